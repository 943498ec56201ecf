"""``/api/v1/resource-groups/`` (operators read, admins write, every change in the audit trail) and
the capacity page (operators and admins): values, the 400s that change nothing, the 409s."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from console.audit.models import AuditEvent
from processes.groups.models import DEFAULT_GROUP, ResourceGroup
from storage.models import Catalog, Table

pytestmark = pytest.mark.django_db
URL = "/api/v1/resource-groups/"


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _send(user, method: str, url: str, body: dict | None = None):
    return _client(user).generic(method, url, json.dumps(body or {}), content_type="application/json")


def _groups() -> list[tuple]:
    return sorted(ResourceGroup.objects.values_list("name", "max_concurrency", "compute_budget_seconds"))


def test_an_admin_creates_a_group_and_reads_it_back_with_its_usage(admin_user, operator):
    catalog = Catalog.objects.create(name="sales", kind="path_root", properties={"root": "/lake/sales"})
    table = Table.objects.create(name="t", identifier="eu.t", format="delta", location="/lake/x/t")

    created = _send(
        admin_user,
        "POST",
        URL,
        {
            "name": "sales",
            "max_concurrency": 2,
            "compute_budget_seconds": 1800,
            "catalogs": ["sales"],
            "namespace_patterns": ["eu", "nothing.here"],
            "tables": [],
        },
    )

    assert created.status_code == 201, created.content
    body = created.json()
    group = ResourceGroup.objects.get(name="sales")
    assert {
        k: body[k] for k in ("name", "queue", "max_concurrency", "compute_budget_seconds", "catalogs")
    } == {
        "name": "sales",
        "queue": "",
        "max_concurrency": 2,
        "compute_budget_seconds": 1800,
        "catalogs": ["sales"],
    }
    assert body["effective_queue"] == group.effective_queue
    assert body["usage"] == {
        "scope": "group",
        "active": 0,
        "queued": 0,
        "slots_left": 2,
        "seconds_used": 0.0,
        "seconds_left": 1800.0,
        "held": {},
    }
    assert body["warnings"] == ["namespace pattern 'nothing.here' matches no table (yet)"]
    assert list(group.catalogs.values_list("pk", flat=True)) == [catalog.pk]
    read = _client(operator).get(f"{URL}{group.pk}/").json()
    assert read["namespace_patterns"] == ["eu", "nothing.here"] and read["tables"] == []
    event = AuditEvent.objects.filter(action="resource-group.create").get()
    assert (event.username, event.status) == (admin_user.username, 201)

    changed = _send(admin_user, "PATCH", f"{URL}{group.pk}/", {"max_concurrency": 4, "tables": [table.pk]})
    assert changed.status_code == 200, changed.content
    assert (changed.json()["max_concurrency"], changed.json()["tables"]) == (4, [table.pk])
    event = AuditEvent.objects.filter(action="resource-group.update").get()
    assert (event.target_model, event.target_id, event.status) == (
        "processes.ResourceGroup",
        str(group.pk),
        200,
    )


@pytest.mark.parametrize(
    "body, field, message",
    [
        (
            {"name": "g", "max_concurrency": 0},
            "max_concurrency",
            "max_concurrency must be at least 1 (got 0)",
        ),
        (
            {"name": "g", "compute_budget_seconds": -1},
            "compute_budget_seconds",
            "must be at least 1 (got -1)",
        ),
        ({"name": "Bad Name"}, "name", "name must be 1 to 60 lowercase letters"),
        ({"name": "g", "catalogs": ["missing"]}, "catalogs", "does not exist"),
        ({"max_concurrency": 2}, "name", "a resource group needs a name"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(admin_user, body, field, message):
    before = _groups()

    response = _send(admin_user, "POST", URL, body)

    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert message in response.json()["error"]
    assert _groups() == before


def test_two_groups_claiming_one_table_is_a_400_naming_both(admin_user):
    table = Table.objects.create(name="orders", identifier="eu.orders", format="delta", location="/lake/o")
    assert _send(admin_user, "POST", URL, {"name": "first", "tables": [table.pk]}).status_code == 201

    response = _send(admin_user, "POST", URL, {"name": "second", "tables": [table.pk]})

    assert response.status_code == 400
    assert response.json() == {
        "error": "table orders is already assigned to resource group first; unassign it there before "
        "assigning it to second",
        "field": "tables",
    }
    assert not ResourceGroup.objects.filter(name="second").exists()


def test_the_default_group_cannot_be_deleted_and_another_can(admin_user):
    default = ResourceGroup.objects.get(name=DEFAULT_GROUP)
    other = ResourceGroup.objects.create(name="other")

    refused = _send(admin_user, "DELETE", f"{URL}{default.pk}/")
    deleted = _send(admin_user, "DELETE", f"{URL}{other.pk}/")

    assert refused.status_code == 409
    assert refused.json()["error"].startswith("the default group cannot be deleted")
    assert deleted.status_code == 204
    assert list(ResourceGroup.objects.values_list("name", flat=True)) == [DEFAULT_GROUP]


def test_viewers_cannot_read_and_operators_cannot_write(viewer, operator):
    default = ResourceGroup.objects.get(name=DEFAULT_GROUP)

    assert _client(viewer).get(URL).status_code == 403
    assert _client(operator).get(URL).status_code == 200
    assert _send(operator, "POST", URL, {"name": "g"}).status_code == 403
    assert _send(operator, "PATCH", f"{URL}{default.pk}/", {"max_concurrency": 5}).status_code == 403
    assert _groups() == [(DEFAULT_GROUP, 20, 72000)]


def test_the_capacity_page_shows_budgets_backlog_and_a_group_with_no_worker(operator, viewer, settings):
    from django.core.cache import cache

    from processes.groups.capacity import WORKERS_CACHE_KEY

    ResourceGroup.objects.create(
        name="night",
        max_concurrency=3,
        compute_budget_seconds=5400,
        held={"at": "2026-01-01T00:00:00+00:00", "count": 4, "by_action": {"rewrite": 4}, "reason": "full"},
    )
    # The workers as the cache holds their last answer: one worker consuming the default queue only.
    worker = {"queues": [settings.LAKEWARDEN_HEAVY_QUEUE], "slots": 2, "busy": 1}
    import time

    cache.set(WORKERS_CACHE_KEY, {"ok": True, "checked_at": time.time(), "workers": {"heavy@h": worker}})

    page = _client(operator).get("/capacity/")

    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="group-night"' in html and 'id="group-default"' in html
    night = html[html.index('id="group-night"') :]
    assert "0 / 3" in night and "5,400" in night
    assert "no live worker consumes its queue" in night
    assert "<td>rewrite</td><td>0</td><td>4</td>" in night
    assert "The scheduler held back 4 due runs" in night
    default = html[html.index('id="group-default"') : html.index('id="group-night"')]
    assert "<td>heavy@h</td>" in default and "no live worker" not in default
    assert _client(viewer).get("/capacity/").status_code == 403


def _admin_form(name: str, **values) -> dict:
    form = {
        "name": name,
        "description": "",
        "queue": "",
        "max_concurrency": 2,
        "compute_budget_seconds": 3600,
        "namespace_patterns": "[]",
        "assignments-TOTAL_FORMS": 0,
        "assignments-INITIAL_FORMS": 0,
        "assignments-MIN_NUM_FORMS": 0,
        "assignments-MAX_NUM_FORMS": 1000,
    }
    form.update(values)
    return form


def test_the_admin_refuses_what_the_api_refuses_and_creates_the_rest(admin_user):
    Table.objects.create(name="orders", identifier="eu.orders", format="delta", location="/lake/o")
    ResourceGroup.objects.create(name="first", namespace_patterns=["eu"])
    client = _client(admin_user)
    url = "/admin/processes/resourcegroup/add/"

    zero = client.post(url, _admin_form("zero", max_concurrency=0))
    overlap = client.post(url, _admin_form("second", namespace_patterns='["e*"]'))
    created = client.post(url, _admin_form("night", namespace_patterns='["us"]'))

    assert zero.status_code == 200 and "max_concurrency must be at least 1 (got 0)" in zero.content.decode()
    assert overlap.status_code == 200
    assert (
        "namespace pattern &#x27;e*&#x27; of second and &#x27;eu&#x27; of resource group first claim the same tables"
        in overlap.content.decode()
    )
    assert created.status_code == 302
    assert _groups() == [(DEFAULT_GROUP, 20, 72000), ("first", 2, 7200), ("night", 2, 3600)]
    statuses = AuditEvent.objects.filter(action="resource-group.create").values_list("status", flat=True)
    assert sorted(statuses) == [302, 400, 400]


def test_an_admin_creates_and_changes_a_group_on_the_capacity_page_and_bad_input_is_a_400(
    admin_user, operator
):
    client = _client(admin_user)

    created = client.post(
        "/capacity/groups/", {"name": "nightly", "max_concurrency": "3", "namespace_patterns": "sales.*, eu"}
    )
    group = ResourceGroup.objects.get(name="nightly")
    changed = client.post(f"/capacity/groups/{group.pk}/", {"compute_budget_seconds": "900"})
    refused = client.post(f"/capacity/groups/{group.pk}/", {"max_concurrency": "0"})
    not_a_number = client.post("/capacity/groups/", {"name": "x", "max_concurrency": "two"})

    assert (created.status_code, changed.status_code) == (302, 302)
    group.refresh_from_db()
    assert (group.max_concurrency, group.compute_budget_seconds, group.namespace_patterns) == (
        3,
        900,
        ["sales.*", "eu"],
    )
    assert refused.status_code == 400
    assert "max_concurrency must be at least 1 (got 0)" in refused.content.decode()
    assert not_a_number.status_code == 400
    assert "max_concurrency must be a whole number (got &#x27;two&#x27;)" in not_a_number.content.decode()
    assert _groups() == [(DEFAULT_GROUP, 20, 72000), ("nightly", 3, 900)]
    actions = AuditEvent.objects.filter(action__startswith="resource-group.").order_by("at", "id")
    assert [(e.action, e.status) for e in actions] == [
        ("resource-group.create", 302),
        ("resource-group.update", 302),
        ("resource-group.update", 400),
        ("resource-group.create", 400),
    ]
    assert _client(operator).post("/capacity/groups/", {"name": "y"}).status_code == 403
    assert 'action="/capacity/groups/"' not in _client(operator).get("/capacity/").content.decode()


def test_lakewarden_serve_starts_a_worker_on_each_groups_queue(settings):
    from console.management.commands.lakewarden_serve import Command

    ResourceGroup.objects.create(name="nightly", max_concurrency=3)
    ResourceGroup.objects.create(name="own", queue="maintenance.own", max_concurrency=1)

    commands = Command().commands(host="127.0.0.1", port=8000, concurrency=2, light_concurrency=1)

    def option(name: str, flag: str) -> str:
        return commands[name][commands[name].index(flag) + 1]

    assert sorted(commands) == [
        "beat",
        "group nightly worker",
        "group own worker",
        "heavy worker",
        "light worker",
        "web",
    ]
    assert (option("group nightly worker", "--queues"), option("group nightly worker", "--concurrency")) == (
        f"{settings.LAKEWARDEN_HEAVY_QUEUE}.nightly",
        "3",
    )
    assert (option("group own worker", "--queues"), option("group own worker", "--concurrency")) == (
        "maintenance.own",
        "1",
    )
    assert option("group own worker", "--hostname").startswith("group-own@")
