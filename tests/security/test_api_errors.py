"""Every API error has the one body ``{"error", "field"}``, including a crash (JSON 500, logged)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def _is_error_body(body: dict) -> bool:
    return isinstance(body.get("error"), str) and body["error"] and "field" in body


def test_every_kind_of_refusal_has_the_same_body(lake, api_as, users):
    from processes.models import Process, ProcessStatus

    Process.objects.filter(pk=lake.process.pk).update(status=ProcessStatus.SUCCESS)
    too_large = '{"sql": "' + "x" * 3_000_000 + '"}'
    answers = {
        400: api_as(users["admin"]).post("/api/v1/tables/", {"location": "relative/path"}, format="json"),
        401: api_as(None).get("/api/v1/tables/"),
        403: api_as(users["viewer"]).post(f"/api/v1/tables/{lake.table.pk}/refresh/"),
        404: api_as(users["viewer"]).get("/api/v1/tables/999999/"),
        405: api_as(users["admin"]).delete(f"/api/v1/tables/{lake.table.pk}/"),
        409: api_as(users["operator"]).post(f"/api/v1/processes/{lake.process.pk}/cancel/"),
        413: api_as(users["operator"]).post("/api/v1/queries/", too_large, content_type="application/json"),
    }

    for status, response in answers.items():
        assert response.status_code == status, (status, response.content)
        assert _is_error_body(response.json()), (status, response.json())
    assert answers[400].json()["field"] == "location"


def test_an_unauthenticated_request_is_a_401_with_the_error_body_asking_for_a_token(api_as):
    response = api_as(None).get("/api/v1/tables/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert _is_error_body(response.json())


def test_an_unknown_api_path_is_a_json_404_not_the_consoles_page(api_as, users):
    response = api_as(users["viewer"]).get("/api/v1/no-such-collection/1.5/")

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert _is_error_body(response.json())


@pytest.mark.parametrize(
    ("role", "path", "accept", "status"),
    [
        (None, "/api/schema/", "*/*", 401),  # the schema's own YAML renderer, by default
        (None, "/api/schema/", "application/yaml", 401),
        ("none", "/api/schema/", "*/*", 403),
        (None, "/api/docs/", "text/html", 401),  # the Swagger UI page's template
        (None, "/api/v1/tables/", "text/html", 401),  # DRF's browsable API
        ("viewer", "/api/v1/tables/999999/", "text/html", 404),
        ("viewer", "/api/v1/tables/?format=zz", "text/html", 400),
    ],
)
def test_an_error_is_json_whatever_the_accept_header_asks_for(api_as, users, role, path, accept, status):
    """What a client may ask for (the schema in YAML, the API or its docs as HTML pages) is for
    the answer; an error under /api/ is always the JSON error body."""
    response = api_as(users[role]).get(path, HTTP_ACCEPT=accept)

    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    assert _is_error_body(response.json())


def test_a_crash_in_the_api_is_a_json_500_that_is_logged(lake, users, monkeypatch, caplog, settings):
    from rest_framework.test import APIClient

    from storage import selectors

    settings.DEBUG = False

    def broken(**kwargs):
        raise RuntimeError("the database fell over with password=hunter2")

    monkeypatch.setattr(selectors, "table_list", broken)
    client = APIClient()
    client.force_authenticate(users["viewer"])

    response = client.get("/api/v1/tables/")

    assert response.status_code == 500
    assert response.json() == {
        "error": "internal error: it was logged; try again, or tell an admin",
        "field": None,
    }
    assert "RuntimeError" in caplog.text
    assert "hunter2" not in caplog.text  # the log filter masks it in the traceback too
