"""The DuckDB query engine: the same rows as the Spark engine over real tables (an Iceberg table with
position deletes written by pyiceberg, a Delta table with deletion vectors written by Databricks, a
Delta table written by delta-rs, time travel), the SQL policy on DuckDB, cancel, and engine=auto."""

from __future__ import annotations

import dataclasses
import shutil
import threading

import pytest

from processes import queries
from processes.models import Query, QueryEngine, QueryStatus
from processes.query_duckdb import DuckDbRun, arrow_rows, duckdb_sql, scan_estimate
from storage import services
from storage.cache import query_plan
from storage.errors import InvalidInput
from tests.console.tables import write_delta_table
from tests.processes.test_iceberg_deletes import commit_row_delta, data_files, position_deletes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.spark]

# Iceberg "events" (ids 0..19 in 4 files; ids 0, 2, 6, 19 deleted by position deletes), Delta "orders"
# (ids 0..29, UTC timestamps), Delta "dv" (values 1..8 after its deletion vector).
CORPUS = [
    "select id, region, name, amount from events where region = 'eu' and amount > 1 order by id",
    "select region, count(*) as n, sum(amount) as total, min(ts) as first from events group by region "
    "order by region",
    "select count(distinct region) as regions, count(distinct name) as names, count(name) as named "
    "from events",
    "select e.id, e.amount, o.ts from events e join orders o on e.id = o.id order by e.id",
    "select id, amount from events order by amount desc, id limit 5",
    "select name, id from events order by name, id",  # nulls first, as Spark orders them
    "select sum(amount * 2) as doubled, max(amount) - min(amount) as spread from events where id < 12",
    "select o.region, date_trunc('DAY', o.ts) as day, count(*) as n from orders o group by 1, 2 "
    "order by 1, 2",
    "select cast(ts as date) as d, count(*) as n from events group by 1 order by 1",
    "select value, value * value as sq from dv where value % 2 = 0 order by value",
    "select region, count(*) as n from events where name is null or id > 15 group by region order by region",
]


@pytest.fixture
def tables(make_iceberg, warehouse, external_tables):
    """(events console table, its snapshot before the deletes) with orders and dv registered too."""
    events, iceberg = make_iceberg(files=4, rows_per_file=5)
    before = str(iceberg.current_snapshot().snapshot_id)
    files = list(data_files(iceberg))
    commit_row_delta(iceberg, [position_deletes(iceberg, {files[0]: [0, 2], files[1]: [1]})])
    commit_row_delta(iceberg, [position_deletes(iceberg, {files[3]: [4]})])
    orders = write_delta_table(warehouse / "orders", commits=3, rows_per_commit=10)
    services.table_register(location=str(orders))
    shutil.copytree(external_tables / "delta" / "table-with-dv-small", warehouse / "dv")
    services.table_register(location=str(warehouse / "dv"))
    return events, before


def _events_sql(sql: str, events) -> str:
    return sql.replace(" events", f" {events.identifier}")


def _run(spark, sql: str, engine: str, **options) -> Query:
    query = queries.query_submit(sql=sql, engine=engine, cache=False, **options)
    queries.query_run(query_id=query.pk, spark=spark)
    query.refresh_from_db()
    return query


def test_the_corpus_gives_the_same_rows_on_duckdb_and_spark(tables, spark):
    events, _ = tables
    for sql in CORPUS:
        sql = _events_sql(sql, events)
        on_spark, on_duckdb = _run(spark, sql, "spark"), _run(spark, sql, "duckdb")
        assert on_spark.status == on_duckdb.status == QueryStatus.SUCCESS, (
            sql,
            on_spark.error,
            on_duckdb.error,
        )
        assert (on_spark.engine_used, on_duckdb.engine_used) == ("spark", "duckdb")
        assert on_duckdb.rows == on_spark.rows, sql
        assert on_duckdb.columns == on_spark.columns and on_duckdb.total_rows == on_spark.total_rows, sql
        assert on_spark.rows, f"the corpus query returns no row: {sql}"


def test_deletes_and_deletion_vectors_are_applied_on_duckdb(tables, spark):
    events, _ = tables
    ids = _run(spark, f"select id from {events.identifier} order by id", "duckdb")
    assert [row[0] for row in ids.rows] == [i for i in range(20) if i not in (0, 2, 6, 19)]
    values = _run(spark, "select value from dv order by value", "duckdb")
    assert values.rows == [[v] for v in range(1, 9)]
    joined = _run(spark, f"select count(*) from {events.identifier} e join orders o on e.id = o.id", "duckdb")
    assert joined.rows == [[16]]


def test_time_travel_reads_the_older_snapshot_alike_on_both_engines(tables, spark):
    events, before = tables
    plan = query_plan(f"select id, amount from {events.identifier} order by id")
    old = dataclasses.replace(plan, tables=(dataclasses.replace(plan.tables[0], instant=before),))
    estimate = scan_estimate(old)
    run = DuckDbRun()
    try:
        run.register(old, estimate)
        table, total = run.fetch(duckdb_sql(old, estimate), 100, whole=False)
    finally:
        run.close()
    on_duckdb = arrow_rows(table, 100)
    on_spark = queries._collect(queries._compute(spark, old), 100)[0]
    assert total == 20 and [row[0] for row in on_duckdb] == list(range(20))
    assert on_duckdb == on_spark


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("select * from read_parquet('/etc/passwd')", "readparquet"),
        ("select read_csv('/etc/passwd') from orders", "read_csv"),
        ("ATTACH '/tmp/other.db' AS other", "ATTACH statements are not allowed"),
        ("COPY (select * from orders) TO '/tmp/out.csv'", "COPY statements are not allowed"),
        ("INSTALL httpfs", "INSTALL statements are not allowed"),
        ("PRAGMA version", "PRAGMA statements are not allowed"),
    ],
)
def test_the_sql_policy_refuses_file_access_and_duckdb_statements(tables, sql, named):
    with pytest.raises(InvalidInput) as refused:
        queries.query_submit(sql=sql, engine="duckdb")
    assert named in str(refused.value) and not Query.objects.exists()


def test_duckdb_external_access_is_off_even_for_sql_that_passed_the_policy(tables):
    plan = query_plan("select count(*) from orders")
    run = DuckDbRun()
    try:
        run.register(plan, scan_estimate(plan))
        with pytest.raises(Exception, match="disabled by configuration"):
            run.connection.sql("select * from read_csv('/etc/passwd')").fetchall()
        with pytest.raises(Exception, match="locked"):
            run.connection.execute("SET enable_external_access = true")
    finally:
        run.close()


def test_an_unknown_engine_is_refused_and_nothing_is_stored(tables):
    with pytest.raises(InvalidInput, match="engine must be one of auto, spark, duckdb"):
        queries.query_submit(sql="select 1 from orders", engine="presto")
    assert not Query.objects.exists()


def test_cancelling_a_long_duckdb_query_ends_it_canceled(tables, spark):
    sql = "select sum(a.id * b.id + c.id - d.id) from orders a, orders b, orders c, orders d, orders e, orders f"
    query = queries.query_submit(sql=sql, engine="duckdb", cache=False)
    worker = threading.Thread(target=queries.query_run, kwargs={"query_id": query.pk, "spark": spark})
    worker.start()
    _wait_for(lambda: Query.objects.filter(pk=query.pk, status=QueryStatus.RUNNING).exists(), worker)
    queries.query_cancel(query=Query.objects.get(pk=query.pk))
    worker.join()  # returns only once the interrupt stopped DuckDB
    query.refresh_from_db()
    assert query.status == QueryStatus.CANCELED and query.error == "cancelled"
    assert query.engine_used == "duckdb"


def _wait_for(condition, worker: threading.Thread) -> None:
    while not condition():
        assert worker.is_alive() or condition(), "the query ended before it was seen running"
        worker.join(0.05)


def test_auto_picks_duckdb_for_a_small_table_and_spark_above_the_limit(tables, spark, settings):
    settings.LAKEWARDEN_DUCKDB_MAX_SCAN_BYTES = 10**9
    small = _run(spark, "select count(*) from dv", QueryEngine.AUTO)
    settings.LAKEWARDEN_DUCKDB_MAX_SCAN_BYTES = 100
    large = _run(spark, "select count(*) from dv", QueryEngine.AUTO)
    assert (small.engine_used, large.engine_used) == ("duckdb", "spark")
    assert small.engine_reason.startswith("auto: scans") and "at most the DuckDB limit" in small.engine_reason
    assert "above the DuckDB limit of 0.0 MiB" in large.engine_reason
    assert small.rows == large.rows == [[8]]


def test_a_cached_duckdb_result_is_reused_and_invalidated_like_sparks(tables, spark, warehouse):
    from deltalake import write_deltalake

    sql = "select region, count(*) as n, min(ts) as first from orders group by region order by region"
    first = queries.query_submit(sql=sql, engine="duckdb")
    queries.query_run(query_id=first.pk, spark=spark)
    second = queries.query_submit(sql=sql, engine="spark")
    queries.query_run(query_id=second.pk, spark=spark)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == second.status == QueryStatus.SUCCESS, (first.error, second.error)
    assert not first.served_from_cache and second.served_from_cache and first.cached_result_id
    assert second.rows == first.rows == [["eu", 15, "2024-01-01T01:00:00"], ["us", 15, "2024-01-01T00:00:00"]]
    write_deltalake(str(warehouse / "orders"), _one_more_order(), mode="append")
    third = queries.query_submit(sql=sql, engine="duckdb")
    queries.query_run(query_id=third.pk, spark=spark)
    third.refresh_from_db()
    assert not third.served_from_cache and third.rows[0][1] == 16


def _one_more_order():
    import datetime as dt

    import pyarrow as pa

    return pa.table(
        {
            "id": pa.array([99], pa.int64()),
            "region": pa.array(["eu"]),
            "ts": pa.array([dt.datetime(2025, 1, 1, tzinfo=dt.UTC)], pa.timestamp("us", "UTC")),
        }
    )


def test_duckdb_reads_only_the_columns_the_query_names(tables):
    plan = query_plan("select region, count(*) as n from orders o where o.id > 3 group by region")
    estimate = scan_estimate(plan)
    sql = duckdb_sql(plan, estimate)
    run = DuckDbRun()
    try:
        run.register(plan, estimate, sql)
        loaded = run.connection.sql(f"select * from {plan.tables[0].view} limit 0").columns
        table, _ = run.fetch(sql, 10, whole=False)
    finally:
        run.close()
    assert loaded == ["id", "region"]  # ts is never read
    assert sorted(arrow_rows(table, 10)) == [["eu", 13], ["us", 13]]


def test_fetch_past_the_row_limit_counts_every_row():
    """Beyond ``row_limit`` rows the total is counted (a DuckDB 2 relation has no fetchone())."""
    import pyarrow as pa

    run = DuckDbRun()
    try:
        run.register_arrow({"numbers": pa.table({"x": pa.array(range(50), pa.int64())})})
        table, total = run.fetch("select x from numbers", 10, whole=False)
    finally:
        run.close()
    assert (table.num_rows, total) == (11, 50)


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_order_by_holds_on_either_engine_and_in_its_cached_result(tables, spark, engine):
    """ORDER BY is the answer's order, and stays it when the stored result is served."""
    sql = "select id % 7 as k, count(*) as n from orders group by id % 7 order by k desc"
    first = queries.query_submit(sql=sql, engine=engine)
    queries.query_run(query_id=first.pk, spark=spark)
    again = queries.query_submit(sql=sql, engine=engine)
    queries.query_run(query_id=again.pk, spark=spark)
    first.refresh_from_db()
    again.refresh_from_db()
    assert first.status == again.status == QueryStatus.SUCCESS, (first.error, again.error)
    assert not first.served_from_cache and again.served_from_cache
    assert [row[0] for row in first.rows] == [6, 5, 4, 3, 2, 1, 0]
    assert again.rows == first.rows
