"""Listing on the object store reads each metadata file in a bounded number of requests: the
count grows with the number of manifests (Iceberg) or of log files (Delta), never with the
number of entries in them.

Requests are counted by SeaweedFS itself: its Prometheus counter ``SeaweedFS_s3_request_total``
(per bucket, status code and request type), scraped before and after the listing, once no
request is in flight (the counter is bumped after a handler returns, the in-flight gauge after
that). Each table is built twice, with few and with many entries per manifest or commit, and the
two listings must make the same requests.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from storage.io import StoreOptions
from storage.spec import load_table
from tests.conftest import upload_folder
from tests.spec import _delta_log_writer as delta_log

MANIFESTS = 4
FEW, MANY = 10, 1500


def _counted(seaweedfs, bucket: str, action, expected: int | None = None):
    """``action()`` and the requests it made; ``expected``: the count the test will compare, waited
    for (up to 10 s) so a counter bumped late is not read short; more requests are still seen."""
    before = seaweedfs.request_count(bucket)
    result = action()
    floor = None if expected is None else before + expected
    return result, seaweedfs.request_count(bucket, at_least=floor) - before


# -- Iceberg: a REST catalog table with MANIFESTS manifests -----------------------------------


@pytest.fixture(scope="module")
def rest_catalog(seaweedfs):
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("listing-requests", **{"type": "rest", **seaweedfs.rest_catalog_properties()})
    namespace = f"listing_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    return catalog, namespace


def _fake_data_file(location: str, k: int):
    """A manifest entry with stats (the file itself does not exist: listing never opens it)."""
    from pyiceberg.conversions import to_bytes
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record
    from pyiceberg.types import LongType, StringType

    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=f"{location}/data/{k:08d}-{uuid.uuid4().hex}.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=1000 + k,
        file_size_in_bytes=100_000 + k,
        column_sizes={1: 4000, 2: 9000},
        value_counts={1: 1000 + k, 2: 1000 + k},
        null_value_counts={1: 0, 2: 0},
        lower_bounds={1: to_bytes(LongType(), k * 1000), 2: to_bytes(StringType(), "a customer name")},
        upper_bounds={1: to_bytes(LongType(), k * 1000 + 999), 2: to_bytes(StringType(), "z customer name")},
        split_offsets=[4],
        sort_order_id=0,
    )
    data_file.spec_id = 0
    return data_file


def _iceberg_table(rest_catalog, per_manifest: int):
    """A table of MANIFESTS fast appends of ``per_manifest`` entries; returns (table, {path: size})."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    catalog, namespace = rest_catalog
    table = catalog.create_table(
        f"{namespace}.entries_{per_manifest}",
        Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "customer", StringType(), required=False),
        ),
        properties={"commit.manifest-merge.enabled": "false"},
    )
    written: dict[str, int] = {}
    for commit in range(MANIFESTS):
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for k in range(commit * per_manifest, (commit + 1) * per_manifest):
                data_file = _fake_data_file(table.metadata.location, k)
                written[data_file.file_path] = data_file.file_size_in_bytes
                append.append_data_file(data_file)
    table = catalog.load_table(f"{namespace}.entries_{per_manifest}")
    assert len(table.current_snapshot().manifests(table.io)) == MANIFESTS
    return table, written


def _iceberg_listing(seaweedfs, rest_catalog, per_manifest: int) -> int:
    table, written = _iceberg_table(rest_catalog, per_manifest)
    options = StoreOptions.from_properties(seaweedfs.s3_properties(), environ={})
    spec_table = load_table(table.metadata_location, storage=options)
    spec_table.timeline()
    bucket = table.metadata.location.removeprefix("s3://").split("/", 1)[0]
    slices, requests = _counted(
        seaweedfs, bucket, lambda: list(spec_table.file_index().list_files_at(None)), MANIFESTS + 1
    )
    assert {s.base_file.path: s.base_file.size_bytes for s in slices} == written
    assert sum(s.base_file.record_count for s in slices) == sum(1000 + k for k in range(len(written)))
    return requests


def test_iceberg_listing_requests_grow_with_manifests_not_entries(seaweedfs, rest_catalog):
    few = _iceberg_listing(seaweedfs, rest_catalog, FEW)
    many = _iceberg_listing(seaweedfs, rest_catalog, MANY)
    # the manifest list and each manifest: one object each, read whole in one GET (no HEAD first:
    # storage.io.objects)
    assert many == few == MANIFESTS + 1


# -- Delta: commits, a checkpoint, and commits after it ----------------------------------------

BEFORE_CHECKPOINT, AFTER_CHECKPOINT = 3, 3


def _adds(version: int, per_commit: int) -> list[dict]:
    adds = []
    for k in range(per_commit):
        i = version * per_commit + k
        stats = {"numRecords": 1000, "minValues": {"id": i * 1000}, "maxValues": {"id": i * 1000 + 999}}
        adds.append(
            {
                "add": {
                    "path": f"day={i % 30}/part-{i:08d}-{uuid.uuid4().hex}.parquet",
                    "partitionValues": {"day": str(i % 30)},
                    "size": 100_000 + i,
                    "modificationTime": delta_log.COMMIT_MILLIS,
                    "dataChange": True,
                    "stats": json.dumps({**stats, "nullCount": {"id": 0}}),
                }
            }
        )
    return adds


def _delta_table(folder: Path, per_commit: int) -> dict[str, int]:
    """Commits 0..3, a checkpoint at 3 (written by deltalake), commits 4..6; returns {relative: size}."""
    from deltalake import DeltaTable

    fields = [delta_log.field("id", "long"), delta_log.field("day", "string")]
    written: dict[str, int] = {}
    for version in range(BEFORE_CHECKPOINT + 1 + AFTER_CHECKPOINT):
        adds = _adds(version, per_commit)
        written.update({a["add"]["path"]: a["add"]["size"] for a in adds})
        first = (
            [
                {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                delta_log.metadata(fields, ["day"]),
            ]
            if version == 0
            else []
        )
        delta_log.commit(folder, version, *first, *adds)
        if version == BEFORE_CHECKPOINT:
            DeltaTable(str(folder)).create_checkpoint()
    assert (folder / "_delta_log" / f"{BEFORE_CHECKPOINT:020d}.checkpoint.parquet").is_file()
    return written


def _delta_listing(
    seaweedfs, tmp_path: Path, per_commit: int, expected: tuple[int, int] = (None, None)
) -> tuple[int, int]:
    folder = tmp_path / f"delta-{per_commit}"
    written = _delta_table(folder, per_commit)
    prefix = upload_folder(seaweedfs, folder, f"s3://lake/listing-requests/{uuid.uuid4().hex[:8]}")
    options = StoreOptions.from_properties(seaweedfs.s3_properties(), environ={})
    table, opening = _counted(seaweedfs, "lake", lambda: load_table(prefix, storage=options), expected[0])
    assert table.timeline().latest().id == BEFORE_CHECKPOINT + AFTER_CHECKPOINT
    slices, listing = _counted(
        seaweedfs, "lake", lambda: list(table.file_index().list_files_at(None)), expected[1]
    )
    assert {s.base_file.path: s.base_file.size_bytes for s in slices} == {
        f"{prefix}/{path}": size for path, size in written.items()
    }
    return opening, listing


def test_delta_listing_requests_grow_with_log_files_not_entries(seaweedfs, tmp_path):
    few_open, few_list = _delta_listing(seaweedfs, tmp_path, FEW)
    # the same requests as with few entries: waited for, so a late counter is not read short
    many_open, many_list = _delta_listing(seaweedfs, tmp_path, MANY, (few_open, few_list))
    # a commit of 1500 adds is ~0.5 MB: read line by line without a buffer it was ~60 ranged GETs
    assert (many_open, many_list) == (few_open, few_list)
    # listing: the checkpoint (a HEAD, its footer, its one row group) and each later commit
    # (a HEAD and one GET)
    assert 0 < many_list <= 2 * AFTER_CHECKPOINT + 4
    # opening also lists _delta_log and checks the table folder exists
    assert 0 < many_open <= 2 * AFTER_CHECKPOINT + 12
