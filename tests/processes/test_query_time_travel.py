"""Time travel and sampling in the workbench: ``VERSION AS OF`` / ``TIMESTAMP AS OF`` read that
instant of the table on every engine (they read the current rows before), one query may read two
instants of a table, an unknown instant is a 400 naming those that exist; ``TABLESAMPLE``
samples (it was dropped) and runs on Spark, the engine DuckDB's answers are compared with."""

from __future__ import annotations

import re

import pytest

from processes import queries
from processes.models import Query, QueryStatus
from storage import services
from storage.cache import query_plan
from storage.errors import InvalidInput
from tests.console.tables import write_delta_table
from tests.processes.conftest import append_files, rows

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.spark]


@pytest.fixture
def orders(warehouse):
    """A Delta table of three commits of 10 rows (versions 0, 1, 2)."""
    path = write_delta_table(warehouse / "orders", commits=3, rows_per_commit=10)
    return services.table_register(location=str(path))


def _run(spark, sql: str, engine: str, **options) -> Query:
    query = queries.query_submit(sql=sql, engine=engine, cache=False, **options)
    queries.query_run(query_id=query.pk, spark=spark)
    query.refresh_from_db()
    assert query.status == QueryStatus.SUCCESS, query.error
    return query


@pytest.mark.parametrize("engine", ["spark", "duckdb", "auto"])
def test_version_as_of_the_oldest_version_reads_that_version(orders, spark, engine):
    old = _run(spark, "select count(*) as n, max(id) as top from orders version as of 0", engine)
    now = _run(spark, "select count(*) as n, max(id) as top from orders", engine)

    assert old.rows == [[10, 9]] and now.rows == [[30, 29]]
    assert old.engine_used == ("spark" if engine == "spark" else "duckdb")


def test_an_iceberg_snapshot_id_reads_that_snapshot(make_iceberg, spark):
    events, iceberg = make_iceberg(files=2, rows_per_file=20)
    oldest = iceberg.current_snapshot().snapshot_id
    append_files(iceberg, [rows(1000, 3704)])
    sql = f"select count(*) as n from {events.identifier} version as of {oldest}"

    assert _run(spark, sql, "spark").rows == _run(spark, sql, "duckdb").rows == [[40]]
    assert _run(spark, f"select count(*) as n from {events.identifier}", "auto").rows == [[3744]]


def test_timestamp_as_of_reads_the_version_committed_by_then(orders, spark):
    instants = services.table_open(orders).timeline().instants()
    moment = instants[1].timestamp.replace(tzinfo=None).isoformat(sep=" ")
    sql = f"select count(*) as n from orders timestamp as of '{moment}'"

    assert _run(spark, sql, "spark").rows == _run(spark, sql, "duckdb").rows == [[20]]


@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_one_query_reads_two_versions_of_a_table(orders, spark, engine):
    sql = (
        "select count(*) as n, count(v.id) as in_v1 from orders o "
        "left join orders version as of 1 v on o.id = v.id"
    )
    plan = query_plan(sql)

    assert sorted(p.instant for p in plan.tables) == ["1", "2"]
    assert len({p.view for p in plan.tables}) == 2
    assert _run(spark, sql, engine).rows == [[30, 20]]


def test_time_travel_and_the_current_table_are_cached_apart(orders, spark):
    old = query_plan("select count(*) from orders version as of 0")
    now = query_plan("select count(*) from orders")

    assert old.fingerprint != now.fingerprint
    assert [(p.instant, p.current) for p in old.tables] == [("0", "2")]


@pytest.mark.parametrize(
    ("clause", "message"),
    [
        (
            "version as of 7",
            "orders: no version 7 in this table's timeline; its versions, oldest first: 0, 1, 2",
        ),
        ("timestamp as of '1999-01-01'", "no instant at or before 1999-01-01T00:00:00+00:00"),
        ("timestamp as of 'yesterday'", "is not a timestamp"),
        ("timestamp as of current_timestamp()", "time travel takes a literal"),
    ],
)
def test_an_instant_the_table_does_not_have_is_refused_naming_those_it_has(orders, clause, message):
    with pytest.raises(InvalidInput, match=re.escape(message)):
        queries.query_submit(sql=f"select count(*) from orders {clause}", engine="auto")
    assert not Query.objects.exists()


@pytest.fixture
def thousand(warehouse):
    path = write_delta_table(warehouse / "thousand", commits=1, rows_per_commit=1000)
    return services.table_register(location=str(path))


def test_tablesample_samples_on_spark(thousand, spark):
    percent = _run(spark, "select count(*) as n from thousand tablesample (10 percent)", "spark")
    limited = _run(spark, "select count(*) as n from thousand tablesample (5 rows) as t", "spark")
    everything = _run(spark, "select count(*) as n from thousand", "spark")

    assert 30 <= percent.rows[0][0] <= 250  # 10 % of 1,000: mean 100, deviation about 9.5
    assert limited.rows == [[5]] and everything.rows == [[1000]]


def test_tablesample_runs_on_spark_under_auto_and_is_refused_on_duckdb(thousand, spark):
    sampled = _run(spark, "select count(*) as n from thousand tablesample (5 rows)", "auto")

    assert sampled.engine_used == "spark" and "TABLESAMPLE" in sampled.engine_reason
    assert sampled.rows == [[5]]
    with pytest.raises(
        InvalidInput, match="DuckDB would not answer this query as Spark does: TABLESAMPLE"
    ) as refused:
        queries.query_submit(sql="select count(*) from thousand tablesample (5 rows)", engine="duckdb")
    assert refused.value.field == "engine"


def test_tablesample_after_the_alias_is_refused_rather_than_dropped(thousand):
    with pytest.raises(InvalidInput, match="TABLESAMPLE goes right after the table name, before its alias"):
        queries.query_submit(sql="select count(*) from thousand as t tablesample (5 rows)", engine="spark")
