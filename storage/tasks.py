"""Table tasks (light queue): thin wrappers that parse ids and call one service."""

from __future__ import annotations

from celery import shared_task

from storage import services
from storage.models import Table


@shared_task(soft_time_limit=300, time_limit=360, acks_late=True)
def refresh_table_task(table_id: int) -> dict:
    """Re-read one table's metadata facts (idempotent, hence acks_late)."""
    table = Table.objects.filter(pk=table_id).first()
    if table is None:
        return {"table": table_id, "refreshed": False, "reason": "table no longer registered"}
    table = services.table_refresh(table=table)
    return {"table": table_id, "refreshed": not table.refresh_error, "error": table.refresh_error}


@shared_task(soft_time_limit=60, time_limit=90)
def refresh_tables_task() -> int:
    """Queue a refresh of every table (beat); each runs as its own task so one slow table waits alone."""
    ids = list(Table.objects.values_list("pk", flat=True))
    for table_id in ids:
        refresh_table_task.delay(table_id)
    return len(ids)
