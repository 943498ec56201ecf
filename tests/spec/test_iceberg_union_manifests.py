"""Manifests whose ``data_file`` (and ``partition``) are nullable Avro unions, ``["null", {record}]``,
as BigQuery and some Spark versions write them; and decoding failures surface as ``CorruptTable``
naming the file, never as a raw AttributeError/KeyError/TypeError."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from storage.spec import load_table
from storage.spec.errors import CorruptTable
from tests.spec.test_iceberg_legacy import SpecWriter, _optional, fid, manifest_schema

SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "required": False, "type": "long"},
        {"id": 2, "name": "region", "required": False, "type": "string"},
    ],
}
ARROW = pa.schema([fid("id", pa.int64(), 1), fid("region", pa.string(), 2)])
PARTITION_FIELDS = [{"name": "region", "type": _optional("string"), "field-id": 1000}]


def _bounds(low: int, high: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return (
        [{"key": 1, "value": struct.pack("<q", low)}],
        [{"key": 1, "value": struct.pack("<q", high)}],
    )


def _union_table(tmp_path: Path, entries: list[dict[str, Any]] | None = None) -> tuple[str, SpecWriter]:
    """v2, identity on region, one manifest with nullable data_file/partition: ids 1-3 in eu,
    4-5 in us, with id bounds."""
    writer = SpecWriter(tmp_path / "union")
    files = []
    for region, ids in (("eu", [1, 2, 3]), ("us", [4, 5])):
        data_file = writer.parquet(pa.table({"id": ids, "region": [region] * len(ids)}, schema=ARROW))
        data_file["partition"] = {"region": region}
        data_file["lower_bounds"], data_file["upper_bounds"] = _bounds(min(ids), max(ids))
        data_file["null_value_counts"] = [{"key": 1, "value": 0}]
        files.append(data_file)
    records = (
        entries
        if entries is not None
        else [
            {
                "status": 1,
                "snapshot_id": 7,
                "sequence_number": None,
                "file_sequence_number": None,
                "data_file": f,
            }
            for f in files
        ]
    )
    manifest = writer.manifest(files, 7, PARTITION_FIELDS, nullable=True, entries=records)
    document = {
        "format-version": 2,
        "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
        "last-sequence-number": 1,
        "last-column-id": 2,
        "current-schema-id": 0,
        "schemas": [SCHEMA],
        "default-spec-id": 0,
        "partition-specs": [
            {
                "spec-id": 0,
                "fields": [{"name": "region", "transform": "identity", "source-id": 2, "field-id": 1000}],
            }
        ],
        "last-partition-id": 1000,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {},
        "current-snapshot-id": 7,
        "snapshots": [
            {
                "snapshot-id": 7,
                "sequence-number": 1,
                "timestamp-ms": 1_700_000_000_000,
                "summary": {"operation": "append"},
                "manifest-list": writer.manifest_list([(manifest, 0, 7)]),
                "schema-id": 0,
            }
        ],
    }
    return writer.metadata(document), writer


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(row.values()) for row in table.to_pylist())


EXPECTED = [(1, "eu"), (2, "eu"), (3, "eu"), (4, "us"), (5, "us")]


def test_a_manifest_with_a_nullable_data_file_lists_reads_and_prunes(tmp_path):
    location, _ = _union_table(tmp_path)
    table = load_table(location)
    listed = list(table.file_index().list_files_at())
    assert sorted((s.partition.values["region"], s.base_file.record_count) for s in listed) == [
        ("eu", 3),
        ("us", 2),
    ]
    eu = next(s for s in listed if s.partition.values["region"] == "eu")
    assert eu.base_file.lower_bounds["id"] == 1 and eu.base_file.upper_bounds["id"] == 3
    assert eu.base_file.null_counts["id"] == 0
    assert _rows(table.read_arrow()) == EXPECTED
    # partition pruning and column bounds pruning both read the union-decoded fields
    assert [s.partition.values for s in table.file_index().list_files_at(None, "region = 'us'")] == [
        {"region": "us"}
    ]
    assert [s.base_file.record_count for s in table.file_index().list_files_at(None, "id >= 4")] == [2]
    assert _rows(table.read_arrow(filters="id >= 3")) == EXPECTED[2:]
    splits = list(table.plan_splits())
    assert sorted(r for s in splits for r in _rows(table.read_arrow(s))) == EXPECTED
    assert table.summary().record_count == 5


def test_a_null_partition_tuple_reads_as_null_partition_values(tmp_path):
    writer = SpecWriter(tmp_path / "nullpart")
    data_file = writer.parquet(pa.table({"id": [9], "region": ["x"]}, schema=ARROW))
    data_file["partition"] = None
    entries = [
        {
            "status": 1,
            "snapshot_id": 7,
            "sequence_number": None,
            "file_sequence_number": None,
            "data_file": data_file,
        }
    ]
    location, _ = _union_table(tmp_path, entries)
    table = load_table(location)
    assert [s.partition.values for s in table.file_index().list_files_at()] == [{"region": None}]
    assert _rows(table.read_arrow()) == [(9, "x")]


def test_a_null_data_file_is_a_corrupt_manifest_naming_the_file(tmp_path):
    entries = [
        {
            "status": 1,
            "snapshot_id": 7,
            "sequence_number": None,
            "file_sequence_number": None,
            "data_file": None,
        }
    ]
    location, _ = _union_table(tmp_path, entries)
    table = load_table(location)
    for action in (
        lambda: list(table.file_index().list_files_at()),
        lambda: table.read_arrow(),
        lambda: list(table.plan_splits()),
        lambda: table.summary(),
    ):
        with pytest.raises(CorruptTable, match=r"manifest .*-m0\.avro.*data_file"):
            action()


def _rewrite_manifest(location: str, schema: dict[str, Any], records: list[dict[str, Any]]) -> None:
    table = load_table(location)
    manifest = next(iter(table.file_index()._manifests(table.snapshot_for(None)))).path  # type: ignore[attr-defined]
    with open(manifest, "wb") as out:
        fastavro.writer(out, fastavro.parse_schema(schema), records)


@pytest.mark.parametrize(
    "damage",
    ["no-file-path", "partition-not-record", "truncated", "garbage", "string-status", "schema-not-record"],
)
def test_decoding_failures_are_corrupt_tables_naming_the_manifest(tmp_path, damage):
    location, _ = _union_table(tmp_path)
    table = load_table(location)
    manifest = next(iter(table.file_index()._manifests(table.snapshot_for(None)))).path  # type: ignore[attr-defined]
    if damage == "no-file-path":
        schema = manifest_schema(PARTITION_FIELDS, nullable=True)
        data_file = schema["fields"][-1]["type"][1]
        data_file["fields"] = [f for f in data_file["fields"] if f["name"] != "file_path"]
        record = {
            "status": 1,
            "snapshot_id": 7,
            "sequence_number": None,
            "file_sequence_number": None,
            "data_file": {
                "content": 0,
                "file_format": "PARQUET",
                "partition": {"region": "eu"},
                "record_count": 1,
                "file_size_in_bytes": 1,
            },
        }
        _rewrite_manifest(location, schema, [record])
    elif damage == "partition-not-record":
        schema = manifest_schema([], nullable=True)
        data_file = schema["fields"][-1]["type"][1]
        for field in data_file["fields"]:
            if field["name"] == "partition":
                field["type"] = "string"
        record = {
            "status": 1,
            "snapshot_id": 7,
            "sequence_number": None,
            "file_sequence_number": None,
            "data_file": {
                "content": 0,
                "file_path": "/x.parquet",
                "file_format": "PARQUET",
                "partition": "eu",
                "record_count": 1,
                "file_size_in_bytes": 1,
            },
        }
        _rewrite_manifest(location, schema, [record])
    elif damage == "string-status":
        schema = manifest_schema(PARTITION_FIELDS, nullable=True)
        schema["fields"][0]["type"] = "string"
        record = {
            "status": "added",
            "snapshot_id": 7,
            "sequence_number": None,
            "file_sequence_number": None,
            "data_file": None,
        }
        _rewrite_manifest(location, schema, [record])
    elif damage == "schema-not-record":
        _rewrite_manifest(location, {"type": "array", "items": "long"}, [[1, 2]])
    elif damage == "truncated":
        data = Path(manifest).read_bytes()
        Path(manifest).write_bytes(data[: len(data) - 40])
    else:
        Path(manifest).write_bytes(b"Obj\x01" + b"\x00" * 64)
    table = load_table(location)
    with pytest.raises(CorruptTable, match=r"-m0\.avro"):
        table.read_arrow()
    with pytest.raises(CorruptTable, match=r"-m0\.avro"):
        list(table.plan_splits())


def test_a_manifest_list_without_manifest_paths_is_corrupt(tmp_path):
    location, _ = _union_table(tmp_path)
    table = load_table(location)
    manifest_list = table.snapshot_for(None).manifest_list
    schema = {
        "type": "record",
        "name": "manifest_file",
        "fields": [{"name": "manifest_length", "type": "long"}],
    }
    with open(manifest_list, "wb") as out:
        fastavro.writer(out, fastavro.parse_schema(schema), [{"manifest_length": 5}])
    with pytest.raises(CorruptTable, match="snap-"):
        load_table(location).read_arrow()


@pytest.mark.spark
def test_the_spark_reader_reads_a_table_with_union_manifests(tmp_path, spark):
    from storage.spec.spark_source import read_table

    location, _ = _union_table(tmp_path)
    frame = read_table(spark, location, format="iceberg")
    assert sorted(tuple(r) for r in frame.collect()) == EXPECTED
    frame = read_table(spark, location, format="iceberg", filters="region = 'us'")
    assert sorted(tuple(r) for r in frame.collect()) == EXPECTED[3:]


def test_unreadable_bounds_are_unknown_not_errors(tmp_path):
    writer = SpecWriter(tmp_path / "badbounds")
    data_file = writer.parquet(pa.table({"id": [1, 2], "region": ["eu", "eu"]}, schema=ARROW))
    data_file["partition"] = {"region": "eu"}
    # invalid UTF-8 for the string column, a 1-byte "long" is read as a short integer: neither
    # may prune the file or escape as a raw decoding error
    data_file["lower_bounds"] = [{"key": 2, "value": b"\xff\xfe"}, {"key": 1, "value": b""}]
    data_file["upper_bounds"] = [{"key": 2, "value": b"\xff"}]
    entries = [
        {
            "status": 1,
            "snapshot_id": 7,
            "sequence_number": None,
            "file_sequence_number": None,
            "data_file": data_file,
        }
    ]
    location, _ = _union_table(tmp_path, entries)
    table = load_table(location)
    assert _rows(table.read_arrow(filters="region = 'eu'")) == [(1, "eu"), (2, "eu")]
    assert _rows(table.read_arrow(filters="id >= 2")) == [(2, "eu")]
    listed = list(table.file_index().list_files_at())
    assert listed[0].base_file.lower_bounds.get("region") is None
