"""What the landing page shows: tables needing attention (with why), processes now, recent failures,
liveness, totals. Reads only Lakewarden's own database: bounded queries, no table metadata."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import Count, Max, Q
from django.utils import timezone

from console.models import Table
from processes.models import ACTIVE_STATUSES, Process, ProcessStatus, ServiceHeartbeat

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


def table_health(
    table: Table, last_maintenance: dt.datetime | None, recent_failures: int, now: dt.datetime
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
    """Unhealthiest first; two queries whatever the number of tables."""
    now = timezone.now()
    week_ago = now - dt.timedelta(days=7)
    stats = {
        row["table_id"]: row
        for row in Process.objects.values("table_id").annotate(
            last_success=Max("finished_at", filter=Q(status=ProcessStatus.SUCCESS)),
            failures=Count("id", filter=Q(status=ProcessStatus.FAILED, created_at__gte=week_ago)),
        )
    }
    ranked = []
    for table in Table.objects.defer("metrics", "properties"):
        row = stats.get(table.pk, {})
        ranked.append(table_health(table, row.get("last_success"), row.get("failures", 0), now))
    ranked.sort(key=lambda health: (-health.score, health.table.name))
    return ranked[:limit] if limit else ranked


def running_processes():
    return (
        Process.objects.select_related("table").filter(status__in=ACTIVE_STATUSES).order_by("created_at")[:20]
    )


def recent_failures(hours: int = 24):
    since = timezone.now() - dt.timedelta(hours=hours)
    return (
        Process.objects.select_related("table")
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
