"""What the landing page shows: tables needing attention (with why), processes now, recent failures,
liveness, totals. Reads only Lakewarden's own database: bounded queries, no table metadata."""

from __future__ import annotations

import datetime as dt

from django.db.models import Count
from django.utils import timezone

from processes.models import ACTIVE_STATUSES, Process, ProcessStatus, ServiceHeartbeat
from storage.health import TableFacts, TableHealth, table_health
from storage.models import Table

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
