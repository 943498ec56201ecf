"""Delta ``void`` columns (Spark's NullType; issue 29, item 19): the table opens and every row
reads null in them, as Delta Kernel reads them. Spark leaves such columns out of the data files
(top level and inside structs); a file that holds one anyway still reads null there.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from storage.formats.delta import DeltaAdapter
from tests.spec import _delta_log_writer as w

STRUCT = {"type": "struct", "fields": [w.field("a", "integer"), w.field("n", "void")]}


@pytest.fixture
def void_table(tmp_path):
    path = tmp_path / "void"
    # as Spark writes it: no v, no s.n
    spark_file = pa.table(
        {"id": pa.array([1, 2], pa.int64()), "s": pa.array([{"a": 10}, None], pa.struct([("a", pa.int32())]))}
    )
    # a writer that kept v, as an all-null int column
    other_file = pa.table(
        {
            "id": pa.array([3], pa.int64()),
            "v": pa.array([None], pa.int32()),
            "s": pa.array([{"a": 30}], pa.struct([("a", pa.int32())])),
        }
    )
    fields = [w.field("id", "long"), w.field("v", "void"), w.field("s", STRUCT)]
    w.commit(
        path,
        0,
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        w.metadata(fields),
        w.data_file(
            path, spark_file, stats='{"numRecords": 2, "minValues": {"id": 1}, "nullCount": {"v": 2}}'
        ),
        w.data_file(path, other_file),
    )
    return path


def _rows(batches) -> list[dict]:
    return sorted((row for batch in batches for row in batch.to_pylist()), key=lambda r: r["id"])


EXPECTED = [
    {"id": 1, "v": None, "s": {"a": 10, "n": None}},
    {"id": 2, "v": None, "s": None},
    {"id": 3, "v": None, "s": {"a": 30, "n": None}},
]


def test_void_columns_read_as_all_null(void_table):
    table = DeltaAdapter.open(str(void_table))
    assert table.schema.field("v").type == pa.null()
    assert table.schema.field("s").type == pa.struct([("a", pa.int32()), ("n", pa.null())])
    assert _rows(table.read()) == EXPECTED
    assert _rows(b for split in table.plan_splits() for b in table.read(split)) == EXPECTED
    assert _rows(table.read(columns=["id", "v"])) == [{"id": i, "v": None} for i in (1, 2, 3)]


def test_filters_and_listings_work_beside_void_columns(void_table):
    table = DeltaAdapter.open(str(void_table))
    assert _rows(table.read(filters="id >= 2", columns=["id", "v"])) == [
        {"id": 2, "v": None},
        {"id": 3, "v": None},
    ]
    assert _rows(table.read(filters="v is null", columns=["id"])) == [{"id": 1}, {"id": 2}, {"id": 3}]
    assert _rows(table.read(filters="v is not null", columns=["id"])) == []
    assert _rows(table.read(filters="s.n is null", columns=["id"])) == [{"id": 1}, {"id": 2}, {"id": 3}]
    assert sum(1 for _ in table.file_index().list_files_at()) == 2
    # Spark's parquet reader refuses NullType: Spark reads the table through the spec reader
    from storage.spec.spark.plain import parquet_paths_if_plain

    assert parquet_paths_if_plain(table) is None


@pytest.mark.spark
def test_spark_reads_the_void_columns_as_null(spark, void_table):
    from storage.spec.spark_source import read_table

    frame = read_table(spark, str(void_table))
    assert [f.dataType.typeName() for f in frame.schema.fields][:2] == ["long", "void"]
    rows = sorted((row.asDict(recursive=True) for row in frame.collect()), key=lambda r: r["id"])
    assert rows == EXPECTED
