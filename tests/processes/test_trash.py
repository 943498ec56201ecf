"""Trash instead of delete: expiry, orphan cleanup and vacuum move what they remove into
``<table>/.lakewarden-trash/<process>/`` (with a manifest), restore puts it back so the metadata
that names those files reads again, and the beat task purges expired batches."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from processes.models import ProcessStatus
from storage.io import local_path
from storage.trash import MANIFEST_NAME, TRASH_FOLDER
from storage.trash.models import TrashBatch, TrashState
from tests.processes.conftest import append_files, delta_read, delta_rows, iceberg_rows, multiset, rows

pytestmark = pytest.mark.django_db(transaction=True)
TRASH = {"trash-retention": "PT48H"}


@pytest.fixture
def run(transactional_db, monkeypatch):
    """``run(table, action, params)``: the Process row after the executor ran it (no Celery, no Spark:
    none of these actions needs it)."""
    from processes import executor, services

    monkeypatch.setattr(services, "process_enqueue", lambda process: None)

    def go(table, action: str, params: dict | None = None, *, status=ProcessStatus.SUCCESS):
        process = services.process_create(table=table, action=action, params=params or {})
        executor.run_process(process.pk)
        process.refresh_from_db()
        assert process.status == status, process.failure
        return process

    return go


def with_trash(console_table, properties=TRASH):
    console_table.properties = {**(console_table.properties or {}), **properties}
    console_table.save(update_fields=["properties"])
    return console_table


def files_under(root: Path) -> set[Path]:
    return {Path(d, f) for d, _, names in os.walk(root) for f in names}


def manifest(batch: TrashBatch) -> dict:
    return json.loads((Path(batch.location) / MANIFEST_NAME).read_text())


def assert_moved(root: Path, batch: TrashBatch, originals: set[str]) -> None:
    """Every original is gone from its place and sits in the batch under its relative path, with
    the size the manifest records."""
    entries = {e["original"]: e for e in manifest(batch)["entries"]}
    assert set(entries) == originals
    for original, entry in entries.items():
        assert not os.path.exists(original)
        trashed = Path(batch.location) / entry["trashed"]
        assert trashed == root / TRASH_FOLDER / str(batch.process_id) / Path(original).relative_to(root)
        assert trashed.stat().st_size == entry["size"] > 0
    assert batch.file_count == len(originals)
    assert batch.total_bytes == sum(e["size"] for e in entries.values())


# --- Iceberg expiry ------------------------------------------------------------------------------


def history_table(make_iceberg):
    console_table, table = make_iceberg(files=3)
    append_files(table, [rows(1000, 5)])
    table.delete("id < 3")  # copy-on-write: rewrites the file holding ids 0-4
    table.overwrite(rows(3000, 5))
    table.refresh()
    return console_table, table


def test_expiry_with_trash_moves_the_files_and_restore_makes_old_metadata_read_again(
    make_iceberg, run, operator, api_as
):
    from pyiceberg.table import StaticTable

    console_table, table = history_table(make_iceberg)
    with_trash(console_table)
    old_metadata = table.metadata_location
    before = {s.snapshot_id: multiset(iceberg_rows(table, s.snapshot_id)) for s in table.metadata.snapshots}
    current = multiset(iceberg_rows(table))
    root = Path(local_path(table.location()))

    process = run(console_table, "expire-snapshots", {"max-age": 0})

    expired = process.summary["expired_snapshots"]
    assert len(expired) == len(before) - 1
    batch = TrashBatch.objects.get(process_id=process.pk)
    moved = {
        str(local_path(p, percent_decoded=False))
        for paths in process.summary["files"].values()
        for p in paths
    }
    assert process.summary["deleted_data_files"] > 0 and process.summary["deleted_manifest_lists"] == len(
        expired
    )
    assert_moved(root, batch, moved)
    assert batch.state == TrashState.KEPT and batch.action == "expire-snapshots"
    assert batch.kinds["manifest_lists"] == len(expired)
    assert process.summary["trash"]["files"] == len(moved)
    assert multiset(iceberg_rows(table)) == current  # the table reads as before
    with pytest.raises(OSError):  # time travel through the old metadata lost its files
        StaticTable.from_metadata(old_metadata).scan(snapshot_id=expired[0]).to_arrow()

    answer = api_as(operator).post(f"/api/v1/processes/{process.pk}/restore/")

    assert answer.status_code == 200, answer.content
    assert answer.json()["state"] == "restored" and answer.json()["state_changed_by"] == operator.username
    assert all(os.path.exists(p) for p in moved)
    assert not Path(batch.location).exists()
    old = StaticTable.from_metadata(old_metadata)
    for snapshot_id in expired:  # every expired snapshot reads exactly as before, through old metadata
        assert multiset(old.scan(snapshot_id=snapshot_id).to_arrow()) == before[snapshot_id]
    table.refresh()
    assert [s.snapshot_id for s in table.metadata.snapshots] == [table.metadata.current_snapshot_id]

    again = api_as(operator).post(f"/api/v1/processes/{process.pk}/restore/")

    assert again.status_code == 409
    assert "restored already" in again.json()["error"] and "nothing was changed" in again.json()["error"]
    from console.audit.models import AuditEvent  # the audit trail keeps both restores, with their outcome

    restores = AuditEvent.objects.filter(action="trash.restore").order_by("id")
    assert [(e.username, e.status, e.path) for e in restores] == [
        (operator.username, 200, f"/api/v1/processes/{process.pk}/restore/"),
        (operator.username, 409, f"/api/v1/processes/{process.pk}/restore/"),
    ]


def test_expiry_without_trash_deletes_as_before(make_iceberg, run):
    console_table, table = history_table(make_iceberg)

    process = run(console_table, "expire-snapshots", {"max-age": 0})

    deleted = [p for paths in process.summary["files"].values() for p in paths]
    assert deleted and not any(os.path.exists(local_path(p, percent_decoded=False)) for p in deleted)
    assert "trash" not in process.summary and not TrashBatch.objects.exists()
    assert not (Path(local_path(table.location())) / TRASH_FOLDER).exists()


# --- Iceberg orphans -----------------------------------------------------------------------------


@pytest.fixture
def late_writer_table(make_iceberg, old_mtime):
    """A table, a data file a slow writer wrote 10 days ago and has not committed yet (its
    ``DataFile`` ready to commit), and a stray file; every file 10 days old."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow

    console_table, table = make_iceberg(files=4)
    root = Path(local_path(table.location()))
    pending = root / "data" / f"late-{uuid.uuid4()}.parquet"
    schema = schema_to_pyarrow(table.schema(), include_field_ids=True)
    pq.write_table(rows(9000, 7).cast(schema), pending)
    data_file = parquet_file_to_data_file(table.io, table.metadata, f"file://{pending}")
    stray = root / "metadata" / "stray.avro"
    stray.write_bytes(b"not an avro file")
    for path in files_under(root):
        old_mtime(path, 10)
    return console_table, table, pending, data_file, stray


def test_a_trashed_orphan_a_late_commit_needs_is_restored_and_the_table_reads_again(
    late_writer_table, run, operator, client_as
):
    console_table, table, pending, data_file, stray = late_writer_table
    with_trash(console_table)
    root = Path(local_path(table.location()))
    before = multiset(iceberg_rows(table))

    process = run(console_table, "clean-orphan-files")

    batch = TrashBatch.objects.get(process_id=process.pk)
    assert_moved(root, batch, {str(pending), str(stray)})
    assert batch.kinds == {"orphan": 2} and process.summary["deleted_files"] == 0
    assert multiset(iceberg_rows(table)) == before
    # The trash is no orphan: a second cleanup leaves it alone.
    assert run(console_table, "clean-orphan-files", {"dry-run": True}).summary["orphan_files"] == 0
    with table.transaction() as tx:  # the slow writer commits the file the cleanup took
        with tx.update_snapshot().fast_append() as append:
            append.append_data_file(data_file)
    with pytest.raises(OSError):
        iceberg_rows(table)

    page = client_as(operator).get(f"/trash/processes/{process.pk}/")
    assert page.status_code == 200 and b"Restore files" in page.content
    answer = client_as(operator).post(f"/trash/processes/{process.pk}/restore/", HTTP_HX_REQUEST="true")

    assert answer.status_code == 200 and b"Restored" in answer.content
    assert pending.exists() and stray.exists()
    assert multiset(iceberg_rows(table)) == before + multiset(rows(9000, 7))


# --- Delta vacuum --------------------------------------------------------------------------------


@pytest.fixture
def overwritten_delta(make_delta):
    """Version 0 and 1 append two files; version 2 overwrites them (the table's own retention is
    0 hours, so vacuum may take them at once)."""
    console_table, path = make_delta(
        files=2, configuration={"delta.deletedFileRetentionDuration": "interval 0 hours"}
    )
    write_deltalake(str(path), delta_rows(100, 5), mode="overwrite")
    return console_table, path


def version_rows(path, version: int):
    return multiset(DeltaTable(str(path), version=version).to_pyarrow_table())


def test_vacuum_with_trash_keeps_old_versions_restorable(overwritten_delta, run, operator, api_as):
    console_table, path = overwritten_delta
    with_trash(console_table)
    old, current = version_rows(path, 1), multiset(delta_read(path))
    assert old == multiset(delta_rows(0, 10))  # the values of version 1: ids 0-9

    process = run(console_table, "vacuum", {"retention-hours": 0})

    batch = TrashBatch.objects.get(process_id=process.pk)
    removed = {str(path / p) for p in process.summary["files"]}
    assert len(removed) == 2 and batch.kinds == {"data_file": 2}
    assert_moved(path, batch, removed)
    assert multiset(delta_read(path)) == current
    with pytest.raises(OSError):
        DeltaTable(str(path), version=1).to_pyarrow_table()
    # deltalake's own vacuum does not look into the trash.
    assert DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False, full=True) == []

    answer = api_as(operator).post(f"/api/v1/processes/{process.pk}/restore/")

    assert answer.status_code == 200, answer.content
    assert version_rows(path, 1) == multiset(delta_rows(0, 10))
    assert version_rows(path, 0) == multiset(delta_rows(0, 5))
    assert multiset(delta_read(path)) == current


def test_vacuum_without_trash_deletes_as_before(overwritten_delta, run):
    console_table, path = overwritten_delta

    process = run(console_table, "vacuum", {"retention-hours": 0})

    assert process.summary["vacuumed_files"] == 2
    assert not any((path / p).exists() for p in process.summary["files"])
    assert not (path / TRASH_FOLDER).exists() and not TrashBatch.objects.exists()


# --- purge, refusals, roles ----------------------------------------------------------------------


def test_the_purge_task_deletes_expired_batches_only_and_a_purged_batch_cannot_be_restored(
    make_delta, run, operator, api_as
):
    from storage.tasks import purge_trash_task

    batches = []
    for _ in range(2):
        console_table, path = make_delta(
            files=2, configuration={"delta.deletedFileRetentionDuration": "interval 0 hours"}
        )
        write_deltalake(str(path), delta_rows(100, 5), mode="overwrite")
        with_trash(console_table)
        process = run(console_table, "vacuum", {"retention-hours": 0})
        batches.append((TrashBatch.objects.get(process_id=process.pk), path, process))
    (expired, expired_path, expired_process), (kept, _, _) = batches
    TrashBatch.objects.filter(pk=expired.pk).update(
        expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    )

    assert purge_trash_task.apply().get() == [expired_process.pk]

    expired.refresh_from_db()
    kept.refresh_from_db()
    assert expired.state == TrashState.PURGED and expired.state_changed_by == "purge task"
    assert not Path(expired.location).exists()
    assert kept.state == TrashState.KEPT and Path(kept.location).exists()
    answer = api_as(operator).post(f"/api/v1/processes/{expired_process.pk}/restore/")
    assert answer.status_code == 409 and "was purged" in answer.json()["error"]
    assert not any((expired_path / p).exists() for p in expired_process.summary["files"])
    assert purge_trash_task.apply().get() == []  # nothing more is due


def test_viewers_may_look_but_not_restore(overwritten_delta, run, viewer, api_as, client_as):
    console_table, path = overwritten_delta
    with_trash(console_table)
    process = run(console_table, "vacuum", {"retention-hours": 0})

    assert api_as(viewer).post(f"/api/v1/processes/{process.pk}/restore/").status_code == 403
    assert client_as(viewer).post(f"/trash/processes/{process.pk}/restore/").status_code == 403
    shown = api_as(viewer).get(f"/api/v1/processes/{process.pk}/trash/")
    assert shown.status_code == 200 and shown.json()["file_count"] == 2 and shown.json()["state"] == "kept"
    listed = api_as(viewer).get(f"/api/v1/trash/?table={console_table.pk}&state=kept").json()
    assert [b["process"] for b in listed["results"]] == [process.pk]
    assert api_as(viewer).get("/api/v1/trash/?state=lost").status_code == 400
    card = client_as(viewer).get(f"/trash/processes/{process.pk}/")
    assert card.status_code == 200 and b"Restore files" not in card.content
    assert TrashBatch.objects.get(process_id=process.pk).state == TrashState.KEPT
    assert not any((path / p).exists() for p in process.summary["files"])


def test_a_restore_while_a_process_holds_the_table_is_refused_and_changes_nothing(
    overwritten_delta, run, operator, api_as
):
    from processes.executor import TableLock

    console_table, path = overwritten_delta
    with_trash(console_table)
    process = run(console_table, "vacuum", {"retention-hours": 0})
    lock = TableLock(console_table.pk)
    lock.acquire()
    try:
        answer = api_as(operator).post(f"/api/v1/processes/{process.pk}/restore/")
    finally:
        lock.release()

    assert answer.status_code == 409 and "maintenance process is running" in answer.json()["error"]
    assert not any((path / p).exists() for p in process.summary["files"])
    assert TrashBatch.objects.get(process_id=process.pk).state == TrashState.KEPT


def test_a_restore_that_would_overwrite_another_file_moves_nothing(overwritten_delta, run, operator, api_as):
    console_table, path = overwritten_delta
    with_trash(console_table)
    process = run(console_table, "vacuum", {"retention-hours": 0})
    first, second = sorted(process.summary["files"])
    (path / first).write_bytes(b"someone else's file")

    answer = api_as(operator).post(f"/api/v1/processes/{process.pk}/restore/")

    assert answer.status_code == 409 and "hold another file" in answer.json()["error"]
    assert (path / first).read_bytes() == b"someone else's file" and not (path / second).exists()
    assert TrashBatch.objects.get(process_id=process.pk).state == TrashState.KEPT


def test_with_nothing_to_remove_no_batch_is_made_and_the_page_card_loads_itself(make_iceberg, run):
    from django.template.loader import render_to_string

    console_table, table = make_iceberg(files=2)
    with_trash(console_table)

    process = run(console_table, "clean-orphan-files", {"min-age": 0})

    assert process.summary["orphan_files"] == 0 and process.summary["trash"]["files"] == 0
    assert not TrashBatch.objects.exists()
    assert not (Path(local_path(table.location())) / TRASH_FOLDER).exists()
    card = render_to_string("console/partials/process_trash.html", {"process": process})
    assert f'hx-get="/trash/processes/{process.pk}/"' in card


def test_an_expiry_whose_commit_fails_leaves_the_table_and_no_trash_behind(make_iceberg, run, monkeypatch):
    from processes.maintenance.iceberg import expire as iceberg_expire

    console_table, table = history_table(make_iceberg)
    with_trash(console_table)
    root = Path(local_path(table.location()))
    snapshots, on_disk = [s.snapshot_id for s in table.metadata.snapshots], files_under(root)

    def refused(table, expired_ids):
        raise RuntimeError("the catalog refused the commit")

    monkeypatch.setattr(iceberg_expire, "_expire", refused)
    process = run(console_table, "expire-snapshots", {"max-age": 0}, status=ProcessStatus.FAILED)

    assert "the catalog refused the commit" in process.failure
    table.refresh()
    assert [s.snapshot_id for s in table.metadata.snapshots] == snapshots
    assert files_under(root) == on_disk  # not even the manifest written before the commit
    assert not TrashBatch.objects.exists()
