"""Record lookup: ``/api/v1/tables/{id}/records/`` and the table page's lookup box."""

from __future__ import annotations

import pytest

from storage import services
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


@pytest.fixture
def orders(warehouse):
    """Delta, 3 commits of 10 rows: ids 0-9, 10-19, 20-29 (versions 0, 1, 2)."""
    path = write_delta_table(warehouse / "orders", commits=3, rows_per_commit=10)
    return services.table_register(location=str(path))


def _url(table) -> str:
    return f"/api/v1/tables/{table.pk}/records/"


def test_a_viewer_gets_the_file_of_each_key(api_as, viewer, orders):
    response = api_as(viewer).get(_url(orders), {"key": ["5", "25", "99"], "column": "id"})

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["instant"]["id"] == "2" and body["key_columns"] == ["id"]
    records = {r["key"]: r for r in body["records"]}
    assert records[5]["found"] and records[5]["file_path"].endswith(".parquet")
    assert records[25]["found"] and records[25]["file_path"] != records[5]["file_path"]
    assert records[99] == {
        "key": 99,
        "found": False,
        "file_path": None,
        "file_group_id": None,
        "partition": None,
        "instant_id": "2",
    }
    assert body["files_read"] == 2  # 99 is outside every file's id range


def test_keys_at_an_older_version(api_as, viewer, orders):
    response = api_as(viewer).get(_url(orders), {"key": ["5", "25"], "column": "id", "at": "0"})

    assert response.status_code == 200
    assert [r["found"] for r in response.json()["records"]] == [True, False]


def test_anonymous_is_refused(api_as, orders):
    response = api_as(None).get(_url(orders), {"key": "5", "column": "id"})

    assert response.status_code == 401


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"column": "id"}, "key", "at least one key"),
        ({"key": "5"}, "column", "declares no record key"),
        ({"key": "5", "column": "nope"}, "column", "unknown column 'nope'"),
        ({"key": "five", "column": "id"}, "key", "column id is long"),
        ({"key": "5", "column": "id", "at": "77"}, "at", "no version 77"),
        ({"keys": "\n".join(str(i) for i in range(1001)), "column": "id"}, "key", "at most 1000 keys"),
        ({"key": "a\x00b", "column": "id"}, "key", "NUL"),
    ],
)
def test_bad_input_answers_400_naming_the_field(api_as, viewer, orders, params, field, message):
    response = api_as(viewer).get(_url(orders), params)

    assert response.status_code == 400
    assert response.json()["field"] == field and message in response.json()["error"]


def test_more_keys_than_django_takes_as_parameters_answers_400(api_as, viewer, orders):
    response = api_as(viewer).get(_url(orders), {"key": [str(i) for i in range(1001)], "column": "id"})

    assert response.status_code == 400 and "refused" in response.json()["error"]


def test_an_unknown_table_answers_404(api_as, viewer, db):
    assert api_as(viewer).get("/api/v1/tables/999999/records/", {"key": "1"}).status_code == 404


def test_the_openapi_schema_documents_the_lookup(api_as, viewer):
    schema = api_as(viewer).get("/api/schema/", HTTP_ACCEPT="application/json").json()

    operation = schema["paths"]["/api/v1/tables/{table_pk}/records/"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"table_pk", "key", "column", "at"}


def test_the_table_page_has_a_records_tab_with_the_lookup_box(client_as, viewer, orders):
    client = client_as(viewer)

    page = client.get(f"/tables/{orders.pk}/records/")
    detail = client.get(f"/tables/{orders.pk}/")

    assert page.status_code == 200 and 'name="keys"' in page.content.decode()
    assert f"/tables/{orders.pk}/records/" in detail.content.decode()


def test_the_lookup_box_answers_with_a_fragment(client_as, viewer, orders):
    response = client_as(viewer).get(
        f"/tables/{orders.pk}/records/", {"keys": "5\n99", "column": "id"}, HTTP_HX_REQUEST="true"
    )

    content = response.content.decode()
    assert response.status_code == 200 and "<html" not in content
    assert ".parquet" in content and "<script" not in content
    assert content.count("<tr>") == 3  # the header and one row per key


def test_the_lookup_box_shows_bad_input(client_as, viewer, orders):
    response = client_as(viewer).get(f"/tables/{orders.pk}/records/", {"keys": "5"}, HTTP_HX_REQUEST="true")

    assert response.status_code == 400 and "declares no record key" in response.content.decode()


def test_a_hudi_table_with_a_metadata_record_index_is_answered_from_it(
    api_as, viewer, hudi_fixture, warehouse
):
    """The API reports which path answered: Hudi's metadata-table record index, no data file read."""
    import shutil

    from storage.formats.hudi._metadata_index import file_group_index
    from tests.spec.hudi_metadata_writer import Location, MetadataTable, hfile_log_block
    from tests.spec.test_hudi_record_index_metadata import COW, FIRST, INIT, P10, P20, P30, SECOND

    root = warehouse / "hudi_cow"
    shutil.copytree(hudi_fixture(COW), root)
    metadata = MetadataTable(root, 2, version=8).create()
    metadata.complete(FIRST)
    metadata.complete(INIT)
    metadata.write_base(
        INIT, {"1": Location("10", P10, 1), "2": Location("20", P20, 1), "3": Location("10", P10, 1)}
    )
    metadata.append(file_group_index("4", 2), INIT, hfile_log_block(SECOND, {"4": Location("30", P30, 2)}))
    metadata.complete(SECOND)
    table = services.table_register(location=str(root))

    response = api_as(viewer).get(_url(table), {"key": ["2", "4", "99"]})

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["method"].startswith("the metadata table's record index") and body["files_read"] == 0
    records = {r["key"]: r for r in body["records"]}
    assert (records[2]["partition"], records[2]["file_group_id"]) == ("20", P20)
    assert records[2]["file_path"].endswith(f"_{FIRST}.parquet")
    assert (records[4]["partition"], records[4]["file_group_id"]) == ("30", P30)
    assert records[99]["found"] is False and body["instant"]["id"] == SECOND


# --- 1,000 keys in a POST body (issue 29, item 12) --------------------------------------------------


def test_a_viewer_posts_the_documented_1000_keys_in_a_json_body(api_as, viewer, orders):
    """As a query string they are ~5 KB: over gunicorn's request line and Django's 1,000 fields."""
    keys = [str(i) for i in range(1000)]

    response = api_as(viewer).post(_url(orders), {"key": keys, "column": "id", "at": "1"}, format="json")

    assert response.status_code == 200, response.content[:300]
    records = response.json()["records"]
    assert len(records) == 1000
    assert [r["key"] for r in records if r["found"]] == list(range(20))  # version 1: ids 0-19


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"key": [str(i) for i in range(1001)], "column": "id"}, "key", "at most 1000 keys"),
        ({"key": [], "column": "id"}, "key", "at least one key"),
        ({"key": "5", "column": "id"}, "key", "list"),
        ({"key": [{"a": 1}], "column": "id"}, "key", "valid string"),
        ({"key": ["a\x00b"], "column": "id"}, "key", "NUL"),
        ({"key": ["5"], "column": "nope"}, "column", "unknown column 'nope'"),
        ({"column": "id"}, "key", "required"),
    ],
)
def test_a_bad_lookup_body_answers_400_naming_the_field(api_as, viewer, orders, body, field, message):
    response = api_as(viewer).post(_url(orders), body, format="json")

    assert response.status_code == 400, response.content[:300]
    assert response.json()["field"] == field and message in response.json()["error"]


def test_the_openapi_schema_documents_the_posted_lookup(api_as, viewer):
    schema = api_as(viewer).get("/api/schema/", HTTP_ACCEPT="application/json").json()

    operation = schema["paths"]["/api/v1/tables/{table_pk}/records/"]["post"]
    assert operation["operationId"] == "tables_records_lookup" and "requestBody" in operation
