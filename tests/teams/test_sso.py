"""SSO groups map to teams (issue 32): against the real OpenID provider of the SSO tests, a user
whose groups map to team A sees team A's tables from the first sign-in on; leaving the group at
the provider means leaving the team at the next sign-in, and hand-added memberships stay."""

from __future__ import annotations

import pytest
from django.test import Client

from console.teams.models import Team, TeamMember
from tests.security.sso_support.browser import provider_sign_in, sign_in_start
from tests.security.test_sso_oidc import PROVIDER_PASSWORD, oidc_on, provider  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


def _sign_in(username: str) -> Client:
    client = Client()
    answer = client.get(provider_sign_in(sign_in_start(client), username, PROVIDER_PASSWORD))
    assert answer.status_code == 302 and answer["Location"] == "/", answer
    return client


def _listed(client: Client) -> set[int]:
    answer = client.get("/tables/")
    assert answer.status_code == 200
    return {row["id"] for row in answer.context["page"].object_list}


def test_an_oidc_user_whose_groups_map_to_team_a_sees_team_as_tables_at_first_sign_in(lake, oidc_on):  # noqa: F811
    lake.teams["A"].sso_groups = ["lakewarden-operators"]
    lake.teams["A"].save()
    lake.teams["B"].sso_groups = ["marketing", "staff"]  # olivia holds neither
    lake.teams["B"].save()

    client = _sign_in("olivia")

    assert _listed(client) == lake.ids({"a1", "a2"})
    memberships = {(m.team.name, m.source) for m in TeamMember.objects.filter(user__username="olivia")}
    assert memberships == {("A", "sso")}
    api = client.get("/api/v1/tables/")
    assert {row["id"] for row in api.json()["results"]} == lake.ids({"a1", "a2"})


def test_sso_memberships_follow_the_groups_at_each_sign_in_and_hand_added_ones_stay(lake, oidc_on):  # noqa: F811
    lake.teams["A"].sso_groups = ["lakewarden-operators"]
    lake.teams["A"].save()
    _sign_in("olivia")
    olivia = TeamMember.objects.get(team__name="A", user__username="olivia").user
    TeamMember.objects.create(team=lake.teams["B"], user=olivia)  # added by an admin
    Team.objects.filter(name="A").update(sso_groups=["someone-else"])

    client = _sign_in("olivia")

    assert {(m.team.name, m.source) for m in TeamMember.objects.filter(user=olivia)} == {("B", "manual")}
    assert _listed(client) == lake.ids({"b1", "b2", "b3"})
