"""Issue 10, item 7: input that used to be a 500 (or an HTML page, or silently ignored) is a 4xx with
the API's one error body ``{"error", "field"}``, and the console pages show the error."""

from __future__ import annotations

import decimal
import json
import time

import pyarrow as pa
import pytest

pytestmark = pytest.mark.django_db


def _error(response, status: int, field=None) -> str:
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert isinstance(body["error"], str) and body["error"], body
    assert body["field"] == field, body
    return body["error"]


@pytest.fixture
def amounts(lake):
    """A Delta table with a decimal(10,2) column, registered."""
    from deltalake import write_deltalake

    from storage import services

    path = lake.warehouse / "amounts"
    amounts = [decimal.Decimal("1.50"), decimal.Decimal("2.25")]
    write_deltalake(
        str(path),
        pa.table({"id": pa.array([1, 2], pa.int64()), "amount": pa.array(amounts, pa.decimal128(10, 2))}),
    )
    return services.table_register(location=str(path))


# --- NUL characters: Postgres stores them in no text column -----------------------------------------


@pytest.mark.parametrize("param", ["search", "format"])
def test_a_nul_in_the_table_list_filters_is_a_400(api_as, users, lake, param):
    message = _error(api_as(users["viewer"]).get(f"/api/v1/tables/?{param}=a%00b"), 400, param)

    assert param in message


def test_a_nul_in_the_table_page_search_shows_the_error_on_the_page(client_as, users, lake):
    client = client_as(users["viewer"])

    page = client.get("/tables/?q=a%00b")
    fragment = client.get("/tables/?q=a%00b", HTTP_HX_REQUEST="true")

    assert page.status_code == fragment.status_code == 400
    assert "must not contain a NUL character" in page.content.decode()
    assert fragment.content.decode().startswith('<p class="error">search must not contain a NUL')


def test_an_unknown_cached_result_state_on_its_page_shows_the_error(client_as, users, lake):
    response = client_as(users["viewer"]).get("/cached-results/?state=%00")

    assert response.status_code == 400
    assert "state must be one of POPULATING, READY, INVALID, CLEANED" in response.content.decode()


@pytest.mark.parametrize("as_form", [False, True], ids=["json", "form"])
def test_a_nul_in_the_query_storage_is_a_400_naming_the_field(api_as, users, lake, as_form):
    body = {"sql": "select * from orders", "storage": "scr\x00atch"}
    api = api_as(users["operator"])

    response = (
        api.post("/api/v1/queries/", body) if as_form else api.post("/api/v1/queries/", body, format="json")
    )

    assert "NUL character" in _error(response, 400, "storage")


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/v1/storages/", {"name": "pg", "type": "postgres", "config": {"dsn": "a\x00"}}, "config"),
        ("/api/v1/tables/", {"location": "{unregistered}", "properties": {"owner": "a\x00"}}, "properties"),
        ("/api/v1/catalogs/", {"name": "c", "kind": "path_root", "properties": {"\x00": "x"}}, "properties"),
    ],
    ids=["storage-config", "table-properties", "catalog-property-name"],
)
def test_a_nul_anywhere_in_a_json_body_is_a_400_naming_the_top_field(api_as, users, lake, url, body, field):
    body = {k: v.format(unregistered=lake.unregistered) if isinstance(v, str) else v for k, v in body.items()}

    assert "NUL character" in _error(api_as(users["admin"]).post(url, body, format="json"), 400, field)


# --- filters with numbers no column can hold --------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["files", "splits", "partitions"])
@pytest.mark.parametrize(
    ("literal", "message"),
    [("1e99999", "out of range for every column type"), ("1e100", "out of range for decimal")],
)
def test_a_number_no_decimal_column_holds_is_a_400_naming_it(
    api_as, users, amounts, endpoint, literal, message
):
    response = api_as(users["viewer"]).get(
        f"/api/v1/tables/{amounts.pk}/{endpoint}/", {"filter": f"amount = {literal}"}
    )

    error = _error(response, 400, "filter")
    assert literal in error and "position 9" in error and message in error


def test_a_huge_exponent_for_a_long_column_is_refused_at_once(api_as, users, amounts):
    started = time.monotonic()

    response = api_as(users["viewer"]).get(
        f"/api/v1/tables/{amounts.pk}/files/", {"filter": "id = 1e999999999"}
    )

    assert "out of range" in _error(response, 400, "filter")
    assert time.monotonic() - started < 5  # binding alone used to build a billion-digit integer


def test_the_files_tab_shows_a_number_that_fits_no_column(client_as, users, amounts):
    response = client_as(users["viewer"]).get(f"/tables/{amounts.pk}/files/", {"filter": "amount = 1e99999"})

    assert response.status_code == 400
    assert "out of range for every column type" in response.content.decode()


# --- sizes ------------------------------------------------------------------------------------------


def test_a_body_over_the_upload_limit_is_a_413(api_as, users, lake):
    body = json.dumps({"sql": "select 1", "padding": "x" * 4_400_000})

    error = _error(
        api_as(users["operator"]).post("/api/v1/queries/", body, content_type="application/json"), 413
    )

    assert "2.5 MiB" in error


def test_a_3_mb_query_is_a_413(api_as, users, lake):
    body = json.dumps({"sql": "select '" + "x" * 3_000_000 + "'"})

    _error(api_as(users["operator"]).post("/api/v1/queries/", body, content_type="application/json"), 413)


def test_sql_over_its_limit_in_a_small_body_is_a_413_naming_sql(api_as, users, lake):
    from console.api.limits import MAX_SQL_CHARACTERS

    sql = "select * from orders where id in (" + ",".join(["1"] * MAX_SQL_CHARACTERS) + ")"

    error = _error(
        api_as(users["operator"]).post("/api/v1/queries/", {"sql": sql}, format="json"), 413, "sql"
    )

    assert f"the limit is {MAX_SQL_CHARACTERS:,}" in error


def test_the_workbench_refuses_sql_over_its_limit_and_a_body_over_the_upload_limit(client_as, users, lake):
    client = client_as(users["operator"])

    long_sql = client.post("/queries/run/", {"sql": "select 1 " + "x" * 100_000})
    huge_body = client.post("/queries/run/", {"sql": "select 1 " + "x" * 3_000_000})

    assert long_sql.status_code == 400 and "the limit is 65,536" in long_sql.content.decode()
    assert huge_body.status_code == 413 and "2.5 MiB" in huge_body.content.decode()


# --- nesting ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "[" * 100_000,
        "[" * 100_000 + "]" * 100_000,
        '{"table": 1, "action": "touch", "params": {"a": ' + "[" * 900 + "]" * 900 + "}}",
    ],
    ids=["unclosed", "closed", "within-the-recursion-limit"],
)
def test_deeply_nested_json_is_a_400(api_as, users, lake, body):
    response = api_as(users["operator"]).post("/api/v1/processes/", body, content_type="application/json")

    assert "nest at most 32 levels" in _error(response, 400)


def test_deeply_nested_params_on_the_run_form_are_an_error_message(client_as, users, lake):
    response = client_as(users["operator"]).post(
        f"/tables/{lake.table.pk}/processes/run/", {"action": "touch", "params": "[" * 100_000}
    )

    assert response.status_code == 302  # back to the tab, with the message


# --- paging -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", ["1e30", "100000000000000000000000000000", "0", "-1", "1_000", "²"])
def test_a_page_out_of_range_is_a_400_with_a_clean_message(api_as, users, lake, page):
    response = api_as(users["viewer"]).get(f"/api/v1/tables/{lake.table.pk}/files/", {"page": page})

    error = _error(response, 400, "page")
    assert error.startswith("page must be a positive whole number from 1 to 1000000, not ")
    assert "islice" not in error


# --- JSON everywhere under /api/v1/, 401 for anonymous requests ----------------------------------------


@pytest.mark.parametrize(
    "path", ["/api/v1/nothing/", "/api/v1/tables/1.5/", "/api/v1/tables/abc/", "/api/v1/tables/1/nothing/"]
)
@pytest.mark.parametrize("role", ["viewer", None])
def test_everything_under_the_api_answers_json_even_unknown_paths(api_as, users, lake, path, role):
    response = api_as(users[role]).get(path)

    assert response.status_code in (401, 404)
    _error(response, response.status_code)


def test_a_crash_outside_any_api_view_is_a_json_500(client, settings):
    from console import errorpages

    request = client.get("/api/v1/").wsgi_request

    response = errorpages.server_error(request)

    assert response.status_code == 500 and response["Content-Type"] == "application/json"
    assert json.loads(response.content)["error"].startswith("internal error")


@pytest.mark.parametrize("path", ["/api/v1/", "/api/v1/tables/", "/api/v1/tables/abc/", "/api/schema/"])
def test_an_anonymous_api_request_is_a_401_asking_for_a_token(api_as, path):
    response = api_as(None).get(path, HTTP_ACCEPT="application/json")

    _error(response, 401)
    assert response["WWW-Authenticate"] == "Token"


def test_console_pages_still_send_anonymous_visitors_to_the_login_page(client):
    response = client.get("/tables/")

    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


# --- enum filters ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "field", "allowed"),
    [
        ("/api/v1/tables/?format=orc", "format", "iceberg, delta, hudi"),
        ("/api/v1/processes/?status=DONE", "status", "PENDING, RUNNING, SUCCESS"),
        ("/api/v1/processes/?active=maybe", "active", "true or false"),
        ("/api/v1/processes/?action=rewite", "action", None),  # None: every action installed
    ],
)
def test_an_unknown_enum_filter_value_is_a_400_naming_the_allowed_ones(
    api_as, users, lake, url, field, allowed
):
    if allowed is None:
        from processes.plugin import known_actions
        from processes.registry import configured_factories

        served = {a for c in configured_factories(include_disabled=True) for _, a in c.factory.pairs()}
        actions = set(known_actions()) | served
        assert {"rewrite", "expire-snapshots", "vacuum", "touch"} <= actions
        allowed = ", ".join(sorted(actions))
    assert allowed in _error(api_as(users["viewer"]).get(url), 400, field)


@pytest.mark.parametrize(
    ("url", "field", "echoed"),
    [
        ("/api/v1/processes/?action=%25", "action", "'%' is not an action"),
        ("/api/v1/processes/?action=%25s", "action", "'%s' is not an action"),
        ("/api/v1/processes/?action=%25(value)r%25%25", "action", "'%(value)r%%' is not an action"),
        ("/api/v1/processes/?active=%25", "active", "'%' is not true or false"),
        ("/api/v1/processes/?status=%25", "status", "'%' is not a status"),
        ("/api/v1/tables/?format=%25", "format", "'%'"),
    ],
)
def test_a_percent_sign_in_a_filter_value_is_a_400_that_shows_it(api_as, users, lake, url, field, echoed):
    """Issue 29, item 12: django-filter %-formats every message; ``?action=%`` was a 500."""
    assert echoed in _error(api_as(users["viewer"]).get(url), 400, field)


def _nested(depth: int) -> str:
    """``depth`` levels of parentheses and ``not``: ``not (id >= 0 and ((...)))``."""
    inner, level, shape = "id >= 0", 0, 0
    while level < depth:
        if shape % 3 == 2 and level + 2 <= depth:
            inner, level = f"not ({inner})", level + 2  # the not and its parenthesis
        elif shape % 3 == 1:
            inner, level = f"id >= 0 and ({inner})", level + 1
        else:
            inner, level = f"({inner})", level + 1
        shape += 1
    return inner


@pytest.mark.parametrize("read", ["files", "splits", "partitions"])
def test_a_filter_nested_past_the_limit_is_a_400_naming_it_and_the_limit_is_answered(
    api_as, users, lake, read
):
    """Issue 29, item 12: 300 levels of parentheses exhausted the parser's stack (a 500)."""
    from urllib.parse import quote

    from storage.spec.expressions.parser import MAX_DEPTH

    api = api_as(users["viewer"])
    url = f"/api/v1/tables/{lake.table.pk}/{read}/?filter="

    deepest = api.get(url + quote(_nested(MAX_DEPTH)))
    error = _error(api.get(url + quote(_nested(MAX_DEPTH + 1))), 400, "filter")
    huge = _error(api.get(url + quote("(" * 20_000 + "id = 1" + ")" * 20_000)), 400, "filter")

    assert deepest.status_code == 200, deepest.content[:300]
    assert f"more than {MAX_DEPTH} levels deep" in error and f"more than {MAX_DEPTH} levels deep" in huge


@pytest.mark.parametrize(
    ("query", "count"),
    [
        ("format=delta", 1),
        ("status=PENDING", 1),
        ("active=true", 1),
        ("active=false", 0),
        ("action=touch", 1),
    ],
)
def test_known_enum_filter_values_still_filter(api_as, users, lake, query, count):
    collection = "tables" if query.startswith("format") else "processes"

    response = api_as(users["viewer"]).get(f"/api/v1/{collection}/?{query}")

    assert response.status_code == 200 and response.json()["count"] == count


def test_an_action_only_the_history_knows_is_still_a_filter(api_as, users, lake):
    from processes.models import Process

    Process.objects.filter(pk=lake.process.pk).update(action="retired-plugin-action")

    response = api_as(users["viewer"]).get("/api/v1/processes/?action=retired-plugin-action")

    assert response.status_code == 200 and response.json()["count"] == 1


# --- the schema says so -----------------------------------------------------------------------------------


def test_the_schema_documents_401_with_its_header_and_413_on_every_body(api_as, users):
    document = api_as(users["viewer"]).get("/api/schema/", HTTP_ACCEPT="application/json").json()

    error = {"$ref": "#/components/schemas/Error"}
    operations = [op for item in document["paths"].values() for op in item.values() if "responses" in op]
    for operation in operations:
        unauthenticated = operation["responses"]["401"]
        assert unauthenticated["content"]["application/json"]["schema"] == error
        assert "WWW-Authenticate" in unauthenticated["headers"]
        if "requestBody" in operation:
            assert operation["responses"]["413"]["content"]["application/json"]["schema"] == error
    query_body = document["components"]["schemas"]["QueryCreate"]
    assert query_body["properties"]["sql"]["maxLength"] == 65536
