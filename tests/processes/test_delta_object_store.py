"""The Delta maintenance of this issue on the object store (SeaweedFS's S3): files with deletion
vectors are left out of compactions there and counted (no put-if-absent commit that can name a
vector), ``purge-deletion-vectors`` is refused with the reason, and ``checkpoint`` writes the
checkpoint and cleans the log through the store."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from processes.factories.delta_rewrite import VECTORS_ON_OBJECT_STORES
from processes.models import ProcessStatus
from tests.conftest import upload_folder
from tests.objectstore.test_delta_maintenance_s3 import (  # noqa: F401 (fixtures)
    data_objects,
    make_s3_delta,
    objects,
    s3_root,
    storage_options,
)
from tests.processes.conftest import multiset
from tests.processes.test_delta_deletion_vectors import DV_ON, all_rows, delete_rows

pytestmark = pytest.mark.django_db(transaction=True)


def scan(location, storage_options):
    table = DeltaTable(location, storage_options=storage_options)
    return multiset(pa.RecordBatchReader.from_stream(table.scan()).read_all())


@pytest.fixture
def s3_dv_table(make_delta, seaweedfs, s3_root, s3_prefix, storage_options):
    """A deltalake table with deletion vectors on 3 of its 8 files, uploaded to S3 and
    registered: (console table, location, expected rows)."""
    from storage.models import Table

    _, path = make_delta(files=8, rows_per_file=10, partitioned=False, configuration=DV_ON)
    deleted = {1, 12, 23}
    delete_rows(path, deleted)
    location = upload_folder(seaweedfs, path, f"{s3_prefix}/dv-{uuid.uuid4().hex[:6]}")
    console = Table.objects.create(location=location, format="delta", name=location.rsplit("/", 1)[1])
    rows = all_rows(8, 10, partitioned=False)
    expected = multiset(rows.filter(pa.array([i not in deleted for i in rows["id"].to_pylist()])))
    assert scan(location, storage_options) == expected
    return console, location, expected


def test_on_s3_files_with_deletion_vectors_are_left_out_and_counted(s3_dv_table, run_now, storage_options):
    console, location, expected = s3_dv_table

    process = run_now(console, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert (summary["files_in"], summary["files_out"], summary["deletion_vector_files_skipped"]) == (5, 1, 3)
    assert summary["note"] == VECTORS_ON_OBJECT_STORES and summary["operation"] == "WRITE"
    assert scan(location, storage_options) == expected
    table = DeltaTable(location, storage_options=storage_options)
    assert table.history(1)[0]["lakewarden.process-id"] == str(process.pk)
    assert len(table.file_uris()) == 4  # the compacted file and the three with vectors


def test_purge_on_s3_is_refused_and_changes_nothing(s3_dv_table, run_now, seaweedfs, storage_options):
    console, location, expected = s3_dv_table
    before = objects(seaweedfs, location)

    process = run_now(console, "purge-deletion-vectors", {"deleted-ratio-threshold": 0})

    assert process.status == ProcessStatus.FAILED
    assert "CommitUnsupported" in process.failure and VECTORS_ON_OBJECT_STORES in process.failure
    assert objects(seaweedfs, location) == before
    assert scan(location, storage_options) == expected


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
