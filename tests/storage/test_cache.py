"""Cached query results: computed once, reused, invalidated by a new snapshot, recovered when the
stored data vanishes, evicted least-recently-used under a quota."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from processes import queries
from processes.models import Query, QueryStatus
from storage import services
from storage import services as console_services
from storage.errors import InvalidInput
from storage.models import CachedResult, CachedResultState, StorageBackend, StorageSource
from storage.results.plugin import StorageDescriptor
from tests.console.tables import write_delta_table

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.spark]

AGGREGATE = "select region, count(*) as n, sum(id) as total from orders group by region order by region"


@pytest.fixture
def orders(warehouse):
    path = write_delta_table(warehouse / "orders", commits=3, rows_per_commit=10)
    return console_services.table_register(location=str(path))


@pytest.fixture
def run(spark):
    """``run(sql, **options)`` submits a query and runs it here, as a worker would."""

    def submit_and_run(sql: str, **options) -> Query:
        query = queries.query_submit(sql=sql, **options)
        queries.query_run(query_id=query.pk, spark=spark)
        query.refresh_from_db()
        return query

    return submit_and_run


def _result_folder(result: CachedResult) -> Path:
    return Path(result.properties["path"])


def test_the_second_run_is_served_from_the_cache_with_the_same_rows(orders, run):
    first = run(AGGREGATE)
    second = run(AGGREGATE.replace("select", "SELECT"))  # the same query, written differently

    assert first.status == QueryStatus.SUCCESS and not first.served_from_cache
    assert second.status == QueryStatus.SUCCESS and second.served_from_cache
    assert second.rows == first.rows == [["eu", 15, 225], ["us", 15, 210]]
    result = CachedResult.objects.get()
    assert result.state == CachedResultState.READY and result.hits == 1 and result.row_count == 2
    assert result.size_bytes > 0 and _result_folder(result).is_dir()
    assert result.source_snapshots == {str(orders.pk): "2"}


def test_a_query_without_cache_stores_nothing(orders, run):
    query = run(AGGREGATE, cache=False)

    assert query.rows and not query.served_from_cache
    assert CachedResult.objects.count() == 0


def test_a_new_append_invalidates_the_result_and_the_next_run_recomputes(orders, run):
    run(AGGREGATE)
    old = CachedResult.objects.get()
    write_delta_table(Path(orders.location), commits=1, rows_per_commit=10)

    again = run(AGGREGATE)

    old.refresh_from_db()
    assert old.state == CachedResultState.CLEANED
    assert "new snapshot" in old.state_reason or "moved" in old.state_reason
    assert not _result_folder(old).exists()  # the cleanup hook reclaimed the space
    assert not again.served_from_cache
    assert sum(row[1] for row in again.rows) == 40
    assert CachedResult.objects.get(state=CachedResultState.READY).source_snapshots == {str(orders.pk): "3"}


def test_refreshing_a_table_that_moved_invalidates_its_results(orders, run):
    run(AGGREGATE)
    write_delta_table(Path(orders.location), commits=1)

    console_services.table_refresh(table=orders)

    assert CachedResult.objects.get().state == CachedResultState.CLEANED


def test_stored_data_that_vanished_is_recomputed_once_transparently(orders, run):
    first = run(AGGREGATE)
    shutil.rmtree(_result_folder(CachedResult.objects.get()))

    second = run(AGGREGATE)
    third = run(AGGREGATE)

    assert second.status == QueryStatus.SUCCESS and not second.served_from_cache
    assert second.rows == first.rows
    assert third.served_from_cache and third.rows == first.rows
    states = sorted(CachedResult.objects.values_list("state", flat=True))
    assert states == [CachedResultState.CLEANED, CachedResultState.READY]


def test_least_recently_used_results_are_evicted_over_the_quota(orders, run, warehouse):
    backend = services.storage_backend_register(
        name="small",
        descriptor=StorageDescriptor(type="filesystem", config={"root": str(warehouse / "small")}),
    )
    queries = [f"select id from orders where id < {limit}" for limit in (5, 10, 15)]
    run(queries[0], backend=backend)
    one_result = CachedResult.objects.get().size_bytes
    services.storage_backend_update(backend=backend, quota_bytes=int(one_result * 2.5))
    run(queries[1], backend=backend)
    run(queries[0], backend=backend)  # a hit: the first result is now the most recently used
    run(queries[2], backend=backend)

    states = {r.sql.split("< ")[1]: r.state for r in CachedResult.objects.all()}
    assert states == {
        "5": CachedResultState.READY,
        "10": CachedResultState.CLEANED,
        "15": CachedResultState.READY,
    }
    evicted = CachedResult.objects.get(state=CachedResultState.CLEANED)
    assert "quota" in evicted.state_reason and not _result_folder(evicted).exists()


def test_a_result_larger_than_the_row_limit_says_so_and_keeps_the_first_rows(orders, run):
    query = run("select id from orders order by id", row_limit=7)

    assert query.truncated and query.total_rows == 30
    assert [row[0] for row in query.rows] == list(range(7))


def test_invalidate_and_drop_reclaim_the_space(orders, run):
    run(AGGREGATE)
    result = CachedResult.objects.get()

    services.cached_result_invalidate(result=result)
    assert not _result_folder(result).exists()
    services.cached_result_drop(result=CachedResult.objects.get())
    assert CachedResult.objects.count() == 0


def test_a_query_naming_a_catalog_identifier_reads_the_iceberg_table(warehouse, run):
    from tests.console.tables import write_iceberg_table

    catalog = console_services.catalog_create(
        name="lake", kind="iceberg_sql", properties={"warehouse": warehouse.as_uri()}
    )
    import uuid

    identifier = f"ns_{uuid.uuid4().hex[:6]}.events"
    write_iceberg_table(console_services.iceberg_catalog(catalog), identifier, commits=3)
    console_services.table_register(catalog=catalog, identifier=identifier)

    query = run(f"select count(*) as n, max(id) as top from {identifier}")

    assert query.rows == [[30, 29]]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("selec region from orders", "does not parse"),
        ("select * from nowhere", "unknown table 'nowhere'"),
        ("drop table orders", "only queries"),
        ("select 1; select 2", "one statement"),
        ("", "empty"),
        ("select 1", "reads no managed table"),
    ],
)
def test_bad_sql_is_refused_before_anything_runs(orders, sql, message):
    with pytest.raises(InvalidInput, match=message):
        queries.query_submit(sql=sql)
    assert Query.objects.count() == 0


def test_ctes_are_not_mistaken_for_tables(orders, run):
    query = run("with eu as (select * from orders where region = 'eu') select count(*) from eu")

    assert query.rows == [[15]]


def test_a_row_limit_beyond_the_display_limit_is_refused(orders, settings):
    settings.LAKEWARDEN_QUERY_ROW_LIMIT = 100

    with pytest.raises(InvalidInput, match="at most 100"):
        queries.query_submit(sql=AGGREGATE, row_limit=5000)


def test_cancelling_a_pending_query_stops_it_before_it_runs(orders, spark):
    query = queries.query_submit(sql=AGGREGATE)

    queries.query_cancel(query=query)
    queries.query_run(query_id=query.pk, spark=spark)

    query.refresh_from_db()
    assert query.status == QueryStatus.CANCELED and query.rows == []


def test_code_yaml_and_console_registration_make_the_same_backend(warehouse, tmp_path, admin_user, client_as):
    from django.core.management import call_command

    root = str(warehouse / "cache")
    in_code = services.storage_backend_register(
        name="from-code",
        descriptor=StorageDescriptor().with_type("filesystem").with_config("root", root),
        source=StorageSource.CODE,
    )
    yaml_file = tmp_path / "storage.yaml"
    yaml_file.write_text(f"intermediate-result-storage:\n  type: filesystem\n  config:\n    root: {root}\n")
    call_command("lakewarden_storage", "from-yaml", str(yaml_file))
    client_as(admin_user).post(
        "/storages/new/", {"name": "from-console", "type": "filesystem", "p:filesystem:root": root}
    )

    backends = {b.name: b for b in StorageBackend.objects.all()}
    assert {(b.type, tuple(sorted(b.config.items()))) for b in backends.values()} == {
        ("filesystem", (("root", root),))
    }
    assert [backends[n].source for n in ("from-code", "from-yaml", "from-console")] == [
        "code",
        "yaml",
        "console",
    ]
    assert in_code.config == backends["from-console"].config


@pytest.mark.parametrize(
    ("storage_type", "config", "message"),
    [
        ("teleport", {}, "teleport"),
        ("filesystem", {"root": "/etc"}, "outside the allowed roots"),
        ("filesystem", {"root": 5}, "root"),
        ("filesystem", {"bogus": 1}, "bogus"),
        ("postgres", {}, "dsn"),
    ],
    ids=["unknown-type", "root-outside", "root-not-text", "unknown-key", "missing-dsn"],
)
def test_bad_storage_registrations_are_refused_and_nothing_is_stored(
    warehouse, storage_type, config, message
):
    with pytest.raises(InvalidInput, match=message):
        services.storage_backend_register(
            name="bad", descriptor=StorageDescriptor(type=storage_type, config=config)
        )
    assert StorageBackend.objects.count() == 0


def test_the_test_button_reports_a_postgres_dsn_that_does_not_connect_without_its_password(spark, warehouse):
    # Saved while it answered; the database has gone since (registration refuses one that does not answer).
    backend = StorageBackend.objects.create(
        name="pg", type="postgres", config={"dsn": "postgresql://u:hunter2@127.0.0.1:1/x"}
    )

    ok, message = services.storage_backend_test(backend=backend, spark=spark)

    assert not ok
    assert "connect" in message and "hunter2" not in message
    backend.refresh_from_db()
    assert backend.last_test_ok is False


def test_the_test_button_runs_a_round_trip_on_a_filesystem_storage(spark, warehouse):
    backend = services.storage_backend_register(
        name="fs",
        descriptor=StorageDescriptor(type="filesystem", config={"root": str(warehouse / "fs")}),
    )

    ok, message = services.storage_backend_test(backend=backend, spark=spark)

    assert ok, message
    assert not any((warehouse / "fs").iterdir())  # the test data was cleaned


@pytest.mark.parametrize("sql", ['"', "select 'unclosed from orders", "select ` from orders"])
def test_sql_the_tokenizer_rejects_is_bad_input_not_a_crash(orders, sql):
    with pytest.raises(InvalidInput, match="does not parse"):
        queries.query_submit(sql=sql)
