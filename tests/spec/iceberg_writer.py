"""A small writer of Iceberg tables from the spec, file by file, for the tables pyiceberg cannot
write: legacy v1 metadata (``test_iceberg_legacy``), nullable-union manifests
(``test_iceberg_union_manifests``), column defaults (``test_iceberg_defaults``), schema history
(``test_iceberg_schema_at_snapshot``), v3 deletion vectors (``iceberg_v3_tables``) and v3 row
lineage (``test_iceberg_row_lineage``).

Parquet data files are written by pyarrow (field ids in the Arrow field metadata), manifests and
manifest lists by fastavro (the spec's Avro schemas of format v1, v2 or v3), deletion vectors as
Puffin files of ``deletion-vector-v1`` blobs, metadata JSON as the test gives it.
"""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap64

FIELD_ID = b"PARQUET:field_id"
PUFFIN_MAGIC = b"PFA1"
DV_MAGIC = b"\xd1\xd3\x39\x64"
ROW_POSITION_FIELD_ID = 2147483545
FILE_PATH_FIELD_ID = 2147483546


def fid(name: str, type_: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
    """An Arrow field carrying its Iceberg field id."""
    return pa.field(name, type_, nullable, {FIELD_ID: str(field_id).encode()})


def optional(type_: Any) -> list[Any]:
    """An Avro union of null and ``type_``."""
    return ["null", type_]


# -- Avro schemas of manifests and manifest lists -------------------------------------------------


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


def _optional_field(name: str, type_: Any, field_id: int) -> dict[str, Any]:
    return {"name": name, "type": optional(type_), "default": None, "field-id": field_id}


def _data_file_fields(version: int, partition: Any) -> list[dict[str, Any]]:
    fields: list[dict[str, Any]] = []
    if version > 1:
        fields.append({"name": "content", "type": "int", "field-id": 134})
    fields += [
        {"name": "file_path", "type": "string", "field-id": 100},
        {"name": "file_format", "type": "string", "field-id": 101},
        {"name": "partition", "type": partition, "field-id": 102},
        {"name": "record_count", "type": "long", "field-id": 103},
        {"name": "file_size_in_bytes", "type": "long", "field-id": 104},
    ]
    if version == 1:
        fields.append({"name": "block_size_in_bytes", "type": "long", "field-id": 105})
    fields += [
        _optional_field("null_value_counts", _int_map("k121_v122", 121, 122, "long"), 110),
        _optional_field("lower_bounds", _int_map("k126_v127", 126, 127, "bytes"), 125),
        _optional_field("upper_bounds", _int_map("k129_v130", 129, 130, "bytes"), 128),
        _optional_field("split_offsets", {"type": "array", "items": "long", "element-id": 133}, 132),
    ]
    if version >= 3:
        fields += [
            _optional_field("key_metadata", "bytes", 131),
            _optional_field("equality_ids", {"type": "array", "items": "int", "element-id": 136}, 135),
            _optional_field("sort_order_id", "int", 140),
            _optional_field("first_row_id", "long", 142),
            _optional_field("referenced_data_file", "string", 143),
            _optional_field("content_offset", "long", 144),
            _optional_field("content_size_in_bytes", "long", 145),
        ]
    return fields


def manifest_schema(
    partition_fields: list[dict[str, Any]], v1: bool = False, nullable: bool = False, version: int = 2
) -> dict:
    """The Avro schema of a manifest of format ``version`` (1 when ``v1``); ``nullable`` writes
    ``data_file`` and ``partition`` as ``["null", {record}]`` unions (as BigQuery and some Spark
    versions do). v3 adds the deletion vector and row lineage fields."""
    version = 1 if v1 else version
    partition: Any = {"type": "record", "name": "r102", "fields": partition_fields}
    if nullable:
        partition = optional(partition)
    data_file: Any = {"type": "record", "name": "r2", "fields": _data_file_fields(version, partition)}
    if nullable:
        data_file = optional(data_file)
    entry = [
        {"name": "status", "type": "int", "field-id": 0},
        {"name": "snapshot_id", "type": "long" if version == 1 else optional("long"), "field-id": 1},
    ]
    if version > 1:
        entry += [
            {"name": "sequence_number", "type": optional("long"), "field-id": 3},
            {"name": "file_sequence_number", "type": optional("long"), "field-id": 4},
        ]
    entry.append({"name": "data_file", "type": data_file, "field-id": 2})
    return {"type": "record", "name": "manifest_entry", "fields": entry}


def manifest_list_schema(version: int = 2) -> dict:
    """The Avro schema of a manifest list; v3 adds ``first_row_id``."""
    fields = [
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
    ]
    if version >= 3:
        fields.append(_optional_field("first_row_id", "long", 520))
    return {"type": "record", "name": "manifest_file", "fields": fields}


MANIFEST_LIST_SCHEMA = manifest_list_schema(2)


# -- deletion vectors ------------------------------------------------------------------------------


def dv_blob(positions: Sequence[int]) -> bytes:
    """A ``deletion-vector-v1`` blob: length, magic, portable 64-bit roaring bitmap, CRC-32."""
    body = DV_MAGIC + BitMap64(positions).serialize()
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


@dataclass
class Blob:
    referenced_data_file: str
    positions: list[int]
    offset: int = 0
    length: int = 0


def write_puffin(path: Path, blobs: list[Blob], snapshot_id: int, sequence_number: int) -> int:
    """A Puffin file of ``blobs`` (their offset and length are filled in); returns its size."""
    out = bytearray(PUFFIN_MAGIC)
    for blob in blobs:
        data = dv_blob(blob.positions)
        blob.offset, blob.length = len(out), len(data)
        out += data
    footer = {
        "blobs": [
            {
                "type": "deletion-vector-v1",
                "fields": [ROW_POSITION_FIELD_ID],
                "snapshot-id": snapshot_id,
                "sequence-number": sequence_number,
                "offset": b.offset,
                "length": b.length,
                "properties": {
                    "referenced-data-file": b.referenced_data_file,
                    "cardinality": str(len(b.positions)),
                },
            }
            for b in blobs
        ],
        "properties": {"created-by": "lakewarden tests"},
    }
    payload = json.dumps(footer).encode("utf-8")
    out += PUFFIN_MAGIC + payload + struct.pack("<i", len(payload)) + bytes(4) + PUFFIN_MAGIC
    path.write_bytes(bytes(out))
    return len(out)


def vector_entries(puffin: str, size: int, blobs: list[Blob]) -> list[dict[str, Any]]:
    """The delete manifest's ``data_file`` records of the vectors of one Puffin file."""
    return [
        {
            "content": 1,
            "file_path": puffin,
            "file_format": "PUFFIN",
            "partition": {},
            "record_count": len(b.positions),
            "file_size_in_bytes": size,
            "referenced_data_file": b.referenced_data_file,
            "content_offset": b.offset,
            "content_size_in_bytes": b.length,
        }
        for b in blobs
    ]


# -- the writer ------------------------------------------------------------------------------------


def entry(data_file: dict[str, Any], snapshot_id: int | None, sequence: int | None, status: int = 1) -> dict:
    """A manifest entry; a None snapshot id or sequence number is inherited from the manifest."""
    return {
        "status": status,
        "snapshot_id": snapshot_id,
        "sequence_number": sequence,
        "file_sequence_number": sequence,
        "data_file": data_file,
    }


class SpecWriter:
    """Writes an Iceberg table under ``root`` file by file, from the spec. The files name each
    other under ``base`` (``root`` itself by default; a ``file://`` URI, or an ``s3://`` prefix
    for a table uploaded there afterwards)."""

    def __init__(self, root: Path, base: str | None = None) -> None:
        self.root = root
        self.base = (base or str(root)).rstrip("/")
        (root / "data").mkdir(parents=True, exist_ok=True)
        (root / "metadata").mkdir(parents=True, exist_ok=True)

    def named(self, path: Path) -> str:
        """How the table's files name the local file ``path``."""
        return f"{self.base}/{path.relative_to(self.root).as_posix()}"

    def local(self, named: str) -> Path:
        """The local file a name of ``named`` stands for (a local path stands for itself)."""
        if not named.startswith(self.base):
            return Path(named)
        return self.root / named.removeprefix(self.base).lstrip("/")

    def parquet(self, rows: pa.Table, name: str | None = None, **options: Any) -> dict[str, Any]:
        """Writes ``rows`` (fields carrying their ids) and returns its data_file record."""
        path = self.root / "data" / (name or f"{uuid.uuid4().hex}.parquet")
        pq.write_table(rows, path, **options)
        return self._record(path, "PARQUET", rows.num_rows)

    def orc(self, rows: pa.Table, name: str | None = None, **options: Any) -> dict[str, Any]:
        """Writes ``rows`` as ORC (field ids as ``iceberg.id`` field metadata, which pyarrow
        writes as ORC type attributes, as Iceberg's ORC writer does); returns its data_file
        record."""
        import pyarrow.orc as orc

        path = self.root / "data" / (name or f"{uuid.uuid4().hex}.orc")
        orc.write_table(rows, path, **options)
        return self._record(path, "ORC", rows.num_rows)

    def _record(self, path: Path, file_format: str, record_count: int) -> dict[str, Any]:
        return {
            "content": 0,
            "file_path": self.named(path),
            "file_format": file_format,
            "partition": {},
            "record_count": record_count,
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
        *,
        version: int = 2,
        content: str = "data",
        name: str | None = None,
        avro_metadata: dict[str, str] | None = None,
    ) -> str:
        """A manifest of ``files`` (ADDED by ``snapshot_id``, sequence numbers inherited), or of
        the ``entries`` given; returns its name."""
        path = self.root / "metadata" / (name or f"{uuid.uuid4().hex}-m0.avro")
        avro_schema = schema or manifest_schema(
            partition_fields or [], v1=v1, nullable=nullable, version=version
        )
        records = entries if entries is not None else [entry(f, snapshot_id, None) for f in files]
        metadata = {
            "partition-spec-id": str(spec_id),
            "format-version": "1" if v1 else str(version),
            "content": content,
            **(avro_metadata or {}),
        }
        with open(path, "wb") as out:
            fastavro.writer(out, fastavro.parse_schema(avro_schema), records, metadata=metadata)
        return self.named(path)

    def listed(
        self,
        manifest: str,
        snapshot_id: int,
        sequence: int,
        *,
        spec_id: int = 0,
        content: int = 0,
        files: int = 1,
        rows: int = 0,
        first_row_id: int | None = None,
    ) -> dict[str, Any]:
        """A manifest list row for ``manifest`` (added by ``snapshot_id``)."""
        return {
            "manifest_path": manifest,
            "manifest_length": self.local(manifest).stat().st_size,
            "partition_spec_id": spec_id,
            "content": content,
            "sequence_number": sequence,
            "min_sequence_number": sequence,
            "added_snapshot_id": snapshot_id,
            "added_files_count": files,
            "existing_files_count": 0,
            "deleted_files_count": 0,
            "added_rows_count": rows,
            "existing_rows_count": 0,
            "deleted_rows_count": 0,
            "first_row_id": first_row_id,
        }

    def manifest_list(self, manifests: list[tuple[str, int, int]], sequence: int = 1) -> str:
        """A v2 manifest list of ``manifests`` as (path, spec id, snapshot id that added its files)."""
        return self.write_manifest_list(
            [self.listed(m, snap, sequence, spec_id=spec) for m, spec, snap in manifests]
        )

    def write_manifest_list(
        self,
        rows: list[dict[str, Any]],
        version: int = 2,
        metadata: dict[str, str] | None = None,
        name: str | None = None,
    ) -> str:
        """A manifest list of the given rows (``listed``; fields the version lacks are left
        out); returns its name."""
        path = self.root / "metadata" / (name or f"snap-{uuid.uuid4().hex}.avro")
        with open(path, "wb") as out:
            fastavro.writer(
                out, fastavro.parse_schema(manifest_list_schema(version)), rows, metadata=metadata
            )
        return self.named(path)

    def one_snapshot_table(
        self,
        fields: list[dict[str, Any]],
        files: list[dict[str, Any]],
        format_version: int = 2,
        delete_files: list[dict[str, Any]] | None = None,
    ) -> str:
        """An unpartitioned table of ``fields`` (Iceberg schema fields) whose one snapshot
        appends ``files`` (``parquet``/``orc`` records) and, in a delete manifest of the same
        sequence number, ``delete_files`` (position deletes apply, equality deletes would not);
        returns the metadata file's local path."""
        rows = [self.listed(self.manifest(files, 1), 1, 1, files=len(files))]
        if delete_files:
            deletes = self.manifest(delete_files, 1, content="deletes")
            rows.append(self.listed(deletes, 1, 1, content=1, files=len(delete_files)))
        document: dict[str, Any] = {
            "format-version": format_version,
            "table-uuid": "0d9a1f0e-5b7c-4f0e-9a55-2b9e3f7c1a01",
            "last-sequence-number": 1,
            "last-column-id": max(f["id"] for f in fields),
            "current-schema-id": 0,
            "schemas": [{"type": "struct", "schema-id": 0, "fields": fields}],
            "default-spec-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": []}],
            "last-partition-id": 999,
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": {},
            "current-snapshot-id": 1,
            "snapshots": [
                {
                    "snapshot-id": 1,
                    "sequence-number": 1,
                    "timestamp-ms": 1_700_000_000_000,
                    "schema-id": 0,
                    "summary": {"operation": "append"},
                    "manifest-list": self.write_manifest_list(rows),
                }
            ],
        }
        if format_version >= 3:
            document["next-row-id"] = 0
        return self.metadata(document)

    def metadata(self, document: dict[str, Any], version: int = 1, hint: bool = False) -> str:
        """Writes ``vN.metadata.json`` (and ``version-hint.text`` when ``hint``); returns its
        local path."""
        document.setdefault("location", self.base)
        document.setdefault("last-updated-ms", 1_700_000_000_000)
        path = self.root / "metadata" / f"v{version}.metadata.json"
        path.write_text(json.dumps(document))
        if hint:
            (self.root / "metadata" / "version-hint.text").write_text(str(version), encoding="utf-8")
        return str(path)
