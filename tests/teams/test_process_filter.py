"""The API's process filter under teams (issue 32): an action found only in another team's history
is an unknown action, exactly as a name never used, so action names do not leak across teams."""

from __future__ import annotations

import pytest

from processes.models import Process

pytestmark = pytest.mark.django_db


@pytest.fixture
def legacy(lake):
    """Processes of actions no installed plugin serves, one on team A's table, one on team B's."""
    return {
        name: Process.objects.create(table=lake.tables[table], action=name, factory="gone")
        for name, table in (("legacy_a", "a1"), ("legacy_b", "b1"))
    }


def _answer(api, action: str):
    return api.get("/api/v1/processes/", {"action": action})


def test_an_action_only_in_another_teams_history_is_unknown(lake, legacy, api_as):
    alice = api_as(lake.users["alice"])
    refused, never = _answer(alice, "legacy_b"), _answer(alice, "never_used")
    assert (refused.status_code, never.status_code) == (400, 400)
    assert refused.json()["error"].replace("legacy_b", "X") == never.json()["error"].replace(
        "never_used", "X"
    )
    assert refused.json()["error"].startswith("action: 'legacy_b' is not an action; actions are ")

    own = _answer(alice, "legacy_a")
    assert own.status_code == 200 and [p["id"] for p in own.json()["results"]] == [legacy["legacy_a"].pk]


@pytest.mark.parametrize(
    ("username", "action"), [("bob", "legacy_b"), ("root", "legacy_b"), ("root", "legacy_a")]
)
def test_the_team_holding_the_history_and_admins_filter_by_it(lake, legacy, api_as, username, action):
    answer = _answer(api_as(lake.users[username]), action)
    assert answer.status_code == 200, answer.content
    assert [p["id"] for p in answer.json()["results"]] == [legacy[action].pk]
