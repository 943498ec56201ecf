"""A refused admin change is recorded with the outcome it had, not the 200 of the page that shows
its errors; ``/metrics`` answers its errors as plain text like its refusals, never HTML (issue 29,
item 22)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from console.audit.models import AuditEvent

pytestmark = pytest.mark.django_db


def _configure_in_the_admin(admin_user, properties: str):
    """(the plugin's row, the answer) after an admin posts ``properties`` for the test plugin."""
    from processes.models import PluginConfig
    from processes.registry import configured_factories

    configured_factories()
    config = PluginConfig.objects.get(name="test-touch")
    client = Client()
    client.force_login(admin_user)
    form = {"name": "test-touch", "enabled": "on", "priority": "7", "properties": properties}
    return config, client.post(reverse("admin:processes_pluginconfig_change", args=[config.pk]), form)


def test_a_refused_admin_change_is_recorded_as_a_400_with_its_errors(admin_user, test_plugin):
    config, response = _configure_in_the_admin(admin_user, '{"min-files": -1}')

    assert response.status_code == 200 and b"errornote" in response.content  # the admin shows the form again
    event = AuditEvent.objects.get(action="plugin.configure")
    assert event.status == 400
    assert "properties" in event.details["refused"]
    assert "changes" not in event.details  # nothing was saved
    config.refresh_from_db()
    assert config.priority != 7


def test_an_accepted_admin_change_keeps_its_302(admin_user, test_plugin):
    _, response = _configure_in_the_admin(admin_user, '{"min-files": 1}')

    assert response.status_code == 302
    event = AuditEvent.objects.get(action="plugin.configure")
    assert event.status == 302 and "refused" not in event.details


@pytest.fixture
def scraper(settings):
    settings.LAKEWARDEN_METRICS_TOKEN = "s3cret-token"
    return Client(HTTP_AUTHORIZATION="Bearer s3cret-token")


def _plain(response) -> str:
    assert response["Content-Type"].startswith("text/plain"), (response.status_code, response["Content-Type"])
    text = response.content.decode()
    assert "<" not in text and text.endswith("\n") and text.count("\n") == 1, text
    return text


def test_a_method_metrics_do_not_answer_is_a_plain_405(scraper):
    response = scraper.post("/metrics")

    assert response.status_code == 405 and response["Allow"] == "GET"
    assert "metrics answer GET" in _plain(response)


def test_a_path_under_metrics_is_a_plain_404(scraper):
    response = scraper.get("/metrics/extra")

    assert response.status_code == 404
    assert "metrics are served at /metrics" in _plain(response)


def test_a_metrics_crash_is_a_plain_500(scraper, monkeypatch):
    def broken():
        raise RuntimeError("<html>boom</html>")

    monkeypatch.setattr("console.metrics.views.metrics_text", broken)
    scraper.raise_request_exception = False

    response = scraper.get("/metrics")

    assert response.status_code == 500
    assert "boom" not in _plain(response)


def test_console_pages_keep_their_html_error_pages(admin_user):
    client = Client()
    client.force_login(admin_user)

    response = client.get("/no-such-page/")

    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")
