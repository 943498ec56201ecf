"""Deletes by row position applied by Spark's own parquet reader (``read_table``'s fast path):
position delete files and deletion vectors become a left anti-join on (file,
``_metadata.row_index``), so a table with such deletes is scanned at Spark's speed. Every read is
compared with the spec API's own read of the same table, row for row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from storage.spec.registry import load_table
from storage.spec.spark.plain import _without_deleted_rows, plain_parquet_plan
from storage.spec.spark_source import read_table, register
from tests.spec import _delta_log_writer as w

pytestmark = pytest.mark.spark


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: json.dumps(r, default=repr, sort_keys=True))


def _frame_rows(frame) -> list[dict]:
    return _sorted(frame.toArrow().to_pylist())


def _spec_rows(location: Path | str, filters: str | None = None) -> list[dict]:
    table = load_table(str(location))
    return _sorted([r for b in table.read(filters=filters) for r in b.to_pylist()])


@pytest.fixture(scope="module")
def lakewarden(spark):
    register(spark)
    return spark


#: rows per file, and the positions each file's deletion vector removes (file 2 has none)
ROWS = 1000
DELETED = {0: [0, 1, 2, 499, 500, 999], 1: list(range(0, ROWS, 7))}


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
        w.metadata(
            [w.field("id", "long"), w.field("name", "string")],
            configuration={"delta.enableDeletionVectors": "true"},
        ),
        *actions,
    )
    return table_path


def _expected_ids(low: int = 0, high: int = 3 * ROWS) -> list[int]:
    gone = {number * ROWS + p for number, positions in DELETED.items() for p in positions}
    return [i for i in range(low, high) if i not in gone]


def test_delta_deletion_vectors_are_taken_out_by_spark_parquet(lakewarden, delta_with_vectors):
    plan = plain_parquet_plan(load_table(str(delta_with_vectors)))
    assert plan is not None and len(plan.paths) == 3
    assert sorted(len(p) for p in plan.deleted.values()) == sorted(len(p) for p in DELETED.values())

    frame = read_table(lakewarden, str(delta_with_vectors))

    assert frame.inputFiles()  # Spark's parquet scan, not the data source
    assert frame.columns == ["id", "name"]
    rows = _frame_rows(frame)
    assert [r["id"] for r in sorted(rows, key=lambda r: r["id"])] == _expected_ids()
    assert rows == _spec_rows(delta_with_vectors)


def test_a_filter_that_skips_row_groups_keeps_the_deletes_in_line(lakewarden, delta_with_vectors):
    # ids 450-1250: row groups before 400 and after 1300 are skipped by statistics
    frame = read_table(lakewarden, str(delta_with_vectors), filters="id >= 450 and id < 1250", columns=["id"])

    assert frame.inputFiles()
    assert sorted(r.id for r in frame.collect()) == _expected_ids(450, 1250)


@pytest.mark.spark
def test_iceberg_position_deletes_take_the_fast_path_with_the_same_rows(lakewarden, iceberg_fixture):
    path = iceberg_fixture("spark_v2_position_deletes")
    condition = "l_partkey_int < 500 and l_shipdate_date >= date'1996-01-01'"

    everything = read_table(lakewarden, str(path))
    filtered = read_table(lakewarden, str(path), filters=condition)

    assert everything.inputFiles() and filtered.inputFiles()
    assert everything.count() == 6592  # Spark's own count of the table (fixtures README)
    assert _frame_rows(everything) == _spec_rows(path)
    assert _frame_rows(filtered) == _spec_rows(path, condition)


@pytest.mark.spark
def test_equality_deletes_stay_with_the_data_source(lakewarden, iceberg_fixture):
    path = iceberg_fixture("spark_v2_equality_deletes")

    frame = read_table(lakewarden, str(path))

    assert plain_parquet_plan(load_table(str(path))) is None
    assert not frame.inputFiles()
    assert sorted((r.id, r.name) for r in frame.collect()) == [(4, "d"), (5, "e")]


def test_a_file_spark_names_otherwise_sends_the_read_back_to_the_data_source(lakewarden, delta_with_vectors):
    plan = plain_parquet_plan(load_table(str(delta_with_vectors)))
    assert plan is not None
    frame = lakewarden.read.parquet(*plan.paths)

    assert _without_deleted_rows(lakewarden, frame, {"/elsewhere/x.parquet": np.array([0], np.int64)}) is None
