"""Trash services: keep a process's files in its batch, restore a batch, purge expired batches.

Restoring puts every file back where it was (as it was: same path, same bytes); it does not touch
the table's metadata. What that makes readable again is whatever metadata still names the files:
the older versions of a Delta table (its log still names vacuumed files), an Iceberg table whose
orphan cleanup took a file a later commit named, or an Iceberg metadata file from before an expiry
(time travel through it). Expired snapshots stay expired in the current metadata.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from storage.errors import Conflict, NotFound
from storage.io import StoreOptions, is_object_store, is_within, join
from storage.io.guard import KeptFiles, OutsideTable, kept_summary
from storage.models import Table
from storage.paths import table_guard
from storage.trash.folder import (
    MoveReport,
    TrashConflict,
    TrashUnavailable,
    batch_location,
    manifest_digest,
    move_to_trash,
    prepare_batch,
    purge_batch,
    read_manifest,
    restore_batch,
)
from storage.trash.models import TrashBatch, TrashState

logger = logging.getLogger(__name__)
PURGE_TASK = "purge task"


@dataclass
class TrashOutcome:
    batch: TrashBatch
    report: MoveReport
    kept: KeptFiles

    def summary(self) -> dict:
        """The facts a process summary shows."""
        return {
            **kept_summary(self.kept),
            "location": self.batch.location,
            "expires_at": self.batch.expires_at.isoformat(),
            "files": self.report.files,
            "bytes": self.report.bytes,
            "kinds": self.report.kinds,
            "missing": len(self.report.missing),
            "failed": len(self.report.failed),
        }


def _storage(table: Table) -> StoreOptions | None:
    from storage.services import table_store_options

    return table_store_options(table) if is_object_store(table.location) else None


def trash_files(
    *,
    table: Table,
    process_id: int,
    action: str,
    retention: dt.timedelta,
    root: str,
    files: list[tuple[str, int, str]],
    storage: StoreOptions | None,
) -> TrashOutcome:
    """Move ``files`` ((location, size, kind), in the order to move them) into the process's
    batch under ``root`` (the table location, spelt as the locations are): the manifest first,
    then the bookkeeping row, then the files. Only what the table's path guard allows moves (the
    batch folder included); the rest stays in place and is reported kept. Call it holding the
    table's lock."""
    guard = table_guard(table)
    files, kept = guard.split(files, path=lambda file: file[0])
    asked = {path for path, _, _ in files}
    batch = TrashBatch.objects.filter(process_id=process_id).first()
    named = files
    if batch is not None:  # the same process trashing twice: one manifest names both
        earlier = read_manifest(batch.location, storage, digest=batch.manifest_sha256 or None)
        named = [*((e.original, e.size, e.kind) for e in earlier), *files]
    try:
        guard.check(batch_location(root, process_id), "keep the trash in")
    except OutsideTable as refused:
        raise TrashUnavailable(str(refused)) from None
    location, entries = prepare_batch(root, process_id, named, storage, action=action)
    digest = manifest_digest(location, storage)
    if batch is None:
        batch = TrashBatch.objects.create(
            table=table,
            process_id=process_id,
            action=action,
            location=location,
            expires_at=timezone.now() + retention,
            manifest_sha256=digest,
        )
    else:
        batch.manifest_sha256 = digest
        batch.save(update_fields=["manifest_sha256"])
    report = move_to_trash(location, [e for e in entries if e.original in asked], storage)
    batch.file_count += report.files
    batch.total_bytes += report.bytes
    batch.failed_count += len(report.failed)
    batch.kinds = {k: batch.kinds.get(k, 0) + report.kinds.get(k, 0) for k in {*batch.kinds, *report.kinds}}
    batch.save(update_fields=["file_count", "total_bytes", "failed_count", "kinds"])
    return TrashOutcome(batch, report, kept)


def trash_batch_get(*, process_id: int) -> TrashBatch:
    batch = TrashBatch.objects.select_related("table").filter(process_id=process_id).first()
    if batch is None:
        raise NotFound(f"process {process_id} put nothing in the trash")
    return batch


def trash_batch_restore(*, process_id: int, user: str = "") -> TrashBatch:
    """Move every file of the process's batch back to where it was. Refused (409, nothing
    changed) once restored, purged or expired, or when a file cannot be put back as it was.
    The caller holds the table's maintenance lock."""
    with transaction.atomic():
        batch = TrashBatch.objects.select_for_update().filter(process_id=process_id).first()
        if batch is None:
            raise NotFound(f"process {process_id} put nothing in the trash")
        refusal = batch.restore_refusal()
        if refusal:
            raise Conflict(f"{refusal}; nothing was changed")
        storage = _storage(batch.table)
        try:
            entries = read_manifest(batch.location, storage, digest=batch.manifest_sha256 or None)
        except FileNotFoundError:
            raise Conflict(f"the trash of process {process_id} has no manifest at {batch.location}") from None
        except TrashConflict as changed:
            raise Conflict(
                f"cannot restore the trash of process {process_id}: {changed}; nothing was moved"
            ) from None
        _check_restorable(batch, entries)
        try:
            report = restore_batch(batch.location, entries, storage)
        except TrashConflict as conflict:
            raise Conflict(
                f"cannot restore the trash of process {process_id}: {conflict}; nothing was moved"
            ) from None
        except OSError as error:  # a store error half-way: what moved back stays back; run it again
            raise Conflict(
                f"restoring the trash of process {process_id} stopped: {error}; run it again"
            ) from error
        batch.state = TrashState.RESTORED
        batch.state_changed_at = timezone.now()
        batch.state_changed_by = user
        batch.save(update_fields=["state", "state_changed_at", "state_changed_by"])
    logger.info("restored %s file(s) of process %s to %s", report.files, process_id, batch.table.location)
    return batch


def _check_restorable(batch: TrashBatch, entries: list) -> None:
    """``Conflict`` (nothing moved) unless every file goes back inside the table, as its path
    guard allows, from inside the batch folder: a restore never writes another table's path."""
    guard = table_guard(batch.table)
    refused = []
    for entry in entries:
        inside = join(batch.location, entry.trashed)
        reason = (
            guard.refusal(entry.original)
            or guard.refusal(inside)
            or (None if is_within(inside, batch.location) else "not inside the batch")
        )
        if reason:
            refused.append(f"{entry.original} ({reason})")
    if refused:
        raise Conflict(
            f"cannot restore the trash of process {batch.process_id}: {len(refused)} file(s) would go "
            f"where this table may not write: {', '.join(refused[:5])}; nothing was moved"
        )


def trash_batches_purge(*, now: dt.datetime | None = None, limit: int = 200) -> list[int]:
    """Delete the files of kept batches past their expiry and mark them purged; the process ids
    purged. A batch being restored right now is skipped (its row is locked) and left to the next
    run; a batch whose folder cannot be deleted stays kept and is tried again."""
    now = now or timezone.now()
    due = list(
        TrashBatch.objects.filter(state=TrashState.KEPT, expires_at__lte=now)
        .order_by("expires_at")
        .values_list("pk", flat=True)[:limit]
    )
    purged = []
    for pk in due:
        with transaction.atomic():
            batch = (
                TrashBatch.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("table")
                .filter(pk=pk, state=TrashState.KEPT)
                .first()
            )
            if batch is None:
                continue
            refusal = table_guard(batch.table).refusal(batch.location)
            if refusal:  # a trash folder replaced by a link to elsewhere: never delete through it
                logger.warning("will not purge the trash at %s: %s", batch.location, refusal)
                continue
            try:
                purge_batch(batch.location, _storage(batch.table))
            except OSError:
                logger.warning("could not purge the trash at %s", batch.location, exc_info=True)
                continue
            batch.state = TrashState.PURGED
            batch.state_changed_at = now
            batch.state_changed_by = PURGE_TASK
            batch.save(update_fields=["state", "state_changed_at", "state_changed_by"])
            purged.append(batch.process_id)
    return purged
