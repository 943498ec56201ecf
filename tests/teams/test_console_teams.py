"""The console's Teams page (issue 32): admins manage every team; a team owner (an operator in a
team holding an owner grant: bob in B, which owns catalog ``lakeb``) manages their team only, and
grants only within what it owns; members see their teams read only. Every change is audited."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEvent
from console.teams.models import Grant, TeamMember

pytestmark = pytest.mark.django_db


def _grants(team) -> list[str]:
    return sorted(str(g) for g in Grant.objects.filter(team=team))


def _said(answer) -> list[str]:
    """The messages the page the change redirected to shows (the change's own only)."""
    assert [url for url, _ in answer.redirect_chain] == ["/teams/"], answer.status_code
    return [str(m) for m in answer.context["messages"]]


def test_an_admin_sees_and_manages_every_team(lake, client_as):
    page = client_as(lake.users["root"]).get("/teams/")
    assert page.status_code == 200
    assert [t.name for t in page.context["teams"]] == ["A", "A-readers", "B"]
    assert page.context["managed"] == {t.pk for t in lake.teams.values()}
    assert b'action="/teams/%d/grants/"' % lake.teams["A"].pk in page.content


def test_a_team_owner_adds_and_removes_members_of_their_team_audited(lake, client_as):
    client = client_as(lake.users["bob"])
    team = lake.teams["B"]
    page = client.get("/teams/")
    assert [t.name for t in page.context["teams"]] == ["B"] and page.context["managed"] == {team.pk}

    answer = client.post(f"/teams/{team.pk}/members/", {"username": "olga"}, follow=True)
    assert _said(answer) == ["olga joined B."]
    membership = TeamMember.objects.get(team=team, user=lake.users["olga"])
    event = AuditEvent.objects.latest("pk")
    assert (event.action, event.details["changes"]) == ("team.member", [{"user": "olga", "joined": True}])

    answer = client.post(f"/teams/{team.pk}/members/", {"username": "nobody"}, follow=True)
    assert _said(answer) == ["no such user: nobody"]
    answer = client.post(f"/teams/{team.pk}/members/{membership.pk}/remove/", follow=True)
    assert _said(answer) == ["olga left B."]
    assert sorted(team.members.values_list("username", flat=True)) == ["bob"]
    assert AuditEvent.objects.latest("pk").details["changes"] == [{"user": "olga", "joined": False}]


def test_a_team_owner_grants_only_within_what_their_team_owns(lake, client_as):
    client = client_as(lake.users["bob"])
    team = lake.teams["B"]
    lake_catalog, lakeb = lake.tables["a1"].catalog, lake.tables["b2"].catalog
    before = _grants(team)

    answer = client.post(
        f"/teams/{team.pk}/grants/",
        {"role": "viewer", "catalog": lakeb.pk, "namespace": "sales"},
        follow=True,
    )
    assert _said(answer) == ["B: viewer on namespace lakeb.sales."]
    assert _grants(team) == sorted([*before, "B: viewer on namespace lakeb.sales"])
    assert AuditEvent.objects.latest("pk").details["changes"] == [
        {"team": "B", "scope": "namespace lakeb.sales", "before": None, "after": "viewer"}
    ]
    for refused in (
        {"role": "owner", "catalog": lake_catalog.pk},  # B only operates lake.b
        {"role": "viewer", "catalog": lake_catalog.pk, "namespace": "a"},
        {"role": "viewer", "table": lake.tables["a1"].pk},
    ):
        answer = client.post(f"/teams/{team.pk}/grants/", refused, follow=True)
        assert _said(answer)[0].startswith("B owns no catalog, namespace or table covering ")
    assert _grants(team) == sorted([*before, "B: viewer on namespace lakeb.sales"])

    operates_b = Grant.objects.get(team=team, namespace="b")
    answer = client.post(f"/teams/{team.pk}/grants/{operates_b.pk}/remove/", follow=True)
    assert _said(answer) == ["B owns no catalog, namespace or table covering namespace lake.b"]
    added = Grant.objects.get(team=team, namespace="sales")
    answer = client.post(f"/teams/{team.pk}/grants/{added.pk}/remove/", follow=True)
    assert _said(answer) == ["B: grant on namespace lakeb.sales revoked."]
    assert _grants(team) == before


def test_bad_grant_forms_are_refused_and_change_nothing(lake, client_as):
    client = client_as(lake.users["root"])
    team = lake.teams["A"]
    before = _grants(team)
    for body, said in (
        ({"role": "viewer"}, "give either a catalog (and maybe a namespace of it) or a table id"),
        (
            {"role": "god", "table": lake.tables["a1"].pk},
            "Select a valid choice. god is not one of the available choices.",
        ),
        (
            {"role": "viewer", "table": "x"},
            "Select a valid choice. That choice is not one of the available choices.",
        ),
    ):
        assert _said(client.post(f"/teams/{team.pk}/grants/", body, follow=True)) == [said]
    assert _grants(team) == before


def test_members_see_their_team_read_only_and_others_cannot_change_it(lake, client_as):
    a = lake.teams["A"]
    alice = client_as(lake.users["alice"])  # an operator in A, which owns nothing
    page = alice.get("/teams/")
    assert [t.name for t in page.context["teams"]] == ["A"] and page.context["managed"] == set()
    assert b"/members/" not in page.content and b"/grants/" not in page.content
    assert alice.post(f"/teams/{a.pk}/members/", {"username": "olga"}).status_code == 403
    assert alice.post(f"/teams/{lake.teams['B'].pk}/members/", {"username": "olga"}).status_code == 404
    assert (
        client_as(lake.users["bob"]).post(f"/teams/{a.pk}/members/", {"username": "bob"}).status_code == 404
    )
    assert (
        client_as(lake.users["vic"]).post(f"/teams/{a.pk}/members/", {"username": "vic"}).status_code == 403
    )
    grant = Grant.objects.get(team=a)
    assert client_as(lake.users["bob"]).post(f"/teams/{a.pk}/grants/{grant.pk}/remove/").status_code == 404
    assert sorted(a.members.values_list("username", flat=True)) == ["alice", "vic"]
    assert Grant.objects.filter(pk=grant.pk).exists()
