"""Iceberg v3 tables with deletion vectors, written from the spec by ``iceberg_writer`` (pyiceberg
0.12 cannot write deletion vectors): parquet data files, one Puffin file of ``deletion-vector-v1``
blobs, v3 manifests and manifest list, a format-version 3 metadata JSON.

The table schema is ``id long`` (field 1), ``name string`` (field 2), unpartitioned.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tests.spec.iceberg_writer import (
    DV_MAGIC,
    FILE_PATH_FIELD_ID,
    PUFFIN_MAGIC,
    ROW_POSITION_FIELD_ID,
    Blob,
    SpecWriter,
    dv_blob,
    entry,
    fid,
    vector_entries,
    write_puffin,
)

# Blob, write_puffin and dv_blob are imported from here by other tests (deletion vectors, rewrite
# commits): re-exported.
__all__ = [
    "ARROW_SCHEMA",
    "DV_MAGIC",
    "FILE_PATH_FIELD_ID",
    "ICEBERG_SCHEMA",
    "PUFFIN_MAGIC",
    "ROW_POSITION_FIELD_ID",
    "SNAPSHOT_ID",
    "Blob",
    "V3Table",
    "dv_blob",
    "v3_avro_metadata",
    "write_puffin",
    "write_v3_table",
]

ICEBERG_SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "required": False, "type": "long"},
        {"id": 2, "name": "name", "required": False, "type": "string"},
    ],
}
ARROW_SCHEMA = pa.schema([fid("id", pa.int64(), 1), fid("name", pa.string(), 2)])


def v3_avro_metadata() -> dict[str, str]:
    """The key-value metadata a v3 manifest of this schema carries (as Java writes it)."""
    return {"schema": json.dumps(ICEBERG_SCHEMA), "schema-id": "0", "partition-spec": "[]"}


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


def _manifest(writer: SpecWriter, name: str, entries: list[dict[str, Any]], content: str) -> str:
    """A v3 manifest; its name as the manifest list gives it (a local path)."""
    named = writer.manifest(
        [],
        SNAPSHOT_ID,
        entries=entries,
        version=3,
        content=content,
        name=name,
        avro_metadata=v3_avro_metadata(),
    )
    return str(writer.local(named))


def _data_files(writer: SpecWriter, sizes: Sequence[int], own: dict[int, int]) -> tuple[list, list, list]:
    """(paths, rows, manifest entries) of the data files: ids numbered across them."""
    paths, all_rows, entries = [], [], []
    next_id = 0
    for index, size in enumerate(sizes):
        rows = [(next_id + i, f"n{next_id + i}") for i in range(size)]
        next_id += size
        table = pa.Table.from_pylist([{"id": r[0], "name": r[1]} for r in rows], schema=ARROW_SCHEMA)
        data_file = writer.parquet(table, f"data-{index}.parquet", row_group_size=4)
        data_file.update(partition={}, first_row_id=own.get(index))
        paths.append(data_file["file_path"])
        all_rows.append(rows)
        entries.append(entry(data_file, SNAPSHOT_ID, 1))
    return paths, all_rows, entries


def _position_delete(writer: SpecWriter, paths: list[str], target: int, position: int) -> dict[str, Any]:
    """A v2 position delete file deleting ``position`` of data file ``target``."""
    schema = pa.schema(
        [
            fid("file_path", pa.string(), FILE_PATH_FIELD_ID, nullable=False),
            fid("pos", pa.int64(), ROW_POSITION_FIELD_ID, nullable=False),
        ]
    )
    rows = pa.table({"file_path": [paths[target]], "pos": [position]}, schema=schema)
    data_file = writer.parquet(rows, "pos-deletes.parquet")
    data_file.update(content=1, referenced_data_file=paths[target])
    return entry(data_file, SNAPSHOT_ID, 2)


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
    writer = SpecWriter(location, base=f"file://{location}")
    paths, all_rows, data_entries = _data_files(writer, sizes, own_first_row_ids)
    manifests = [(_manifest(writer, "data-m.avro", data_entries, "data"), 0, 1, len(sizes))]
    position_delete_path = None
    if stale_position_delete is not None:
        pos_entry = _position_delete(writer, paths, *stale_position_delete)
        position_delete_path = pos_entry["data_file"]["file_path"]
        manifests.append((_manifest(writer, "pos-m.avro", [pos_entry], "deletes"), 1, 2, 1))
    blobs = [Blob(paths[i], sorted(positions)) for i, positions in sorted(deleted.items())]
    puffin = location / "data" / "deletes.puffin"
    puffin_size = write_puffin(puffin, blobs, SNAPSHOT_ID, 3)
    vectors = vector_entries(writer.named(puffin), puffin_size, blobs)
    for vector in vectors:
        vector["content_offset"] += offset_shift
    if vectors:
        dv_entries = [entry(v, SNAPSHOT_ID, 3) for v in vectors]
        manifests.append((_manifest(writer, "dv-m.avro", dv_entries, "deletes"), 1, 3, len(dv_entries)))
    list_rows = [
        writer.listed(
            path,
            SNAPSHOT_ID,
            sequence,
            content=content,
            files=count,
            rows=sum(sizes) if content == 0 else 0,
            first_row_id=0 if content == 0 else None,
        )
        for path, content, sequence, count in manifests
    ]
    manifest_list = writer.write_manifest_list(
        list_rows,
        version=3,
        metadata={"snapshot-id": str(SNAPSHOT_ID), "sequence-number": "3", "format-version": "3"},
        name=f"snap-{SNAPSHOT_ID}.avro",
    )
    writer.metadata(
        _metadata(writer.base, manifest_list, sizes, sum(len(b.positions) for b in blobs)), hint=True
    )
    return V3Table(
        location=location,
        data_paths=paths,
        rows=all_rows,
        deleted={paths[i]: sorted(p) for i, p in deleted.items()},
        puffin_path=writer.named(puffin),
        blobs=blobs,
        position_delete_path=position_delete_path,
        first_row_ids=_inherited_first_row_ids(sizes, own_first_row_ids),
    )


def _inherited_first_row_ids(sizes: Sequence[int], own: dict[int, int]) -> list[int | None]:
    """Each data file's first_row_id: its own, else the manifest's (0) plus the rows of the files
    before it that inherited theirs too."""
    inherited: list[int | None] = []
    counter = 0
    for index, size in enumerate(sizes):
        if index in own:
            inherited.append(own[index])
        else:
            inherited.append(counter)
            counter += size
    return inherited


def _metadata(location: str, manifest_list: str, sizes: Sequence[int], deletes: int) -> dict[str, Any]:
    rows = sum(sizes)
    return {
        "format-version": 3,
        "table-uuid": str(uuid.uuid4()),
        "location": location,
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
                "manifest-list": manifest_list,
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
