"""Which engine answers, end to end through query_submit and query_run: ``auto`` sends what
DuckDB would answer otherwise to Spark (saying why) and runs again on Spark what DuckDB fails;
``duckdb`` refuses it with the reason. The answers the issue found wrong now match Spark's."""

from __future__ import annotations

import pytest

from processes import queries
from processes.models import Query, QueryStatus
from storage import services
from storage.errors import InvalidInput
from tests.console.tables import write_delta_table

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.spark]


@pytest.fixture
def orders(warehouse):
    """ids 0..29, regions eu/us, hourly UTC timestamps from 2024-01-01."""
    return services.table_register(location=str(write_delta_table(warehouse / "orders", commits=3)))


def _run(spark, sql: str, engine: str) -> Query:
    query = queries.query_submit(sql=sql, engine=engine, cache=False)
    queries.query_run(query_id=query.pk, spark=spark)
    query.refresh_from_db()
    return query


@pytest.mark.parametrize(
    ("sql", "named", "rows"),
    [
        ("select substring_index('a.b.c', '.', 2) as x from orders limit 1", "substring_index", [["a.b"]]),
        ("select conv('ff', 16, 10) as x from orders limit 1", "conv", [["255"]]),
        (
            "select count(*) as n from orders lateral view outer explode(array()) e as x",
            "LATERAL VIEW",
            [[30]],
        ),
    ],
)
def test_auto_sends_what_duckdb_lacks_to_spark_and_says_why(orders, spark, sql, named, rows):
    query = _run(spark, sql, "auto")

    assert query.status == QueryStatus.SUCCESS, query.error
    assert query.engine_used == "spark" and named in query.engine_reason
    assert query.rows == rows


def test_duckdb_refuses_at_submission_what_it_would_answer_otherwise(orders):
    with pytest.raises(
        InvalidInput, match="DuckDB would not answer this query as Spark does: the function conv"
    ):
        queries.query_submit(sql="select conv(region, 16, 10) from orders", engine="duckdb")
    assert not Query.objects.exists()


def test_duckdb_refuses_at_run_time_what_only_types_tell(orders, spark):
    query = _run(spark, "select count(*) as n from orders where id = '1'", "duckdb")

    assert query.status == QueryStatus.FAILED
    assert "DuckDB would not answer this query as Spark does" in query.error and "id = '1'" in query.error


@pytest.mark.parametrize("engine", ["duckdb", "auto", "spark"])
def test_a_bad_cast_fails_on_every_engine_instead_of_answering_null(orders, spark, engine):
    query = _run(spark, "select cast(region as int) as x from orders", engine)

    assert query.status == QueryStatus.FAILED and query.rows == []
    if engine != "duckdb":  # auto ran it again on Spark: Spark's error stands
        assert "CAST_INVALID_INPUT" in query.error and query.engine_used == "spark"


def test_auto_runs_again_on_spark_what_duckdb_fails(orders, spark):
    query = _run(spark, "select cast('2024-02' as date) as d from orders limit 1", "auto")

    assert query.status == QueryStatus.SUCCESS, query.error
    assert query.engine_used == "spark" and query.engine_reason.startswith("auto: DuckDB failed (")
    assert query.rows == [["2024-02-01"]]


@pytest.mark.parametrize(
    ("sql", "rows"),
    [
        ("select date_add(min(cast(ts as date)), 1) as d from orders", [["2024-01-02"]]),
        ("select 1 / 0 as x from orders", None),
        (
            "select region, count(*) as n from orders group by region with rollup order by region",
            [[None, 30], ["eu", 15], ["us", 15]],
        ),
    ],
)
def test_the_answers_the_issue_found_wrong_match_spark_on_duckdb(orders, spark, sql, rows):
    on_duckdb, on_spark = _run(spark, sql, "duckdb"), _run(spark, sql, "spark")

    assert on_duckdb.engine_used == "duckdb"
    if rows is None:
        assert on_duckdb.status == on_spark.status == QueryStatus.FAILED
        assert "DIVIDE_BY_ZERO" in on_duckdb.error
    else:
        assert on_duckdb.rows == on_spark.rows == rows
