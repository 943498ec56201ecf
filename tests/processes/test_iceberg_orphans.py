"""Iceberg orphan file cleanup: never a referenced file, never a young one, never staging."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from processes.maintenance.iceberg.orphans import referenced_paths
from processes.maintenance.outputs import local_path
from processes.models import ProcessStatus
from tests.processes.conftest import append_files, iceberg_rows, multiset, rows

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def aged_table(make_iceberg, old_mtime):
    """A table with history whose every file is 10 days old, plus planted unreferenced files."""
    console_table, table = make_iceberg(files=8, partitioned=True)
    append_files(table, [rows(500, 5, "eu")])
    table.delete("id = 1")
    table.refresh()
    root = Path(local_path(table.location()))
    planted = {
        "old_data": root / "data" / "region=eu" / "never-committed.parquet",
        "old_metadata": root / "metadata" / "stray-manifest.avro",
        "young_data": root / "data" / "in-flight.parquet",
        "staged": root / ".lakewarden-staging" / "process-99" / "group-00000" / "part-0.parquet",
        "hint": root / "metadata" / "version-hint.text",  # a Hadoop-catalog reader's pointer
    }
    for path in planted.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"PAR1 not really")
    for folder, _, names in os.walk(root):
        for name in names:
            if Path(folder, name) != planted["young_data"]:
                old_mtime(Path(folder, name), 10)
    return console_table, table, planted


def all_files(root: Path) -> set[Path]:
    return {Path(d, f) for d, _, names in os.walk(root) for f in names}


def test_only_old_unreferenced_files_are_deleted(aged_table, run_now):
    console_table, table, planted = aged_table
    root = Path(local_path(table.location()))
    referenced = {Path(p) for p in referenced_paths(table)}
    before_rows = multiset(iceberg_rows(table))
    before_files = all_files(root)

    process = run_now(console_table, "clean-orphan-files")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    remaining = all_files(root)
    assert before_files - remaining == {planted["old_data"], planted["old_metadata"]}
    assert process.summary["deleted_files"] == 2 and process.summary["too_young_to_delete"] == 1
    assert {p for p in referenced if p.is_relative_to(root)} <= remaining  # nothing referenced is gone
    assert planted["young_data"].exists() and planted["staged"].exists() and planted["hint"].exists()
    assert multiset(iceberg_rows(table)) == before_rows
    for snapshot in table.metadata.snapshots:  # every snapshot still reads
        iceberg_rows(table, snapshot.snapshot_id)


def test_the_metadata_log_version_hint_and_statistics_count_as_referenced(aged_table):
    _, table, _ = aged_table
    referenced = referenced_paths(table)
    assert local_path(table.metadata_location) in referenced
    assert all(local_path(e.metadata_file) in referenced for e in table.metadata.metadata_log)
    assert len(table.metadata.metadata_log) >= 2


def test_a_dry_run_lists_the_orphans_and_deletes_nothing(aged_table, run_now):
    console_table, table, planted = aged_table
    root = Path(local_path(table.location()))
    before = all_files(root)

    process = run_now(console_table, "clean-orphan-files", {"dry-run": True})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert all_files(root) == before
    assert sorted(process.summary["files"]) == sorted(str(planted[k]) for k in ("old_data", "old_metadata"))


def test_files_of_expired_snapshots_left_behind_are_orphans_once_old(aged_table, run_now, old_mtime):
    console_table, table, planted = aged_table
    expired = run_now(console_table, "expire-snapshots", {"max-age": 0, "dry-run": True})
    only_expired = [local_path(p) for paths in expired.summary["files"].values() for p in paths]
    assert only_expired
    # Snapshots expired by another tool that does not delete files: their files stay behind.
    table.maintenance.expire_snapshots().by_ids(expired.summary["expired_snapshots"]).commit()

    table.refresh()
    # A file a remaining manifest still names (as a deleted entry) is kept: orphan cleanup is
    # the more careful of the two.
    unnamed = set(only_expired) - referenced_paths(table)
    assert unnamed

    process = run_now(console_table, "clean-orphan-files")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert unnamed <= set(process.summary["files"])
    assert not any(os.path.exists(p) for p in unnamed)
    for snapshot in table.metadata.snapshots:  # what remains still reads
        iceberg_rows(table, snapshot.snapshot_id)
