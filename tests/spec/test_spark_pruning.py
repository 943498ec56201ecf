"""Column pruning for the ``lakewarden`` data source (``sql_over_views``) and split sizing by the
cores Spark has: the columns a query needs reach the file reader, and the answers are those of
the query over every column."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from storage.spec.spark.pruning import needed_columns, sql_over_views
from storage.spec.spark_source import read_table, register
from tests.spec.test_spark_source import _plan, delta_orders  # noqa: F401

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def lakewarden(spark):
    register(spark)
    return spark


def _scan_columns(frame) -> list[list[str]]:
    """The columns each data-source scan of ``frame`` reads, in plan order."""
    from storage.spec.spark.pruning import _seq

    found = []

    def walk(node):
        if node.getClass().getSimpleName() == "DataSourceV2ScanRelation":
            found.append(sorted(a.name() for a in _seq(node.output())))
        for child in _seq(node.children()):
            walk(child)
        for subquery in _seq(node.subqueries()):
            walk(subquery)

    walk(frame._jdf.queryExecution().optimizedPlan())
    return found


def _views(spark, via="source", **locations):
    """Views through the data source by default (``via="source"``: read_table's own default for
    these tables is Spark's parquet reader, which Spark prunes itself)."""
    return {
        view: (lambda columns, p=path: read_table(spark, str(p), columns=columns, via=via))
        for view, path in locations.items()
    }


def _full(spark, sql: str, **locations):
    """The query over views that read every column (no pruning)."""
    for view, path in locations.items():
        read_table(spark, str(path), via="source").createOrReplaceTempView(view)
    return spark.sql(sql)


def _orders(path: Path) -> pa.Table:
    return pa.Table.from_batches(list(pa.RecordBatchReader.from_stream(DeltaTable(str(path)).scan())))


def test_a_group_by_reads_only_its_columns_and_answers_as_the_full_read(lakewarden, delta_orders):  # noqa: F811
    sql = "SELECT region, count(DISTINCT id) AS ids, sum(amount) AS amount FROM t GROUP BY region"

    frame = sql_over_views(lakewarden, sql, _views(lakewarden, t=delta_orders))

    assert _scan_columns(frame) == [["amount", "id", "region"]]
    got = {r.region: (r.ids, r.amount) for r in frame.collect()}
    assert got == {r.region: (r.ids, r.amount) for r in _full(lakewarden, sql, t=delta_orders).collect()}
    rows = _orders(delta_orders).to_pylist()
    assert got["eu"] == (
        len({r["id"] for r in rows if r["region"] == "eu"}),
        sum(r["amount"] for r in rows if r["region"] == "eu"),
    )


def test_a_filter_pushed_into_the_scan_keeps_its_column(lakewarden, delta_orders):  # noqa: F811
    sql = "SELECT sum(amount) AS amount FROM t WHERE id >= 100 AND note LIKE 'note-1%'"

    frame = sql_over_views(lakewarden, sql, _views(lakewarden, t=delta_orders))

    assert _scan_columns(frame) == [["amount", "id", "note"]]
    rows = _orders(delta_orders).to_pylist()
    expected = sum(
        r["amount"]
        for r in rows
        if r["id"] >= 100 and r["note"] is not None and r["note"].startswith("note-1")
    )
    assert expected > 0
    assert frame.collect()[0].amount == expected


def test_a_count_reads_one_column_and_counts_every_live_row(lakewarden, delta_orders):  # noqa: F811
    frame = sql_over_views(lakewarden, "SELECT count(*) AS n FROM t", _views(lakewarden, t=delta_orders))

    assert [len(columns) for columns in _scan_columns(frame)] == [1]
    assert frame.collect()[0].n == _orders(delta_orders).num_rows == 100


def test_select_star_reads_every_column(lakewarden, delta_orders):  # noqa: F811
    sql = "SELECT * FROM t WHERE id = 42"

    frame = sql_over_views(lakewarden, sql, _views(lakewarden, t=delta_orders))

    assert _scan_columns(frame) == [["amount", "id", "note", "region", "ts"]]
    assert [r.asDict() for r in frame.collect()] == [
        r.asDict() for r in _full(lakewarden, sql, t=delta_orders).collect()
    ]


def test_a_self_join_and_a_subquery_read_the_union_of_what_each_side_needs(lakewarden, delta_orders):  # noqa: F811
    sql = (
        "SELECT a.id, b.note FROM t a JOIN t b ON a.id = b.id + 1"
        " WHERE a.amount > (SELECT avg(amount) FROM t) ORDER BY a.id"
    )

    frame = sql_over_views(lakewarden, sql, _views(lakewarden, t=delta_orders))

    assert {tuple(c) for c in _scan_columns(frame)} == {("amount", "id", "note")}
    got = [(r.id, r.note) for r in frame.collect()]
    rows = _orders(delta_orders).to_pylist()
    average = sum(r["amount"] for r in rows) / len(rows)
    notes = {r["id"]: r["note"] for r in rows}
    expected = sorted(
        (r["id"], notes[r["id"] - 1]) for r in rows if r["amount"] > average and r["id"] - 1 in notes
    )
    assert got == expected and len(got) > 10


def test_each_side_of_a_union_reads_what_it_projects(lakewarden, delta_orders):  # noqa: F811
    sql = "SELECT count(*) AS n FROM (SELECT id FROM t UNION SELECT id + 1000 FROM t)"

    frame = sql_over_views(lakewarden, sql, _views(lakewarden, t=delta_orders))

    assert frame.collect()[0].n == 200
    # each side of the union projects id: the union's own columns come from those projections
    assert _scan_columns(frame) == [["id"], ["id"]]
    # over the full view: one entry for the table (both sides read it), the union of their needs
    assert list(needed_columns(_full(lakewarden, sql, t=delta_orders)).values()) == [{"id"}]


def test_plain_parquet_views_are_left_to_spark(lakewarden, tmp_path):
    from deltalake import write_deltalake

    path = tmp_path / "plain"
    write_deltalake(
        str(path), pa.table({"id": pa.array(range(10), pa.int64()), "name": [f"n{i}" for i in range(10)]})
    )

    frame = sql_over_views(lakewarden, "SELECT sum(id) AS s FROM t", _views(lakewarden, via="auto", t=path))

    assert _scan_columns(frame) == []  # Spark's own parquet scan, which prunes by itself
    assert frame.collect()[0].s == 45


def test_a_small_table_is_split_so_that_every_core_has_work(delta_orders):  # noqa: F811
    table_schema = pa.schema([("id", pa.int64()), ("region", pa.string())])

    one = _plan(delta_orders, table_schema).partitions()
    four = _plan(delta_orders, table_schema, parallelism=4).partitions()

    assert len(one) == 1  # the whole table fits in one 128 MiB split
    assert len(four) >= 4
    files = sorted(p.file_slice.path for s in four for p in s.split.parts)
    assert files == sorted(p.file_slice.path for s in one for p in s.split.parts)  # each file once


def test_a_bad_parallelism_option_is_refused_with_its_name(delta_orders):  # noqa: F811
    with pytest.raises(ValueError, match="parallelism"):
        _plan(delta_orders, pa.schema([("id", pa.int64())]), parallelism="many")


def test_a_narrowed_read_the_query_cannot_run_on_falls_back_to_every_column(lakewarden, delta_orders, caplog):  # noqa: F811
    # a reader that narrows wrongly (drops a column the query names): the second analysis refuses
    # the query, and it runs over the full view instead of answering with a missing column
    def wrong(columns):
        narrowed = None if columns is None else ["id"]
        return read_table(lakewarden, str(delta_orders), columns=narrowed, via="source")

    frame = sql_over_views(lakewarden, "SELECT sum(amount) AS s FROM t WHERE id < 60", {"t": wrong})

    assert _scan_columns(frame) == [["amount", "id", "note", "region", "ts"]]
    assert frame.collect()[0].s == sum(r["amount"] for r in _orders(delta_orders).to_pylist() if r["id"] < 60)
    assert "column pruning refused" in caplog.text


def test_splits_come_in_even_waves_over_the_cores(tmp_path):
    from deltalake import write_deltalake

    path = tmp_path / "waves"
    for batch in range(10):  # ten files of equal size
        ids = pa.array(range(batch * 1000, batch * 1000 + 1000), pa.int64())
        write_deltalake(str(path), pa.table({"id": ids, "pad": pc.cast(ids, pa.string())}), mode="append")
    schema = pa.schema([("id", pa.int64())])
    # a split target of 3.5 files' weight: alone, splits of 3, 3, 3 and 1 file
    weight = max(p.stat().st_size for p in path.glob("*.parquet")) + 1000
    options = {"target_size": str(weight * 7 // 2), "open_file_cost": "1000"}

    alone = _plan(path, schema, **options).partitions()
    two = _plan(path, schema, parallelism=2, **options).partitions()

    assert [len(s.split.parts) for s in alone] == [3, 3, 3, 1]
    sizes = [len(s.split.parts) for s in two]
    assert len(sizes) >= 2 and max(sizes) - min(sizes) <= 1  # no split of one file left over
    assert sorted(p.file_slice.path for s in two for p in s.split.parts) == sorted(
        str(p) for p in path.glob("*.parquet")
    )
