"""Previews of expiry, orphan cleanup and vacuum: what a run would delete (objects, bytes,
snapshots), the same as a dry run finds, and nothing deleted by the preview itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from deltalake import write_deltalake

from processes.maintenance.delta.vacuum import DeltaVacuumFactory
from processes.maintenance.iceberg.expire import IcebergExpireSnapshotsFactory
from processes.maintenance.iceberg.orphans import IcebergOrphanFilesFactory
from processes.plugin import ProcessInputError
from processes.runtime import TableRuntime
from storage.io import local_path
from tests.processes.conftest import append_files, delta_rows, rows
from tests.processes.test_trash import files_under, history_table, run  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def runtime(console_table, factory) -> TableRuntime:
    return TableRuntime(console_table, factory.properties)


def sizes(paths) -> int:
    return sum(os.path.getsize(p) for p in paths)


def test_the_expiry_preview_names_the_snapshots_and_files_a_run_removes_and_changes_nothing(
    make_iceberg, run
):
    console_table, table = history_table(make_iceberg)
    root = Path(local_path(table.location()))
    on_disk, snapshots = files_under(root), [s.snapshot_id for s in table.metadata.snapshots]
    console_table.properties = {"trash-retention": "P1D"}

    preview = IcebergExpireSnapshotsFactory().preview(
        runtime(console_table, IcebergExpireSnapshotsFactory()), "expire-snapshots", {"max-age": 0}
    )

    assert files_under(root) == on_disk
    table.refresh()
    assert [s.snapshot_id for s in table.metadata.snapshots] == snapshots
    dry = run(console_table, "expire-snapshots", {"max-age": 0, "dry-run": True}).summary
    doomed = [local_path(p, percent_decoded=False) for paths in dry["files"].values() for p in paths]
    assert preview.details["snapshots_to_expire"] == dry["expired_snapshots"] and len(snapshots) - 1 == len(
        dry["expired_snapshots"]
    )
    assert preview.objects_to_delete == len(doomed) > 0
    assert preview.bytes_to_delete == sizes(doomed)
    assert (
        preview.details["deleted_manifest_lists"]
        == preview.details["snapshots_removed"]
        == len(dry["expired_snapshots"])
    )
    assert preview.details["trash_retention_seconds"] == 86400


def test_the_expiry_preview_says_when_there_is_nothing_to_expire(make_iceberg):
    console_table, _ = make_iceberg(files=2)
    factory = IcebergExpireSnapshotsFactory()

    preview = factory.preview(runtime(console_table, factory), "expire-snapshots", {})

    assert preview.objects_to_delete == 0 and preview.details["snapshots_to_expire"] == []
    assert preview.notes and preview.notes[0].startswith("nothing to do")


def test_the_expiry_preview_of_a_table_without_a_catalog_says_nothing_would_run(make_iceberg):
    from storage import services

    _, table = make_iceberg(files=2, register=False)
    by_location = services.table_register(location=table.location())
    factory = IcebergExpireSnapshotsFactory()

    preview = factory.preview(runtime(by_location, factory), "expire-snapshots", {"max-age": 0})

    assert preview.notes == ["nothing would run: expiring snapshots needs a catalog to commit"]
    assert preview.objects_to_delete == 0


def test_the_orphan_preview_counts_old_unreferenced_files_and_deletes_nothing(make_iceberg, old_mtime):
    console_table, table = make_iceberg(files=3)
    append_files(table, [rows(100, 5)])
    root = Path(local_path(table.location()))
    stray = [root / "data" / "stray.parquet", root / "metadata" / "stray.avro"]
    for number, path in enumerate(stray):
        path.write_bytes(b"x" * (100 + number))
    (root / ".lakewarden-trash" / "7").mkdir(parents=True)
    (root / ".lakewarden-trash" / "7" / "kept.parquet").write_bytes(b"kept")
    for path in files_under(root):
        old_mtime(path, 10)
    on_disk = files_under(root)
    factory = IcebergOrphanFilesFactory()

    preview = factory.preview(runtime(console_table, factory), "clean-orphan-files", {})

    assert files_under(root) == on_disk
    assert preview.objects_to_delete == 2 and preview.bytes_to_delete == 201
    assert sorted(preview.details["files"]) == sorted(str(p) for p in stray)


def test_the_vacuum_preview_counts_what_a_vacuum_removes_and_refuses_a_short_retention(make_delta):
    console_table, path = make_delta(files=2)
    write_deltalake(str(path), delta_rows(100, 5), mode="overwrite")
    on_disk = files_under(path)
    factory = DeltaVacuumFactory()

    preview = factory.preview(runtime(console_table, factory), "vacuum", {"retention-hours": 168})
    # A retention of 0 is below the table's (Delta's default) 7 days: refused, as a run would be.
    with pytest.raises(ProcessInputError, match="shorter than the table's own retention"):
        factory.preview(runtime(console_table, factory), "vacuum", {"retention-hours": 0})

    assert files_under(path) == on_disk
    assert preview.objects_to_delete == 0 and preview.notes[0].startswith("nothing to do")


def test_the_vacuum_preview_lists_removed_files_with_their_bytes(make_delta):
    console_table, path = make_delta(
        files=2, configuration={"delta.deletedFileRetentionDuration": "interval 0 hours"}
    )
    write_deltalake(str(path), delta_rows(100, 5), mode="overwrite")
    on_disk = files_under(path)
    factory = DeltaVacuumFactory()

    preview = factory.preview(runtime(console_table, factory), "vacuum", {"retention-hours": 0})

    assert files_under(path) == on_disk
    removed = [Path(p) for p in preview.details["files"]]
    assert len(removed) == preview.objects_to_delete == 2
    assert all(p.exists() and p.parent == path for p in removed)
    assert preview.bytes_to_delete == sizes(removed)


@pytest.mark.parametrize(
    ("config", "seconds"),
    [
        ({}, None),
        ({"trash-retention": 0}, None),
        ({"trash-retention": "PT48H"}, 172800),
        ({"trash-retention": "3600"}, 3600),
    ],
)
def test_trash_is_off_unless_a_positive_retention_is_set(config, seconds):
    from processes.maintenance.retention import trash_retention

    found = trash_retention(config)
    assert (found.total_seconds() if found else None) == seconds


def test_a_table_property_overrides_the_factorys_trash_retention(make_delta):
    from processes.maintenance.delta.vacuum import DeltaVacuumProcess

    console_table, _ = make_delta(files=1)
    factory = DeltaVacuumFactory()
    factory.configure({"trash-retention": "P7D"})
    assert DeltaVacuumProcess({}, runtime(console_table, factory).config).trash.days == 7
    console_table.properties = {"trash-retention": 0}
    assert DeltaVacuumProcess({}, runtime(console_table, factory).config).trash is None
