"""What the landing page shows: tables needing attention (with why), processes now, recent failures,
liveness, totals. Reads only Lakewarden's own database: bounded queries, no table metadata."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import Count
from django.utils import timezone

from processes.models import ACTIVE_STATUSES, Process, ProcessStatus, ServiceHeartbeat
from storage.models import Table

# Weights of the health score (0 healthy .. 100 needs attention now); each part is capped.
WEIGHTS = {"small_files": 40, "file_count": 15, "snapshots": 10, "maintenance": 20, "failures": 15}
MANY_FILES, MANY_SNAPSHOTS, STALE_DAYS, MANY_FAILURES = 10_000, 500, 30, 3


@dataclass
class TableHealth:
    table: Table
    score: int
    reasons: list[str] = field(default_factory=list)
    last_maintenance: dt.datetime | None = None
    recent_failures: int = 0


@dataclass(slots=True)
class TableFacts:
    """The facts a health score reads (a Table row has them too); cheap to build by the thousand."""

    file_count: int
    small_file_count: int
    instant_count: int

    @property
    def small_file_ratio(self) -> float:
        return self.small_file_count / self.file_count if self.file_count else 0.0


def table_health(
    table: Table | TableFacts, last_maintenance: dt.datetime | None, recent_failures: int, now: dt.datetime
) -> TableHealth:
    # A handful of small files is no problem (nothing to compact); the ratio counts fully from 20 on.
    few = min(table.small_file_count / 20, 1.0)
    parts: dict[str, float] = {
        "small_files": table.small_file_ratio * few,
        "file_count": min(table.file_count / MANY_FILES, 1.0),
        "snapshots": min(table.instant_count / MANY_SNAPSHOTS, 1.0),
        "maintenance": 1.0
        if last_maintenance is None
        else min((now - last_maintenance).total_seconds() / 86400 / STALE_DAYS, 1.0),
        "failures": min(recent_failures / MANY_FAILURES, 1.0),
    }
    # A tiny table needs little maintenance: the weight grows with its files up to 50.
    parts["maintenance"] *= min(table.file_count / 50, 1.0)
    score = round(sum(WEIGHTS[name] * value for name, value in parts.items()))
    reasons = []
    if table.small_file_count:
        reasons.append(f"{table.small_file_ratio:.0%} of {table.file_count:,} files are small")
    if parts["file_count"] >= 0.5:
        reasons.append(f"{table.file_count:,} files")
    if parts["snapshots"] >= 0.5:
        reasons.append(f"{table.instant_count:,} snapshots kept")
    if last_maintenance is None and table.file_count:
        reasons.append("never maintained")
    elif last_maintenance is not None and parts["maintenance"] >= 0.25:
        reasons.append(f"last maintained {(now - last_maintenance).days} days ago")
    if recent_failures:
        reasons.append(f"{recent_failures} failed process{'es' if recent_failures > 1 else ''} in 7 days")
    return TableHealth(table, score, reasons, last_maintenance, recent_failures)


def tables_by_health(*, limit: int | None = 10) -> list[TableHealth]:
    """Unhealthiest first; two queries whatever the number of tables or processes (the last
    successful maintenance is kept on the table row by the executor). Scores are computed from
    plain rows; only the tables shown are loaded as models."""
    now = timezone.now()
    week_ago = now - dt.timedelta(days=7)
    failures = dict(
        Process.objects.filter(created_at__gte=week_ago, status=ProcessStatus.FAILED)
        .values_list("table_id")
        .annotate(n=Count("id"))
    )
    fields = ("pk", "name", "file_count", "small_file_count", "instant_count", "last_maintenance_at")
    scored = []
    for pk, name, file_count, small_count, instants, maintained in Table.objects.values_list(*fields):
        health = table_health(
            TableFacts(file_count, small_count, instants), maintained, failures.get(pk, 0), now
        )
        scored.append((-health.score, name, pk, health))
    scored.sort(key=lambda item: item[:3])
    chosen = scored[:limit] if limit else scored
    tables = Table.objects.defer("metrics", "properties").in_bulk([pk for _, _, pk, _ in chosen])
    result = []
    for _, _, pk, health in chosen:
        health.table = tables[pk]
        result.append(health)
    return result


def running_processes():
    return (
        Process.objects.select_related("table")
        .defer("table__metrics")
        .filter(status__in=ACTIVE_STATUSES)
        .order_by("created_at")[:20]
    )


def recent_failures(hours: int = 24):
    since = timezone.now() - dt.timedelta(hours=hours)
    return (
        Process.objects.select_related("table")
        .defer("table__metrics")
        .filter(status=ProcessStatus.FAILED, finished_at__gte=since)
        .order_by("-finished_at")[:20]
    )


def liveness() -> dict:
    from django.conf import settings

    from console.health import check_workers

    workers = check_workers(timeout=0.8)
    beat = ServiceHeartbeat.objects.filter(name="beat").first()
    fresh_within = dt.timedelta(seconds=max(3 * settings.LAKEWARDEN_SCHEDULER_SECONDS, 90))
    beat_alive = beat is not None and timezone.now() - beat.last_seen < fresh_within
    return {"workers": workers, "beat": beat, "beat_alive": beat_alive}
