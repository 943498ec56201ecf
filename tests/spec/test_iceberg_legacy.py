"""Legacy Iceberg v1 metadata, as the Java reference (TableMetadataParser) accepts it.

The tables are hand-written from the spec: parquet files by pyarrow (field ids in the Arrow field
metadata), manifests and manifest lists by fastavro, metadata JSON by hand. ``SpecWriter`` is
shared with the other hand-written Iceberg tests (defaults, union manifests, schema at snapshot).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.spec import load_table
from storage.spec.errors import CorruptTable

FIELD_ID = b"PARQUET:field_id"


def fid(name: str, type_: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable, {FIELD_ID: str(field_id).encode()})


def _optional(type_: Any) -> list[Any]:
    return ["null", type_]


def _int_map(name: str, key_id: int, value_id: int, value: str) -> dict[str, Any]:
    return {
        "type": "array",
        "logicalType": "map",
        "items": {
            "type": "record",
            "name": name,
            "fields": [
                {"name": "key", "type": "int", "field-id": key_id},
                {"name": "value", "type": value, "field-id": value_id},
            ],
        },
    }


def manifest_schema(partition_fields: list[dict[str, Any]], v1: bool = False, nullable: bool = False) -> dict:
    """The Avro schema of a manifest (v1 or v2 field set); ``nullable`` writes ``data_file`` and
    ``partition`` as ``["null", {record}]`` unions (as BigQuery and some Spark versions do)."""
    partition: Any = {"type": "record", "name": "r102", "fields": partition_fields}
    if nullable:
        partition = _optional(partition)
    fields: list[dict[str, Any]] = []
    if not v1:
        fields.append({"name": "content", "type": "int", "field-id": 134})
    fields += [
        {"name": "file_path", "type": "string", "field-id": 100},
        {"name": "file_format", "type": "string", "field-id": 101},
        {"name": "partition", "type": partition, "field-id": 102},
        {"name": "record_count", "type": "long", "field-id": 103},
        {"name": "file_size_in_bytes", "type": "long", "field-id": 104},
    ]
    if v1:
        fields.append({"name": "block_size_in_bytes", "type": "long", "field-id": 105})
    fields += [
        {
            "name": "null_value_counts",
            "type": _optional(_int_map("k121_v122", 121, 122, "long")),
            "default": None,
            "field-id": 110,
        },
        {
            "name": "lower_bounds",
            "type": _optional(_int_map("k126_v127", 126, 127, "bytes")),
            "default": None,
            "field-id": 125,
        },
        {
            "name": "upper_bounds",
            "type": _optional(_int_map("k129_v130", 129, 130, "bytes")),
            "default": None,
            "field-id": 128,
        },
        {
            "name": "split_offsets",
            "type": _optional({"type": "array", "items": "long", "element-id": 133}),
            "default": None,
            "field-id": 132,
        },
    ]
    data_file: Any = {"type": "record", "name": "r2", "fields": fields}
    if nullable:
        data_file = _optional(data_file)
    entry = [
        {"name": "status", "type": "int", "field-id": 0},
        {"name": "snapshot_id", "type": "long" if v1 else _optional("long"), "field-id": 1},
    ]
    if not v1:
        entry += [
            {"name": "sequence_number", "type": _optional("long"), "field-id": 3},
            {"name": "file_sequence_number", "type": _optional("long"), "field-id": 4},
        ]
    entry.append({"name": "data_file", "type": data_file, "field-id": 2})
    return {"type": "record", "name": "manifest_entry", "fields": entry}


MANIFEST_LIST_SCHEMA = {
    "type": "record",
    "name": "manifest_file",
    "fields": [
        {"name": "manifest_path", "type": "string", "field-id": 500},
        {"name": "manifest_length", "type": "long", "field-id": 501},
        {"name": "partition_spec_id", "type": "int", "field-id": 502},
        {"name": "content", "type": "int", "field-id": 517},
        {"name": "sequence_number", "type": "long", "field-id": 515},
        {"name": "min_sequence_number", "type": "long", "field-id": 516},
        {"name": "added_snapshot_id", "type": "long", "field-id": 503},
        {"name": "added_files_count", "type": "int", "field-id": 504},
        {"name": "existing_files_count", "type": "int", "field-id": 505},
        {"name": "deleted_files_count", "type": "int", "field-id": 506},
        {"name": "added_rows_count", "type": "long", "field-id": 512},
        {"name": "existing_rows_count", "type": "long", "field-id": 513},
        {"name": "deleted_rows_count", "type": "long", "field-id": 514},
    ],
}


class SpecWriter:
    """Writes an Iceberg table under ``root`` file by file, from the spec."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "data").mkdir(parents=True, exist_ok=True)
        (root / "metadata").mkdir(parents=True, exist_ok=True)

    def parquet(self, rows: pa.Table, name: str | None = None, **options: Any) -> dict[str, Any]:
        """Writes ``rows`` (fields carrying their ids) and returns its data_file record."""
        path = self.root / "data" / (name or f"{uuid.uuid4().hex}.parquet")
        pq.write_table(rows, path, **options)
        return {
            "content": 0,
            "file_path": str(path),
            "file_format": "PARQUET",
            "partition": {},
            "record_count": rows.num_rows,
            "file_size_in_bytes": path.stat().st_size,
            "block_size_in_bytes": 64 * 1024 * 1024,
            "null_value_counts": None,
            "lower_bounds": None,
            "upper_bounds": None,
            "split_offsets": None,
        }

    def manifest(
        self,
        files: list[dict[str, Any]],
        snapshot_id: int,
        partition_fields: list[dict[str, Any]] | None = None,
        v1: bool = False,
        nullable: bool = False,
        spec_id: int = 0,
        schema: dict[str, Any] | None = None,
        entries: list[dict[str, Any]] | None = None,
    ) -> str:
        path = self.root / "metadata" / f"{uuid.uuid4().hex}-m0.avro"
        avro_schema = schema or manifest_schema(partition_fields or [], v1=v1, nullable=nullable)
        records = (
            entries
            if entries is not None
            else [
                {
                    "status": 1,
                    "snapshot_id": snapshot_id,
                    "sequence_number": None,
                    "file_sequence_number": None,
                    "data_file": data_file,
                }
                for data_file in files
            ]
        )
        metadata = {
            "partition-spec-id": str(spec_id),
            "format-version": "1" if v1 else "2",
            "content": "data",
        }
        with open(path, "wb") as out:
            fastavro.writer(out, fastavro.parse_schema(avro_schema), records, metadata=metadata)
        return str(path)

    def manifest_list(self, manifests: list[tuple[str, int, int]], sequence: int = 1) -> str:
        """``manifests`` as (path, spec id, snapshot id that added its files)."""
        path = self.root / "metadata" / f"snap-{uuid.uuid4().hex}.avro"
        rows = [
            {
                "manifest_path": m,
                "manifest_length": Path(m).stat().st_size,
                "partition_spec_id": spec,
                "content": 0,
                "sequence_number": sequence,
                "min_sequence_number": sequence,
                "added_snapshot_id": snap,
                "added_files_count": 1,
                "existing_files_count": 0,
                "deleted_files_count": 0,
                "added_rows_count": 0,
                "existing_rows_count": 0,
                "deleted_rows_count": 0,
            }
            for m, spec, snap in manifests
        ]
        with open(path, "wb") as out:
            fastavro.writer(out, fastavro.parse_schema(MANIFEST_LIST_SCHEMA), rows)
        return str(path)

    def metadata(self, document: dict[str, Any], version: int = 1) -> str:
        document.setdefault("location", str(self.root))
        document.setdefault("last-updated-ms", 1_700_000_000_000)
        path = self.root / "metadata" / f"v{version}.metadata.json"
        path.write_text(json.dumps(document))
        return str(path)


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(row.values()) for row in table.to_pylist())


SCHEMA_V1 = {
    "type": "struct",
    "fields": [
        {"id": 1, "name": "id", "required": False, "type": "long"},
        {"id": 2, "name": "region", "required": False, "type": "string"},
    ],
}


def _legacy_table(tmp_path: Path, inline: bool) -> tuple[str, list[int]]:
    """A v1 table the Java parser accepts and pyiceberg's model refuses: ``schema`` only,
    ``partition-spec`` only (field without field-id), no last-partition-id, default-spec-id,
    current-snapshot-id (the last snapshot is not current!), properties nor table-uuid; snapshots
    with inline ``manifests`` (``inline``) or manifest lists. Two snapshots, identity on region."""
    writer = SpecWriter(tmp_path / "legacy")
    partition_fields = [{"name": "region", "type": _optional("string"), "field-id": 1000}]
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
        "location": str(writer.root),
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
