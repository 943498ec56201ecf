"""The result storage form generated from each storage type's configuration schema (issue 34,
"storage config is JSON with a quota in bytes"): a field per setting with its description, the
quota in MiB/GiB/TiB, secrets never sent back, errors beside their field with nothing saved, the
raw JSON behind "Advanced", and a registered storage edited through the same form."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEvent
from storage import services
from storage.models import StorageBackend, StorageSource
from storage.results.plugin import StorageDescriptor
from tests.console.forms_html import controls
from tests.storage.test_api import reachable_dsn

pytestmark = pytest.mark.django_db

GIB = 1024**3


def _error(html: str, html_id: str) -> str:
    return html.split(f'id="{html_id}-error"', 1)[1].split(">", 1)[1].split("</p>", 1)[0]


def test_the_form_has_each_types_settings_with_descriptions_and_the_quota_in_units(client_as, admin_user):
    html = client_as(admin_user).get("/storages/").content.decode()
    form = controls(html)

    assert form.options["type"] == ["filesystem", "iceberg", "postgres"]
    assert form.selected["type"] == "filesystem"
    root = form.controls["p:filesystem:root"]
    assert (root["type"], root["id"]) == ("text", "storage-filesystem-root")
    assert "one sub-folder per cached result" in html  # the schema's description, beside the field
    assert form.controls["p:postgres:dsn"]["type"] == "password"  # a secret
    rows = form.controls["p:postgres:max_rows"]
    assert (rows["type"], rows["min"], rows["step"]) == ("number", "1", "1")
    timeout = form.controls["p:postgres:connect_timeout"]
    assert (timeout["min"], timeout["max"]) == ("1", "300")
    assert form.controls["p:filesystem:s3.path-style-access"]["type"] == "checkbox"
    assert form.controls["p:storage:quota"]["type"] == "number"
    assert form.options["u:storage:quota"] == ["MiB", "GiB", "TiB"]
    assert form.controls["config"]["tag"] == "textarea"  # the raw JSON, behind "Advanced"
    assert "checked" not in form.controls["advanced"]


def test_a_registered_storage_is_saved_with_exactly_what_the_form_meant(client_as, admin_user, warehouse):
    root = warehouse / "cache"
    response = client_as(admin_user).post(
        "/storages/new/",
        {
            "name": "scratch",
            "type": "filesystem",
            "p:filesystem:root": str(root),
            "p:filesystem:s3.region": "",  # empty: not set
            "p:storage:quota": "2",
            "u:storage:quota": "GiB",
            "is_default": "1",
            "p:postgres:max_rows": "5",  # another type's fields are not this storage's
            "config": '{"root": "/elsewhere"}',  # the JSON counts only under "Advanced"
        },
    )

    assert response.status_code == 302, response.content.decode()
    backend = StorageBackend.objects.get()
    assert (backend.name, backend.type, backend.config) == ("scratch", "filesystem", {"root": str(root)})
    assert (backend.quota_bytes, backend.is_default, backend.source) == (2 * GIB, True, StorageSource.CONSOLE)


def test_a_bad_value_is_refused_beside_its_field_and_nothing_is_saved(client_as, admin_user, warehouse):
    client = client_as(admin_user)

    refused = client.post(
        "/storages/new/",
        {
            "name": "scratch",
            "type": "filesystem",
            "p:filesystem:root": "/etc",
            "p:storage:quota": "1.5",
            "u:storage:quota": "GiB",
        },
    )
    html = refused.content.decode()
    assert refused.status_code == 400
    assert "outside the allowed roots" in _error(html, "storage-filesystem-root")
    form = controls(html)
    assert form.controls["p:filesystem:root"]["value"] == "/etc"  # kept as typed
    assert form.controls["p:storage:quota"]["value"] == "1.5"
    assert form.controls["name"]["value"] == "scratch"

    no_number = client.post(
        "/storages/new/",
        {"name": "scratch", "type": "filesystem", "p:storage:quota": "lots", "u:storage:quota": "GiB"},
    )
    assert no_number.status_code == 400
    assert _error(no_number.content.decode(), "storage-storage-quota") == "&#x27;lots&#x27; is not a number"
    too_small = client.post(
        "/storages/new/",
        {
            "name": "pg",
            "type": "postgres",
            "p:postgres:dsn": reachable_dsn("s3cret"),
            "p:postgres:max_rows": "0",
        },
    )
    html = too_small.content.decode()
    assert too_small.status_code == 400
    assert _error(html, "storage-postgres-max_rows") == "0 is less than the minimum of 1"
    assert "s3cret" not in html  # a typed secret is not sent back
    assert not StorageBackend.objects.exists()


def test_advanced_json_registers_the_configuration_as_written(client_as, admin_user, warehouse):
    root = warehouse / "raw"
    client = client_as(admin_user)

    bad = client.post(
        "/storages/new/", {"name": "raw", "type": "filesystem", "advanced": "1", "config": "[1]"}
    )
    assert bad.status_code == 400
    assert "must be a JSON object" in bad.content.decode()
    response = client.post(
        "/storages/new/",
        {"name": "raw", "type": "filesystem", "advanced": "1", "config": f'{{"root": "{root}"}}'},
    )

    assert response.status_code == 302, response.content.decode()
    assert StorageBackend.objects.get().config == {"root": str(root)}


@pytest.fixture
def postgres_storage(db):
    return services.storage_backend_register(
        name="pg",
        descriptor=StorageDescriptor(type="postgres", config={"dsn": reachable_dsn("s3cret"), "schema": "a"}),
        quota_bytes=3 * GIB,
    )


def test_the_edit_form_shows_the_stored_values_and_never_the_secret(client_as, admin_user, postgres_storage):
    html = client_as(admin_user).get(f"/storages/{postgres_storage.pk}/edit/").content.decode()
    form = controls(html)

    assert "s3cret" not in html
    assert form.controls["p:postgres:schema"]["value"] == "a"
    assert (form.controls["p:storage:quota"]["value"], form.selected["u:storage:quota"]) == ("3", "GiB")
    assert form.controls["p:postgres:dsn"]["placeholder"] == "set; empty keeps it"
    assert "type" not in form.controls and "name" not in form.controls  # fixed once registered


def test_an_edit_saves_the_new_values_and_an_empty_secret_keeps_the_stored_one(
    client_as, admin_user, postgres_storage
):
    response = client_as(admin_user).post(
        f"/storages/{postgres_storage.pk}/edit/",
        {
            "p:postgres:dsn": "",
            "p:postgres:schema": "b",
            "p:postgres:max_rows": "1000",
            "p:storage:quota": "512",
            "u:storage:quota": "MiB",
        },
    )

    assert response.status_code == 302, response.content.decode()
    postgres_storage.refresh_from_db()
    assert postgres_storage.config == {"dsn": reachable_dsn("s3cret"), "schema": "b", "max_rows": 1000}
    assert postgres_storage.quota_bytes == 512 * 1024**2
    event = AuditEvent.objects.get(action="storage.update")  # audited like the API's edits
    assert (event.target_model, event.target_id, event.status) == (
        "storage.StorageBackend",
        str(postgres_storage.pk),
        302,
    )
    [change] = event.details["changes"]
    assert (change["before"]["quota_bytes"], change["after"]["quota_bytes"]) == (3 * GIB, 512 * 1024**2)
    assert "s3cret" not in str(event.details)


def test_a_refused_edit_changes_nothing(client_as, admin_user, postgres_storage):
    client = client_as(admin_user)
    before = StorageBackend.objects.values().get()

    for fields, html_id, expected in (
        (
            {"p:postgres:schema": "not a name!", "p:storage:quota": "1", "u:storage:quota": "GiB"},
            "storage-postgres-schema",
            "does not match",
        ),
        (
            {"p:postgres:schema": "b", "p:storage:quota": ""},
            "storage-storage-quota",
            "cannot be removed here",
        ),
        (
            {"p:postgres:schema": "b", "p:storage:quota": "0", "u:storage:quota": "GiB"},
            "storage-storage-quota",
            "must be positive",
        ),
    ):
        response = client.post(f"/storages/{postgres_storage.pk}/edit/", fields)
        assert response.status_code == 400, fields
        assert expected in _error(response.content.decode(), html_id), fields
        assert StorageBackend.objects.values().get() == before


def test_viewers_and_operators_cannot_edit_a_storage(client_as, viewer, operator, postgres_storage):
    for user in (viewer, operator):
        client = client_as(user)
        assert client.get(f"/storages/{postgres_storage.pk}/edit/").status_code == 403
        assert (
            client.post(f"/storages/{postgres_storage.pk}/edit/", {"p:postgres:schema": "b"}).status_code
            == 403
        )
    assert StorageBackend.objects.get().config["schema"] == "a"
