"""The query workbench refuses SQL that reaches the JVM, the environment or files (issue 10, item 1),
through the REST API and the console form, before anything is stored or run; the workbench's normal
queries are still accepted."""

from __future__ import annotations

import re

import pytest

from processes.models import Query
from storage import services as storage_services
from tests.console.tables import write_delta_table
from tests.processes.test_sql_policy import HOSTILE, NORMAL

pytestmark = pytest.mark.django_db

TABLE_NAMES = ("customers", "orders", "events", "accounts")


@pytest.fixture
def managed_tables(warehouse):
    return [
        storage_services.table_register(location=str(write_delta_table(warehouse / name, commits=1)))
        for name in TABLE_NAMES
    ]


def _plain_names(sql: str) -> str:
    """The corpus names tables ``demo.x``; tables registered by folder are called ``x``."""
    return re.sub(r"\bdemo\.(" + "|".join(TABLE_NAMES) + r")\b", r"\1", sql)


def test_the_issue_query_is_refused_with_a_400_naming_the_function(api_as, operator, managed_tables):
    answer = api_as(operator).post(
        "/api/v1/queries/",
        {"sql": "select java_method('java.lang.System','getenv','DATABASE_URL') as v from customers limit 1"},
        format="json",
    )

    assert answer.status_code == 400, answer.content
    assert answer.json()["field"] == "sql"
    assert "java_method" in answer.json()["error"]
    assert Query.objects.count() == 0


@pytest.mark.parametrize(("sql", "function"), HOSTILE)
def test_every_hostile_query_is_refused_by_the_api_naming_the_function(
    api_as, operator, managed_tables, sql, function
):
    answer = api_as(operator).post("/api/v1/queries/", {"sql": _plain_names(sql)}, format="json")

    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert body["field"] == "sql"
    assert function.lower() in body["error"].lower(), body["error"]
    assert Query.objects.count() == 0


def test_the_corpus_is_large_enough():
    assert len(HOSTILE) >= 50
    assert len(READING_TABLES) >= 30


# The workbench runs queries over managed tables; the corpus's table-less queries (VALUES) are
# checked by the policy's own tests.
READING_TABLES = [p for p in NORMAL if re.search(r"\bdemo\.", p.values[0])]


@pytest.mark.parametrize("sql", READING_TABLES)
def test_the_workbench_normal_queries_are_still_accepted(api_as, operator, managed_tables, sql):
    answer = api_as(operator).post(
        "/api/v1/queries/", {"sql": _plain_names(sql), "cache": False}, format="json"
    )

    assert answer.status_code in (201, 202), answer.content
    assert Query.objects.get().status == "PENDING"


def test_the_console_form_refuses_a_hostile_query_and_stores_nothing(client_as, operator, managed_tables):
    answer = client_as(operator).post(
        "/queries/run/", {"sql": "select reflect('java.lang.System', 'getenv') from orders"}
    )

    assert answer.status_code == 400
    assert b"reflect" in answer.content
    assert Query.objects.count() == 0


def test_a_64_kib_chain_of_and_is_accepted_by_the_api(api_as, operator, managed_tables):
    """Issue 29, item 9: 8 KB of ``and 1=1`` held a web worker 52 s, 16 KB met its timeout (500)."""
    from console.api.limits import MAX_SQL_CHARACTERS

    head = "select * from customers where 1=1"
    sql = head + " and 1=1" * ((MAX_SQL_CHARACTERS - len(head)) // 8)

    answer = api_as(operator).post("/api/v1/queries/", {"sql": sql, "cache": False}, format="json")

    assert answer.status_code in (201, 202), answer.content
    assert Query.objects.get().sql == sql
