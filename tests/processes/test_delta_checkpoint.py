"""The Delta ``checkpoint`` action: a checkpoint at the current version, read back and compared
with the log, then log files older than the log retention removed only below a checkpoint that
keeps every retained version readable."""

from __future__ import annotations

import json
import os
import shutil
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from processes.maintenance.delta import checkpoint as delta_checkpoint
from processes.models import ProcessStatus
from storage.formats.delta.commit import open_version, put_commit
from tests.processes.conftest import delta_read, delta_rows, multiset

pytestmark = pytest.mark.django_db(transaction=True)
DAY = 86400


def log_names(path) -> set[str]:
    return {p.name for p in (path / "_delta_log").iterdir() if p.is_file()}


def age_commits(path, versions, days: float) -> None:
    """Make the log files of ``versions`` ``days`` old (commit files' modification times are
    their age, as Delta and delta-rs read it)."""
    when = time.time() - days * DAY
    for version in versions:
        for file in (path / "_delta_log").glob(f"{version:020d}.*"):
            os.utime(file, (when, when))


def rows_at(path, version: int) -> pa.Table:
    return pa.RecordBatchReader.from_stream(DeltaTable(str(path), version=version).scan()).read_all()


def expected_at(version: int):
    """make_delta's rows of versions 0..version (5 rows a commit)."""
    return multiset(pa.concat_tables(delta_rows(i * 5, 5) for i in range(version + 1)))


def test_a_checkpoint_lets_the_expired_log_below_it_go(make_delta, run_now):
    console_table, path = make_delta(files=12)
    age_commits(path, range(12), days=40)
    rows = multiset(delta_read(path))

    process = run_now(console_table, "checkpoint")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert summary["checkpoint_created"] and summary["checkpoint_version"] == 11
    assert summary["log_retention_hours"] == 720 and summary["cleanup_floor"] == 11
    assert summary["log_files_removed"] == 11
    assert log_names(path) == {f"{11:020d}.json", f"{11:020d}.checkpoint.parquet", "_last_checkpoint"}
    assert json.loads((path / "_delta_log" / "_last_checkpoint").read_text())["version"] == 11
    assert multiset(delta_read(path)) == rows == multiset(rows_at(path, 11))


def test_versions_within_the_retention_stay_readable_through_an_older_checkpoint(
    make_delta, run_now, tmp_path
):
    """Commits 0-14 are old, 15-20 young: version 15 needs the checkpoint at 10 and commits 11-15,
    so only the files below 10 go, though the new checkpoint is at 20 (delta-io/delta#4146)."""
    from deltalake import write_deltalake

    console_table, path = make_delta(files=11)
    first = run_now(console_table, "checkpoint")
    assert first.status == ProcessStatus.SUCCESS, first.failure
    assert first.summary["log_files_removed"] == 0  # nothing is old yet
    for i in range(11, 21):
        write_deltalake(str(path), delta_rows(i * 5, 5), mode="append")
    age_commits(path, range(15), days=40)
    reference = tmp_path / "reference"
    shutil.copytree(path, reference)  # the same log, mtimes included, for deltalake's own cleanup

    process = run_now(console_table, "checkpoint")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["cleanup_floor"] == 10 and process.summary["log_files_removed"] == 10
    names = log_names(path)
    assert {f"{v:020d}.json" for v in range(10, 21)} <= names
    assert not {f"{v:020d}.json" for v in range(10)} & names
    assert {f"{10:020d}.checkpoint.parquet", f"{20:020d}.checkpoint.parquet"} <= names
    for version in (10, 15, 20):
        assert multiset(rows_at(path, version)) == expected_at(version)
    assert multiset(delta_read(path)) == expected_at(20)
    reference_table = DeltaTable(str(reference))
    reference_table.create_checkpoint()
    reference_table.cleanup_metadata()
    assert log_names(reference) == names  # deltalake's cleanup keeps exactly the same files


def test_a_log_younger_than_the_tables_retention_is_kept(make_delta, run_now):
    console_table, path = make_delta(
        files=4, configuration={"delta.logRetentionDuration": "interval 60 days"}
    )
    age_commits(path, range(4), days=40)
    before = log_names(path)

    process = run_now(console_table, "checkpoint")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["log_retention_hours"] == 1440 and process.summary["log_files_removed"] == 0
    assert log_names(path) == before | {f"{3:020d}.checkpoint.parquet", "_last_checkpoint"}


def test_a_dry_run_writes_nothing_and_lists_what_would_go(make_delta, run_now):
    console_table, path = make_delta(files=5)
    age_commits(path, range(5), days=40)
    before = log_names(path)

    process = run_now(console_table, "checkpoint", {"dry-run": True})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert not process.summary["checkpoint_created"] and process.summary["log_files_removed"] == 4
    assert [f.rsplit("/", 1)[1] for f in process.summary["files"]] == [f"{v:020d}.json" for v in range(4)]
    assert log_names(path) == before


def test_a_checkpoint_that_disagrees_with_the_log_is_removed_and_nothing_is_cleaned(
    make_delta, run_now, monkeypatch
):
    console_table, path = make_delta(files=5)
    age_commits(path, range(5), days=40)
    before = log_names(path)
    real = delta_checkpoint.live_files

    def one_file_more(spec):
        return {**real(spec), ("/nowhere/missing.parquet", None): {}}

    monkeypatch.setattr(delta_checkpoint, "live_files", one_file_more)
    process = run_now(console_table, "checkpoint")

    assert process.status == ProcessStatus.FAILED
    assert "lists 5 live files where the log replay has 6" in process.failure
    assert log_names(path) == before  # the checkpoint and its _last_checkpoint were taken back
    assert multiset(delta_read(path)) == expected_at(4)


def test_a_table_with_the_compaction_and_vectors_checkpoints_and_reads_the_same(
    external_tables, warehouse, run_now
):
    """The Databricks table with a deletion vector, compacted by our OPTIMIZE commit (whose remove
    names the vector): deltalake's checkpoint of that log holds the compacted file alone."""
    from storage import services

    path = warehouse / "dv"
    shutil.copytree(external_tables / "delta" / "table-with-dv-small", path)
    console_table = services.table_register(location=str(path))
    compacted = run_now(console_table, "rewrite", {"delete-file-threshold": 1, "min-input-files": 2})
    assert compacted.status == ProcessStatus.SUCCESS, compacted.failure

    process = run_now(console_table, "checkpoint")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["checkpoint_version"] == 2
    spec = open_version(str(path))
    adds = list(spec.log.checkpoint_adds(spec.log.checkpoints[2]))
    assert len(adds) == 1 and not adds[0].get("deletionVector")
    assert sorted(rows_at(path, 2)["value"].to_pylist()) == list(range(1, 9))
    assert sorted(delta_read(path)["value"].to_pylist()) == list(range(1, 9))


def test_a_table_with_v2_checkpoints_is_refused_unchanged(make_delta, run_now):
    console_table, path = make_delta(files=2)
    spec = open_version(str(path))
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["v2Checkpoint"],
        "writerFeatures": ["appendOnly", "invariants", "v2Checkpoint"],
    }
    assert put_commit(spec.store, spec.version + 1, json.dumps({"protocol": protocol}).encode())
    before = log_names(path)

    process = run_now(console_table, "checkpoint")

    assert process.status == ProcessStatus.FAILED and "v2Checkpoint" in process.failure
    assert log_names(path) == before


def test_scheduled_checkpoints_wait_for_enough_commits(make_delta, run_now):
    from processes.maintenance.delta.checkpoint import DeltaCheckpointFactory
    from processes.runtime import TableRuntime

    console_table, path = make_delta(files=4)
    factory = DeltaCheckpointFactory()
    factory.configure({"min-commits": 3})
    runtime = TableRuntime(console_table, factory.properties)
    assert factory.trigger(runtime, "checkpoint") is not None  # versions 0-3, no checkpoint yet
    assert run_now(console_table, "checkpoint").status == ProcessStatus.SUCCESS
    assert factory.trigger(runtime, "checkpoint") is None  # checkpoint at the latest version
