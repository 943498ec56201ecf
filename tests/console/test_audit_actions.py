"""Every audited action writes exactly its row: real requests through the whole stack (middleware,
session or token authentication, views, services, Postgres), then the row read back."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token

from console.audit.models import AuditEvent
from processes.models import Process, ProcessStatus
from storage.models import Catalog, StorageBackend, Table
from storage.secrets import MASK
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db

AGENT = "audit-test/1.0 (" + "x" * 300 + ")"


def _session(user) -> Client:
    client = Client(HTTP_USER_AGENT=AGENT, REMOTE_ADDR="10.1.2.3")
    client.force_login(user)
    return client


def _token(user) -> Client:
    key = Token.objects.create(user=user).key
    return Client(HTTP_AUTHORIZATION=f"Token {key}", HTTP_USER_AGENT=AGENT, REMOTE_ADDR="10.9.8.7")


def _post_json(client: Client, url: str, body: dict, method: str = "POST"):
    return client.generic(method, url, json.dumps(body), content_type="application/json")


def _trail():
    """The rows the test's requests wrote. Left out: the role fixtures' users get their group
    outside any request (a role change of its own, ``username`` empty) and the test client's
    ``force_login`` signs in outside any request (a login with no method)."""
    return (
        AuditEvent.objects.exclude(action="role.change", username="")
        .exclude(action="login", method="")
        .order_by("id")
    )


def _only_event(**filters) -> AuditEvent:
    events = list(_trail().filter(**filters))
    assert len(events) == 1, [(e.action, e.target, e.status) for e in _trail()]
    return events[0]


def test_registering_a_table_through_the_api_writes_one_row_naming_the_new_table(admin_user, warehouse):
    path = write_delta_table(warehouse / "orders", commits=1)

    response = _post_json(_token(admin_user), "/api/v1/tables/", {"location": str(path)})

    assert response.status_code == 201, response.content
    table = Table.objects.get(location=str(path))
    event = _only_event()
    assert (event.action, event.user_id, event.username) == ("table.register", admin_user.pk, "admin-user")
    assert (event.target_model, event.target_id, event.target_label) == (
        "storage.Table",
        str(table.pk),
        "orders",
    )
    assert (event.status, event.method, event.path) == (201, "POST", "/api/v1/tables/")
    assert event.client_address == "10.9.8.7"
    assert event.user_agent == AGENT[:200]
    assert event.details["request"] == {"location": str(path)}


def test_a_refused_registration_is_recorded_with_its_400(admin_user, warehouse):
    response = _post_json(_token(admin_user), "/api/v1/tables/", {"location": str(warehouse / "missing")})

    assert response.status_code == 400
    event = _only_event()
    assert (event.action, event.status, event.target_model, event.target_id) == (
        "table.register",
        400,
        "storage.Table",
        "",
    )


def test_unregistering_a_table_in_the_admin_writes_one_row_with_the_table_named(admin_user, warehouse):
    from storage import services

    table = services.table_register(location=str(write_delta_table(warehouse / "orders", commits=1)))
    assert not _trail().exists()  # a registration outside a request is not a user action

    response = _session(admin_user).post(
        reverse("admin:storage_table_delete", args=[table.pk]), {"post": "yes"}
    )

    assert response.status_code == 302
    assert not Table.objects.filter(pk=table.pk).exists()
    event = _only_event()
    assert (event.action, event.username, event.status) == ("table.unregister", "admin-user", 302)
    assert (event.target_model, event.target_id, event.target_label) == (
        "storage.Table",
        str(table.pk),
        "orders",
    )
    assert event.client_address == "10.1.2.3"
    assert "post" not in event.details.get("request", {})  # the admin's confirmation field is noise


@pytest.fixture
def delta_table(warehouse, test_plugin):
    from storage import services

    return services.table_register(location=str(write_delta_table(warehouse / "orders", commits=1)))


def test_run_cancel_retry_and_kill_each_write_their_row(operator, delta_table):
    api = _token(operator)

    run = _post_json(api, "/api/v1/processes/", {"table": delta_table.pk, "action": "touch", "params": {}})
    assert run.status_code == 201, run.content
    first = run.json()["id"]
    cancel = _post_json(api, f"/api/v1/processes/{first}/cancel/", {})
    retry = _post_json(api, f"/api/v1/processes/{first}/retry/", {})
    second = retry.json()["id"]
    kill = _post_json(api, f"/api/v1/processes/{second}/kill/", {"grace_seconds": 0})

    assert (cancel.status_code, retry.status_code, kill.status_code) == (200, 201, 200)
    assert Process.objects.get(pk=first).status == ProcessStatus.CANCELED
    assert Process.objects.get(pk=second).status == ProcessStatus.KILLED
    rows = [(e.action, e.target_model, e.target_id, e.status, e.username) for e in _trail()]
    assert rows == [
        ("process.run", "processes.Process", str(first), 201, "operator-user"),
        ("process.cancel", "processes.Process", str(first), 200, "operator-user"),
        ("process.retry", "processes.Process", str(first), 201, "operator-user"),
        ("process.kill", "processes.Process", str(second), 200, "operator-user"),
    ]
    assert AuditEvent.objects.get(action="process.run").details["request"] == {
        "table": delta_table.pk,
        "action": "touch",
        "params": {},
    }


def test_a_refused_cancel_is_recorded_with_its_409_and_a_viewers_attempt_with_its_403(
    operator, viewer, delta_table
):
    from processes import services

    process = services.process_create(table=delta_table, action="touch", params={})
    Process.objects.filter(pk=process.pk).update(status=ProcessStatus.SUCCESS)

    conflict = _post_json(_token(operator), f"/api/v1/processes/{process.pk}/cancel/", {})
    refused = _post_json(_token(viewer), f"/api/v1/processes/{process.pk}/cancel/", {})

    assert (conflict.status_code, refused.status_code) == (409, 403)
    rows = [(e.action, e.username, e.status) for e in _trail()]
    assert rows == [("process.cancel", "operator-user", 409), ("process.cancel", "viewer-user", 403)]


def test_a_process_run_from_the_console_page_is_named_from_the_url(operator, delta_table):
    response = _session(operator).post(
        reverse("console:table-process-run", args=[delta_table.pk]), {"action": "touch", "params": "{}"}
    )

    assert response.status_code in (200, 302), response.content
    process = Process.objects.get(table=delta_table)
    verb_url = reverse("console:process-act", args=[process.pk, "cancel"])
    _session(operator).post(verb_url)
    rows = [(e.action, e.target_model, e.target_id) for e in _trail()]
    assert rows == [
        ("process.run", "storage.Table", str(delta_table.pk)),
        ("process.cancel", "processes.Process", str(process.pk)),
    ]
    assert "csrfmiddlewaretoken" not in _trail().first().details["request"]


def test_creating_a_catalog_in_the_console_names_the_new_catalog_and_its_settings(admin_user, warehouse):
    response = _session(admin_user).post(
        reverse("console:catalog-create"),
        {"name": "lake", "kind": "path_root", "p:path_root:root": str(warehouse)},
    )

    assert response.status_code == 302, response.content
    catalog = Catalog.objects.get(name="lake")
    event = _only_event()
    assert (event.action, event.target_model, event.target_id, event.target_label) == (
        "catalog.create",
        "storage.Catalog",
        str(catalog.pk),
        "lake",
    )
    [change] = event.details["changes"]
    assert change["created"] is True
    assert change["after"] == {"name": "lake", "kind": "path_root", "properties": {"root": str(warehouse)}}


def _postgres_dsn(password: str) -> str:
    settings = connection.settings_dict
    return f"postgresql://lakewarden:{password}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{settings['NAME']}"


def test_a_storage_change_keeps_before_and_after_with_the_secret_masked(admin_user):
    storage = StorageBackend.objects.create(
        name="small", type="postgres", config={"dsn": _postgres_dsn("first-secret"), "schema": "audit_a"}
    )

    response = _post_json(
        _token(admin_user),
        f"/api/v1/storages/{storage.pk}/",
        {"config": {"dsn": _postgres_dsn("second-secret"), "schema": "audit_b"}},
        method="PATCH",
    )

    assert response.status_code == 200, response.content
    storage.refresh_from_db()
    assert storage.config["schema"] == "audit_b" and "second-secret" in storage.config["dsn"]
    event = _only_event()
    assert (event.action, event.target_model, event.target_id, event.target_label, event.status) == (
        "storage.update",
        "storage.StorageBackend",
        str(storage.pk),
        "small",
        200,
    )
    stored = json.dumps(event.details)
    assert "first-secret" not in stored and "second-secret" not in stored
    [change] = event.details["changes"]
    assert change["before"] == {"config": {"dsn": _postgres_dsn(MASK), "schema": "audit_a"}}
    assert change["after"] == {"config": {"dsn": _postgres_dsn(MASK), "schema": "audit_b"}}
    assert event.details["request"]["config"]["dsn"] == _postgres_dsn(MASK)


def test_a_settings_change_outside_a_request_is_a_row_of_its_own(db):
    storage = StorageBackend.objects.create(name="small", type="postgres", config={"dsn": "x", "token": "t1"})
    assert not _trail().exists()  # a creation outside a request is not a user action

    storage.config = {"dsn": "x", "token": "t2"}
    storage.save()

    event = _only_event()
    assert (event.action, event.username, event.status, event.target_id) == (
        "storage.change",
        "",
        None,
        str(storage.pk),
    )
    assert event.details["changes"][0]["before"] == {"config": {"token": MASK}}


def _user_change_form(user, groups: list[Group]) -> dict:
    return {
        "username": user.username,
        "first_name": "",
        "last_name": "",
        "email": "",
        "is_active": "on",
        "groups": [g.pk for g in groups],
        "last_login_0": "",
        "last_login_1": "",
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
    }


def test_a_role_change_in_the_admin_writes_one_row_with_the_groups_before_and_after(admin_user, viewer):
    operator_group = Group.objects.get_or_create(name="operator")[0]
    client = _session(admin_user)
    before = AuditEvent.objects.count()

    response = client.post(
        reverse("admin:auth_user_change", args=[viewer.pk]), _user_change_form(viewer, [operator_group])
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    assert list(viewer.groups.values_list("name", flat=True)) == ["operator"]
    assert AuditEvent.objects.count() == before + 1
    event = _only_event()
    assert (event.action, event.username, event.target_model, event.target_id, event.target_label) == (
        "role.change",
        "admin-user",
        "auth.User",
        str(viewer.pk),
        "viewer-user",
    )
    [change] = event.details["changes"]
    assert change["before"] == {"groups": ["viewer"], "role": "viewer"}
    assert change["after"] == {"groups": ["operator"], "role": "operator"}


def test_a_role_change_in_code_is_recorded_too(viewer):
    viewer.groups.add(Group.objects.get_or_create(name="admin")[0])

    event = AuditEvent.objects.filter(action="role.change", target_id=str(viewer.pk)).latest("id")
    assert (event.username, event.status) == ("", None)
    assert event.details["changes"][0]["after"] == {"groups": ["admin", "viewer"], "role": "admin"}


def test_a_login_and_a_failed_login_each_write_their_row_without_the_password(viewer):
    client = Client(HTTP_USER_AGENT=AGENT, REMOTE_ADDR="10.4.4.4")

    failed = client.post(reverse("login"), {"username": "viewer-user", "password": "wrong-password-123"})
    ok = client.post(reverse("login"), {"username": "viewer-user", "password": "correct horse battery"})

    assert failed.status_code == 200 and ok.status_code == 302
    rows = [(e.action, e.user_id, e.username, e.client_address, e.target_id) for e in _trail()]
    assert rows == [
        ("login.failed", None, "viewer-user", "10.4.4.4", ""),
        ("login", viewer.pk, "viewer-user", "10.4.4.4", str(viewer.pk)),
    ]
    assert "wrong-password-123" not in json.dumps(list(AuditEvent.objects.values()), default=str)
    assert "correct horse" not in json.dumps(list(AuditEvent.objects.values()), default=str)


def test_a_url_missing_from_the_action_table_is_recorded_under_its_url_name(admin_user, delta_table):
    response = _session(admin_user).post(reverse("console:table-refresh", args=[delta_table.pk]))
    from console.audit.actions import ACTIONS, action_name

    assert response.status_code < 500
    assert _only_event().action == "table.refresh"
    assert "console:made-up" not in ACTIONS
    assert action_name("console:made-up", "POST", {}) == "console:made-up"
    assert action_name("admin:processes_pluginconfig_change", "POST", {}) == "plugin.configure"


def test_a_body_postgres_cannot_keep_is_recorded_without_what_it_cannot_keep(admin_user, warehouse):
    body = '{"location": "' + str(warehouse) + '\\u0000x", "password": "p4ss"}'

    response = _token(admin_user).post("/api/v1/tables/", body, content_type="application/json")

    assert response.status_code == 400
    event = _only_event()
    assert (event.action, event.status) == ("table.register", 400)
    assert event.details["request"] == {"location": f"{warehouse}x", "password": MASK}


def test_a_viewers_refused_attempt_with_a_lone_surrogate_is_still_recorded(viewer, delta_table):
    """JSON may escape half a surrogate pair ("\\ud9bc"): Postgres refuses it in jsonb, and the
    row of a refused request was lost (the API fuzz's viewer, 403)."""
    body = '{"params": {"note": "a\\ud9bcb", "\\udf05": "lone low"}, "name": "x\\ud83d\\ude00"}'

    response = _token(viewer).post(
        f"/api/v1/tables/{delta_table.pk}/processes/preview/", body, content_type="application/json"
    )

    assert response.status_code == 403
    event = _only_event()
    assert (event.action, event.username, event.status) == ("process.preview", "viewer-user", 403)
    assert event.details["request"] == {
        "params": {"note": "a\ufffdb", "\ufffd": "lone low"},
        "name": "x\U0001f600",
    }


def test_configuring_a_plugin_in_the_admin_keeps_the_properties_before_and_after(admin_user, test_plugin):
    from processes.models import PluginConfig

    config = PluginConfig.objects.update_or_create(
        name="test-touch", defaults={"enabled": True, "priority": 100, "properties": {"min-files": 0}}
    )[0]
    form = {"name": "test-touch", "enabled": "on", "priority": "7", "properties": '{"min-files": 5}'}

    response = _session(admin_user).post(
        reverse("admin:processes_pluginconfig_change", args=[config.pk]), form
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    event = _only_event(action="plugin.configure")
    assert (event.target_model, event.target_id, event.status) == (
        "processes.PluginConfig",
        str(config.pk),
        302,
    )
    [change] = event.details["changes"]
    assert change["before"]["priority"] == 100 and change["after"]["priority"] == 7
    assert change["before"]["properties"] == {"min-files": 0}
    # The admin fills the factory's defaults in: they are part of the change.
    assert change["after"]["properties"] == {
        "min-files": 5,
        "interval": 3600,
        "parallelism": 2,
        "on-new-snapshot": False,
    }


def test_a_body_nested_hundreds_deep_is_refused_and_recorded_shallow(admin_user):
    """The API refuses it (400); the trail keeps the row with the body cut at a few levels rather
    than failing the request while masking it."""
    body = '{"table": 1, "action": "touch", "params": {"a": ' + "[" * 900 + "]" * 900 + "}}"
    response = _token(admin_user).generic("POST", "/api/v1/processes/", body, content_type="application/json")

    assert response.status_code == 400, response.content
    event = _only_event(action="process.run")
    assert event.status == 400
    assert "nested deeper" in json.dumps(event.details)
