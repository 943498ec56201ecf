"""A small writer of Iceberg v3 tables with deletion vectors, from the spec (pyiceberg 0.12 cannot
write deletion vectors): parquet data files (pyarrow), Puffin files of ``deletion-vector-v1``
blobs, manifests and a manifest list (fastavro), and a format-version 3 metadata JSON.

The table schema is ``id long`` (field 1), ``name string`` (field 2), unpartitioned.
"""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap64

PUFFIN_MAGIC = b"PFA1"
DV_MAGIC = b"\xd1\xd3\x39\x64"
ROW_POSITION_FIELD_ID = 2147483545
FILE_PATH_FIELD_ID = 2147483546

ICEBERG_SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "required": False, "type": "long"},
        {"id": 2, "name": "name", "required": False, "type": "string"},
    ],
}
ARROW_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), metadata={b"PARQUET:field_id": b"1"}),
        pa.field("name", pa.string(), metadata={b"PARQUET:field_id": b"2"}),
    ]
)


def _opt(kind: Any) -> list[Any]:
    return ["null", kind]


def _array(element: Any, element_id: int) -> dict[str, Any]:
    return {"type": "array", "items": element, "element-id": element_id}


DATA_FILE_SCHEMA = {
    "type": "record",
    "name": "r2",
    "fields": [
        {"name": "content", "type": "int", "field-id": 134},
        {"name": "file_path", "type": "string", "field-id": 100},
        {"name": "file_format", "type": "string", "field-id": 101},
        {"name": "partition", "type": {"type": "record", "name": "r102", "fields": []}, "field-id": 102},
        {"name": "record_count", "type": "long", "field-id": 103},
        {"name": "file_size_in_bytes", "type": "long", "field-id": 104},
        {"name": "key_metadata", "type": _opt("bytes"), "default": None, "field-id": 131},
        {"name": "split_offsets", "type": _opt(_array("long", 133)), "default": None, "field-id": 132},
        {"name": "equality_ids", "type": _opt(_array("int", 136)), "default": None, "field-id": 135},
        {"name": "sort_order_id", "type": _opt("int"), "default": None, "field-id": 140},
        {"name": "first_row_id", "type": _opt("long"), "default": None, "field-id": 142},
        {"name": "referenced_data_file", "type": _opt("string"), "default": None, "field-id": 143},
        {"name": "content_offset", "type": _opt("long"), "default": None, "field-id": 144},
        {"name": "content_size_in_bytes", "type": _opt("long"), "default": None, "field-id": 145},
    ],
}
MANIFEST_ENTRY_SCHEMA = {
    "type": "record",
    "name": "manifest_entry",
    "fields": [
        {"name": "status", "type": "int", "field-id": 0},
        {"name": "snapshot_id", "type": _opt("long"), "default": None, "field-id": 1},
        {"name": "sequence_number", "type": _opt("long"), "default": None, "field-id": 3},
        {"name": "file_sequence_number", "type": _opt("long"), "default": None, "field-id": 4},
        {"name": "data_file", "type": DATA_FILE_SCHEMA, "field-id": 2},
    ],
}
MANIFEST_FILE_SCHEMA = {
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
        {"name": "first_row_id", "type": _opt("long"), "default": None, "field-id": 520},
    ],
}


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


def _entry(snapshot_id: int, sequence: int, data_file: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": 1,
        "snapshot_id": snapshot_id,
        "sequence_number": sequence,
        "file_sequence_number": sequence,
        "data_file": {"partition": {}, **data_file},
    }


def _write_manifest(path: Path, entries: list[dict[str, Any]], content: str) -> int:
    metadata = {
        "schema": json.dumps(ICEBERG_SCHEMA),
        "schema-id": "0",
        "partition-spec": "[]",
        "partition-spec-id": "0",
        "format-version": "3",
        "content": content,
    }
    with path.open("wb") as stream:
        fastavro.writer(stream, fastavro.parse_schema(MANIFEST_ENTRY_SCHEMA), entries, metadata=metadata)
    return path.stat().st_size


@dataclass
class V3Table:
    """What the tests need to know about a written table."""

    location: Path
    data_paths: list[str]
    rows: list[list[tuple[int, str]]]  # rows of each data file, in file order
    deleted: dict[str, list[int]]  # data file path -> positions its deletion vector deletes
    puffin_path: str
    blobs: list[Blob]
    position_delete_path: str | None = None
    first_row_ids: list[int | None] = field(default_factory=list)


SNAPSHOT_ID = 3051729675574597004


def write_v3_table(
    location: Path,
    sizes: Sequence[int] = (10, 10, 5),
    deleted: dict[int, list[int]] | None = None,
    *,
    own_first_row_ids: dict[int, int] | None = None,
    stale_position_delete: tuple[int, int] | None = None,
    offset_shift: int = 0,
) -> V3Table:
    """A v3 table whose data file ``i`` holds ``sizes[i]`` rows (ids numbered across files,
    names ``"n<id>"``) and, for each ``i`` in ``deleted``, a deletion vector of those positions;
    all vectors share one Puffin file. ``stale_position_delete`` (file index, position) adds a v2
    position delete file for that file, older than the vectors (a reader must ignore it where a
    vector exists). ``offset_shift`` moves every manifest ``content_offset`` (corruption tests)."""
    deleted = {0: [1, 3, 4], 1: [0, 9]} if deleted is None else deleted
    own_first_row_ids = own_first_row_ids or {}
    data_dir, metadata_dir = location / "data", location / "metadata"
    data_dir.mkdir(parents=True)
    metadata_dir.mkdir()
    paths, all_rows, data_entries = [], [], []
    next_id = 0
    for index, size in enumerate(sizes):
        rows = [(next_id + i, f"n{next_id + i}") for i in range(size)]
        next_id += size
        path = data_dir / f"data-{index}.parquet"
        table = pa.Table.from_pylist([{"id": r[0], "name": r[1]} for r in rows], schema=ARROW_SCHEMA)
        pq.write_table(table, path, row_group_size=4)
        uri = f"file://{path}"
        paths.append(uri)
        all_rows.append(rows)
        data_file = {
            "content": 0,
            "file_path": uri,
            "file_format": "PARQUET",
            "record_count": size,
            "file_size_in_bytes": path.stat().st_size,
            "first_row_id": own_first_row_ids.get(index),
        }
        data_entries.append(_entry(SNAPSHOT_ID, 1, data_file))
    manifests = [
        (_write_manifest(metadata_dir / "data-m.avro", data_entries, "data"), "data-m.avro", 0, 1, len(sizes))
    ]

    position_delete_path = None
    if stale_position_delete is not None:
        target, position = stale_position_delete
        pos_schema = pa.schema(
            [
                pa.field(
                    "file_path", pa.string(), False, {b"PARQUET:field_id": str(FILE_PATH_FIELD_ID).encode()}
                ),
                pa.field(
                    "pos", pa.int64(), False, {b"PARQUET:field_id": str(ROW_POSITION_FIELD_ID).encode()}
                ),
            ]
        )
        pos_path = data_dir / "pos-deletes.parquet"
        pq.write_table(
            pa.table({"file_path": [paths[target]], "pos": [position]}, schema=pos_schema), pos_path
        )
        position_delete_path = f"file://{pos_path}"
        entry = _entry(
            SNAPSHOT_ID,
            2,
            {
                "content": 1,
                "file_path": position_delete_path,
                "file_format": "PARQUET",
                "record_count": 1,
                "file_size_in_bytes": pos_path.stat().st_size,
                "referenced_data_file": paths[target],
            },
        )
        manifests.append(
            (_write_manifest(metadata_dir / "pos-m.avro", [entry], "deletes"), "pos-m.avro", 1, 2, 1)
        )

    blobs = [Blob(paths[i], sorted(positions)) for i, positions in sorted(deleted.items())]
    puffin = data_dir / "deletes.puffin"
    puffin_size = write_puffin(puffin, blobs, SNAPSHOT_ID, 3)
    puffin_uri = f"file://{puffin}"
    dv_entries = [
        _entry(
            SNAPSHOT_ID,
            3,
            {
                "content": 1,
                "file_path": puffin_uri,
                "file_format": "PUFFIN",
                "record_count": len(blob.positions),
                "file_size_in_bytes": puffin_size,
                "referenced_data_file": blob.referenced_data_file,
                "content_offset": blob.offset + offset_shift,
                "content_size_in_bytes": blob.length,
            },
        )
        for blob in blobs
    ]
    if dv_entries:
        manifest = _write_manifest(metadata_dir / "dv-m.avro", dv_entries, "deletes")
        manifests.append((manifest, "dv-m.avro", 1, 3, len(dv_entries)))
    list_rows = [
        {
            "manifest_path": str(metadata_dir / name),
            "manifest_length": length,
            "partition_spec_id": 0,
            "content": content,
            "sequence_number": sequence,
            "min_sequence_number": sequence,
            "added_snapshot_id": SNAPSHOT_ID,
            "added_files_count": count,
            "existing_files_count": 0,
            "deleted_files_count": 0,
            "added_rows_count": sum(sizes) if content == 0 else 0,
            "existing_rows_count": 0,
            "deleted_rows_count": 0,
            "first_row_id": 0 if content == 0 else None,
        }
        for length, name, content, sequence, count in manifests
    ]
    manifest_list = metadata_dir / f"snap-{SNAPSHOT_ID}.avro"
    with manifest_list.open("wb") as stream:
        fastavro.writer(
            stream,
            fastavro.parse_schema(MANIFEST_FILE_SCHEMA),
            list_rows,
            metadata={"snapshot-id": str(SNAPSHOT_ID), "sequence-number": "3", "format-version": "3"},
        )
    _write_metadata(location, metadata_dir, manifest_list, sizes, sum(len(b.positions) for b in blobs))
    inherited: list[int | None] = []
    counter = 0
    for index, size in enumerate(sizes):
        if index in own_first_row_ids:
            inherited.append(own_first_row_ids[index])
        else:
            inherited.append(counter)
            counter += size
    return V3Table(
        location=location,
        data_paths=paths,
        rows=all_rows,
        deleted={paths[i]: sorted(p) for i, p in deleted.items()},
        puffin_path=puffin_uri,
        blobs=blobs,
        position_delete_path=position_delete_path,
        first_row_ids=inherited,
    )


def _write_metadata(
    location: Path, metadata_dir: Path, manifest_list: Path, sizes: Sequence[int], deletes: int
) -> None:
    rows = sum(sizes)
    metadata = {
        "format-version": 3,
        "table-uuid": str(uuid.uuid4()),
        "location": f"file://{location}",
        "last-sequence-number": 3,
        "last-updated-ms": 1_700_000_000_000,
        "last-column-id": 2,
        "current-schema-id": 0,
        "schemas": [ICEBERG_SCHEMA],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {},
        "current-snapshot-id": SNAPSHOT_ID,
        "next-row-id": rows,
        "snapshots": [
            {
                "snapshot-id": SNAPSHOT_ID,
                "sequence-number": 3,
                "timestamp-ms": 1_700_000_000_000,
                "manifest-list": f"file://{manifest_list}",
                "summary": {
                    "operation": "overwrite",
                    "total-data-files": str(len(sizes)),
                    "total-records": str(rows),
                    "total-position-deletes": str(deletes),
                },
                "schema-id": 0,
                "first-row-id": 0,
                "added-rows": rows,
            }
        ],
        "snapshot-log": [{"snapshot-id": SNAPSHOT_ID, "timestamp-ms": 1_700_000_000_000}],
        "metadata-log": [],
        "refs": {"main": {"snapshot-id": SNAPSHOT_ID, "type": "branch"}},
    }
    (metadata_dir / "v1.metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    (metadata_dir / "version-hint.text").write_text("1", encoding="utf-8")
