"""Time travel reads an old Delta version with the schema of that version's metadata: columns added
later are absent, columns dropped later are present, and under column mapping renamed columns keep
their old names; listings, filters, pruning and splits planned at the old version agree.

Two tables: one written with deltalake (an append adding a column by schema evolution, then an
overwrite replacing the schema), one written here from the protocol under column mapping (rename,
drop, add: deltalake 1.6 cannot rename or drop).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from storage.formats.delta import DeltaAdapter
from storage.spec.errors import FilterError
from tests.spec import _delta_log_writer as w


@pytest.fixture
def evolved_table(tmp_path) -> Path:
    """v0 {id, name}; v1 appends with a new column score; v2 overwrites with {id, score}; v3 appends."""
    path = str(tmp_path / "evolved")
    write_deltalake(path, pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}))
    write_deltalake(
        path,
        pa.table({"id": pa.array([3], pa.int64()), "name": ["c"], "score": [1.5]}),
        mode="append",
        schema_mode="merge",
    )
    write_deltalake(
        path,
        pa.table({"id": pa.array([4], pa.int64()), "score": [2.5]}),
        mode="overwrite",
        schema_mode="overwrite",
    )
    write_deltalake(path, pa.table({"id": pa.array([5], pa.int64()), "score": [3.5]}), mode="append")
    return Path(path)


def _mapped_fields(*fields: tuple[str, str, int, str]) -> list[dict]:
    return [w.mapped(name, type_, column_id, physical) for name, type_, column_id, physical in fields]


def _config(max_id: int) -> dict[str, str]:
    return {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": str(max_id)}


@pytest.fixture
def mapped_table(tmp_path) -> Path:
    """Column mapping by name: v0 {a, b}; v1 renames b to c and drops a; v2 adds d."""
    path = tmp_path / "mapped"
    a, b = ("a", "long", 1, "col-a1"), ("b", "string", 2, "col-b2")
    file0 = pa.table({"col-a1": pa.array([1, 2], pa.int64()), "col-b2": ["x", "y"]})
    stats0 = '{"numRecords":2,"minValues":{"col-a1":1,"col-b2":"x"},"maxValues":{"col-a1":2,"col-b2":"y"}}'
    w.commit(
        path,
        0,
        w.protocol("columnMapping"),
        w.metadata(_mapped_fields(a, b), configuration=_config(2)),
        w.data_file(path, file0, stats=stats0),
    )
    c = ("c", "string", 2, "col-b2")
    file1 = pa.table({"col-b2": ["z"]})
    stats1 = '{"numRecords":1,"minValues":{"col-b2":"z"},"maxValues":{"col-b2":"z"}}'
    w.commit(
        path,
        1,
        w.metadata(_mapped_fields(c), configuration=_config(2)),
        w.data_file(path, file1, stats=stats1),
        operation="RENAME COLUMN",
    )
    d = ("d", "long", 3, "col-d3")
    file2 = pa.table({"col-b2": ["w"], "col-d3": pa.array([7], pa.int64())})
    stats2 = '{"numRecords":1,"minValues":{"col-b2":"w","col-d3":7},"maxValues":{"col-b2":"w","col-d3":7}}'
    w.commit(
        path,
        2,
        w.metadata(_mapped_fields(c, d), configuration=_config(3)),
        w.data_file(path, file2, stats=stats2),
        operation="ADD COLUMNS",
    )
    return path


def _rows(batches, key: str) -> list[dict]:
    return sorted((row for batch in batches for row in batch.to_pylist()), key=lambda r: r[key])


def _split_rows(table, instant, key: str, **read) -> list[dict]:
    splits = list(table.plan_splits(instant, target_size=1, open_file_cost=0))
    return _rows((b for split in splits for b in table.read(split, **read)), key)


EVOLVED = {
    0: [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
    1: [{"id": 1, "name": "a", "score": None}, {"id": 2, "name": "b", "score": None},
        {"id": 3, "name": "c", "score": 1.5}],
    2: [{"id": 4, "score": 2.5}],
    3: [{"id": 4, "score": 2.5}, {"id": 5, "score": 3.5}],
}  # fmt: skip


@pytest.mark.parametrize("version", sorted(EVOLVED))
def test_each_version_reads_with_its_own_columns(evolved_table, version):
    table = DeltaAdapter.open(str(evolved_table))
    assert table.schema.names == ["id", "score"]
    assert table.schema_at(version).names == list(EVOLVED[version][-1])
    assert _rows(table.read(version), "id") == EVOLVED[version]
    assert _split_rows(table, version, "id") == EVOLVED[version]
    opened = DeltaAdapter.open(str(evolved_table), version=version)
    assert opened.schema.names == list(EVOLVED[version][-1])
    assert _split_rows(opened, None, "id") == EVOLVED[version]


def test_filters_and_listings_at_an_old_version_use_its_columns(evolved_table):
    table = DeltaAdapter.open(str(evolved_table))
    index = table.file_index()
    kept = list(index.list_files_at(0, filters="name = 'b'"))
    assert [r for r in _rows(table.read(kept, filters="name = 'b'"), "id")] == [{"id": 2, "name": "b"}]
    assert _rows(table.read(1, columns=["name"], filters="score > 1"), "name") == [{"name": "c"}]
    # The version-0 file predates score: its statistics say nothing of it, so it is kept.
    first_ids = [s.base_file.lower_bounds["id"] for s in index.list_files_at(1, filters="score > 1")]
    assert sorted(first_ids) == [1, 3]
    assert [s.base_file.lower_bounds["id"] for s in index.list_files_at(1, filters="name = 'c'")] == [3]
    with pytest.raises(FilterError, match="score"):
        table.read(0, filters="score > 1")
    with pytest.raises(FilterError, match="name"):
        table.read(columns=["name"])


MAPPED = {
    0: [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}],
    1: [{"c": "x"}, {"c": "y"}, {"c": "z"}],
    2: [{"c": "w", "d": 7}, {"c": "x", "d": None}, {"c": "y", "d": None}, {"c": "z", "d": None}],
}


@pytest.mark.parametrize("version", sorted(MAPPED))
def test_column_mapping_keeps_the_names_each_version_had(mapped_table, version):
    table = DeltaAdapter.open(str(mapped_table))
    key = "a" if version == 0 else "c"
    assert table.schema_at(version).names == list(MAPPED[version][0])
    assert _rows(table.read(version), key) == MAPPED[version]
    assert _split_rows(table, version, key) == MAPPED[version]
    assert DeltaAdapter.open(str(mapped_table), version=version).schema.names == list(MAPPED[version][0])


def test_pruning_at_an_old_version_reads_statistics_under_the_old_names(mapped_table):
    table = DeltaAdapter.open(str(mapped_table))
    index = table.file_index()
    assert list(index.list_files_at(0, filters="b = 'q'")) == []
    kept = list(index.list_files_at(0, filters="b = 'y'"))
    assert _rows(table.read(kept, filters="b = 'y'"), "a") == [{"a": 2, "b": "y"}]
    assert kept[0].base_file.upper_bounds == {"a": 2, "b": "y"}
    latest = list(index.list_files_at(filters="c = 'w'"))
    assert _rows(table.read(latest), "c") == [{"c": "w", "d": 7}]
    assert _rows(table.read(1, filters="c >= 'y'"), "c") == [{"c": "y"}, {"c": "z"}]


@pytest.mark.spark
def test_spark_reads_an_old_version_with_its_columns(spark, evolved_table, mapped_table):
    from storage.spec.spark_source import read_table

    old = read_table(spark, str(evolved_table), instant=0)
    assert sorted((r.asDict() for r in old.collect()), key=lambda r: r["id"]) == EVOLVED[0]
    renamed = read_table(spark, str(mapped_table), instant=0)
    assert sorted((r.asDict() for r in renamed.collect()), key=lambda r: r["a"]) == MAPPED[0]


@pytest.mark.spark
def test_spark_reads_the_latest_version_of_both_tables(spark, evolved_table, mapped_table):
    from storage.spec.spark_source import read_table

    rows = read_table(spark, str(evolved_table)).collect()
    assert sorted((r.asDict() for r in rows), key=lambda r: r["id"]) == EVOLVED[3]
    rows = read_table(spark, str(mapped_table)).collect()
    assert sorted((r.asDict() for r in rows), key=lambda r: r["c"]) == MAPPED[2]
