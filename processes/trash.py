"""Restoring a process's trash: the files move back under the table's maintenance lock, so no
maintenance process (an orphan cleanup listing the location) runs on the table meanwhile."""

from __future__ import annotations

from processes.executor import TableLock, TableLockBusy
from processes.models import Process
from storage.errors import Conflict, NotFound
from storage.trash.models import TrashBatch
from storage.trash.services import trash_batch_get, trash_batch_restore


def process_trash(*, process_id: int) -> TrashBatch:
    """The trash batch of a process; 404 when the process does not exist or trashed nothing."""
    if not Process.objects.filter(pk=process_id).exists():
        raise NotFound(f"process {process_id} does not exist")
    return trash_batch_get(process_id=process_id)


def process_trash_restore(*, process_id: int, user=None) -> TrashBatch:
    """Move the files process ``process_id`` put in the trash back where they were. 409 with the
    reason (nothing changed) once the batch is restored, purged or expired, or while another
    maintenance process holds the table."""
    batch = process_trash(process_id=process_id)
    refusal = batch.restore_refusal()
    if refusal:
        raise Conflict(f"{refusal}; nothing was changed")
    lock = TableLock(batch.table_id, holder=f"lakewarden trash restore {process_id}")
    try:
        lock.acquire()
    except TableLockBusy:
        raise Conflict(
            f"a maintenance process is running on table {batch.table}; restore once it has ended "
            "(nothing was changed)"
        ) from None
    try:
        return trash_batch_restore(process_id=process_id, user=getattr(user, "username", "") or "")
    finally:
        lock.release()
