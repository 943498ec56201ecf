"""Catalog PATCH and DELETE in the API (issue 34): the console's rules (storage/services/catalogs.py),
admins only whatever a team's grants say, bad input refused with nothing changed, every call audited."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEvent
from storage.models import Catalog, CatalogKind

pytestmark = pytest.mark.django_db


def _catalog(lake, name: str) -> Catalog:
    return Catalog.objects.get(name=name)


def test_an_admin_changes_a_catalogs_root_and_the_change_is_audited(lake, api_as):
    catalog = _catalog(lake, "lakeb")
    new_root = lake.root / "lake"  # another folder under the allowed roots
    answer = api_as(lake.users["root"]).patch(
        f"/api/v1/catalogs/{catalog.pk}/", {"properties": {"root": str(new_root)}}, format="json"
    )

    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["id"], body["name"], body["kind"]) == (catalog.pk, "lakeb", "path_root")
    assert body["properties"] == {"root": str(new_root)}
    assert body["table_count"] == 1  # sales.more; "loose" is registered by location
    catalog.refresh_from_db()
    assert catalog.properties == {"root": str(new_root)}
    event = AuditEvent.objects.get(action="catalog.update")
    assert (event.username, event.method, event.status, event.target_id) == (
        "root",
        "PATCH",
        200,
        str(catalog.pk),
    )


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"properties": {"root": "/nowhere/at/all"}}, "root", "/nowhere/at/all"),
        ({"properties": {}}, "root", "root"),
        ({"name": "renamed", "properties": {"root": "x"}}, "name", "cannot change"),
        ({"kind": "iceberg_rest", "properties": {"root": "x"}}, "kind", "cannot change"),
        ({"root": "/tmp"}, "properties", "required"),
        ({"properties": "root=/tmp"}, "properties", "dictionary"),
    ],
    ids=["root-outside", "root-missing", "rename", "new-kind", "no-properties", "not-an-object"],
)
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(lake, api_as, body, field, message):
    catalog = _catalog(lake, "lake")
    before = dict(catalog.properties)
    answer = api_as(lake.users["root"]).patch(f"/api/v1/catalogs/{catalog.pk}/", body, format="json")

    assert answer.status_code == 400, answer.content
    assert field in answer.content.decode() and message in answer.content.decode()
    catalog.refresh_from_db()
    assert (catalog.name, catalog.kind, catalog.properties) == ("lake", CatalogKind.PATH_ROOT, before)


def test_a_catalog_with_tables_is_not_deleted_an_empty_one_is(lake, api_as):
    api = api_as(lake.users["root"])
    lake_catalog = _catalog(lake, "lake")
    answer = api.delete(f"/api/v1/catalogs/{lake_catalog.pk}/")
    assert answer.status_code == 409
    assert "has 4 registered tables" in answer.json()["error"]
    assert Catalog.objects.filter(pk=lake_catalog.pk).exists()

    empty = Catalog.objects.create(
        name="empty", kind=CatalogKind.PATH_ROOT, properties={"root": str(lake.root / "lakeb")}
    )
    assert api.delete(f"/api/v1/catalogs/{empty.pk}/").status_code == 204
    assert not Catalog.objects.filter(pk=empty.pk).exists()
    assert (lake.root / "lakeb" / "sales" / "more" / "_delta_log").is_dir()  # no data touched
    assert sorted(AuditEvent.objects.filter(action="catalog.delete").values_list("status", flat=True)) == [
        204,
        409,
    ]


@pytest.mark.parametrize("username", ["alice", "amy", "vic", "bob", "olga"])
def test_only_admins_change_or_delete_a_catalog_whatever_their_grants(lake, api_as, username):
    """bob's team owns all of lakeb and operates lake's namespace b: still no catalog change."""
    api = api_as(lake.users[username])
    for name in ("lake", "lakeb"):
        catalog = _catalog(lake, name)
        before = dict(catalog.properties)
        patch = api.patch(
            f"/api/v1/catalogs/{catalog.pk}/", {"properties": {"root": str(lake.root)}}, format="json"
        )
        delete = api.delete(f"/api/v1/catalogs/{catalog.pk}/")
        assert (name, patch.status_code, delete.status_code) == (name, 403, 403)
        catalog.refresh_from_db()
        assert catalog.properties == before
    assert api_as(None).delete(f"/api/v1/catalogs/{_catalog(lake, 'lakeb').pk}/").status_code == 401
    assert Catalog.objects.count() == 2


def test_the_openapi_schema_documents_patch_and_delete(lake, api_as):
    schema = (
        api_as(lake.users["root"]).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    )
    operations = schema["paths"]["/api/v1/catalogs/{id}/"]
    assert {"get", "patch", "delete"} <= set(operations)
    patch_body = operations["patch"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert patch_body.endswith("/PatchedCatalogUpdate") or patch_body.endswith("/CatalogUpdate")
    assert {"200", "400", "403", "404"} <= set(operations["patch"]["responses"])
    assert {"204", "409"} <= set(operations["delete"]["responses"])
    assert "put" not in operations  # PATCH only: the whole set of properties is what PATCH sends
