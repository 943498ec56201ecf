"""``/api/v1/alert-channels/`` (admin role): create with checked URLs (400 for anything but http(s),
and for a private target when LAKEWARDEN_ALERT_ALLOW_PRIVATE is off), "send test" posting to a real
local receiver, delete; the admin's channel form checks the same; the tick is on the beat schedule
and its tasks stay on the light queue."""

from __future__ import annotations

import pytest

from processes.alerts.models import AlertChannel, AlertDelivery
from tests.processes.test_alerts_receiver import closed_port_url, receiver  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db
URL = "/api/v1/alert-channels/"


@pytest.mark.parametrize(
    "url", ["ftp://example.org/hook", "file:///etc/passwd", "not a url", "http://", "javascript:alert(1)"]
)
def test_a_webhook_url_that_is_not_http_is_400_and_creates_nothing(api_as, admin_user, url):
    answer = api_as(admin_user).post(URL, {"name": "bad", "kind": "webhook", "url": url}, format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()["field"] == "url"
    assert not AlertChannel.objects.exists()


def test_a_private_target_is_400_only_when_the_switch_is_off(api_as, admin_user, settings, receiver):
    api = api_as(admin_user)
    settings.LAKEWARDEN_ALERT_ALLOW_PRIVATE = False
    for url in (receiver.url(), "http://10.1.2.3/hook", "http://[::1]:80/", "http://localhost/x"):
        answer = api.post(URL, {"name": "onprem", "kind": "slack", "url": url}, format="json")
        assert answer.status_code == 400, (url, answer.content)
        assert "private network" in answer.json()["error"]
    assert not AlertChannel.objects.exists()
    settings.LAKEWARDEN_ALERT_ALLOW_PRIVATE = True
    answer = api.post(URL, {"name": "onprem", "kind": "slack", "url": receiver.url()}, format="json")
    assert answer.status_code == 201, answer.content
    assert AlertChannel.objects.get().url == receiver.url()


def test_channels_are_for_admins_only(api_as, viewer, operator):
    for user in (viewer, operator):
        assert api_as(user).get(URL).status_code == 403
        answer = api_as(user).post(URL, {"name": "x", "kind": "webhook", "url": "http://example.org/"})
        assert answer.status_code == 403
    assert api_as().get(URL).status_code == 401
    assert not AlertChannel.objects.exists()


def test_create_list_send_test_and_delete(api_as, admin_user, receiver):
    api = api_as(admin_user)
    created = api.post(URL, {"name": "ops", "kind": "webhook", "url": receiver.url("/ops")}, format="json")
    assert created.status_code == 201, created.content
    channel = created.json()
    assert (channel["name"], channel["kind"], channel["enabled"]) == ("ops", "webhook", True)
    assert [row["name"] for row in api.get(URL).json()["results"]] == ["ops"]
    again = api.post(URL, {"name": "ops", "kind": "webhook", "url": receiver.url()}, format="json")
    assert again.status_code == 409

    sent = api.post(f"{URL}{channel['id']}/test/")
    assert sent.status_code == 200, sent.content
    assert (sent.json()["status"], sent.json()["attempts"], sent.json()["event"]) == ("sent", 1, "test")
    [request] = receiver.requests
    assert request["path"] == "/ops"
    assert (
        request["body"]["event"] == "test" and request["body"]["title"] == "[Lakewarden] test of channel ops"
    )
    listed = api.get("/api/v1/alert-deliveries/").json()["results"]
    assert [(row["channel"], row["status"]) for row in listed] == [(channel["id"], "sent")]

    assert api.delete(f"{URL}{channel['id']}/").status_code == 204
    assert not AlertChannel.objects.exists() and not AlertDelivery.objects.exists()


def test_send_test_to_a_failing_endpoint_answers_a_failed_row(api_as, admin_user, receiver, closed_port_url):
    api = api_as(admin_user)
    receiver.status = 500
    for url in (receiver.url(), closed_port_url):
        channel = AlertChannel.objects.create(name=f"c{len(url)}{url[-9:-5]}", kind="webhook", url=url)
        answer = api.post(f"{URL}{channel.pk}/test/")
        assert answer.status_code == 200, answer.content
        assert (answer.json()["status"], answer.json()["attempts"]) == ("failed", 1)
        assert answer.json()["last_error"]
    assert len(receiver.requests) == 1  # a test is tried once, not retried


def test_a_channel_is_changed_with_patch_checked_as_a_new_one(api_as, admin_user):
    api = api_as(admin_user)
    made = api.post(URL, {"name": "hook", "kind": "webhook", "url": "http://example.org/a"}, format="json")
    api.post(URL, {"name": "other", "kind": "webhook", "url": "http://example.org/o"}, format="json")
    path = f"{URL}{made.json()['id']}/"

    changed = api.patch(path, {"url": "https://example.org/b", "enabled": False}, format="json")

    assert changed.status_code == 200, changed.content
    assert (changed.json()["url"], changed.json()["enabled"], changed.json()["name"]) == (
        "https://example.org/b", False, "hook",
    )  # fmt: skip
    stored = AlertChannel.objects.get(name="hook")
    assert (stored.url, stored.enabled) == ("https://example.org/b", False)
    for body, status, field in (
        ({"url": "ftp://example.org/x"}, 400, "url"),
        ({"kind": "email"}, 400, "recipients"),  # an email channel needs recipients
        ({"team": "ops"}, 400, "team"),
        ({"name": "other"}, 409, None),
    ):
        answer = api.patch(path, body, format="json")
        assert answer.status_code == status, (body, answer.content)
        if field:
            assert answer.json()["field"] == field, (body, answer.content)
    again = AlertChannel.objects.get(pk=stored.pk)  # every refused change changed nothing
    assert (again.name, again.kind, again.url, again.enabled) == (
        "hook",
        "webhook",
        "https://example.org/b",
        False,
    )


def test_email_channel_needs_recipients(api_as, admin_user):
    answer = api_as(admin_user).post(URL, {"name": "mail", "kind": "email"}, format="json")
    assert answer.status_code == 400 and answer.json()["field"] == "recipients"
    answer = api_as(admin_user).post(
        URL, {"name": "mail", "kind": "email", "recipients": "a@b.org"}, format="json"
    )
    assert answer.status_code == 201


def test_the_admin_channel_form_checks_the_url():
    from django.contrib import admin

    from console.alerts_admin import AlertChannelForm

    assert admin.site.is_registered(AlertChannel)
    form = AlertChannelForm(
        data={"name": "x", "kind": "webhook", "url": "ftp://example.org/", "enabled": True}
    )
    assert not form.is_valid()
    assert "url" in form.errors
    form = AlertChannelForm(
        data={"name": "x", "kind": "webhook", "url": "https://example.org/", "enabled": True}
    )
    assert form.is_valid(), form.errors


def test_the_evaluation_tick_is_scheduled_and_alert_tasks_stay_on_the_light_queue(settings):
    from console.celery import app, route_task

    entry = settings.CELERY_BEAT_SCHEDULE["evaluate-alerts"]
    purge = settings.CELERY_BEAT_SCHEDULE["purge-trash"]
    assert "processes.alerts.tasks" in settings.CELERY_IMPORTS  # storage/tasks.py is autodiscovered
    assert entry["task"] == "processes.alerts.tasks.evaluate_alerts_task"
    assert purge["task"] == "storage.tasks.purge_trash_task"
    assert entry["schedule"] == settings.LAKEWARDEN_ALERT_SECONDS
    app.loader.import_default_modules()
    for name in (entry["task"], "processes.alerts.tasks.deliver_alert_task", purge["task"]):
        assert name in app.tasks
        assert route_task(name, (), {}, {}) is None  # the default (light) queue, never the heavy one


def test_the_alerts_page_lists_channels_and_its_button_sends_a_test(
    client_as, admin_user, operator, receiver
):
    channel = AlertChannel.objects.create(name="pager", kind="slack", url=receiver.url("/pager"))
    assert client_as(operator).get("/alerts/").status_code == 403
    client = client_as(admin_user)
    page = client.get("/alerts/")
    assert page.status_code == 200
    assert b"pager" in page.content and b"No delivery yet." in page.content
    answer = client.post(f"/alerts/channels/{channel.pk}/test/", follow=True)
    assert answer.status_code == 200
    assert b"Test alert sent to pager." in answer.content
    assert [request["path"] for request in receiver.requests] == ["/pager"]
    assert receiver.bodies()[0] == {
        "text": "*[Lakewarden] test of channel pager*\nThis is a test alert sent from Lakewarden: the channel works."
    }
    assert AlertDelivery.objects.get().status == "sent"
