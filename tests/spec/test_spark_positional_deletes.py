"""Spark's own parquet reader as ``read_table``'s default path (``storage.spec.spark.rowindex``):
position deletes and deletion vectors taken out by a bitmap per file on ``_metadata.row_index``,
Delta's partition values joined in by file, and the tables it cannot read exactly sent to the
``lakewarden`` data source with the reason. Every fast read is compared, row for row and value for
value, with the data source's read of the same table (``via="source"``) and with the spec API's."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from storage.spec.registry import load_table
from storage.spec.spark.plain import VIA_CONF, parquet_plan, read_path
from storage.spec.spark.rowindex import ParquetPlan, deleted_bitmap, parquet_frame
from storage.spec.spark_source import read_table, register
from tests.spec import _delta_log_writer as w


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: json.dumps(r, default=repr, sort_keys=True))


def _frame_rows(frame) -> list[dict]:
    return _sorted([row.asDict(recursive=True) for row in frame.collect()])


def _spec_rows(location: Path | str, filters: str | None = None) -> list[dict]:
    table = load_table(str(location))
    return _sorted([r for b in table.read(filters=filters) for r in b.to_pylist()])


def _fast_and_source(spark, location: Path | str, **kwargs) -> tuple[list[dict], list[dict]]:
    fast = read_table(spark, str(location), **kwargs)
    source = read_table(spark, str(location), via="source", **kwargs)
    assert fast.inputFiles(), "the fast read is not Spark's parquet scan"
    assert not source.inputFiles(), "the forced read is not the data source"
    assert fast.schema == source.schema
    return _frame_rows(fast), _frame_rows(source)


@pytest.fixture(scope="module")
def lakewarden(spark):
    register(spark)
    return spark


# -- the bitmap ------------------------------------------------------------------------------------


def test_the_bitmap_sets_one_bit_per_deleted_position():
    positions = np.array([64, 65, 127, 128, 191, 1000], np.int64)

    first, words = deleted_bitmap(positions)

    assert first == 1  # positions 0-63 hold nothing: no word for them
    assert len(words) == 1000 // 64 - 1 + 1
    found = [
        first * 64 + i * 64 + bit for i, word in enumerate(words) for bit in range(64) if (word >> bit) & 1
    ]
    assert found == positions.tolist()
    assert words[0] == -(2**63) | 0b11  # bit 63 (127) makes the signed word negative


def test_files_of_one_size_go_to_separate_groups():
    deleted = {"b": np.array([0], np.int64)}
    plan = ParquetPlan(["a", "b", "c", "d"], sizes={"a": 10, "b": 10, "c": 11, "d": 10}, deleted=deleted)

    assert plan.groups() == [["a", "c"], ["b"], ["d"]]
    # files that fill in different partition columns are scanned apart; those joined to nothing
    # (no partition value to fill, no deletes) in one plain scan
    values = {"a": {"p": 1}, "b": {"p": 2}, "d": {"p": 3}}
    filling = ParquetPlan(["a", "b", "c", "d"], plan.sizes, partition_columns=("p",), partition_values=values)
    assert filling.groups() == [["a"], ["b"], ["d"], ["c"]]
    assert dataclasses.replace(filling, deleted=deleted, key="name").groups() == [["a", "b", "d"], ["c"]]


# -- Delta: deletion vectors, partitions -----------------------------------------------------------

#: rows per file, and the positions each file's deletion vector removes (file 2 has none)
ROWS = 1000
DELETED = {0: [0, 1, 2, 63, 64, 499, 500, 999], 1: list(range(0, ROWS, 7))}


def _protocol():
    return {
        "protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"],
            "writerFeatures": ["deletionVectors"],
        }
    }


@pytest.fixture
def delta_with_vectors(tmp_path) -> Path:
    """Three files of 1,000 rows in row groups of 100 (ids 0-2999), two with deletion vectors, in
    a folder whose name Hadoop has to percent-encode."""
    table_path = tmp_path / "a table+with %odd# name"
    actions = []
    for number in range(3):
        ids = range(number * ROWS, (number + 1) * ROWS)
        data = pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]})
        add = w.data_file(table_path, data, row_group_size=100)
        if number in DELETED:
            add["add"]["deletionVector"] = w.inline_vector(DELETED[number])
        actions.append(add)
    fields = [w.field("id", "long"), w.field("name", "string")]
    w.commit(
        table_path,
        0,
        _protocol(),
        w.metadata(fields, configuration={"delta.enableDeletionVectors": "true"}),
        *actions,
    )
    return table_path


def _expected_ids(low: int = 0, high: int = 3 * ROWS) -> list[int]:
    gone = {number * ROWS + p for number, positions in DELETED.items() for p in positions}
    return [i for i in range(low, high) if i not in gone]


@pytest.mark.spark
def test_delta_deletion_vectors_are_taken_out_by_spark_parquet(lakewarden, delta_with_vectors):
    table = load_table(str(delta_with_vectors))
    plan = parquet_plan(table)
    assert isinstance(plan, ParquetPlan) and len(plan.paths) == 3
    assert sorted(len(p) for p in plan.deleted.values()) == sorted(len(p) for p in DELETED.values())

    fast, source = _fast_and_source(lakewarden, delta_with_vectors)

    assert [r["id"] for r in sorted(fast, key=lambda r: r["id"])] == _expected_ids()
    assert {r["id"]: r["name"] for r in fast}[1001] == "n1001"
    assert fast == source == _spec_rows(delta_with_vectors)


@pytest.mark.spark
def test_a_filter_that_skips_row_groups_keeps_the_deletes_in_line(lakewarden, delta_with_vectors):
    # ids 450-1250: row groups before 400 and after 1300 are skipped by statistics
    kwargs = {"filters": "id >= 450 and id < 1250", "columns": ["id"]}
    fast, source = _fast_and_source(lakewarden, delta_with_vectors, **kwargs)

    assert [r["id"] for r in sorted(fast, key=lambda r: r["id"])] == _expected_ids(450, 1250)
    assert fast == source


@pytest.mark.spark
def test_files_of_the_same_size_keep_their_own_deletes(lakewarden, tmp_path):
    """Two files with the same bytes (so the same size) and different deletion vectors: each
    file's bitmap must reach its own rows only."""
    table_path = tmp_path / "twins"
    data = pa.table({"id": pa.array(range(300), pa.int64())})
    first = w.data_file(table_path, data, row_group_size=100)
    second = w.data_file(table_path, data, row_group_size=100)
    first["add"]["deletionVector"] = w.inline_vector([0, 1, 2])
    second["add"]["deletionVector"] = w.inline_vector([297, 298, 299])
    fields = [w.field("id", "long")]
    w.commit(table_path, 0, _protocol(), w.metadata(fields), first, second)

    table = load_table(str(table_path))
    plan = parquet_plan(table)
    assert isinstance(plan, ParquetPlan) and plan.key == "name"  # sizes repeat, names do not
    fast, source = _fast_and_source(lakewarden, table_path)
    # keyed by size instead: one scan per group of distinct sizes, unioned
    by_size = dataclasses.replace(plan, key="size")
    assert len(by_size.groups()) == 2
    grouped = _frame_rows(parquet_frame(lakewarden, table.schema, by_size))

    assert sorted(r["id"] for r in fast) == sorted([*range(3, 300), *range(0, 297)])
    assert fast == source == grouped


@pytest.fixture
def delta_partitioned_with_vectors(tmp_path) -> Path:
    """Partitioned by region (string) and day (date), partition columns not in the files; one
    file with a deletion vector; one partition value null."""
    table_path = tmp_path / "partitioned"
    actions = []
    parts = [("eu", "2024-01-01", [0, 5]), ("us", "2024-01-02", None), (None, "2024-01-01", [9])]
    for number, (region, day, deleted) in enumerate(parts):
        data = pa.table({"id": pa.array(range(number * 10, number * 10 + 10), pa.int64())})
        add = w.data_file(table_path, data, partition={"region": region, "day": day})
        if deleted:
            add["add"]["deletionVector"] = w.inline_vector(deleted)
        actions.append(add)
    fields = [w.field("id", "long"), w.field("region", "string"), w.field("day", "date")]
    w.commit(table_path, 0, _protocol(), w.metadata(fields, partition_columns=["region", "day"]), *actions)
    return table_path


@pytest.mark.spark
def test_delta_partition_values_and_vectors_together(lakewarden, delta_partitioned_with_vectors):
    path = delta_partitioned_with_vectors

    fast, source = _fast_and_source(lakewarden, path)

    by_id = {r["id"]: (r["region"], r["day"]) for r in fast}
    assert sorted(by_id) == [i for i in range(30) if i not in (0, 5, 29)]
    assert by_id[1] == ("eu", dt.date(2024, 1, 1))
    assert by_id[15] == ("us", dt.date(2024, 1, 2))
    assert by_id[20] == (None, dt.date(2024, 1, 1))
    assert fast == source == _spec_rows(path)
    # a filter on a partition column and one on a data column
    fast, source = _fast_and_source(lakewarden, path, filters="day = date'2024-01-01' and id > 3")
    assert sorted(r["id"] for r in fast) == [4, 6, 7, 8, 9, 20, 21, 22, 23, 24, 25, 26, 27, 28]
    assert fast == source


@pytest.mark.spark
@pytest.mark.parametrize(
    "name", ["data-reader-partition-values", "partition-type-primitives", "table-with-dv-small"]
)
def test_delta_fixtures_read_the_same_both_ways(lakewarden, delta_fixture, name):
    path = delta_fixture(name)

    fast, source = _fast_and_source(lakewarden, path)

    assert fast == source
    assert len(fast) == {"data-reader-partition-values": 3, "partition-type-primitives": 16}.get(name, 8)


# -- Iceberg ---------------------------------------------------------------------------------------


@pytest.mark.spark
def test_iceberg_position_deletes_take_the_fast_path_with_the_same_rows(lakewarden, iceberg_fixture):
    path = iceberg_fixture("spark_v2_position_deletes")
    condition = "l_partkey_int < 500 and l_shipdate_date >= date'1996-01-01'"
    plan = parquet_plan(load_table(str(path)))
    assert isinstance(plan, ParquetPlan) and plan.deleted  # the table has position deletes

    fast, source = _fast_and_source(lakewarden, path)
    assert len(fast) == 6592  # Spark's own count of the table (fixtures README)
    assert fast == source
    fast, source = _fast_and_source(lakewarden, path, filters=condition)
    assert 0 < len(fast) < 6592
    assert fast == source


# -- what falls back -------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize(
    ("kind", "name", "reason"),
    [
        ("iceberg", "spark_v2_equality_deletes", "by value"),
        ("delta", "table_with_column_mapping", "under its names"),
    ],
)
def test_what_cannot_be_read_exactly_goes_through_the_data_source(
    lakewarden, iceberg_fixture, delta_fixture, kind, name, reason
):
    path = (iceberg_fixture if kind == "iceberg" else delta_fixture)(name)
    table = load_table(str(path))

    found = read_path(table, str(path))
    frame = read_table(lakewarden, str(path))

    assert found.way == "source" and reason in found.reason
    assert not frame.inputFiles()
    assert _frame_rows(frame) == _frame_rows(read_table(lakewarden, str(path), via="source"))
    if name == "spark_v2_equality_deletes":
        assert sorted((r.id, r.name) for r in frame.collect()) == [(4, "d"), (5, "e")]


@pytest.mark.spark
def test_the_switch_forces_the_data_source(lakewarden, delta_with_vectors):
    lakewarden.conf.set(VIA_CONF, "source")
    try:
        forced = read_table(lakewarden, str(delta_with_vectors))
    finally:
        lakewarden.conf.unset(VIA_CONF)
    assert not forced.inputFiles()
    assert read_table(lakewarden, str(delta_with_vectors)).inputFiles()
    assert read_path(load_table(str(delta_with_vectors)), "x", via="source").reason == "forced: via='source'"
    with pytest.raises(ValueError, match="via must be one of auto, source"):
        read_table(lakewarden, str(delta_with_vectors), via="jvm")
