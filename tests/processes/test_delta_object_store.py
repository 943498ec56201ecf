"""The Delta maintenance of this issue on the object store (SeaweedFS's S3): files with deletion
vectors are compacted and purged there with the commit writer's put-if-absent (a ``PUT`` with
``If-None-Match: *``), each removed with its vector, and ``checkpoint`` writes the checkpoint and
cleans the log through the store."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from processes.models import ProcessStatus
from storage.formats.delta import commit as delta_commit
from storage.formats.delta.commit import live_files, open_version, put_commit
from tests.conftest import upload_folder
from tests.objectstore.test_delta_maintenance_s3 import (  # noqa: F401 (fixtures)
    data_objects,
    make_s3_delta,
    objects,
    s3_root,
    storage_options,
)
from tests.processes.conftest import delta_rows, multiset
from tests.processes.test_delta_deletion_vectors import DV_ON, all_rows, delete_rows

pytestmark = pytest.mark.django_db(transaction=True)

DELETED = {1, 12, 23}  # one row in each of the first three files (10 rows a file)


def scan(location, storage_options):
    table = DeltaTable(location, storage_options=storage_options)
    return multiset(pa.RecordBatchReader.from_stream(table.scan()).read_all())


def last_commit(seaweedfs, location: str) -> list[dict]:
    log = sorted(p for p in objects(seaweedfs, location) if p.endswith(".json") and "/_delta_log/" in p)[-1]
    with seaweedfs.filesystem().open_input_stream(log.removeprefix("s3://")) as stream:
        return [json.loads(line) for line in stream.read().decode().splitlines() if line.strip()]


@pytest.fixture
def s3_dv_table(make_delta, seaweedfs, s3_root, s3_prefix, storage_options):
    """A deltalake table with deletion vectors on 3 of its 8 files, uploaded to S3 and
    registered: (console table, location, expected rows)."""
    from storage.models import Table

    _, path = make_delta(files=8, rows_per_file=10, partitioned=False, configuration=DV_ON)
    delete_rows(path, DELETED)
    location = upload_folder(seaweedfs, path, f"{s3_prefix}/dv-{uuid.uuid4().hex[:6]}")
    console = Table.objects.create(location=location, format="delta", name=location.rsplit("/", 1)[1])
    rows = all_rows(8, 10, partitioned=False)
    expected = multiset(rows.filter(pa.array([i not in DELETED for i in rows["id"].to_pylist()])))
    assert scan(location, storage_options) == expected
    return console, location, expected


def vectors_of(location, s3_options) -> dict[str, dict]:
    return {
        add["path"]: add["deletionVector"]
        for add in live_files(open_version(location, storage=s3_options)).values()
        if add.get("deletionVector")
    }


def test_put_if_absent_on_s3_creates_a_commit_once_and_never_overwrites_it(s3_dv_table, s3_options):
    _, location, _ = s3_dv_table
    spec = open_version(location, storage=s3_options)
    target = spec.store.table_path(f"_delta_log/{spec.version + 5:020d}.json")

    assert put_commit(spec.store, spec.version + 5, b"first") is True
    assert put_commit(spec.store, spec.version + 5, b"second") is False
    with spec.store.fs.open_input_stream(target) as stream:
        assert stream.read() == b"first"


def test_on_s3_files_with_deletion_vectors_are_compacted_with_their_vectors_removed(
    s3_dv_table, run_now, seaweedfs, storage_options, s3_options
):
    console, location, expected = s3_dv_table
    vectors = vectors_of(location, s3_options)
    version = DeltaTable(location, storage_options=storage_options).version()
    assert len(vectors) == 3

    process = run_now(console, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert (summary["files_in"], summary["files_out"], summary["deletion_vectors_applied"]) == (8, 1, 3)
    assert summary["operation"] == "OPTIMIZE" and summary["version"] == version + 1
    assert scan(location, storage_options) == expected  # deltalake reads it
    table = DeltaTable(location, storage_options=storage_options)
    assert len(table.file_uris()) == 1
    actions = last_commit(seaweedfs, location)
    assert actions[0]["commitInfo"]["lakewarden.process-id"] == str(process.pk)
    removes = [a["remove"] for a in actions if "remove" in a]
    assert {r["path"]: r["deletionVector"] for r in removes if r.get("deletionVector")} == vectors
    assert len(removes) == 8 and not any(r["dataChange"] for r in removes)


def test_purge_on_s3_rewrites_the_files_with_vectors(
    s3_dv_table, run_now, seaweedfs, storage_options, s3_options
):
    console, location, expected = s3_dv_table
    vectors = vectors_of(location, s3_options)

    process = run_now(console, "purge-deletion-vectors", {"deleted-ratio-threshold": 0})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 3 and process.summary["deleted_rows_purged"] == 3
    assert scan(location, storage_options) == expected
    assert vectors_of(location, s3_options) == {}
    assert len(DeltaTable(location, storage_options=storage_options).file_uris()) == 5 + 1
    info = last_commit(seaweedfs, location)[0]["commitInfo"]
    assert info["operation"] == "REORG" and info["operationMetrics"]["numDeletionVectorsRemoved"] == "3"
    assert set(vectors) <= {a["remove"]["path"] for a in last_commit(seaweedfs, location) if "remove" in a}


def test_on_s3_a_writer_taking_the_next_version_first_is_checked_again_and_kept(
    s3_dv_table, run_now, storage_options, monkeypatch
):
    console, location, expected = s3_dv_table
    appended = delta_rows(90_000, 7)
    real = delta_commit._checked_actions
    raced = []

    def check_then_race(latest, request):
        actions = real(latest, request)
        if not raced:  # another writer takes the version this commit is about to create
            write_deltalake(location, appended, mode="append", storage_options=storage_options)
            raced.append(True)
        return actions

    monkeypatch.setattr(delta_commit, "_checked_actions", check_then_race)
    version = DeltaTable(location, storage_options=storage_options).version()
    process = run_now(console, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["version"] == version + 2 and process.summary["attempts"] == 1
    history = {
        h["version"]: h["operation"] for h in DeltaTable(location, storage_options=storage_options).history(2)
    }
    assert history == {version + 1: "WRITE", version + 2: "OPTIMIZE"}
    assert scan(location, storage_options) == expected + multiset(appended)


def test_a_checkpoint_on_s3_cleans_the_log_through_the_store(
    make_s3_delta, run_now, seaweedfs, storage_options
):
    # A retention of 0 hours: every commit is expired, the new checkpoint is the floor.
    console, location = make_s3_delta(
        files=6, configuration={"delta.logRetentionDuration": "interval 0 hours"}
    )
    rows = scan(location, storage_options)
    data = data_objects(objects(seaweedfs, location))

    process = run_now(console, "checkpoint")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["log_files_removed"] == 5 and process.summary["cleanup_floor"] == 5
    log = {p.rsplit("/", 1)[1] for p in objects(seaweedfs, location) if "/_delta_log/" in p}
    assert log == {f"{5:020d}.json", f"{5:020d}.checkpoint.parquet", "_last_checkpoint"}
    assert data_objects(objects(seaweedfs, location)) == data
    assert scan(location, storage_options) == rows
