"""The API under teams (issue 32): lists show exactly the user's teams' tables and processes,
details of anything else are 404, actions need an operator grant (403 with a weaker one) and
nothing of team B is changed by a member of team A."""

from __future__ import annotations

import pytest

from processes.models import Process, ProcessStatus
from tests.teams.conftest import SEES, TABLES

pytestmark = pytest.mark.django_db

SIGNED_IN = sorted(SEES)


def _ids(answer) -> set[int]:
    assert answer.status_code == 200, answer.content
    body = answer.json()
    return {row["id"] for row in (body["results"] if isinstance(body, dict) else body)}


@pytest.mark.parametrize("username", SIGNED_IN)
def test_the_table_list_shows_exactly_the_tables_of_the_users_teams(lake, api_as, username):
    api = api_as(lake.users[username])

    assert _ids(api.get("/api/v1/tables/")) == lake.ids(SEES[username])
    # the search and the format filter narrow what the user sees, never widen it
    assert _ids(api.get("/api/v1/tables/", {"search": "orders"})) == lake.ids(
        SEES[username] & {"a1", "ab", "b1"}
    )
    assert _ids(api.get("/api/v1/tables/", {"format": "delta"})) == lake.ids(SEES[username])


@pytest.mark.parametrize("username", SIGNED_IN)
def test_a_table_the_user_may_not_see_is_404_on_every_read(lake, api_as, username):
    api = api_as(lake.users[username])
    for name, table in lake.tables.items():
        expected = 200 if name in SEES[username] else 404
        for suffix in ("", "snapshots/", "files/", "records/?key=1&column=id", "maintenance/"):
            answer = api.get(f"/api/v1/tables/{table.pk}/{suffix}")
            assert (name, suffix, answer.status_code) == (name, suffix, expected), answer.content


def test_anonymous_calls_are_401_and_show_nothing(lake, api_as):
    api = api_as(None)
    for path in ("/api/v1/tables/", f"/api/v1/tables/{lake.tables['a1'].pk}/", "/api/v1/processes/"):
        assert api.get(path).status_code == 401
    assert api.post(f"/api/v1/processes/{lake.pending['a1'].pk}/cancel/").status_code == 401
    assert Process.objects.get(pk=lake.pending["a1"].pk).status == ProcessStatus.PENDING


@pytest.mark.parametrize("username", SIGNED_IN)
def test_the_process_list_and_details_follow_the_tables(lake, api_as, username):
    api = api_as(lake.users[username])
    seen = SEES[username]
    expected = {lake.pending[n].pk for n in seen} | {lake.failed[n].pk for n in seen}

    assert _ids(api.get("/api/v1/processes/")) == expected
    assert _ids(api.get("/api/v1/processes/", {"status": "FAILED"})) == {lake.failed[n].pk for n in seen}
    for name in TABLES:
        answer = api.get(f"/api/v1/processes/{lake.pending[name].pk}/")
        assert (name, answer.status_code) == (name, 200 if name in seen else 404)
    trash = api.get("/api/v1/trash/")
    assert trash.status_code == 200 and trash.json()["results"] == []


@pytest.mark.parametrize(
    ("username", "expected"),
    [
        ("alice", {"lake": 2}),
        ("amy", {"lake": 2}),
        ("vic", {"lake": 2}),
        ("bob", {"lake": 1, "lakeb": 2}),
        ("olga", {}),
        ("root", {"lake": 4, "lakeb": 2}),
    ],
)
def test_catalogs_list_those_the_user_has_tables_in_and_count_only_those(lake, api_as, username, expected):
    answer = api_as(lake.users[username]).get("/api/v1/catalogs/")
    assert answer.status_code == 200
    assert {row["name"]: row["table_count"] for row in answer.json()["results"]} == expected


#: (user, answer on team A's process, answer on team B's process) for cancel, kill and retry
ACTS = [
    ("alice", 200, 404),
    ("amy", 403, 404),  # a viewer grant on A: sees it, may not act
    ("vic", 403, 403),  # the viewer role: refused before any lookup, as before teams
    ("bob", 404, 200),
    ("olga", 404, 404),
    ("root", 200, 200),
]


@pytest.mark.parametrize("verb", ["cancel", "kill", "retry"])
@pytest.mark.parametrize(("username", "on_a", "on_b"), ACTS)
def test_process_actions_need_an_operator_grant_on_the_table(lake, api_as, verb, username, on_a, on_b):
    api = api_as(lake.users[username])
    processes = lake.failed if verb == "retry" else lake.pending
    before = {p.pk: (p.status, p.cancel_requested) for p in Process.objects.all()}

    answers = {
        name: api.post(f"/api/v1/processes/{processes[name].pk}/{verb}/").status_code for name in ("a1", "b1")
    }

    def done(code: int) -> int:
        # An allowed retry reaches the service, which refuses it: the table's PENDING process of
        # the same action is still active (409). Cancel and kill change the PENDING process.
        return 409 if verb == "retry" and code == 200 else code

    assert answers == {"a1": done(on_a), "b1": done(on_b)}
    changed = {
        lake.name_of(p.table_id)
        for p in Process.objects.all()
        if before.get(p.pk) != (p.status, p.cancel_requested)
    }
    changeable = set() if verb == "retry" else {"a1", "b1"}
    assert changed == {name for name, code in (("a1", on_a), ("b1", on_b)) if code == 200} & changeable


@pytest.mark.parametrize(("username", "on_a", "on_b"), ACTS)
def test_submitting_a_process_needs_an_operator_grant_and_hides_other_teams_tables(
    lake, api_as, username, on_a, on_b
):
    api = api_as(lake.users[username])
    count = Process.objects.count()
    answers = {}
    for name in ("a1", "b1"):
        answer = api.post(
            "/api/v1/processes/", {"table": lake.tables[name].pk, "action": "no-such-action"}, format="json"
        )
        answers[name] = (answer.status_code, answer.json().get("field"))
    # An allowed submission reaches the service (which refuses the unknown action: 400 on action);
    # a table the user may not see is refused as a missing one is (400 on table).
    expected = {
        200: (400, "action"),
        404: (400, "table"),
        403: (403, None),
    }
    assert answers == {"a1": expected[on_a], "b1": expected[on_b]}
    missing = api.post("/api/v1/processes/", {"table": 999999, "action": "rewrite"}, format="json")
    if on_b == 404:
        assert missing.json()["error"].replace("999999", "X") == api.post(
            "/api/v1/processes/", {"table": lake.tables["b1"].pk, "action": "rewrite"}, format="json"
        ).json()["error"].replace(str(lake.tables["b1"].pk), "X")
    assert Process.objects.count() == count


@pytest.mark.parametrize(("username", "on_a", "on_b"), ACTS)
def test_preview_and_restore_follow_the_same_rules(lake, api_as, username, on_a, on_b):
    api = api_as(lake.users[username])
    for name, code in (("a1", on_a), ("b1", on_b)):
        preview = api.post(
            f"/api/v1/tables/{lake.tables[name].pk}/processes/preview/", {"action": "nope"}, format="json"
        )
        restore = api.post(f"/api/v1/processes/{lake.failed[name].pk}/restore/")
        if code == 200:  # allowed: the service answers (no such action; nothing in the trash)
            assert (preview.status_code, restore.status_code) == (400, 404)
            assert restore.json()["error"] == f"process {lake.failed[name].pk} put nothing in the trash"
        else:
            assert (preview.status_code, restore.status_code) == (code, code)
