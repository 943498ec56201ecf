"""Iceberg snapshot expiry: kept snapshots stay readable, only unreachable files are deleted."""

from __future__ import annotations

import os

import pytest

from processes.maintenance.iceberg.expire import IcebergExpireSnapshotsFactory
from processes.maintenance.outputs import local_path
from processes.maintenance.retention import parse_duration
from processes.models import ProcessStatus
from tests.processes.conftest import append_files, iceberg_rows, multiset, rows

pytestmark = pytest.mark.django_db(transaction=True)


def history_table(make_iceberg):
    """A table with appends, a copy-on-write delete and an overwrite: files come and go."""
    console_table, table = make_iceberg(files=6)
    append_files(table, [rows(1000, 5), rows(1005, 5)])
    table.delete("id < 3")  # copy-on-write: rewrites the file holding ids 0-4
    append_files(table, [rows(2000, 5)])
    table.overwrite(rows(3000, 5))  # every earlier file leaves the current snapshot
    append_files(table, [rows(4000, 5)])
    table.refresh()
    return console_table, table


def files_on_disk(table) -> set[str]:
    root = local_path(table.location())
    return {os.path.join(d, f) for d, _, names in os.walk(root) for f in names}


def snapshot_rows(table) -> dict[int, object]:
    return {s.snapshot_id: multiset(iceberg_rows(table, s.snapshot_id)) for s in table.metadata.snapshots}


def test_expiry_keeps_min_snapshots_and_every_kept_snapshot_reads_as_before(make_iceberg, run_now):
    console_table, table = history_table(make_iceberg)
    before = snapshot_rows(table)
    newest = [s.snapshot_id for s in sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)][-2:]

    process = run_now(console_table, "expire-snapshots", {"max-age": 0, "min-snapshots": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    table.refresh()
    assert {s.snapshot_id for s in table.metadata.snapshots} == set(newest)
    assert sorted(process.summary["expired_snapshots"]) == sorted(set(before) - set(newest))
    for snapshot_id in newest:  # every file a kept snapshot needs is still there
        assert multiset(iceberg_rows(table, snapshot_id)) == before[snapshot_id]
    deleted = [p for paths in process.summary["files"].values() for p in paths]
    assert (
        process.summary["deleted_data_files"] > 0
        and process.summary["deleted_manifest_lists"] == len(before) - 2
    )
    assert not any(os.path.exists(local_path(p)) for p in deleted)


def test_nothing_younger_than_max_age_is_expired(make_iceberg, run_now):
    console_table, table = history_table(make_iceberg)
    snapshots, files = len(table.metadata.snapshots), files_on_disk(table)

    process = run_now(console_table, "expire-snapshots")  # default max-age: 5 days

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["expired_snapshots"] == []
    table.refresh()
    assert len(table.metadata.snapshots) == snapshots
    assert files_on_disk(table) == files


def test_a_dry_run_lists_what_a_real_run_deletes_and_deletes_nothing(make_iceberg, run_now):
    console_table, table = history_table(make_iceberg)
    files, snapshot_count = files_on_disk(table), len(table.metadata.snapshots)

    dry = run_now(console_table, "expire-snapshots", {"max-age": 0, "dry-run": True})

    assert dry.status == ProcessStatus.SUCCESS, dry.failure
    table.refresh()
    assert len(table.metadata.snapshots) == snapshot_count
    assert files_on_disk(table) == files
    real = run_now(console_table, "expire-snapshots", {"max-age": 0})
    assert real.status == ProcessStatus.SUCCESS, real.failure
    assert real.summary["files"] == dry.summary["files"]
    assert real.summary["expired_snapshots"] == dry.summary["expired_snapshots"]


def test_expiry_of_a_spark_table_keeps_the_rows_of_its_kept_snapshots(external_iceberg, run_now):
    console_table, table = external_iceberg("spark_v2_position_deletes")
    # Spark's own counts per snapshot (fixtures README): 6005, 6005, 7690, 7690, 6592, 6592, 6592
    ordered = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)

    process = run_now(console_table, "expire-snapshots", {"min-snapshots": 4})  # written long ago

    assert process.status == ProcessStatus.SUCCESS, process.failure
    table.refresh()
    kept = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    assert [s.snapshot_id for s in kept] == [s.snapshot_id for s in ordered[-4:]]
    assert [iceberg_rows(table, s.snapshot_id).num_rows for s in kept] == [7690, 6592, 6592, 6592]


def test_the_trigger_offers_expiry_only_when_a_snapshot_is_old_enough(make_iceberg):
    from processes.runtime import TableRuntime

    factory = IcebergExpireSnapshotsFactory()
    console_table, _ = history_table(make_iceberg)
    assert factory.trigger(TableRuntime(console_table, factory.properties), "expire-snapshots") is None
    console_table.properties = {"max-age": 0}
    assert factory.trigger(TableRuntime(console_table, factory.properties), "expire-snapshots") is not None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(432000, 432000), ("P5D", 432000), ("PT36H", 129600), ("P1DT30M", 88200), ("60", 60)],
)
def test_ages_are_seconds_or_iso_durations(value, seconds):
    assert parse_duration(value).total_seconds() == seconds


@pytest.mark.parametrize("value", ["P1Y", "5 days", -1, "P"])
def test_ages_that_are_not_durations_are_refused(value):
    with pytest.raises(ValueError):
        parse_duration(value)
