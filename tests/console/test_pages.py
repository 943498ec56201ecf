"""Console pages: login, roles, one URL for page and fragment, health."""

from __future__ import annotations

import pytest

from storage import services
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


def test_pages_redirect_anonymous_visitors_to_the_login_page(client):
    response = client.get("/tables/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_a_user_without_a_role_is_told_to_ask_for_one(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("nobody", password="x"))

    response = client.get("/tables/")

    assert response.status_code == 403
    assert b"no role yet" in response.content


def test_the_tables_page_lists_registered_tables_with_their_facts(client_as, viewer, warehouse):
    services.table_register(location=str(write_delta_table(warehouse / "orders", commits=3)))

    response = client_as(viewer).get("/tables/")

    html = response.content.decode()
    assert response.status_code == 200
    assert "orders" in html and "Delta" in html and "<html" in html
    assert "Register a table" not in html  # viewers cannot register


def test_the_tables_url_answers_htmx_with_the_rows_fragment_only(client_as, viewer, warehouse):
    services.table_register(location=str(write_delta_table(warehouse / "orders", commits=1)))
    services.table_register(location=str(write_delta_table(warehouse / "events", commits=1)))

    response = client_as(viewer).get("/tables/?q=orde", HTTP_HX_REQUEST="true")

    html = response.content.decode()
    assert "<html" not in html
    assert "orders" in html and "events" not in html
    assert "HX-Request" in response["Vary"]


def test_the_table_page_shows_schema_and_partitioning(client_as, viewer, warehouse):
    table = services.table_register(
        location=str(write_delta_table(warehouse / "orders", commits=1, partition_by=["region"]))
    )

    html = client_as(viewer).get(f"/tables/{table.pk}/").content.decode()

    assert "identity(region)" in html
    assert "<code>ts</code>" in html


def test_the_table_page_explains_a_table_that_became_unreadable(client_as, viewer, warehouse):
    import shutil

    path = write_delta_table(warehouse / "orders", commits=1)
    table = services.table_register(location=str(path))
    shutil.rmtree(path)

    response = client_as(viewer).get(f"/tables/{table.pk}/")

    assert response.status_code == 200
    assert "cannot be read right now" in response.content.decode()


def test_an_admin_registers_a_table_from_the_console_and_is_sent_to_its_page(
    client_as, admin_user, warehouse
):
    path = write_delta_table(warehouse / "orders", commits=1)

    response = client_as(admin_user).post(
        "/tables/register/", {"location": str(path)}, HTTP_HX_REQUEST="true"
    )

    assert response.status_code == 204
    assert response["HX-Redirect"].startswith("/tables/")


def test_a_bad_registration_in_the_console_re_renders_the_form_with_the_error(
    client_as, admin_user, warehouse
):
    response = client_as(admin_user).post(
        "/tables/register/", {"location": str(warehouse / "nope")}, HTTP_HX_REQUEST="true"
    )

    assert response.status_code == 400
    assert "does not exist" in response.content.decode()


def test_a_viewer_cannot_register_from_the_console(client_as, viewer, warehouse):
    response = client_as(viewer).post("/tables/register/", {"location": str(warehouse)})

    assert response.status_code == 403


def test_an_unknown_page_gets_the_console_styled_404(client_as, viewer):
    response = client_as(viewer).get("/no/such/page/")

    assert response.status_code == 404


def test_the_icon_is_served_at_favicon_ico_without_login(client):
    """Pages that do not link the icon (Swagger UI, the raw API schema) make browsers ask for
    /favicon.ico: it is the console's SVG icon, not a 404."""
    response = client.get("/favicon.ico")

    assert response.status_code == 200
    assert response["Content-Type"] == "image/svg+xml"
    body = response.content.decode()
    assert body.lstrip().startswith("<svg") and body.rstrip().endswith("</svg>")
    assert client.post("/favicon.ico").status_code == 405


def test_healthz_reports_each_part_without_login(client, settings):
    # A Redis database no worker listens on: the report must say none answered.
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/13"

    response = client.get("/healthz")

    body = response.json()
    assert set(body["checks"]) == {"database", "broker", "worker", "spark"}
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["broker"]["ok"] is True
    assert body["checks"]["spark"]["ok"] is True
    # No worker runs in this test: the report must say so and answer 503.
    assert body["checks"]["worker"]["ok"] is False
    assert response.status_code == 503


def test_healthz_answers_503_naming_an_unreachable_broker(client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"

    body = client.get("/healthz").json()
    assert body["checks"]["broker"]["ok"] is False
    assert "unreachable" in body["checks"]["broker"]["detail"]
