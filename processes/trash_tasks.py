"""The trash's beat task: purge the batches whose retention has passed (light queue)."""

from __future__ import annotations

from celery import shared_task

from storage.trash.services import trash_batches_purge


@shared_task(soft_time_limit=600, time_limit=660, acks_late=True)
def purge_trash_task() -> list[int]:
    """Delete expired trash batches' files and mark them purged (idempotent, hence acks_late);
    the ids of the processes whose trash was purged."""
    return trash_batches_purge()
