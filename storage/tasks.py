"""Storage tasks (light queue): thin wrappers that parse ids and call one service. The metadata
refresh of tables, and the trash's beat task that purges the batches whose retention has passed."""

from __future__ import annotations

from celery import shared_task
from django.core.cache import cache
from django.utils import timezone

from storage import refresh
from storage.trash.services import trash_batches_purge


@shared_task(soft_time_limit=300, time_limit=360, acks_late=True)
def refresh_table_task(table_id: int) -> dict:
    """Re-read one table's metadata facts (idempotent, hence acks_late)."""
    cache.delete(refresh.queued_key(table_id))  # a pointer that moves again meanwhile queues another
    facts = refresh.refresh_facts(table_id)
    if facts is None:
        return {"table": table_id, "refreshed": False, "reason": "table no longer registered"}
    error = facts.get("refresh_error", "")
    return {"table": table_id, "refreshed": not error, "error": error}


@shared_task(soft_time_limit=30, time_limit=45)
def refresh_active_tables_task() -> dict:
    """The short beat (issue 31): check the pointers of the tables with recent activity and queue
    a refresh of those whose pointer moved, so another writer's commit shows within seconds."""
    ids = refresh.active_table_ids(timezone.now())
    report = refresh.refresh_moved(ids, refresh=refresh_table_task.delay)
    return {"checked": report.checked, "unchanged": report.unchanged, "refreshed": report.refreshed}


@shared_task(soft_time_limit=60, time_limit=90)
def refresh_tables_task() -> int:
    """Check every table's metadata pointer (beat), a batch of tables per task; only tables whose
    pointer moved are refreshed, each as its own task so one slow table waits alone (issue 17)."""
    count = 0
    for batch in refresh.table_id_batches():
        refresh_pointers_task.delay(batch)
        count += len(batch)
    return count


@shared_task(soft_time_limit=240, time_limit=300)
def refresh_pointers_task(table_ids: list[int]) -> dict:
    """Compare the pointers of ``table_ids`` with those of their last refresh; queue a refresh of
    the tables whose pointer moved."""
    report = refresh.refresh_changed(table_ids, refresh=refresh_table_task.delay)
    return {"checked": report.checked, "unchanged": report.unchanged, "refreshed": report.refreshed}


@shared_task(soft_time_limit=600, time_limit=660, acks_late=True)
def purge_trash_task() -> list[int]:
    """Delete expired trash batches' files and mark them purged (idempotent, hence acks_late);
    the ids of the processes whose trash was purged."""
    return trash_batches_purge()
