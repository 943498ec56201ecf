"""Managing teams and grants (issue 32): the management commands (idempotent), the API
(admins change, others read their own teams), every change audited; a table registered by
location belongs to the registering user's team."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from console.audit.models import AuditEvent
from console.teams.access import can
from console.teams.models import Grant, Team, TeamMember
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


def _grants(team: str) -> set[tuple]:
    return {
        (g.role, g.catalog.name if g.catalog else None, g.namespace, g.table_id)
        for g in Grant.objects.filter(team__name=team)
    }


def _members(team: str) -> dict[str, str]:
    return {m.user.username: m.source for m in TeamMember.objects.filter(team__name=team)}


def test_the_team_command_creates_then_keeps_a_team_and_audits_each_change(lake):
    call_command(
        "lakewarden_team", "data-eng", "--members", "alice,bob", "--sso-group", "eng", "--sso-group", "ops"
    )
    call_command(
        "lakewarden_team", "data-eng", "--members", "alice,bob", "--sso-group", "eng", "--sso-group", "ops"
    )

    team = Team.objects.get(name="data-eng")
    assert (team.sso_groups, _members("data-eng")) == (["eng", "ops"], {"alice": "manual", "bob": "manual"})
    events = list(AuditEvent.objects.filter(action="team.change").values_list("target_label", "details"))
    assert events == [
        (
            "data-eng",
            {
                "changes": [
                    {
                        "created": True,
                        "before": {},
                        "after": {
                            "description": "",
                            "sso_groups": ["eng", "ops"],
                            "members": ["alice", "bob"],
                        },
                    }
                ]
            },
        )
    ]

    call_command("lakewarden_team", "data-eng", "--members", "bob")
    assert _members("data-eng") == {"bob": "manual"}
    assert AuditEvent.objects.filter(action="team.change").count() == 2


def test_the_team_command_refuses_an_unknown_user_and_changes_nothing(lake):
    with pytest.raises(CommandError, match="no such user: nobody"):
        call_command("lakewarden_team", "ghosts", "--members", "alice,nobody")
    assert not Team.objects.filter(name="ghosts").exists()


def test_the_grant_command_is_idempotent_and_takes_a_new_role(lake):
    table = lake.tables["ab"]
    call_command("lakewarden_grant", "A", "viewer", "--table", str(table.pk))
    call_command("lakewarden_grant", "A", "viewer", "--table", str(table.pk))
    assert ("viewer", None, "", table.pk) in _grants("A")
    assert can(lake.users["alice"], "view", table) and not can(lake.users["alice"], "operate", table)

    call_command("lakewarden_grant", "A", "operator", "--table", str(table.pk))
    call_command("lakewarden_grant", "A", "viewer", "--namespace", "lakeb.sales")
    assert _grants("A") == {
        ("operator", "lake", "a", None),
        ("operator", None, "", table.pk),
        ("viewer", "lakeb", "sales", None),
    }
    changes = [
        e.details["changes"][0] for e in AuditEvent.objects.filter(action="grant.change").order_by("pk")
    ]
    assert [(c["scope"], c["before"], c["after"]) for c in changes] == [
        (f"table {table.pk} (ab.orders)", None, "viewer"),
        (f"table {table.pk} (ab.orders)", "viewer", "operator"),
        ("namespace lakeb.sales", None, "viewer"),
    ]

    call_command("lakewarden_grant", "A", "viewer", "--table", str(table.pk), "--revoke")
    assert ("operator", None, "", table.pk) not in _grants("A")
    assert AuditEvent.objects.filter(action="grant.delete").count() == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nobody-team", "viewer", "--catalog", "lake"], "no team named 'nobody-team'"),
        (["A", "viewer", "--catalog", "nope"], "no catalog named 'nope'"),
        (["A", "viewer", "--namespace", "lake"], "a namespace is named catalog.namespace"),
        (["A", "viewer", "--table", "999999"], "no table with id 999999"),
    ],
)
def test_the_grant_command_refuses_a_bad_scope_and_changes_nothing(lake, args, message):
    before = _grants("A")
    with pytest.raises(CommandError, match=message):
        call_command("lakewarden_grant", *args)
    assert _grants("A") == before


def test_admins_manage_teams_and_grants_through_the_api(lake, api_as):
    admin = api_as(lake.users["root"])
    created = admin.post(
        "/api/v1/teams/", {"name": "C", "members": ["olga"], "sso_groups": ["grp-c"]}, format="json"
    )
    assert created.status_code == 201
    body = created.json()
    assert {k: body[k] for k in ("name", "sso_groups", "members")} == {
        "name": "C",
        "sso_groups": ["grp-c"],
        "members": [{"username": "olga", "source": "manual"}],
    }
    granted = admin.post(
        "/api/v1/grants/", {"team": "C", "role": "operator", "table": lake.tables["ab"].pk}, format="json"
    )
    assert granted.status_code == 201
    again = admin.post(
        "/api/v1/grants/", {"team": "C", "role": "operator", "table": lake.tables["ab"].pk}, format="json"
    )
    assert again.status_code == 200 and again.json()["id"] == granted.json()["id"]

    olga = api_as(lake.users["olga"])
    assert {row["id"] for row in olga.get("/api/v1/tables/").json()["results"]} == lake.ids({"ab"})
    assert olga.get("/api/v1/teams/").status_code == 403  # admins only, reads too
    assert olga.get(f"/api/v1/grants/{granted.json()['id']}/").status_code == 403
    assert olga.post("/api/v1/teams/", {"name": "D"}, format="json").status_code == 403
    assert (
        olga.post(
            "/api/v1/grants/", {"team": "C", "role": "owner", "catalog": "lake"}, format="json"
        ).status_code
        == 403
    )
    assert olga.delete(f"/api/v1/grants/{granted.json()['id']}/").status_code == 403

    bad = admin.post(
        "/api/v1/grants/", {"team": "C", "role": "operator", "catalog": "lake", "table": 1}, format="json"
    )
    assert bad.status_code == 400
    assert admin.delete(f"/api/v1/grants/{granted.json()['id']}/").status_code == 204
    # a fresh user object, as the next request loads (what a user may see is kept per request)
    olga = api_as(type(lake.users["olga"]).objects.get(username="olga"))
    assert olga.get("/api/v1/tables/").json()["results"] == []
    actions = list(AuditEvent.objects.order_by("pk").values_list("action", "status"))
    # every write is a row: the changes by what they changed, the refused and the idempotent
    # ones by their request
    assert [a for a in actions if a[0].startswith(("team", "grant"))] == [
        ("team.change", 201),
        ("grant.change", 201),
        ("grant-list", 200),
        ("team-list", 403),
        ("grant-list", 403),
        ("grant-detail", 403),
        ("grant-list", 400),
        ("grant.delete", 204),
    ]


def test_a_table_registered_by_location_belongs_to_the_registering_users_team(
    lake, api_as, warehouse, django_user_model
):
    from django.contrib.auth.models import Group

    admin = django_user_model.objects.create_user(username="ada", password="x")
    admin.groups.add(Group.objects.get_or_create(name="admin")[0])
    TeamMember.objects.create(team=lake.teams["A"], user=admin)
    folder = write_delta_table(warehouse / "fresh", commits=1, rows_per_commit=2)

    answer = api_as(admin).post("/api/v1/tables/", {"location": str(folder)}, format="json")

    assert answer.status_code == 201
    table_id = answer.json()["id"]
    assert ("owner", None, "", table_id) in _grants("A")
    alice = api_as(lake.users["alice"])
    assert {row["id"] for row in alice.get("/api/v1/tables/").json()["results"]} == lake.ids({"a1", "a2"}) | {
        table_id
    }
    assert table_id not in {
        row["id"] for row in api_as(lake.users["bob"]).get("/api/v1/tables/").json()["results"]
    }


def test_a_table_registered_by_a_user_in_no_team_gets_no_owner(lake, api_as, warehouse):
    folder = write_delta_table(warehouse / "orphan", commits=1, rows_per_commit=2)

    answer = api_as(lake.users["root"]).post("/api/v1/tables/", {"location": str(folder)}, format="json")

    assert answer.status_code == 201
    assert not Grant.objects.filter(table_id=answer.json()["id"]).exists()


def test_can_refuses_an_unknown_action(lake):
    with pytest.raises(ValueError, match="unknown action 'delete'"):
        can(lake.users["alice"], "delete", lake.tables["a1"])
