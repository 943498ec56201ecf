"""Deletes applied by position (Iceberg position delete files and deletion vectors, Delta deletion
vectors) and by equality, together with row groups skipped by statistics: positions must still
line up with the file's rows when earlier groups are not read. Values are asserted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyroaring import BitMap64

from storage.formats.delta import DeltaAdapter
from storage.formats.iceberg.read import SliceReader
from storage.spec import rowgroups
from storage.spec.expressions import bind_filter
from storage.spec.models import DataFile, FileContent, FileSlice, PartitionDescriptor
from storage.spec.rowgroups import keep_mask, positions_by_path, sorted_positions
from tests.spec import _delta_log_writer as w
from tests.spec.iceberg_writer import FILE_PATH_FIELD_ID, ROW_POSITION_FIELD_ID, Blob, fid, write_puffin

ROWS = 400
GROUP = 100
DELETED = [5, 150, 151, 199, 350, 399]
FILTER = "(id >= 140 and id < 160) or id >= 390"
EXPECTED = [i for i in [*range(140, 160), *range(390, 400)] if i not in DELETED]
SCHEMA = pa.schema([fid("id", pa.int64(), 1), fid("name", pa.string(), 2)])


@pytest.fixture
def data_path(tmp_path: Path) -> Path:
    path = tmp_path / "data.parquet"
    table = pa.table(
        {"id": pa.array(range(ROWS), pa.int64()), "name": [f"n{i}" for i in range(ROWS)]}, schema=SCHEMA
    )
    pq.write_table(table, path, row_group_size=GROUP)
    return path


def _base(path: Path) -> DataFile:
    return DataFile(path=str(path), size_bytes=path.stat().st_size, record_count=ROWS)


def _read(piece: FileSlice, filters: str | None) -> tuple[list[dict[str, Any]], int]:
    reader = SliceReader(PyArrowFileIO(), SCHEMA, None, bind_filter(filters, SCHEMA))
    rows = [row for batch in reader.read(piece) for row in batch.to_pylist()]
    return rows, reader.row_groups_skipped


def _rows(ids: list[int]) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}"} for i in ids]


def _position_deletes(path: Path, entries: list[tuple[str, int]]) -> DataFile:
    schema = pa.schema(
        [
            fid("file_path", pa.string(), FILE_PATH_FIELD_ID, nullable=False),
            fid("pos", pa.int64(), ROW_POSITION_FIELD_ID, nullable=False),
        ]
    )
    entries = sorted(entries)
    table = pa.table({"file_path": [p for p, _ in entries], "pos": [q for _, q in entries]}, schema=schema)
    pq.write_table(table, path)
    return DataFile(
        path=str(path),
        size_bytes=path.stat().st_size,
        record_count=len(entries),
        content=FileContent.POSITION_DELETES,
    )


def test_position_deletes_line_up_with_rows_after_skipped_row_groups(data_path, tmp_path):
    other = str(tmp_path / "other.parquet")
    deletes = _position_deletes(
        tmp_path / "deletes.parquet",
        # another file's positions must not delete rows of this one; a repeated position is one
        [(str(data_path), p) for p in [*DELETED, 150]] + [(other, p) for p in (141, 142, 391)],
    )
    piece = FileSlice(PartitionDescriptor(""), _base(data_path), (deletes,))
    rows, skipped = _read(piece, FILTER)
    assert rows == _rows(EXPECTED)
    assert skipped == 2  # groups 0 and 2
    rows, _ = _read(piece, None)
    assert rows == _rows([i for i in range(ROWS) if i not in DELETED])


def test_two_delete_files_and_a_deletion_vector_are_merged(data_path, tmp_path):
    first = _position_deletes(tmp_path / "d1.parquet", [(str(data_path), p) for p in (150, 391)])
    second = _position_deletes(tmp_path / "d2.parquet", [(str(data_path), p) for p in (151, 391, 392)])
    puffin = tmp_path / "dv.puffin"
    blob = Blob(str(data_path), [140, 2**33])  # a position past the file's rows deletes nothing
    size = write_puffin(puffin, [blob], snapshot_id=1, sequence_number=1)
    vector = DataFile(
        path=str(puffin),
        size_bytes=size,
        record_count=2,
        content=FileContent.DELETION_VECTOR,
        extra={
            "referenced_data_file": str(data_path),
            "content_offset": blob.offset,
            "content_size_in_bytes": blob.length,
            "file_size_in_bytes": size,
        },
    )
    piece = FileSlice(PartitionDescriptor(""), _base(data_path), (first, second, vector))
    rows, skipped = _read(piece, FILTER)
    gone = {140, 150, 151, 391, 392}
    assert rows == _rows([i for i in [*range(140, 160), *range(390, 400)] if i not in gone])
    assert skipped == 2


def test_a_deletion_vector_applies_to_the_rows_of_later_row_groups_only_where_it_says(data_path, tmp_path):
    puffin = tmp_path / "dv.puffin"
    positions = list(range(0, ROWS, 3))
    blob = Blob(str(data_path), positions)
    size = write_puffin(puffin, [blob], snapshot_id=1, sequence_number=1)
    vector = DataFile(
        path=str(puffin),
        size_bytes=size,
        record_count=len(positions),
        content=FileContent.DELETION_VECTOR,
        extra={
            "referenced_data_file": str(data_path),
            "content_offset": blob.offset,
            "content_size_in_bytes": blob.length,
        },
    )
    piece = FileSlice(PartitionDescriptor(""), _base(data_path), (vector,))
    rows, skipped = _read(piece, "id >= 295 and id < 305")
    assert rows == _rows([i for i in range(295, 305) if i % 3])
    assert skipped == 2


def _equality_deletes(path: Path, columns: dict[str, pa.Array], fields: list[pa.Field]) -> DataFile:
    pq.write_table(pa.table(columns, schema=pa.schema(fields)), path)
    rows = len(next(iter(columns.values())))
    return DataFile(
        path=str(path),
        size_bytes=path.stat().st_size,
        record_count=rows,
        content=FileContent.EQUALITY_DELETES,
        equality_columns=tuple(f.name for f in fields),
        extra={"equality_ids": [int(f.metadata[b"PARQUET:field_id"]) for f in fields]},
    )


def test_equality_deletes_on_two_columns_match_nulls_to_nulls(tmp_path):
    schema = pa.schema([fid("id", pa.int64(), 1), fid("a", pa.int32(), 2), fid("b", pa.string(), 3)])
    data = pa.table(
        {
            "id": pa.array(range(8), pa.int64()),
            "a": pa.array([1, 1, None, None, 2, 2, 1, None], pa.int32()),
            "b": pa.array(["x", "y", "x", None, None, "x", None, "y"]),
        },
        schema=schema,
    )
    path = tmp_path / "data.parquet"
    pq.write_table(data, path, row_group_size=4)
    fields = [fid("a", pa.int64(), 2), fid("b", pa.string(), 3)]  # written as long: conformed
    deletes = _equality_deletes(
        tmp_path / "eq.parquet",
        {"a": pa.array([1, None, 2, 3], pa.int64()), "b": pa.array(["x", None, None, "x"])},
        fields,
    )
    base = DataFile(path=str(path), size_bytes=path.stat().st_size, record_count=8)
    piece = FileSlice(PartitionDescriptor(""), base, (deletes,))
    reader = SliceReader(PyArrowFileIO(), schema, ["id"], None)
    assert [r["id"] for b in reader.read(piece) for r in b.to_pylist()] == [1, 2, 5, 6, 7]
    reader = SliceReader(PyArrowFileIO(), schema, ["id"], bind_filter("id >= 4", schema))
    assert [r["id"] for b in reader.read(piece) for r in b.to_pylist()] == [5, 6, 7]
    assert reader.row_groups_skipped == 1


# -- Delta deletion vectors ----------------------------------------------------------------------


def test_a_delta_deletion_vector_lines_up_after_skipped_row_groups(tmp_path):
    table_path = tmp_path / "delta"
    data = pa.table({"id": pa.array(range(ROWS), pa.int32()), "name": [f"n{i}" for i in range(ROWS)]})
    add = w.data_file(table_path, data, row_group_size=GROUP)
    add["add"]["deletionVector"] = w.inline_vector(DELETED)
    fields = [w.field("id", "long"), w.field("name", "string")]  # int32 in the file: widened
    w.commit(
        table_path,
        0,
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors"],
            }
        },
        w.metadata(fields, configuration={"delta.enableDeletionVectors": "true"}),
        add,
    )
    table = DeltaAdapter.open(str(table_path))
    before = dict(rowgroups.totals)
    rows = [r for b in table.read(filters=FILTER) for r in b.to_pylist()]
    assert rows == _rows(EXPECTED)
    assert rowgroups.totals["skipped"] - before["skipped"] == 2
    assert rowgroups.totals["kept"] - before["kept"] == 2
    rows = [r for b in table.read() for r in b.to_pylist()]
    assert rows == _rows([i for i in range(ROWS) if i not in DELETED])
    assert json.dumps(add)  # the action was written as given


# -- the position helpers ---------------------------------------------------------------------------


def test_positions_are_sorted_unique_int64_from_every_source():
    vector = BitMap64([3, 2**40, 7])
    merged = sorted_positions([vector, pa.array([7, 1], pa.int64()), np.array([9, 3])])
    assert merged is not None and merged.dtype == np.int64
    assert merged.tolist() == [1, 3, 7, 9, 2**40]
    assert sorted_positions([BitMap64(), pa.array([], pa.int64())]) is None


def test_keep_masks_cover_only_their_own_rows():
    deleted = np.array([0, 9, 10, 19, 25], dtype=np.int64)
    assert keep_mask(deleted, 10, 10).to_pylist() == [False] + [True] * 8 + [False]
    assert keep_mask(deleted, 20, 5) is None
    assert keep_mask(deleted, 1, 8) is None
    assert keep_mask(None, 0, 10) is None
    assert keep_mask(deleted, 0, 1).to_pylist() == [False]


def test_position_delete_tables_group_by_data_file():
    table = pa.table(
        {
            "file_path": pa.array(["b", "a", "b", None, "a", "b"]).dictionary_encode(),
            "pos": pa.array([5, 2, 1, 0, 2, None], pa.int64()),
        }
    )
    grouped = positions_by_path(table, "file_path", "pos")
    assert {k: v.tolist() for k, v in grouped.items()} == {"a": [2], "b": [1, 5]}
    assert positions_by_path(table.slice(0, 0), "file_path", "pos") == {}


def test_position_delete_tables_read_as_dictionaries_group_across_chunks():
    # chunks with their own dictionaries, one repeating a value: no position may be lost
    first = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), pa.array(["a", "b"]))
    second = pa.DictionaryArray.from_arrays(pa.array([1, 0, 2], pa.int32()), pa.array(["b", "a", "a"]))
    table = pa.table(
        {
            "file_path": pa.chunked_array([first, second]),
            "pos": pa.chunked_array([pa.array([1, 2, 3]), pa.array([4, 5, 6])]),
        }
    )
    grouped = positions_by_path(table, "file_path", "pos")
    assert {k: v.tolist() for k, v in grouped.items()} == {"a": [1, 3, 4, 6], "b": [2, 5]}
