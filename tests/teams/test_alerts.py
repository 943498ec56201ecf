"""Alerts under teams (issue 32): a team's channels hear only of the team's tables (whoever's rule
fired), a team's rule watches only the team's tables, and a team member sees and changes only their
teams' channels, rules and deliveries in the API and the console; admins see all."""

from __future__ import annotations

import pytest
from django.core import mail
from django.utils import timezone

from console.alerts_admin import AlertRuleForm
from processes.alerts.evaluation import channels_for, evaluate_rule
from processes.alerts.models import AlertChannel, AlertDelivery, AlertEpisode, AlertRule
from tests.teams.conftest import CHANNELS, RULES

pytestmark = pytest.mark.django_db

#: what each user sees: (channels, rules); None: refused (403)
SEES = {
    "alice": ({"a-hook"}, {"a-failures"}),
    "amy": (set(), set()),  # operator of A-readers: a team with no channel or rule
    "bob": ({"b-hook"}, set()),
    "vic": None,  # the viewer role
    "olga": None,  # an operator in no team
    "root": (set(CHANNELS), set(RULES)),
}


def _heard(rule: AlertRule, lake) -> dict[str, set[str]]:
    """channel name -> the tables (by fixture name) whose alerts the rule's tick sent it."""
    evaluate_rule(rule, timezone.now())
    heard: dict[str, set[str]] = {}
    for delivery in AlertDelivery.objects.filter(episode__rule=rule).select_related("channel", "episode"):
        table_id = int(delivery.episode.subject.split(":")[1])
        heard.setdefault(delivery.channel.name, set()).add(lake.name_of(table_id))
    return heard


def test_a_teams_channel_hears_only_of_the_teams_tables_from_an_admins_rule(lake, alerting):
    _, rules = alerting

    assert _heard(rules["every-failure"], lake) == {
        "admins": set(lake.tables),
        "a-hook": {"a1", "a2"},
        "b-hook": {"b1", "b2", "b3"},
    }


def test_a_teams_rule_watches_only_the_teams_tables_and_sends_to_its_channels(lake, alerting):
    _, rules = alerting

    assert _heard(rules["a-failures"], lake) == {"a-hook": {"a1", "a2"}}
    subjects = set(AlertEpisode.objects.filter(rule=rules["a-failures"]).values_list("subject", flat=True))
    assert subjects == {f"process:{lake.tables[n].pk}:rewrite" for n in ("a1", "a2")}


def test_alerts_that_are_no_tables_go_to_admins_channels_only(lake, alerting):
    channels, rules = alerting
    assert [c.name for c in channels_for(rules["silence"], "service:beat")] == ["admins"]
    # chosen explicitly, a team's channel still hears only of the team's tables
    rules["silence"].channels.set([channels["a-hook"], channels["admins"]])
    assert [c.name for c in channels_for(rules["silence"], "service:workers")] == ["admins"]
    rules["every-failure"].channels.set([channels["b-hook"]])
    a1, b1 = lake.tables["a1"].pk, lake.tables["b1"].pk
    assert channels_for(rules["every-failure"], f"process:{a1}:rewrite") == []
    assert channels_for(rules["every-failure"], f"table:{b1}") == [channels["b-hook"]]


def _names(answer) -> set[str]:
    assert answer.status_code == 200, answer.content
    return {row["name"] for row in answer.json()["results"]}


@pytest.mark.parametrize("username", sorted(SEES))
def test_the_api_lists_and_shows_only_the_users_teams_alerts(lake, alerting, api_as, username):
    channels, rules = alerting
    for channel in channels.values():
        AlertDelivery.objects.create(channel=channel, event="test", title=f"to {channel.name}", text="x")
    api = api_as(lake.users[username])
    paths = ("/api/v1/alert-channels/", "/api/v1/alert-rules/", "/api/v1/alert-deliveries/")
    if SEES[username] is None:
        assert [api.get(path).status_code for path in paths] == [403, 403, 403]
        return
    sees_channels, sees_rules = SEES[username]

    assert _names(api.get(paths[0])) == sees_channels
    assert _names(api.get(paths[1])) == sees_rules
    delivered = api.get(paths[2])
    assert delivered.status_code == 200
    assert {row["title"] for row in delivered.json()["results"]} == {f"to {n}" for n in sees_channels}
    for name, channel in channels.items():
        expected = 200 if name in sees_channels else 404
        assert (name, api.get(f"{paths[0]}{channel.pk}/").status_code) == (name, expected)
    for name, rule in rules.items():
        expected = 200 if name in sees_rules else 404
        assert (name, api.get(f"{paths[1]}{rule.pk}/").status_code) == (name, expected)


def test_anonymous_calls_to_alerts_are_401(lake, alerting, api_as):
    for path in ("/api/v1/alert-channels/", "/api/v1/alert-rules/", "/api/v1/alert-deliveries/"):
        assert api_as(None).get(path).status_code == 401


def test_a_team_member_changes_only_their_teams_channels_and_rules(lake, alerting, api_as):
    channels, rules = alerting
    alice = api_as(lake.users["alice"])
    before = sorted(AlertChannel.objects.values_list("name", "team__name", "enabled"))

    assert alice.delete(f"/api/v1/alert-channels/{channels['b-hook'].pk}/").status_code == 404
    assert (
        alice.patch(f"/api/v1/alert-channels/{channels['b-hook'].pk}/", {"enabled": False}).status_code == 404
    )
    assert alice.post(f"/api/v1/alert-channels/{channels['b-hook'].pk}/test/").status_code == 404
    assert (
        alice.patch(f"/api/v1/alert-rules/{rules['every-failure'].pk}/", {"enabled": False}).status_code
        == 404
    )
    assert alice.delete(f"/api/v1/alert-rules/{rules['every-failure'].pk}/").status_code == 404
    refused = alice.post(
        "/api/v1/alert-channels/",
        {"name": "sneaky", "kind": "email", "recipients": "x@example.org", "team": "B"},
        format="json",
    )
    assert (refused.status_code, refused.json()["field"]) == (400, "team")
    assert sorted(AlertChannel.objects.values_list("name", "team__name", "enabled")) == before
    assert AlertRule.objects.get(pk=rules["every-failure"].pk).enabled is True
    assert mail.outbox == []

    made = alice.post(
        "/api/v1/alert-channels/",
        {"name": "a-mail", "kind": "email", "recipients": "a@example.org"},
        format="json",
    )
    assert made.status_code == 201 and made.json()["team"] == "A"  # alice's one team
    tested = alice.post(f"/api/v1/alert-channels/{channels['a-hook'].pk}/test/")
    assert tested.status_code == 200 and tested.json()["status"] == "sent"
    assert [m.to for m in mail.outbox] == [["a-hook@example.org"]]
    changed = alice.patch(f"/api/v1/alert-rules/{rules['a-failures'].pk}/", {"threshold": 80}, format="json")
    assert changed.status_code == 200 and changed.json()["threshold"] == 80
    switched = alice.patch(
        f"/api/v1/alert-channels/{channels['a-hook'].pk}/", {"enabled": False}, format="json"
    )
    assert switched.status_code == 200 and AlertChannel.objects.get(pk=channels["a-hook"].pk).enabled is False


def test_a_teams_rule_watches_tables_through_the_teams_own_channels(lake, alerting, api_as):
    channels, _ = alerting
    alice = api_as(lake.users["alice"])
    count = AlertRule.objects.count()

    service = alice.post("/api/v1/alert-rules/", {"name": "quiet", "kind": "service_silent"}, format="json")
    foreign = alice.post(
        "/api/v1/alert-rules/",
        {"name": "theirs", "kind": "process_failed", "channels": [channels["b-hook"].pk]},
        format="json",
    )
    admins = api_as(lake.users["root"]).post(
        "/api/v1/alert-rules/",
        {"name": "mixed", "kind": "table_health", "team": "A", "channels": [channels["b-hook"].pk]},
        format="json",
    )

    assert (service.status_code, service.json()["field"]) == (400, "kind")
    assert (foreign.status_code, foreign.json()["field"]) == (400, "channels")
    assert (admins.status_code, admins.json()["field"]) == (400, "channels")
    assert AlertRule.objects.count() == count
    made = alice.post(
        "/api/v1/alert-rules/",
        {"name": "a-health", "kind": "table_health", "threshold": 70, "channels": [channels["a-hook"].pk]},
        format="json",
    )
    assert made.status_code == 201, made.content
    assert (made.json()["team"], made.json()["channels"]) == ("A", [channels["a-hook"].pk])


@pytest.mark.parametrize("username", sorted(SEES))
def test_the_alerts_page_shows_only_the_users_teams_alerts(lake, alerting, client_as, username):
    channels, _ = alerting
    client = client_as(lake.users[username])
    page = client.get("/alerts/")
    link = 'href="/alerts/"'
    if SEES[username] is None:
        assert page.status_code == 403
        assert client.post(f"/alerts/channels/{channels['admins'].pk}/test/").status_code == 403
        assert link not in client.get("/teams/").content.decode()  # the menu leaves the page out
        return
    sees_channels, sees_rules = SEES[username]
    assert page.status_code == 200
    assert link in client.get("/teams/").content.decode()
    assert {c.name for c in page.context["channels"]} == sees_channels
    assert {r.name for r in page.context["rules"]} == sees_rules
    for name, channel in channels.items():
        if name not in sees_channels:
            answer = client.post(f"/alerts/channels/{channel.pk}/test/")
            assert (name, answer.status_code) == (name, 404)
    assert mail.outbox == []


def test_the_admins_rule_form_holds_a_teams_rule_to_its_tables_and_channels(lake, alerting):
    channels, _ = alerting
    base = {"name": "from-admin", "enabled": True, "threshold": 60, "minutes": 0, "team": lake.teams["A"].pk}

    service = AlertRuleForm(data={**base, "kind": "service_silent"})
    foreign = AlertRuleForm(data={**base, "kind": "process_failed", "channels": [channels["b-hook"].pk]})
    own = AlertRuleForm(data={**base, "kind": "process_failed", "channels": [channels["a-hook"].pk]})

    assert not service.is_valid() and list(service.errors) == ["kind"]
    assert not foreign.is_valid() and list(foreign.errors) == ["channels"]
    assert own.is_valid(), own.errors


@pytest.mark.parametrize(
    ("username", "switchable"),
    [
        ("alice", {"a-hook", "a-failures"}),
        ("bob", {"b-hook"}),
        ("root", set(CHANNELS) | set(RULES)),
        ("olga", None),
        ("vic", None),
    ],
)
def test_the_alerts_page_switches_only_the_users_teams_channels_and_rules(
    lake, alerting, client_as, username, switchable
):
    channels, rules = alerting
    client = client_as(lake.users[username])
    answers = {}
    for name, channel in channels.items():
        answers[name] = client.post(f"/alerts/channels/{channel.pk}/toggle/").status_code
    for name, rule in rules.items():
        answers[name] = client.post(f"/alerts/rules/{rule.pk}/toggle/").status_code

    if switchable is None:
        assert set(answers.values()) == {403}
    else:
        assert answers == {name: 302 if name in switchable else 404 for name in answers}
    switched = {c.name for c in AlertChannel.objects.filter(enabled=False)} | {
        r.name for r in AlertRule.objects.filter(enabled=False)
    }
    assert switched == (switchable or set())
