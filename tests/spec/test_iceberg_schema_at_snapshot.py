"""Time travel reads an old snapshot with the snapshot's own schema (its ``schema-id``): columns
added later are absent, dropped ones present, renamed ones under their old name."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage.spec import load_table
from storage.spec.errors import FilterError
from tests.spec.iceberg_writer import SpecWriter, fid


def _field(name: str, field_id: int, type_: str) -> dict[str, Any]:
    return {"id": field_id, "name": name, "required": False, "type": type_}


# schema 0: id, old_name, gone. schema 1: old_name renamed new_name, gone dropped, added added,
# and a new column that reuses the dropped name "gone" (another field id)
SCHEMA_0 = {
    "type": "struct",
    "schema-id": 0,
    "fields": [_field("id", 1, "long"), _field("old_name", 2, "string"), _field("gone", 3, "int")],
}
SCHEMA_1 = {
    "type": "struct",
    "schema-id": 1,
    "fields": [
        _field("id", 1, "long"),
        _field("new_name", 2, "string"),
        _field("added", 4, "double"),
        _field("gone", 5, "string"),
    ],
}


def evolved_table(root: Path) -> tuple[str, int, int]:
    writer = SpecWriter(root)
    first = writer.parquet(
        pa.table(
            {"id": [1, 2], "old_name": ["a", "b"], "gone": [10, 20]},
            schema=pa.schema(
                [fid("id", pa.int64(), 1), fid("old_name", pa.string(), 2), fid("gone", pa.int32(), 3)]
            ),
        )
    )
    # bounds of field 3 (the dropped int "gone"): a filter on the new "gone" must not use them
    first["lower_bounds"] = [{"key": 3, "value": struct.pack("<i", 10)}]
    first["upper_bounds"] = [{"key": 3, "value": struct.pack("<i", 20)}]
    second = writer.parquet(
        pa.table(
            {"id": [3], "new_name": ["c"], "added": [0.5], "gone": ["back"]},
            schema=pa.schema(
                [
                    fid("id", pa.int64(), 1),
                    fid("new_name", pa.string(), 2),
                    fid("added", pa.float64(), 4),
                    fid("gone", pa.string(), 5),
                ]
            ),
        )
    )
    m1 = writer.manifest([first], 1)
    m2 = writer.manifest([second], 2)
    snapshots = [
        {
            "snapshot-id": 1,
            "sequence-number": 1,
            "timestamp-ms": 1_700_000_000_000,
            "schema-id": 0,
            "summary": {"operation": "append"},
            "manifest-list": writer.manifest_list([(m1, 0, 1)], 1),
        },
        {
            "snapshot-id": 2,
            "parent-snapshot-id": 1,
            "sequence-number": 2,
            "timestamp-ms": 1_700_000_000_001,
            "schema-id": 1,
            "summary": {"operation": "append"},
            "manifest-list": writer.manifest_list([(m1, 0, 1), (m2, 0, 2)], 2),
        },
    ]
    location = writer.metadata(
        {
            "format-version": 2,
            "table-uuid": "0d5bd1c5-64b5-4b34-bbcd-5cdd3f7e4e0f",
            "last-sequence-number": 2,
            "last-column-id": 5,
            "current-schema-id": 1,
            "schemas": [SCHEMA_0, SCHEMA_1],
            "default-spec-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": []}],
            "last-partition-id": 999,
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": {},
            "current-snapshot-id": 2,
            "snapshots": snapshots,
        }
    )
    return location, 1, 2


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def test_an_old_snapshot_reads_with_its_own_schema(tmp_path):
    location, old, new = evolved_table(tmp_path / "evolved")
    table = load_table(location)
    assert table.schema_at(old).names == ["id", "old_name", "gone"]
    assert table.schema_at(new).names == table.schema.names == ["id", "new_name", "added", "gone"]
    then = table.read_arrow(old)
    assert then.schema.names == ["id", "old_name", "gone"]
    assert then.schema.field("gone").type == pa.int32()
    assert _rows(then) == [{"id": 1, "old_name": "a", "gone": 10}, {"id": 2, "old_name": "b", "gone": 20}]
    assert _rows(table.read_arrow()) == [
        {"id": 1, "new_name": "a", "added": None, "gone": None},
        {"id": 2, "new_name": "b", "added": None, "gone": None},
        {"id": 3, "new_name": "c", "added": 0.5, "gone": "back"},
    ]
    assert _rows(table.read_arrow(new)) == _rows(table.read_arrow())


def test_filters_and_columns_name_the_snapshots_columns(tmp_path):
    location, old, _ = evolved_table(tmp_path / "evolved")
    table = load_table(location)
    assert table.read_arrow(old, columns=["old_name"], filters="gone = 20").to_pylist() == [{"old_name": "b"}]
    assert table.read_arrow(old, filters="old_name = 'a'", columns=["id"]).to_pylist() == [{"id": 1}]
    with pytest.raises(FilterError):
        table.read_arrow(old, filters="new_name = 'a'")
    with pytest.raises(FilterError):
        table.read_arrow(old, columns=["new_name"])
    # a column added later may still be named explicitly (callers holding the current schema)
    assert _rows(table.read_arrow(old, columns=["id", "added"], filters="added is null")) == [
        {"id": 1, "added": None},
        {"id": 2, "added": None},
    ]
    # "gone" names field 5 today: the current read filters on it, not on the dropped field 3
    assert table.read_arrow(filters="gone = 'back'", columns=["id"]).to_pylist() == [{"id": 3}]
    assert table.read_arrow(filters="gone is null", columns=["id"]).num_rows == 2


def test_listing_and_splits_at_an_old_snapshot(tmp_path):
    location, old, _ = evolved_table(tmp_path / "evolved")
    table = load_table(location)
    assert [s.base_file.record_count for s in table.file_index().list_files_at(old)] == [2]
    splits = list(table.plan_splits(old))
    # splits planned at a snapshot read with its schema
    assert [r for s in splits for r in _rows(table.read_arrow(s))] == [
        {"id": 1, "old_name": "a", "gone": 10},
        {"id": 2, "old_name": "b", "gone": 20},
    ]
    splits = list(table.plan_splits(old, filters="gone = 20"))
    assert [r for s in splits for r in table.read_arrow(s, filters="gone = 20").to_pylist()] == [
        {"id": 2, "old_name": "b", "gone": 20}
    ]
    # the current schema's splits are unchanged
    assert sorted(r["new_name"] for s in table.plan_splits() for r in table.read_arrow(s).to_pylist()) == [
        "a",
        "b",
        "c",
    ]


@pytest.mark.spark
def test_the_spark_reader_reads_an_old_snapshot_with_its_schema(tmp_path, spark):
    from storage.spec.spark_source import read_table

    location, old, _ = evolved_table(tmp_path / "evolved")
    frame = read_table(spark, location, format="iceberg", instant=old)
    assert frame.columns == ["id", "old_name", "gone"]
    assert sorted(tuple(r) for r in frame.collect()) == [(1, "a", 10), (2, "b", 20)]
    frame = read_table(spark, location, format="iceberg", instant=old, filters="old_name = 'b'")
    assert [tuple(r) for r in frame.collect()] == [(2, "b", 20)]
    frame = read_table(spark, location, format="iceberg")
    assert sorted(tuple(r) for r in frame.collect()) == [
        (1, "a", None, None),
        (2, "b", None, None),
        (3, "c", 0.5, "back"),
    ]
