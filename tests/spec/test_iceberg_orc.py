"""Iceberg tables whose data and delete files are ORC, alone or beside parquet (issue 29, item 19),
as Hive, Impala, Trino and Spark write them: listed, split and read with the values a parquet
file of the same rows gives; deletes in ORC files applied. They were refused ("only parquet data
files are read").

The ORC files carry their field ids as ``iceberg.id`` type attributes, as Iceberg's ORC writer
writes them; one ORC column has the name it had before a rename, so only the id matches it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from storage.formats.iceberg.read import SliceReader
from storage.spec import load_table
from storage.spec.errors import CorruptTable
from storage.spec.models import DataFile, FileContent, FileSlice, PartitionDescriptor
from tests.spec.iceberg_writer import SpecWriter, fid

ORC_ROWS = 1000
FIRST_ORC_ID = 100
BASE_TS = dt.datetime(2024, 2, 29, 12, 0, 0)
FIELDS = [
    {"id": 1, "name": "id", "required": False, "type": "long"},
    {"id": 2, "name": "name", "required": False, "type": "string"},
    {"id": 3, "name": "ts", "required": False, "type": "timestamp"},
]
# position deletes: ORC rows 0, 500, 999 and parquet row 1
DELETED_IDS = {2, FIRST_ORC_ID, FIRST_ORC_ID + 500, FIRST_ORC_ID + 999}


def orc_field(name: str, type_: pa.DataType, field_id: int) -> pa.Field:
    return pa.field(name, type_, metadata={"iceberg.id": str(field_id)})


def _ts(row_id: int) -> dt.datetime:
    return BASE_TS + dt.timedelta(seconds=row_id, microseconds=row_id)


def _orc_rows() -> pa.Table:
    # written before "name" was renamed: its ORC column is still "old_name"; ORC timestamps
    # come back as nanoseconds
    schema = pa.schema(
        [
            orc_field("id", pa.int64(), 1),
            orc_field("old_name", pa.string(), 2),
            orc_field("ts", pa.timestamp("ns"), 3),
        ]
    )
    ids = list(range(FIRST_ORC_ID, FIRST_ORC_ID + ORC_ROWS))
    return pa.table(
        {"id": ids, "old_name": [f"n{i}" for i in ids], "ts": [_ts(i) for i in ids]}, schema=schema
    )


def _position_deletes(writer: SpecWriter, targets: dict[str, list[int]]) -> dict:
    schema = pa.schema(
        [orc_field("file_path", pa.string(), 2147483546), orc_field("pos", pa.int64(), 2147483545)]
    )
    paths = [path for path, positions in sorted(targets.items()) for _ in positions]
    positions = [p for _, ps in sorted(targets.items()) for p in ps]
    record = writer.orc(pa.table({"file_path": paths, "pos": positions}, schema=schema), "pos-deletes.orc")
    record.update(content=1)
    return record


@pytest.fixture
def mixed_table(tmp_path) -> tuple[str, dict, dict]:
    writer = SpecWriter(tmp_path / "mixed")
    parquet_schema = pa.schema(
        [fid("id", pa.int64(), 1), fid("name", pa.string(), 2), fid("ts", pa.timestamp("us"), 3)]
    )
    parquet_file = writer.parquet(
        pa.table(
            {"id": [1, 2, 3], "name": ["a", "b", "c"], "ts": [_ts(i) for i in (1, 2, 3)]},
            schema=parquet_schema,
        )
    )
    orc_file = writer.orc(_orc_rows(), "data-0.orc", stripe_size=4096)
    orc_file["split_offsets"] = [3, orc_file["file_size_in_bytes"] // 2]  # stripe offsets a writer records
    deletes = _position_deletes(
        writer, {orc_file["file_path"]: [0, 500, 999], parquet_file["file_path"]: [1]}
    )
    location = writer.one_snapshot_table(FIELDS, [parquet_file, orc_file], delete_files=[deletes])
    return location, parquet_file, orc_file


def _expected_ids() -> list[int]:
    every = [1, 2, 3, *range(FIRST_ORC_ID, FIRST_ORC_ID + ORC_ROWS)]
    return [i for i in every if i not in DELETED_IDS]


def _rows(batches) -> list[dict]:
    return sorted((row for batch in batches for row in batch.to_pylist()), key=lambda r: r["id"])


def test_a_table_mixing_parquet_and_orc_reads_every_row_with_its_values(mixed_table):
    location, _, _ = mixed_table
    table = load_table(location)
    rows = _rows(table.read_arrow().to_batches())
    assert [r["id"] for r in rows] == _expected_ids()
    assert len(rows) == 3 + ORC_ROWS - len(DELETED_IDS) == 999
    by_id = {r["id"]: r for r in rows}
    assert by_id[1] == {"id": 1, "name": "a", "ts": _ts(1)}
    # the renamed column found by its id, nanoseconds read as the table's microseconds
    assert by_id[101] == {"id": 101, "name": "n101", "ts": dt.datetime(2024, 2, 29, 12, 1, 41, 101)}
    assert by_id[1098] == {"id": 1098, "name": "n1098", "ts": _ts(1098)}
    assert table.read_arrow().schema.field("ts").type == pa.timestamp("us")


def test_orc_files_are_listed_and_filtered(mixed_table):
    location, parquet_file, orc_file = mixed_table
    table = load_table(location)
    slices = sorted(table.file_index().list_files_at(), key=lambda s: s.base_file.file_format)
    assert [s.base_file.file_format for s in slices] == ["orc", "parquet"]
    assert [s.base_file.record_count for s in slices] == [ORC_ROWS, 3]
    assert [d.file_format for d in slices[0].delete_files] == ["orc"]
    ids = [r["id"] for r in _rows(table.read_arrow(filters="id >= 1000", columns=["id"]).to_batches())]
    assert ids == list(range(1000, FIRST_ORC_ID + 999))
    names = table.read_arrow(filters="name = 'n150'", columns=["id", "name"]).to_pylist()
    assert names == [{"id": 150, "name": "n150"}]


def test_splits_keep_an_orc_file_whole_and_read_each_row_once(mixed_table):
    location, _, orc_file = mixed_table
    table = load_table(location)
    splits = list(table.plan_splits(target_size=1024, open_file_cost=0))
    orc_parts = [p for s in splits for p in s.parts if p.file_slice.base_file.file_format == "orc"]
    assert len(orc_parts) == 1  # the writer's stripe offsets are not used to cut it
    assert (orc_parts[0].start, orc_parts[0].length) == (0, orc_file["file_size_in_bytes"])
    ids = sorted(r["id"] for split in splits for b in table.read(split) for r in b.to_pylist())
    assert ids == _expected_ids()


def test_orc_equality_and_position_deletes_apply_to_an_orc_data_file(tmp_path):
    writer = SpecWriter(tmp_path / "deletes")
    data = writer.orc(_orc_rows(), "data.orc")
    positions = _position_deletes(writer, {data["file_path"]: [3]})
    equality_schema = pa.schema([orc_field("old", pa.string(), 2)])
    equality = writer.orc(pa.table({"old": ["n101", "n102", None]}, schema=equality_schema), "eq.orc")

    def data_file(record: dict, content: FileContent, **extra) -> DataFile:
        return DataFile(
            path=record["file_path"],
            size_bytes=record["file_size_in_bytes"],
            record_count=record["record_count"],
            content=content,
            file_format="orc",
            **extra,
        )

    from pyiceberg.io.pyarrow import PyArrowFileIO

    piece = FileSlice(
        PartitionDescriptor(""),
        data_file(data, FileContent.DATA),
        (
            data_file(positions, FileContent.POSITION_DELETES),
            data_file(
                equality,
                FileContent.EQUALITY_DELETES,
                equality_columns=("name",),
                extra={"equality_ids": (2,)},
            ),
        ),
    )
    schema = pa.schema(
        [fid("id", pa.int64(), 1), fid("name", pa.string(), 2), fid("ts", pa.timestamp("us"), 3)]
    )
    reader = SliceReader(PyArrowFileIO(), schema, ["id"], None)
    ids = [r["id"] for b in reader.read(piece) for r in b.to_pylist()]
    assert ids[:4] == [100, 104, 105, 106]  # 101, 102 by name, 103 by position
    assert len(ids) == ORC_ROWS - 3


def test_a_file_that_is_not_orc_is_a_corrupt_table(mixed_table):
    location, _, orc_file = mixed_table
    Path(orc_file["file_path"]).write_bytes(b"not an orc file at all")
    with pytest.raises(CorruptTable, match=r"data-0\.orc is not a readable ORC file"):
        load_table(location).read_arrow()


@pytest.mark.spark
def test_spark_reads_the_mixed_table_through_the_data_source(spark, mixed_table):
    from storage.spec.spark_source import read_table

    location, _, _ = mixed_table
    frame = read_table(spark, location, filters="id >= 1095")
    assert sorted((r["id"], r["name"]) for r in frame.collect()) == [(i, f"n{i}") for i in range(1095, 1099)]
    assert read_table(spark, location).count() == 999
