"""The workbench: a query's result exported as CSV and Parquet (the whole cached result when its
storage still holds it, else the rows kept with the query), and the schema browser."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from processes import queries
from processes.models import Query, QueryStatus
from storage import services
from storage.models import CachedResult
from storage.results.plugin import StorageDescriptor
from tests.console.tables import write_delta_table

ORDERED = "select id, region from orders order by id"


@pytest.fixture
def orders(warehouse, db):
    path = write_delta_table(warehouse / "orders", commits=3, rows_per_commit=10)
    return services.table_register(location=str(path))


@pytest.fixture
def run(spark, warehouse):
    """``run(sql, **options)``: submitted and run here as a worker would, cached in a folder."""
    backend = services.storage_backend_register(
        name="scratch",
        descriptor=StorageDescriptor(type="filesystem", config={"root": str(warehouse / "cache")}),
    )

    def submit_and_run(sql: str, **options) -> Query:
        query = queries.query_submit(sql=sql, backend=backend, **options)
        queries.query_run(query_id=query.pk, spark=spark)
        query.refresh_from_db()
        assert query.status == QueryStatus.SUCCESS, query.error
        return query

    return submit_and_run


def _region(order_id: int) -> str:
    return "eu" if order_id % 2 else "us"  # tests/console/tables.py


def _body(response) -> bytes:
    return b"".join(response.streaming_content)


@pytest.mark.spark
@pytest.mark.django_db(transaction=True)
def test_the_csv_export_of_a_cached_result_holds_every_row_not_only_the_shown_ones(
    client_as, viewer, orders, run
):
    query = run(ORDERED, row_limit=5)

    response = client_as(viewer).get(f"/queries/{query.pk}/export.csv")

    assert query.truncated and len(query.rows) == 5 and query.total_rows == 30
    assert response.status_code == 200 and response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="query-{query.pk}.csv"'
    assert response["X-Lakewarden-Export"] == f"whole result: cached result {query.cached_result.name}"
    expected = "id,region\r\n" + "".join(f"{i},{_region(i)}\r\n" for i in range(30))
    assert _body(response) == expected.encode()


@pytest.mark.spark
@pytest.mark.django_db(transaction=True)
def test_the_parquet_export_reads_back_to_the_same_rows(client_as, viewer, orders, run):
    query = run(ORDERED, row_limit=5)

    response = client_as(viewer).get(f"/queries/{query.pk}/export.parquet")

    assert response.status_code == 200 and response["Content-Type"] == "application/vnd.apache.parquet"
    table = pq.read_table(io.BytesIO(_body(response)))
    assert table.column_names == ["id", "region"]
    assert table.to_pylist() == [{"id": i, "region": _region(i)} for i in range(30)]


@pytest.mark.spark
@pytest.mark.django_db(transaction=True)
def test_with_its_cached_result_gone_the_export_holds_the_kept_rows_and_says_so(
    client_as, viewer, orders, run
):
    query = run(ORDERED, row_limit=5)
    shutil.rmtree(Path(CachedResult.objects.get().properties["path"]))

    csv_answer = client_as(viewer).get(f"/queries/{query.pk}/export.csv")
    parquet_answer = client_as(viewer).get(f"/queries/{query.pk}/export.parquet")

    assert csv_answer["X-Lakewarden-Export"] == "partial: the first 5 rows kept with the query"
    assert (
        _body(csv_answer) == ("id,region\r\n" + "".join(f"{i},{_region(i)}\r\n" for i in range(5))).encode()
    )
    rows = pq.read_table(io.BytesIO(_body(parquet_answer))).to_pylist()
    assert rows == [{"id": i, "region": _region(i)} for i in range(5)]


@pytest.mark.spark
@pytest.mark.django_db(transaction=True)
def test_an_uncached_query_exports_its_kept_rows_with_nulls_empty(client_as, viewer, orders, run):
    query = run(
        "select region, count(*) as n, cast(null as string) as nothing from orders group by region order by region",
        cache=False,
    )

    response = client_as(viewer).get(f"/queries/{query.pk}/export.csv")

    assert response["X-Lakewarden-Export"] == "whole result: the rows kept with the query"
    assert _body(response) == b"region,n,nothing\r\neu,15,\r\nus,15,\r\n"


@pytest.mark.django_db
def test_a_query_without_a_result_cannot_be_exported_and_says_why(client_as, viewer, orders):
    pending = Query.objects.create(sql="select 1", status=QueryStatus.PENDING)
    failed = Query.objects.create(sql="select 1", status=QueryStatus.FAILED, error="boom")
    bare = Query.objects.create(sql="select 1", status=QueryStatus.SUCCESS, columns=[], rows=[])
    client = client_as(viewer)

    answers = {
        "pending": client.get(f"/queries/{pending.pk}/export.csv"),
        "failed": client.get(f"/queries/{failed.pk}/export.parquet"),
        "bare": client.get(f"/queries/{bare.pk}/export.csv"),
        "format": client.get(f"/queries/{bare.pk}/export.xlsx"),
    }

    assert {name: answer.status_code for name, answer in answers.items()} == {
        "pending": 409,
        "failed": 409,
        "bare": 409,
        "format": 400,
    }
    text = {name: answer.content.decode() for name, answer in answers.items()}
    assert (
        f"query #{pending.pk} is PENDING; only a successful query&#x27;s result can be exported"
        in text["pending"]
    )
    assert f"query #{bare.pk} kept no rows and its cached result is gone" in text["bare"]
    assert "export format must be csv or parquet, not &#x27;xlsx&#x27;" in text["format"]


@pytest.mark.django_db
def test_the_schema_browser_lists_tables_and_their_columns_with_types(client_as, operator, orders, warehouse):
    other = services.table_register(location=str(write_delta_table(warehouse / "returns", commits=1)))
    client = client_as(operator)

    page = client.get("/queries/").content.decode()
    found = client.get("/queries/tables/", {"tables": "RET"}).content.decode()
    columns = client.get(f"/queries/tables/{orders.pk}/columns/").content.decode()

    assert 'data-insert="orders"' in page and 'data-insert="returns"' in page
    assert "<kbd>Ctrl</kbd>+<kbd>Enter</kbd>" in page
    assert 'data-insert="returns"' in found and 'data-insert="orders"' not in found
    assert f"/queries/tables/{other.pk}/columns/" in found
    names = re.findall(r'data-insert="([^"]+)"[^>]*>[^<]*</button><span class="type">([^<]+)<', columns)
    assert names == [("id", "int64"), ("region", "string"), ("ts", "timestamp[us, tz=UTC]")]
    assert client.get("/queries/tables/999999/columns/").status_code == 404
    assert client.get("/queries/tables/", {"tables": "a\x00b"}).status_code == 400
