"""The engine choice through the API and the console workbench: accepted, stored, shown, refused
when unknown (nothing stored)."""

from __future__ import annotations

import pytest

from processes.models import Query
from storage import services
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


@pytest.fixture
def orders(warehouse):
    return services.table_register(location=str(write_delta_table(warehouse / "orders", commits=1)))


def test_the_api_accepts_an_engine_and_defaults_to_auto(api_as, operator, orders):
    chosen = api_as(operator).post(
        "/api/v1/queries/", {"sql": "select count(*) from orders", "engine": "duckdb"}, format="json"
    )
    default = api_as(operator).post("/api/v1/queries/", {"sql": "select count(*) from orders"}, format="json")

    assert chosen.status_code == default.status_code == 201
    assert chosen.json()["engine"] == "duckdb" and default.json()["engine"] == "auto"
    assert chosen.json()["engine_used"] == "" and "engine_reason" in chosen.json()
    assert sorted(Query.objects.values_list("engine", flat=True)) == ["auto", "duckdb"]


def test_the_api_refuses_an_unknown_engine_with_a_400_on_the_field(api_as, operator, orders):
    answer = api_as(operator).post(
        "/api/v1/queries/", {"sql": "select count(*) from orders", "engine": "presto"}, format="json"
    )

    assert answer.status_code == 400 and answer.json()["field"] == "engine"
    assert not Query.objects.exists()


def test_the_workbench_offers_the_engines_and_stores_the_choice(client_as, operator, orders):
    client = client_as(operator)
    page = client.get("/queries/").content.decode()
    answer = client.post("/queries/run/", {"sql": "select count(*) from orders", "engine": "spark"})
    default = client.post("/queries/run/", {"sql": "select count(*) from orders"})

    assert 'name="engine"' in page and '<option value="auto" selected>' in page and "DuckDB" in page
    assert answer.status_code == default.status_code == 200
    assert list(Query.objects.order_by("pk").values_list("engine", flat=True)) == ["spark", "auto"]


def test_the_api_and_workbench_refuse_on_duckdb_what_duckdb_would_answer_otherwise(
    api_as, client_as, operator, orders
):
    sql = "select conv(region, 16, 10) from orders"
    answer = api_as(operator).post("/api/v1/queries/", {"sql": sql, "engine": "duckdb"}, format="json")
    page = client_as(operator).post("/queries/run/", {"sql": sql, "engine": "duckdb"})
    auto = api_as(operator).post("/api/v1/queries/", {"sql": sql, "engine": "auto"}, format="json")

    assert answer.status_code == 400 and answer.json()["field"] == "engine"
    assert "DuckDB would not answer this query as Spark does: the function conv" in answer.json()["error"]
    assert page.status_code == 400 and "the function conv" in page.content.decode()
    assert auto.status_code == 201 and list(Query.objects.values_list("engine", flat=True)) == ["auto"]
