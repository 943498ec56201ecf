"""REST API for catalogs and tables: status codes, error bodies, roles, token auth."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from storage.models import Catalog, CatalogKind, Table
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


def test_an_admin_registers_a_table_by_posting_its_location(api_as, admin_user, warehouse):
    path = write_delta_table(warehouse / "orders", commits=2)

    response = api_as(admin_user).post("/api/v1/tables/", {"location": str(path)}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["format"] == "delta"
    assert response.json()["file_count"] == 2
    assert Table.objects.filter(location=str(path)).exists()


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "location", "give a location"),
        ({"location": "/definitely/not/here"}, "location", "outside the allowed roots"),
        ({"location": "{root}/missing"}, "location", "does not exist"),
        ({"location": "{root}", "format": "orc"}, "format", "orc"),
    ],
    ids=["nothing", "outside", "missing", "unknown-format"],
)
def test_bad_registrations_answer_400_with_the_field_and_message_and_store_nothing(
    api_as, admin_user, warehouse, body, field, message
):
    body = {k: v.format(root=warehouse) for k, v in body.items()}

    response = api_as(admin_user).post("/api/v1/tables/", body, format="json")

    assert response.status_code == 400
    assert response.json()["field"] == field
    assert message in response.json()["error"]
    assert Table.objects.count() == 0


def test_a_duplicate_registration_answers_400(api_as, admin_user, warehouse):
    path = write_delta_table(warehouse / "orders", commits=1)
    api = api_as(admin_user)
    api.post("/api/v1/tables/", {"location": str(path)}, format="json")

    response = api.post("/api/v1/tables/", {"location": str(path)}, format="json")

    assert response.status_code == 400
    assert "already registered" in response.json()["error"]
    assert Table.objects.count() == 1


def test_a_viewer_can_list_tables_but_not_register_one(api_as, viewer, warehouse):
    path = write_delta_table(warehouse / "orders", commits=1)
    api = api_as(viewer)

    assert api.get("/api/v1/tables/").status_code == 200
    response = api.post("/api/v1/tables/", {"location": str(path)}, format="json")
    assert response.status_code == 403
    assert "admin" in response.json()["error"]
    assert Table.objects.count() == 0


def test_anonymous_requests_are_refused(api_as):
    assert api_as(None).get("/api/v1/tables/").status_code in (401, 403)
    assert api_as(None).get("/api/schema/").status_code in (401, 403)


def test_a_token_from_drf_create_token_authenticates(client, viewer):
    from io import StringIO

    out = StringIO()
    call_command("drf_create_token", viewer.username, stdout=out)
    token = out.getvalue().split()[2]

    response = client.get("/api/v1/tables/", HTTP_AUTHORIZATION=f"Token {token}")

    assert response.status_code == 200
    assert response.json()["count"] == 0


def test_table_list_and_detail_show_metadata_facts(api_as, viewer, admin_user, warehouse):
    path = write_delta_table(warehouse / "orders", commits=3)
    created = api_as(admin_user).post("/api/v1/tables/", {"location": str(path)}, format="json").json()

    listing = api_as(viewer).get("/api/v1/tables/?format=delta").json()
    detail = api_as(viewer).get(f"/api/v1/tables/{created['id']}/").json()

    assert [t["name"] for t in listing["results"]] == ["orders"]
    assert detail["record_count"] == 30
    assert detail["current_instant"] == "2"
    assert api_as(viewer).get("/api/v1/tables/999999/").status_code == 404


def test_syncing_a_catalog_through_the_api_reports_what_it_added(api_as, admin_user, warehouse):
    write_delta_table(warehouse / "a", commits=1)
    catalog = api_as(admin_user).post(
        "/api/v1/catalogs/",
        {"name": "paths", "kind": "path_root", "properties": {"root": str(warehouse)}},
        format="json",
    )
    assert catalog.status_code == 201, catalog.content

    response = api_as(admin_user).post(f"/api/v1/catalogs/{catalog.json()['id']}/sync/")

    assert response.status_code == 200
    assert response.json()["added"] == [str(warehouse / "a")]


def test_a_catalog_with_a_bad_kind_or_root_answers_400(api_as, admin_user, warehouse):
    api = api_as(admin_user)
    bad_kind = api.post("/api/v1/catalogs/", {"name": "x", "kind": "glue"}, format="json")
    bad_root = api.post(
        "/api/v1/catalogs/", {"name": "y", "kind": "path_root", "properties": {"root": "/"}}, format="json"
    )

    assert bad_kind.status_code == 400 and bad_kind.json()["field"] == "kind"
    assert bad_root.status_code == 400 and "outside the allowed roots" in bad_root.json()["error"]
    assert Catalog.objects.count() == 0


def test_secrets_in_catalog_properties_are_masked(api_as, admin_user):
    Catalog.objects.create(
        name="rest", kind=CatalogKind.ICEBERG_REST, properties={"uri": "http://x", "token": "s3cr3t"}
    )

    body = api_as(admin_user).get("/api/v1/catalogs/").content.decode()

    assert "s3cr3t" not in body
    assert "********" in body


def test_the_openapi_schema_describes_the_catalog_and_table_endpoints(api_as, viewer):
    response = api_as(viewer).get("/api/schema/", HTTP_ACCEPT="application/json")

    assert response.status_code == 200
    paths = response.json()["paths"]
    assert "/api/v1/tables/" in paths and "post" in paths["/api/v1/tables/"]
    assert "/api/v1/catalogs/{id}/sync/" in paths
