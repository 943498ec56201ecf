"""The query workbench under teams (issue 32): a query naming a table the user may not read is
refused before anything is read, on DuckDB and on Spark (real engines), however the table is
reached (a join, a CTE body, a sub-query, an alias, a set operation); a CTE's name shadows a
table's; a cached result is served only to users who may read all its sources; admins and
installations without teams are unaffected."""

from __future__ import annotations

import pytest

from console.teams.models import Team
from processes import queries
from processes.models import Query, QueryStatus
from storage.access import tables_readable
from storage.cache import cached_result_find, query_plan
from storage.errors import Forbidden, InvalidInput
from storage.models import CachedResult, CachedResultState
from storage.services import storage_backend_default

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.spark]

ENGINES = ["spark", "duckdb"]
#: Each reaches team B's ``b.orders`` (or ``sales.more``) from a query on team A's ``a.orders``.
REACHING_B = {
    "join": "select a.id, b.region from a.orders a join b.orders b on a.id = b.id",
    "cte": "with o as (select id from b.orders) select count(*) as n from a.orders join o using (id)",
    "subquery": "select id from a.orders where id in (select id from (select id from sales.more))",
    "alias": "select x.id from b.orders as x",
    "union": "select id from a.orders union all select id from b.orders",
    "scalar": "select (select max(id) from b.orders) as m from a.orders",
}


def _run(spark, user, sql: str, engine: str, **options) -> Query:
    query = queries.query_submit(sql=sql, engine=engine, user=user, **options)
    queries.query_run(query_id=query.pk, spark=spark)
    query.refresh_from_db()
    return query


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("shape", sorted(REACHING_B))
def test_a_team_a_user_is_refused_a_query_reaching_team_bs_table(lake, engine, shape):
    with pytest.raises(Forbidden) as refused:
        queries.query_submit(sql=REACHING_B[shape], engine=engine, user=lake.users["alice"], cache=False)
    named = "sales.more" if shape == "subquery" else "b.orders"
    assert refused.value.message.startswith(f"you may not read {named}:")
    assert refused.value.status_code == 403 and refused.value.field == "sql"
    assert "a.orders" not in refused.value.message  # only what is refused is named
    assert not Query.objects.exists()


def test_the_refusal_names_every_unreadable_table_once(lake):
    sql = "select * from b.orders join sales.more using (id) join b.orders c using (id) join a.orders using (id)"
    with pytest.raises(Forbidden, match=r"^you may not read b\.orders, sales\.more: "):
        query_plan(sql, readable=tables_readable(lake.users["alice"]))


def test_an_unknown_table_lists_only_the_tables_the_user_may_read(lake):
    with pytest.raises(InvalidInput) as unknown:
        query_plan("select * from nowhere", readable=tables_readable(lake.users["alice"]))
    assert unknown.value.message == "unknown table 'nowhere'; managed tables are: a.orders, a.x.nested"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_team_a_user_joins_their_own_tables_and_a_cte_shadows_bs_table(lake, spark, engine):
    alice = lake.users["alice"]
    joined = _run(
        spark,
        alice,
        "select count(*) as n, sum(o.id) as total from a.orders o join a.x.nested n on o.id = n.id",
        engine,
        cache=False,
    )
    assert (joined.status, joined.engine_used, joined.rows) == (QueryStatus.SUCCESS, engine, [[3, 3]])
    # ``loose`` is team B's table; inside this WITH the name is the CTE, which reads team A's table.
    shadowed = _run(
        spark,
        alice,
        "with loose as (select id from a.orders) select max(id) as m from loose",
        engine,
        cache=False,
    )
    assert (shadowed.status, shadowed.rows) == (QueryStatus.SUCCESS, [[2]])
    # outside the WITH's scope the same name is B's table again
    with pytest.raises(Forbidden, match=r"^you may not read loose:"):
        queries.query_submit(
            sql="select * from (with loose as (select id from a.orders) select id from loose) union all "
            "select id from loose",
            engine=engine,
            user=alice,
        )


@pytest.mark.parametrize("engine", ENGINES)
def test_the_worker_refuses_a_query_row_written_by_other_means(lake, spark, engine):
    query = Query.objects.create(
        sql=REACHING_B["join"], cache=False, row_limit=100, engine=engine, user=lake.users["alice"]
    )
    queries.query_run(query_id=query.pk, spark=spark)
    query.refresh_from_db()
    assert query.status == QueryStatus.FAILED
    assert query.error.startswith("Forbidden: you may not read b.orders:")
    assert query.rows == [] and query.engine_used == ""


@pytest.mark.parametrize("engine", ENGINES)
def test_admins_and_installations_without_teams_are_unaffected(lake, spark, engine):
    admin = _run(spark, lake.users["root"], REACHING_B["join"] + " order by a.id", engine, cache=False)
    assert (admin.status, admin.rows) == (QueryStatus.SUCCESS, [[0, "us"], [1, "eu"], [2, "us"]])
    Team.objects.all().delete()
    olga = lake.users["olga"]  # in no team: with no team defined she reads every table, as before
    for user in (olga, lake.users["alice"]):
        query = _run(spark, user, REACHING_B["union"] + " order by id", engine, cache=False)
        assert (query.status, query.rows) == (QueryStatus.SUCCESS, [[0], [0], [1], [1], [2], [2]])


def test_a_cached_result_of_team_bs_table_is_not_served_to_a_team_a_user(warehouse, lake, spark):
    sql = "select region, count(*) as n from b.orders group by region order by region"
    computed = _run(spark, lake.users["root"], sql, "spark")
    assert (computed.status, computed.served_from_cache) == (QueryStatus.SUCCESS, False)
    result = CachedResult.objects.get()
    assert result.state == CachedResultState.READY
    assert result.source_snapshots == {str(lake.tables["b1"].pk): "0"}

    with pytest.raises(Forbidden, match=r"^you may not read b\.orders:"):
        queries.query_submit(sql=sql, user=lake.users["alice"])
    # the cache itself refuses too, whoever plans the query: A's tables never cover B's result
    plan = query_plan(sql)
    backend = storage_backend_default()
    assert (
        cached_result_find(plan=plan, backend=backend, readable=tables_readable(lake.users["alice"])) is None
    )
    # a query row written by other means: the worker refuses it before the cache is looked at
    row = Query.objects.create(sql=sql, row_limit=100, engine="spark", user=lake.users["alice"])
    queries.query_run(query_id=row.pk, spark=spark)
    row.refresh_from_db()
    assert (row.status, row.served_from_cache, row.rows) == (QueryStatus.FAILED, False, [])
    assert CachedResult.objects.get().hits == 0

    # team B's operator may read the source: the same result is served to them
    served = _run(spark, lake.users["bob"], sql, "duckdb")
    assert (served.status, served.served_from_cache, served.rows) == (
        QueryStatus.SUCCESS,
        True,
        [["eu", 1], ["us", 2]],
    )
    assert CachedResult.objects.get().hits == 1
