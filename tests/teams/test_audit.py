"""The audit trail under teams (issue 32): a team owner reads the events on their team's tables,
processes, queries and the team itself (and its grants), and their own; other operators only their
own; viewers nothing (403); admins, and everyone while no team exists, all of it. The page and the
API answer the same."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEvent
from console.teams.models import Grant, Team
from processes.models import Query, QueryStatus

pytestmark = pytest.mark.django_db


def _event(actor, action: str, target=None) -> AuditEvent:
    values = {"user": actor, "username": actor.get_username(), "action": action}
    if target is not None:
        values.update(target_model=target._meta.label, target_id=str(target.pk), target_label=str(target))
    return AuditEvent.objects.create(**values)


@pytest.fixture
def trail(lake):
    """Events by name; team A owns table a1, so alice (an operator of A) is a team owner, as bob
    (an operator of B, which owns catalog lakeb) is."""
    Grant.objects.create(team=lake.teams["A"], role="owner", table=lake.tables["a1"])
    users, teams, root = lake.users, lake.teams, lake.users["root"]
    queries = {
        name: Query.objects.create(sql="select 1", user=users[name], status=QueryStatus.SUCCESS)
        for name in ("alice", "bob")
    }
    grant_b = Grant.objects.filter(team=teams["B"]).first()
    events = {
        "table-a1": _event(root, "table.refresh", lake.tables["a1"]),
        "table-a2": _event(root, "table.refresh", lake.tables["a2"]),
        "table-ab": _event(root, "table.refresh", lake.tables["ab"]),  # no team's
        "table-b1": _event(root, "table.refresh", lake.tables["b1"]),
        "process-a2": _event(root, "process.cancel", lake.pending["a2"]),
        "process-b3": _event(root, "process.cancel", lake.failed["b3"]),
        "query-alice": _event(root, "query.cancel", queries["alice"]),
        "query-bob": _event(root, "query.cancel", queries["bob"]),
        "team-a": _event(root, "team.change", teams["A"]),
        "team-b": _event(root, "team.change", teams["B"]),
        "team-a-readers": _event(root, "team.change", teams["A-readers"]),
        "grant-b": _event(root, "grant.change", grant_b),
        "alice-login": _event(users["alice"], "login"),
        "amy-login": _event(users["amy"], "login"),
        "olga-login": _event(users["olga"], "login"),
        "bob-team-a": _event(users["bob"], "team.change", teams["A"]),  # bob's own, on A
    }
    return events


#: what each user reads, by event name; None: refused (403)
READS = {
    # bob's change to team A is an event on the team alice owns
    "alice": {"table-a1", "table-a2", "process-a2", "query-alice", "team-a", "alice-login", "bob-team-a"},
    "bob": {"table-b1", "process-b3", "query-bob", "team-b", "grant-b", "bob-team-a"},
    "amy": {"amy-login"},  # an operator of A-readers, which owns nothing: their own only
    "olga": {"olga-login"},  # an operator in no team
    "vic": None,  # the viewer role
}


def _names(rows, trail, reader: str | None) -> set[str]:
    """The trail's events among ``rows`` ((id, action, username)), by name. For a restricted
    ``reader`` the only others allowed are the sign-ins their test client's log-ins wrote; an
    unrestricted one (None) reads the set-up's events too (the users' role changes)."""
    by_id = {event.pk: name for name, event in trail.items()}
    others = {(action, username) for pk, action, username in rows if pk not in by_id}
    if reader is not None:
        assert others <= {("login", reader)}, others
    return {by_id[pk] for pk, _, _ in rows if pk in by_id}


def _api_names(api, trail, reader: str | None) -> set[str]:
    answer = api.get("/api/v1/audit/")
    assert answer.status_code == 200, answer.content
    rows = [(row["id"], row["action"], row["username"]) for row in answer.json()["results"]]
    return _names(rows, trail, reader)


def _page_names(client, trail, reader: str | None, **params) -> set[str]:
    answer = client.get("/audit/", params)
    assert answer.status_code == 200
    rows = [(event.pk, event.action, event.username) for event in answer.context["page"].items]
    return _names(rows, trail, reader)


@pytest.mark.parametrize("username", sorted(READS))
def test_each_user_reads_exactly_their_teams_events_and_their_own(lake, trail, api_as, client_as, username):
    user = lake.users[username]
    expected = READS[username]
    if expected is None:
        assert api_as(user).get("/api/v1/audit/").status_code == 403
        assert client_as(user).get("/audit/").status_code == 403
        return

    assert _api_names(api_as(user), trail, username) == expected
    assert _page_names(client_as(user), trail, username) == expected
    # a filter narrows what the user reads, never widens it
    tables = _page_names(client_as(user), trail, username, action="table.refresh")
    assert tables == {n for n in expected if n.startswith("table")}


def test_admins_read_every_event(lake, trail, api_as):
    assert _api_names(api_as(lake.users["root"]), trail, None) == set(trail)


def test_without_any_team_operators_read_every_event_as_before(lake, trail, api_as):
    Team.objects.all().delete()
    assert _api_names(api_as(lake.users["olga"]), trail, None) == set(trail)
