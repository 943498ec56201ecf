"""The console under teams (issue 32): the tables list, the search, the overview's counts and
lists, the catalogs, the process list show exactly what the user's teams may see; a table or
process page of another team's is 404; buttons that act need an operator grant (403)."""

from __future__ import annotations

import pytest
from django.test import Client

from console.teams.models import Team
from processes.models import Process, ProcessStatus
from tests.teams.conftest import SEES, TABLES

pytestmark = pytest.mark.django_db

SIGNED_IN = sorted(SEES)


def _client(lake, username) -> Client:
    client = Client()
    if lake.users[username] is not None:
        client.force_login(lake.users[username])
    return client


def _page(client, path, **params):
    answer = client.get(path, params)
    assert answer.status_code == 200, (path, answer.status_code)
    return answer.context


@pytest.mark.parametrize("username", SIGNED_IN)
def test_lists_counts_and_search_show_exactly_the_users_tables(lake, username):
    client = _client(lake, username)
    seen = lake.ids(SEES[username])

    listed = _page(client, "/tables/")["page"].object_list
    assert {row["id"] for row in listed} == seen
    found = _page(client, "/tables/", q="orders")["page"].object_list
    assert {row["id"] for row in found} == lake.ids(SEES[username] & {"a1", "ab", "b1"})
    by_health = _page(client, "/tables/", sort="health")["page"].object_list
    assert {row["id"] for row in by_health} == seen

    overview = _page(client, "/")
    assert overview["totals"]["tables"] == len(seen)
    assert {health.table.pk for health in overview["attention"]} == seen
    assert {p.pk for p in overview["running"]} == {lake.pending[n].pk for n in SEES[username]}

    processes = _page(client, "/processes/")["page"].items
    expected = {lake.pending[n].pk for n in SEES[username]} | {lake.failed[n].pk for n in SEES[username]}
    assert {p.pk for p in processes} == expected

    catalogs = _page(client, "/catalogs/")["catalogs"]
    named = {TABLES[n][0] for n in SEES[username] if TABLES[n][0]} | (
        {"lakeb"} if "b3" in SEES[username] else set()
    )
    assert {c.name for c in catalogs} == named


@pytest.mark.parametrize("username", SIGNED_IN)
def test_pages_of_another_teams_table_or_process_are_404(lake, username):
    client = _client(lake, username)
    for name, table in lake.tables.items():
        expected = 200 if name in SEES[username] else 404
        for path in (
            f"/tables/{table.pk}/",
            f"/tables/{table.pk}/snapshots/",
            f"/tables/{table.pk}/processes/",
            f"/tables/{table.pk}/maintenance/",
            f"/tables/{table.pk}/records/",
            f"/processes/{lake.pending[name].pk}/",
            f"/trash/processes/{lake.pending[name].pk}/",
        ):
            assert (path, client.get(path).status_code) == (path, expected)


def test_a_catalog_page_lists_only_the_users_tables(lake):
    client = _client(lake, "bob")
    lake_catalog = lake.tables["a1"].catalog
    tables = _page(client, f"/catalogs/{lake_catalog.pk}/")["tables"]
    assert {t.pk for t in tables} == lake.ids({"b1"})
    assert _client(lake, "olga").get(f"/catalogs/{lake_catalog.pk}/").status_code == 404


@pytest.mark.parametrize(
    ("username", "on_a", "on_b"),
    [("alice", 200, 404), ("amy", 403, 404), ("vic", 403, 403), ("bob", 404, 200), ("root", 200, 200)],
)
def test_console_buttons_need_an_operator_grant(lake, username, on_a, on_b):
    client = _client(lake, username)
    headers = {"HX-Request": "true"}
    for name, code in (("a1", on_a), ("b1", on_b)):
        cancel = client.post(f"/processes/{lake.pending[name].pk}/cancel/", headers=headers)
        run = client.post(
            f"/tables/{lake.tables[name].pk}/processes/run/", {"action": "nope"}, headers=headers
        )
        restore = client.post(f"/trash/processes/{lake.failed[name].pk}/restore/", headers=headers)
        if code == 200:  # allowed: the services answer (cancelled; no such action; nothing in the trash)
            assert (cancel.status_code, run.status_code, restore.status_code) == (200, 400, 404)
        else:
            assert (cancel.status_code, run.status_code, restore.status_code) == (code, code, code)
        expected = ProcessStatus.CANCELED if code == 200 else ProcessStatus.PENDING
        assert Process.objects.get(pk=lake.pending[name].pk).status == expected


def test_without_any_team_every_user_sees_every_table_as_before(lake, api_as):
    Team.objects.all().delete()
    for username in ("olga", "vic"):
        listed = _page(_client(lake, username), "/tables/")["page"].object_list
        assert {row["id"] for row in listed} == lake.ids(TABLES)
    cancel = api_as(lake.users["olga"]).post(f"/api/v1/processes/{lake.pending['b1'].pk}/cancel/")
    assert cancel.status_code == 200


def test_anonymous_visitors_are_sent_to_sign_in(lake):
    client = Client()
    for path in ("/tables/", f"/tables/{lake.tables['a1'].pk}/", "/processes/", "/"):
        answer = client.get(path)
        assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("username", SIGNED_IN)
def test_the_workbench_schema_browser_lists_and_opens_only_the_users_tables(lake, username):
    """The browser only: refusing a query that names another team's table is later work."""
    client = _client(lake, username)

    listed = _page(client, "/queries/tables/")["browser_tables"]

    assert {row["pk"] for row in listed} == lake.ids(SEES[username])
    for name, table in lake.tables.items():
        answer = client.get(f"/queries/tables/{table.pk}/columns/")
        assert (name, answer.status_code) == (name, 200 if name in SEES[username] else 404)
