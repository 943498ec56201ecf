"""Teams in the Django admin (issue 32): a save goes through the same services as the API and the
commands, so every change is validated and audited the same way."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEvent
from console.teams.models import Grant, Team, TeamMember

pytestmark = pytest.mark.django_db


def _inlines(members: list[dict], grants: list[dict]) -> dict:
    data = {}
    for prefix, rows in (("memberships", members), ("grants", grants)):
        data[f"{prefix}-TOTAL_FORMS"] = len(rows)
        data[f"{prefix}-INITIAL_FORMS"] = sum(1 for r in rows if r.get("id"))
        data[f"{prefix}-MIN_NUM_FORMS"] = 0
        data[f"{prefix}-MAX_NUM_FORMS"] = 1000
        for i, row in enumerate(rows):
            data.update({f"{prefix}-{i}-{key}": value for key, value in row.items()})
    return data


def test_an_admin_creates_a_team_with_members_and_grants_through_the_services(lake, client_as):
    client = client_as(lake.users["root"])
    lakeb = lake.tables["b2"].catalog
    answer = client.post(
        "/admin/teams/team/add/",
        {
            "name": "C",
            "description": "analysts",
            "sso_groups": '["analysts"]',
            **_inlines(
                [{"user": lake.users["olga"].pk}],
                [
                    {"role": "viewer", "catalog": lakeb.pk, "namespace": "sales"},
                    {"role": "operator", "table": lake.tables["a1"].pk},
                ],
            ),
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    team = Team.objects.get(name="C")
    assert (team.description, team.sso_groups) == ("analysts", ["analysts"])
    assert list(team.members.values_list("username", flat=True)) == ["olga"]
    assert sorted(str(g) for g in Grant.objects.filter(team=team)) == [
        f"C: operator on table {lake.tables['a1'].pk} (a.orders)",
        "C: viewer on namespace lakeb.sales",
    ]
    event = AuditEvent.objects.latest("pk")  # the request's one row holds every change it made
    recorded = event.details["changes"]
    assert {
        "created": True,
        "before": {},
        "after": {"description": "analysts", "sso_groups": ["analysts"], "members": []},
    } in recorded
    assert {"user": "olga", "joined": True} in recorded
    assert {"team": "C", "scope": "namespace lakeb.sales", "before": None, "after": "viewer"} in recorded


def test_an_admin_edit_revokes_removes_and_moves_scopes_through_the_services(lake, client_as):
    client = client_as(lake.users["root"])
    team = lake.teams["A"]
    alice = TeamMember.objects.get(team=team, user=lake.users["alice"])
    vic = TeamMember.objects.get(team=team, user=lake.users["vic"])
    grant = Grant.objects.get(team=team)
    answer = client.post(
        f"/admin/teams/team/{team.pk}/change/",
        {
            "description": "",
            "sso_groups": "[]",
            **_inlines(
                [
                    {"id": alice.pk, "team": team.pk, "user": alice.user_id},
                    {"id": vic.pk, "team": team.pk, "user": vic.user_id, "DELETE": "on"},
                ],
                [
                    {
                        "id": grant.pk,
                        "team": team.pk,
                        "role": "operator",
                        "catalog": grant.catalog_id,
                        "namespace": "a.x",
                    }
                ],
            ),
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert sorted(team.members.values_list("username", flat=True)) == ["alice"]
    assert [str(g) for g in Grant.objects.filter(team=team)] == ["A: operator on namespace lake.a.x"]
    recorded = AuditEvent.objects.latest("pk").details["changes"]
    assert {"user": "vic", "joined": False} in recorded
    assert {"team": "A", "scope": "namespace lake.a", "before": "operator", "after": None} in recorded
    assert {"team": "A", "scope": "namespace lake.a.x", "before": None, "after": "operator"} in recorded


def test_an_admin_deletes_a_grant_and_a_team_through_the_services(lake, client_as):
    client = client_as(lake.users["root"])
    grant = Grant.objects.get(team=lake.teams["A-readers"])
    assert client.post(f"/admin/teams/grant/{grant.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Grant.objects.filter(pk=grant.pk).exists()
    assert AuditEvent.objects.latest("pk").action == "grant.delete"
    team = lake.teams["B"]
    assert client.post(f"/admin/teams/team/{team.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Team.objects.filter(pk=team.pk).exists()
    event = AuditEvent.objects.latest("pk")
    assert event.action == "team.delete" and event.details["changes"][0]["before"]["members"] == ["bob"]


def test_a_bad_sso_group_list_is_a_form_error_and_changes_nothing(lake, client_as):
    client = client_as(lake.users["root"])
    answer = client.post("/admin/teams/team/add/", {"name": "D", "sso_groups": "[1, 2]", **_inlines([], [])})
    assert answer.status_code == 200 and b"a list of group names" in answer.content
    assert not Team.objects.filter(name="D").exists()
