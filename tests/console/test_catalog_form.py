"""Catalogs in the console (issue 34: "the catalog form shows every field of every kind and has
no edit, delete or test"): a form per kind generated from the kind's schema, edit with secrets
kept, delete that says and keeps what happens to registered tables, and a connection test that
goes through the outbound rules; each change audited."""

from __future__ import annotations

import http.server
import threading
import uuid

import pytest

from console.audit.models import AuditEvent
from storage import services
from storage.models import Catalog
from tests.console.forms_html import controls
from tests.console.tables import write_iceberg_table

pytestmark = pytest.mark.django_db


def _error(html: str, html_id: str) -> str:
    return html.split(f'id="{html_id}-error"', 1)[1].split(">", 1)[1].split("</p>", 1)[0]


def test_each_kind_has_only_its_own_fields(client_as, admin_user):
    html = client_as(admin_user).get("/catalogs/").content.decode()
    form = controls(html)

    assert form.options["kind"] == ["path_root", "iceberg_sql", "iceberg_rest"]
    fields = {name.split(":")[1]: [] for name in form.controls if name.startswith("p:")}
    for name in form.controls:
        if name.startswith("p:"):
            fields[name.split(":")[1]].append(name.split(":", 2)[2])
    s3 = ["s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.region"]
    assert fields == {
        "path_root": ["root", *s3],
        "iceberg_sql": ["uri", "warehouse", *s3],
        "iceberg_rest": [
            "uri",
            "warehouse",
            "credential",
            "token",
            *s3,
            "s3.connect-timeout",
            "s3.request-timeout",
        ],
    }
    assert form.controls["p:iceberg_rest:credential"]["type"] == "password"
    assert form.controls["p:iceberg_sql:uri"]["type"] == "password"  # a SQLAlchemy URL holds a password
    assert form.controls["p:iceberg_rest:uri"]["type"] == "text"
    assert form.options["u:iceberg_rest:s3.connect-timeout"] == ["days", "hours", "minutes", "seconds"]
    assert "inside the allowed roots" in html  # the root's description, beside it


def test_a_path_root_is_created_with_exactly_its_fields(client_as, admin_user, warehouse):
    response = client_as(admin_user).post(
        "/catalogs/new/",
        {
            "name": "lake",
            "kind": "path_root",
            "p:path_root:root": str(warehouse),
            "p:path_root:s3.region": "eu-west-1",
            "p:path_root:s3.endpoint": "",
            "p:iceberg_rest:uri": "http://elsewhere",  # another kind's field: not this catalog's
        },
    )

    assert response.status_code == 302, response.content.decode()[:3000]
    catalog = Catalog.objects.get()
    assert (catalog.name, catalog.kind, catalog.properties) == (
        "lake",
        "path_root",
        {"root": str(warehouse), "s3.region": "eu-west-1"},
    )


def test_a_bad_root_is_refused_beside_its_field_and_nothing_is_saved(client_as, admin_user, warehouse):
    response = client_as(admin_user).post(
        "/catalogs/new/", {"name": "lake", "kind": "path_root", "p:path_root:root": "/etc"}
    )

    html = response.content.decode()
    assert response.status_code == 400
    assert "outside the allowed roots" in _error(html, "catalog-path_root-root")
    form = controls(html)
    assert (form.controls["p:path_root:root"]["value"], form.controls["name"]["value"]) == ("/etc", "lake")
    assert form.selected["kind"] == "path_root"
    assert not Catalog.objects.exists()


@pytest.fixture
def root_catalog(warehouse):
    (warehouse / "old").mkdir()
    return services.catalog_create(
        name="lake",
        kind="path_root",
        properties={"root": str(warehouse / "old"), "s3.secret-access-key": "hunter2"},
    )


def test_an_edit_shows_the_values_never_the_secret_and_keeps_it_when_left_empty(
    client_as, admin_user, root_catalog, warehouse
):
    client = client_as(admin_user)
    page = client.get(f"/catalogs/{root_catalog.pk}/edit/").content.decode()
    form = controls(page)
    assert "hunter2" not in page
    assert form.controls["p:path_root:root"]["value"] == str(warehouse / "old")
    assert form.controls["p:path_root:s3.secret-access-key"]["placeholder"] == "set; empty keeps it"
    assert "kind" not in form.controls and "name" not in form.controls  # fixed once created

    response = client.post(
        f"/catalogs/{root_catalog.pk}/edit/",
        {
            "p:path_root:root": str(warehouse),
            "p:path_root:s3.secret-access-key": "",
            "p:path_root:s3.region": "x",
        },
    )

    assert response.status_code == 302, response.content.decode()[:3000]
    root_catalog.refresh_from_db()
    assert root_catalog.properties == {
        "root": str(warehouse),
        "s3.secret-access-key": "hunter2",
        "s3.region": "x",
    }
    event = AuditEvent.objects.get(action="catalog.update")
    assert (event.target_model, event.target_id, event.status) == (
        "storage.Catalog",
        str(root_catalog.pk),
        302,
    )
    assert "hunter2" not in str(event.details)


def test_a_refused_edit_changes_nothing(client_as, admin_user, root_catalog):
    before = Catalog.objects.values().get()

    response = client_as(admin_user).post(f"/catalogs/{root_catalog.pk}/edit/", {"p:path_root:root": "/etc"})

    assert response.status_code == 400
    assert "outside the allowed roots" in _error(response.content.decode(), "catalog-path_root-root")
    assert Catalog.objects.values().get() == before


@pytest.fixture
def sql_catalog(warehouse):
    return services.catalog_create(
        name="ice", kind="iceberg_sql", properties={"warehouse": warehouse.as_uri()}
    )


def test_a_catalog_with_registered_tables_is_not_deleted_and_the_page_says_why(
    client_as, admin_user, sql_catalog
):
    identifier = f"ns_{uuid.uuid4().hex[:6]}.events"
    write_iceberg_table(services.iceberg_catalog(sql_catalog), identifier, commits=1)
    table = services.table_register(catalog=sql_catalog, identifier=identifier)
    client = client_as(admin_user)

    page = client.get(f"/catalogs/{sql_catalog.pk}/").content.decode()
    assert (
        f"{sql_catalog.name} has 1 registered table: it can be deleted only once they are unregistered"
        in page
    )
    response = client.post(f"/catalogs/{sql_catalog.pk}/delete/", follow=True)

    assert f"{sql_catalog.name} has 1 registered table; unregister them first" in response.content.decode()
    assert Catalog.objects.filter(pk=sql_catalog.pk).exists()
    table.refresh_from_db()
    assert table.catalog_id == sql_catalog.pk


def test_a_catalog_without_tables_is_deleted_and_audited(client_as, admin_user, root_catalog):
    page = client_as(admin_user).get(f"/catalogs/{root_catalog.pk}/").content.decode()
    assert "No table is registered from it" in page

    response = client_as(admin_user).post(f"/catalogs/{root_catalog.pk}/delete/")

    assert response.status_code == 302 and response["Location"] == "/catalogs/"
    assert not Catalog.objects.exists()
    event = AuditEvent.objects.get(action="catalog.delete")
    assert (event.target_model, event.target_id, event.target_label, event.status) == (
        "storage.Catalog",
        str(root_catalog.pk),
        "lake",
        302,
    )


def test_the_connection_test_says_what_answered(client_as, admin_user, root_catalog, sql_catalog, warehouse):
    client = client_as(admin_user)
    created = {(f"{name}_{uuid.uuid4().hex[:6]}",) for name in ("a", "b")}
    for namespace in created:
        services.iceberg_catalog(sql_catalog).create_namespace(namespace)
    # pyiceberg's SQL catalog also lists namespaces of tables other tests left in the database
    namespaces = services.iceberg_catalog(sql_catalog).list_namespaces()
    assert created <= set(namespaces)

    root = client.post(f"/catalogs/{root_catalog.pk}/test/", HTTP_HX_REQUEST="true").content.decode()
    sql = client.post(f"/catalogs/{sql_catalog.pk}/test/", HTTP_HX_REQUEST="true").content.decode()
    (warehouse / "old").rmdir()
    gone = client.post(f"/catalogs/{root_catalog.pk}/test/", HTTP_HX_REQUEST="true").content.decode()

    assert f"the root {warehouse / 'old'} answers" in root and "works" in root
    assert f"the Iceberg SQL catalog answers: {len(namespaces)} namespaces" in sql
    assert "fails" in gone and "old" in gone
    assert AuditEvent.objects.filter(action="catalog.test").count() == 3


class _Redirect(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.send_response(302)
        self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET  # pyiceberg asks for its OAuth token first

    def log_message(self, *args):
        pass


@pytest.fixture
def redirecting_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_rest_catalogs_test_goes_through_the_outbound_rules(client_as, admin_user, redirecting_server):
    """A REST catalog that redirects (here towards a metadata address) is not followed, and the
    answer names the redirect, never the credential."""
    catalog = Catalog.objects.create(
        name="rest",
        kind="iceberg_rest",
        properties={"uri": redirecting_server, "credential": "client:s3cret-value"},
    )

    answer = client_as(admin_user).post(f"/catalogs/{catalog.pk}/test/", HTTP_HX_REQUEST="true")

    text = answer.content.decode()
    assert "fails" in text
    assert "answered HTTP 302, a redirect to http://169.254.169.254; redirects are not followed" in text
    assert "s3cret-value" not in text


def test_viewers_and_operators_can_read_but_not_change_a_catalog(client_as, viewer, operator, root_catalog):
    before = Catalog.objects.values().get()
    for user in (viewer, operator):
        client = client_as(user)
        page = client.get(f"/catalogs/{root_catalog.pk}/").content.decode()
        assert page.count("Test connection") == 0 and "/edit/" not in page
        assert client.get(f"/catalogs/{root_catalog.pk}/edit/").status_code == 403
        for verb in ("edit", "delete", "test"):
            assert (
                client.post(f"/catalogs/{root_catalog.pk}/{verb}/", {"p:path_root:root": "/x"}).status_code
                == 403
            )
    assert Catalog.objects.values().get() == before
