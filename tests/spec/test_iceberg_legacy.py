"""Legacy Iceberg v1 metadata, as the Java reference (TableMetadataParser) accepts it.

The tables are hand-written from the spec by ``iceberg_writer.SpecWriter``: parquet files by
pyarrow, manifests and manifest lists by fastavro, metadata JSON by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage.spec import load_table
from storage.spec.errors import CorruptTable
from tests.spec.iceberg_writer import SpecWriter, fid, manifest_schema, optional

# test_iceberg_union_manifests imports these from here
_optional = optional
__all__ = ["SpecWriter", "_legacy_table", "_optional", "fid", "manifest_schema"]


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(row.values()) for row in table.to_pylist())


SCHEMA_V1 = {
    "type": "struct",
    "fields": [
        {"id": 1, "name": "id", "required": False, "type": "long"},
        {"id": 2, "name": "region", "required": False, "type": "string"},
    ],
}


def _legacy_table(tmp_path: Path, inline: bool, base: str | None = None) -> tuple[str, list[int]]:
    """A v1 table the Java parser accepts and pyiceberg's model refuses: ``schema`` only,
    ``partition-spec`` only (field without field-id), no last-partition-id, default-spec-id,
    current-snapshot-id (the last snapshot is not current!), properties nor table-uuid; snapshots
    with inline ``manifests`` (``inline``) or manifest lists. Two snapshots, identity on region.
    Written under ``tmp_path/legacy``, its files named under ``base`` when given (``SpecWriter``)."""
    writer = SpecWriter(tmp_path / "legacy", base)
    partition_fields = [{"name": "region", "type": optional("string"), "field-id": 1000}]
    snapshots = []
    ids = [101, 202]
    for position, (snap, region, values) in enumerate(zip(ids, ("eu", "us"), ([1, 2], [3]), strict=True)):
        rows = pa.table(
            {"id": pa.array(values, pa.int64()), "region": [region] * len(values)},
            schema=pa.schema([fid("id", pa.int64(), 1), fid("region", pa.string(), 2)]),
        )
        data_file = writer.parquet(rows)
        data_file["partition"] = {"region": region}
        manifest = writer.manifest([data_file], snap, partition_fields, v1=True)
        previous = snapshots[-1]["manifests"] if snapshots and inline else []
        snapshot: dict[str, Any] = {
            "snapshot-id": snap,
            "timestamp-ms": 1_700_000_000_000 + position,
            "summary": {"operation": "append"},
        }
        if position:
            snapshot["parent-snapshot-id"] = ids[position - 1]
        if inline:
            snapshot["manifests"] = [*previous, manifest]
        else:
            lists = [(m, 0, s) for m, s in getattr(writer, "_all", [])] + [(manifest, 0, snap)]
            writer._all = [*getattr(writer, "_all", []), (manifest, snap)]  # type: ignore[attr-defined]
            snapshot["manifest-list"] = writer.manifest_list(lists, sequence=0)
        snapshots.append(snapshot)
    document = {
        "format-version": 1,
        "location": writer.base,
        "last-updated-ms": 1_700_000_000_002,
        "last-column-id": 2,
        "schema": SCHEMA_V1,
        "partition-spec": [{"name": "region", "transform": "identity", "source-id": 2}],
        "snapshots": snapshots,
    }
    return writer.metadata(document), ids


@pytest.mark.parametrize("inline", [True, False], ids=["inline-manifests", "manifest-list"])
def test_a_legacy_v1_table_lists_and_reads(tmp_path, inline):
    location, ids = _legacy_table(tmp_path, inline)
    table = load_table(location)
    # no current-snapshot-id: the Java reference has no current snapshot (an empty read)
    assert table.summary().current_instant_id is None
    assert table.read_arrow().num_rows == 0
    assert [i.id for i in table.timeline().instants()] == ids
    assert table.partition_spec.names == ("region",)
    first, second = (table.read_arrow(i) for i in ids)
    assert _rows(first) == [(1, "eu"), (2, "eu")]
    assert _rows(second) == [(1, "eu"), (2, "eu"), (3, "us")]
    listed = list(table.file_index().list_files_at(ids[1]))
    assert sorted(s.partition.values["region"] for s in listed) == ["eu", "us"]
    assert sorted(s.base_file.record_count for s in listed) == [1, 2]
    assert [s.partition.values for s in table.file_index().list_files_at(ids[1], "region = 'us'")] == [
        {"region": "us"}
    ]
    splits = list(table.plan_splits(ids[1]))
    assert sorted(r for split in splits for r in _rows(table.read_arrow(split))) == [
        (1, "eu"),
        (2, "eu"),
        (3, "us"),
    ]
    assert _rows(table.read_arrow(ids[1], filters="id > 1")) == [(2, "eu"), (3, "us")]
    # The changes of each snapshot are its own files, inline manifest lists too (they do not say
    # which snapshot added a manifest: the entries do).
    changes = list(table.file_index().list_files_between(ids[0], ids[1]))
    assert [(c.kind.value, c.instant_id, c.file_slice.partition.values) for c in changes] == [
        ("added", ids[1], {"region": "us"})
    ]
    everything = list(table.file_index().list_files_between(None, ids[1]))
    assert sorted((c.instant_id, c.file_slice.base_file.record_count) for c in everything) == [
        (ids[0], 2),
        (ids[1], 1),
    ]


def test_legacy_fields_the_java_parser_accepts(tmp_path):
    from storage.formats.iceberg._metadata import normalise

    document, _ = normalise(
        {
            "format-version": 1,
            "location": "/x",
            "last-updated-ms": 1,
            "last-column-id": 2,
            "schema": SCHEMA_V1,
            "partition-spec": [{"name": "region", "transform": "identity", "source-id": 2}],
            "snapshots": [{"snapshot-id": 5, "timestamp-ms": 1, "manifests": ["/m.avro"], "summary": {}}],
        }
    )
    assert document["schemas"][0]["schema-id"] == 0 and document["current-schema-id"] == 0
    assert document["partition-specs"] == [
        {
            "spec-id": 0,
            "fields": [{"name": "region", "transform": "identity", "source-id": 2, "field-id": 1000}],
        }
    ]
    assert document["default-spec-id"] == 0 and document["last-partition-id"] == 1000
    assert document["current-snapshot-id"] == -1 and document["properties"] == {}
    assert "summary" not in document["snapshots"][0]  # no operation: as Java, none recorded
    assert document["snapshots"][0]["manifest-list"].endswith('["/m.avro"]')


def test_a_current_legacy_snapshot_and_a_missing_inline_manifest(tmp_path):
    location, ids = _legacy_table(tmp_path, inline=True)
    document = json.loads(Path(location).read_text())
    document["current-snapshot-id"] = ids[1]
    Path(location).write_text(json.dumps(document))
    table = load_table(location)
    assert table.summary().current_instant_id == ids[1]
    assert table.summary().record_count == 3  # no totals in the summary: counted by listing
    assert _rows(table.read_arrow()) == [(1, "eu"), (2, "eu"), (3, "us")]
    Path(document["snapshots"][1]["manifests"][1]).unlink()
    with pytest.raises(CorruptTable, match="-m0.avro"):
        load_table(location).read_arrow()


@pytest.mark.spark
def test_the_spark_reader_reads_a_legacy_v1_table(tmp_path, spark):
    from storage.spec.spark_source import read_table

    location, ids = _legacy_table(tmp_path, inline=True)
    frame = read_table(spark, location, format="iceberg", instant=ids[1])
    assert sorted(tuple(r) for r in frame.collect()) == [(1, "eu"), (2, "eu"), (3, "us")]
    frame = read_table(spark, location, format="iceberg", instant=ids[0], filters="id = 2")
    assert [tuple(r) for r in frame.collect()] == [(2, "eu")]
