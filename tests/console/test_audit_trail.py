"""The audit trail itself: rows cannot be changed or deleted (ORM, admin, database); the page and
the API list are for operators and admins; filters and paging."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from console.audit.models import AuditEvent, AuditEventImmutable

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _event(**values) -> AuditEvent:
    values.setdefault("action", "process.kill")
    return AuditEvent.objects.create(**values)


def test_a_row_cannot_be_changed_or_deleted_through_the_orm(db):
    event = _event(username="ann", target_model="processes.Process", target_id="7")

    event.action = "process.retry"
    with pytest.raises(AuditEventImmutable):
        event.save()
    with pytest.raises(AuditEventImmutable):
        event.delete()
    with pytest.raises(AuditEventImmutable):
        AuditEvent.objects.filter(pk=event.pk).update(action="process.retry")
    with pytest.raises(AuditEventImmutable):
        AuditEvent.objects.filter(pk=event.pk).delete()

    assert AuditEvent.objects.get(pk=event.pk).action == "process.kill"


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE console_auditevent SET action = 'x' WHERE id = %s",
        "DELETE FROM console_auditevent WHERE id = %s",
    ],
    ids=["update", "delete"],
)
def test_the_database_refuses_to_change_or_delete_a_row(db, sql):
    event = _event(username="ann")

    with pytest.raises(IntegrityError, match="append-only"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [event.pk])

    assert AuditEvent.objects.get(pk=event.pk).action == "process.kill"


def test_deleting_a_user_keeps_their_rows_with_the_username(django_user_model):
    gone = django_user_model.objects.create_user(username="gone")
    event = _event(user=gone, username="gone")

    gone.delete()

    kept = AuditEvent.objects.get(pk=event.pk)
    assert (kept.user_id, kept.username, kept.action) == (None, "gone", "process.kill")


def test_the_admin_shows_rows_read_only(admin_user):
    event = _event(username="ann")
    client = _client(admin_user)

    listing = client.get(reverse("admin:console_auditevent_changelist"))
    change = client.post(reverse("admin:console_auditevent_change", args=[event.pk]), {"action": "x"})
    delete = client.post(reverse("admin:console_auditevent_delete", args=[event.pk]), {"post": "yes"})
    add = client.get(reverse("admin:console_auditevent_add"))

    assert listing.status_code == 200 and b"process.kill" in listing.content
    assert (change.status_code, delete.status_code, add.status_code) == (403, 403, 403)
    assert AuditEvent.objects.get(pk=event.pk).action == "process.kill"


def test_a_viewer_gets_403_on_the_page_and_the_api(viewer):
    _event(username="ann")
    client = _client(viewer)

    page = client.get(reverse("console:audit"))
    api = client.get("/api/v1/audit/")

    assert (page.status_code, api.status_code) == (403, 403)
    assert b"process.kill" not in page.content and b"process.kill" not in api.content


def test_anonymous_visitors_are_sent_to_log_in_or_refused(db):
    page = Client().get(reverse("console:audit"))
    api = Client().get("/api/v1/audit/")

    assert page.status_code == 302 and page["Location"].startswith(reverse("login"))
    assert api.status_code == 401


@pytest.mark.parametrize("role", ["operator", "admin_user"])
def test_operators_and_admins_read_the_trail_newest_first(role, request):
    user = request.getfixturevalue(role)
    _event(username="ann", action="table.register", target_model="storage.Table", target_id="3")
    _event(username="bob", action="process.kill", status=409)
    client = _client(user)

    page = client.get(reverse("console:audit"))
    api = client.get("/api/v1/audit/")

    assert page.status_code == 200
    content = page.content.decode()
    assert content.index("process.kill") < content.index("table.register")
    assert api.status_code == 200
    rows = [
        (r["username"], r["action"], r["status"])
        for r in api.json()["results"]
        if r["username"] in ("ann", "bob")
    ]
    assert rows == [("bob", "process.kill", 409), ("ann", "table.register", None)]


@pytest.fixture
def trail(db):
    """Four rows on known days."""
    rows = [
        ("ann", "process.kill", "processes.Process", "7", "", dt.datetime(2026, 3, 1, 10, tzinfo=dt.UTC)),
        ("ann", "process.retry", "processes.Process", "7", "", dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)),
        ("bob", "table.register", "storage.Table", "3", "orders", dt.datetime(2026, 3, 3, 10, tzinfo=dt.UTC)),
        (
            "bob",
            "storage.update",
            "storage.StorageBackend",
            "1",
            "small",
            dt.datetime(2026, 3, 4, 10, tzinfo=dt.UTC),
        ),
    ]
    events = []
    for username, action, model, pk, label, at in rows:
        with connection.cursor() as cursor:  # ``at`` is the insert's own time: written here by hand
            cursor.execute(
                "INSERT INTO console_auditevent (at, username, client_address, user_agent, action, method,"
                " path, target_model, target_id, target_label, details)"
                " VALUES (%s, %s, '', '', %s, 'POST', '', %s, %s, %s, '{}') RETURNING id",
                [at, username, action, model, pk, label],
            )
            events.append(AuditEvent.objects.get(pk=cursor.fetchone()[0]))
    return events


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("user=ANN", ["process.retry", "process.kill"]),
        ("action=process.", ["process.retry", "process.kill"]),
        ("action=process.kill", ["process.kill"]),
        ("target=orders", ["table.register"]),
        ("target=Process 7", ["process.retry", "process.kill"]),
        ("since=2026-03-02&until=2026-03-03", ["table.register", "process.retry"]),
        ("until=2026-03-01T12:00:00Z", ["process.kill"]),
        # An offset Python accepts and Postgres would refuse (the fuzz found it): compared in UTC.
        ("until=2026-03-02T04:42:00%2B16:42", ["process.kill"]),
        ("user=bob&action=storage.update", ["storage.update"]),
    ],
)
def test_filters_work_the_same_on_the_page_and_the_api(operator, trail, query, expected):
    client = _client(operator)

    api = client.get(f"/api/v1/audit/?{query}")
    page = client.get(f"{reverse('console:audit')}?{query}")

    assert api.status_code == 200, api.content
    assert [r["action"] for r in api.json()["results"]] == expected
    assert page.status_code == 200
    shown = page.content.decode()
    for event in trail:
        assert (f"<code>{event.action}</code>" in shown) == (event.action in expected)


def test_a_bad_date_is_a_400_with_the_field_named(operator, trail):
    client = _client(operator)

    api = client.get("/api/v1/audit/?since=yesterday")
    page = client.get(f"{reverse('console:audit')}?until=2026-13-45")

    assert api.status_code == 400 and "since" in api.json()["field"] + str(api.json())
    assert page.status_code == 400 and "until" in page.content.decode()


def test_paging_walks_every_row_once_newest_first(operator, settings):
    created = [_event(username="pager", action=f"demo.a{i:02d}").pk for i in range(55)]
    client = _client(operator)

    first = client.get("/api/v1/audit/?user=pager").json()
    second = client.get("/api/v1/audit/?user=pager&page=2").json()

    assert first["count"] == 55
    ids = [r["id"] for r in first["results"]] + [r["id"] for r in second["results"]]
    assert ids == sorted(created, reverse=True)
    page_one = client.get(f"{reverse('console:audit')}?user=pager").content.decode()
    older = created[55 - 50]  # the 50th newest: the next page starts below it
    assert "demo.a54" in page_one and "demo.a04" not in page_one and f"before={older}" in page_one
    page_two = client.get(f"{reverse('console:audit')}?user=pager&before={older}").content.decode()
    assert "demo.a04" in page_two and "demo.a00" in page_two and "demo.a05" not in page_two
    assert timezone.now() >= AuditEvent.objects.get(pk=created[0]).at


def test_targets_read_as_their_kind_and_link_to_the_objects_page(admin_user):
    import re

    _event(
        username="ann",
        action="table.register",
        target_model="storage.Table",
        target_id="3",
        target_label="orders",
    )
    _event(username="ann", action="process.kill", target_model="processes.Process", target_id="7")
    _event(username="ann", action="storage.update", target_model="storage.StorageBackend", target_id="1")
    _event(username="ann", action="user.update", target_model="auth.User", target_id="2")
    _event(username="ann", action="gone.thing", target_model="nosuch.Model", target_id="x")

    content = _client(admin_user).get(reverse("console:audit")).content.decode()
    rows = re.findall(r'<tr class="audit-event">(.*?)</tr>', content, re.S)
    ann = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in rows if "<td>ann</td>" in row]
    cells = [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", row[4])).strip() for row in ann]
    links = [link for row in ann for link in re.findall(r'<a href="([^"]+)" title="([^"]+)">', row[4])]

    assert cells == ["nosuch.Model x", "user 2", "storage backend 1", "process 7", "table 3 orders"]
    assert links == [
        (reverse("console:storage-list"), "storage.StorageBackend"),
        (reverse("console:process-detail", args=[7]), "processes.Process"),
        (reverse("console:table-detail", args=[3]), "storage.Table"),
    ]
