"""Alert channels and rules changed in the console under teams (issue 32): a team operator creates,
edits and deletes their teams' channels and rules with forms that call the API's services; another
team's is 404, an admin's (team-less) one cannot be made, a team that is not theirs is a 400; every
change is audited as the API's are. And episodes: an admin's rule that fires on a team's table is
shown to the team (read only, without the admin's channels), not to another team."""

from __future__ import annotations

import pytest
from django.utils import timezone

from console.audit.models import AuditEvent
from processes.alerts.evaluation import evaluate_rule
from processes.alerts.models import AlertChannel, AlertEpisode, AlertRule

pytestmark = pytest.mark.django_db


def _state() -> list[tuple]:
    channels = AlertChannel.objects.values_list("name", "kind", "url", "recipients", "enabled", "team__name")
    rules = AlertRule.objects.values_list("name", "kind", "enabled", "threshold", "minutes", "team__name")
    links = AlertRule.channels.through.objects.values_list("alertrule__name", "alertchannel__name")
    return [sorted(channels), sorted(rules), sorted(links)]


def _trail(username: str) -> list[tuple]:
    events = AuditEvent.objects.filter(username=username).exclude(action="login").order_by("id")
    return list(events.values_list("action", "target_model", "target_label", "status"))


def test_a_team_operator_creates_edits_and_deletes_their_teams_channel_and_rule(lake, alerting, client_as):
    client = client_as(lake.users["alice"])
    team_a = lake.teams["A"]

    assert client.get("/alerts/channels/new/").status_code == 200
    made = client.post(
        "/alerts/channels/new/",
        {
            "name": "a-slack",
            "kind": "slack",
            "url": "https://hooks.example.org/a",
            "team": team_a.pk,
            "enabled": "on",
        },
    )
    assert made.status_code == 302, made.content.decode()
    channel = AlertChannel.objects.get(name="a-slack")
    assert (channel.kind, channel.url, channel.team, channel.enabled) == (
        "slack",
        "https://hooks.example.org/a",
        team_a,
        True,
    )
    edited = client.post(
        f"/alerts/channels/{channel.pk}/edit/",
        {"name": "a-mail", "kind": "email", "url": "", "recipients": "ops@example.org"},
    )
    assert edited.status_code == 302, edited.content.decode()
    channel.refresh_from_db()
    assert (channel.name, channel.kind, channel.recipients, channel.enabled, channel.team) == (
        "a-mail",
        "email",
        "ops@example.org",
        False,
        team_a,
    )

    made = client.post(
        "/alerts/rules/new/",
        {
            "name": "a-health",
            "kind": "table_health",
            "team": team_a.pk,
            "threshold": 70,
            "minutes": 5,
            "channels": [channel.pk],
            "enabled": "on",
        },
    )
    assert made.status_code == 302, made.content.decode()
    rule = AlertRule.objects.get(name="a-health")
    assert (rule.kind, rule.team, rule.threshold, rule.minutes, rule.enabled) == (
        "table_health",
        team_a,
        70,
        5,
        True,
    )
    assert [c.name for c in rule.channels.all()] == ["a-mail"]
    edited = client.post(f"/alerts/rules/{rule.pk}/edit/", {"threshold": 85, "minutes": 0, "enabled": "on"})
    assert edited.status_code == 302, edited.content.decode()
    rule.refresh_from_db()
    assert (rule.threshold, rule.minutes, rule.enabled, list(rule.channels.all())) == (85, 0, True, [])

    assert client.post(f"/alerts/rules/{rule.pk}/delete/").status_code == 302
    assert client.post(f"/alerts/channels/{channel.pk}/delete/").status_code == 302
    assert not AlertRule.objects.filter(name="a-health").exists()
    assert not AlertChannel.objects.filter(pk=channel.pk).exists()
    assert _trail("alice") == [
        ("alert-channel.create", "processes.AlertChannel", "a-slack (slack)", 302),
        ("alert-channel.update", "processes.AlertChannel", "a-slack (slack)", 302),
        ("alert-rule.create", "processes.AlertRule", "a-health (table_health)", 302),
        ("alert-rule.update", "processes.AlertRule", "a-health (table_health)", 302),
        ("alert-rule.delete", "processes.AlertRule", "a-health (table_health)", 302),
        ("alert-channel.delete", "processes.AlertChannel", "a-mail (email)", 302),
    ]


def test_the_console_and_the_api_record_the_same_actions(lake, alerting, api_as):
    api = api_as(lake.users["alice"])
    made = api.post(
        "/api/v1/alert-channels/", {"name": "a-api", "kind": "email", "recipients": "x@example.org"}
    )
    assert made.status_code == 201
    assert api.delete(f"/api/v1/alert-channels/{made.json()['id']}/").status_code == 204

    assert _trail("alice") == [
        ("alert-channel.create", "processes.AlertChannel", "a-api (email)", 201),
        ("alert-channel.delete", "processes.AlertChannel", "a-api (email)", 204),
    ]


def test_a_team_user_cannot_see_or_change_another_teams_or_an_admins_alerts(lake, alerting, client_as):
    channels, rules = alerting
    client = client_as(lake.users["alice"])
    before = _state()

    for name in ("admins", "b-hook"):
        pk = channels[name].pk
        assert (name, client.get(f"/alerts/channels/{pk}/edit/").status_code) == (name, 404)
        edit = client.post(
            f"/alerts/channels/{pk}/edit/", {"name": "taken", "kind": "email", "recipients": "x@y.org"}
        )
        assert (name, edit.status_code) == (name, 404)
        assert (name, client.post(f"/alerts/channels/{pk}/delete/").status_code) == (name, 404)
    for name in ("every-failure", "silence"):
        pk = rules[name].pk
        assert (name, client.get(f"/alerts/rules/{pk}/edit/").status_code) == (name, 404)
        assert (
            name,
            client.post(f"/alerts/rules/{pk}/edit/", {"threshold": 1, "minutes": 0}).status_code,
        ) == (
            name,
            404,
        )
        assert (name, client.post(f"/alerts/rules/{pk}/delete/").status_code) == (name, 404)

    channel = {"name": "sneaky", "kind": "email", "recipients": "x@example.org"}
    refusals = {
        "another team's channel": client.post(
            "/alerts/channels/new/", {**channel, "team": lake.teams["B"].pk}
        ),
        "an admin's channel": client.post("/alerts/channels/new/", {**channel, "team": ""}),
        "another team's rule": client.post(
            "/alerts/rules/new/",
            {
                "name": "sneaky",
                "kind": "process_failed",
                "threshold": 60,
                "minutes": 0,
                "team": lake.teams["B"].pk,
            },
        ),
        "an admin's rule": client.post(
            "/alerts/rules/new/", {"name": "sneaky", "kind": "process_failed", "threshold": 60, "minutes": 0}
        ),
        "a rule to B's channel": client.post(
            "/alerts/rules/new/",
            {
                "name": "sneaky",
                "kind": "process_failed",
                "threshold": 60,
                "minutes": 0,
                "team": lake.teams["A"].pk,
                "channels": [channels["b-hook"].pk],
            },
        ),
        "a service rule": client.post(
            "/alerts/rules/new/",
            {
                "name": "sneaky",
                "kind": "service_silent",
                "threshold": 60,
                "minutes": 0,
                "team": lake.teams["A"].pk,
            },
        ),
    }
    errors = {
        what: (answer.status_code, sorted(answer.context["form"].errors)) for what, answer in refusals.items()
    }
    assert errors == {
        "another team's channel": (400, ["team"]),
        "an admin's channel": (400, ["team"]),
        "another team's rule": (400, ["team"]),
        "an admin's rule": (400, ["team"]),
        "a rule to B's channel": (400, ["channels"]),
        "a service rule": (400, ["kind"]),
    }
    assert _state() == before
    # the forms offer only alice's team, and only its channels
    form = client.get("/alerts/rules/new/").context["form"]
    assert [t.name for t in form.fields["team"].queryset] == ["A"]
    assert [c.name for c in form.fields["channels"].queryset] == ["a-hook"]


def test_an_admin_makes_admins_channels_and_changes_any_teams(lake, alerting, client_as):
    channels, rules = alerting
    client = client_as(lake.users["root"])

    made = client.post(
        "/alerts/channels/new/", {"name": "pager", "kind": "webhook", "url": "https://pager.example.org/x"}
    )
    assert made.status_code == 302, made.content.decode()
    assert AlertChannel.objects.get(name="pager").team is None
    edited = client.post(
        f"/alerts/channels/{channels['b-hook'].pk}/edit/",
        {"name": "b-hook", "kind": "email", "recipients": "b-ops@example.org", "enabled": "on"},
    )
    assert edited.status_code == 302
    assert AlertChannel.objects.get(name="b-hook").recipients == "b-ops@example.org"
    # the service's rule for a team's rule, word for word as the API answers it
    refused = client.post(
        "/alerts/rules/new/",
        {
            "name": "mixed",
            "kind": "service_silent",
            "threshold": 60,
            "minutes": 0,
            "team": lake.teams["A"].pk,
        },
    )
    assert refused.status_code == 400
    assert refused.context["form"].errors["kind"] == [
        "a team's rule watches the team's tables: its kind is one of process_failed, table_health"
    ]
    assert client.post(f"/alerts/rules/{rules['silence'].pk}/delete/").status_code == 302
    assert set(AlertRule.objects.values_list("name", flat=True)) == {"every-failure", "a-failures"}


def test_bad_channel_input_is_a_400_beside_its_field_and_changes_nothing(lake, alerting, client_as):
    channels, _ = alerting
    client = client_as(lake.users["alice"])
    team = lake.teams["A"].pk
    before = _state()

    no_url = client.post("/alerts/channels/new/", {"name": "x", "kind": "webhook", "url": "", "team": team})
    taken = client.post(
        "/alerts/channels/new/",
        {"name": "b-hook", "kind": "email", "recipients": "x@example.org", "team": team},
    )
    no_recipient = client.post(
        f"/alerts/channels/{channels['a-hook'].pk}/edit/",
        {"name": "a-hook", "kind": "email", "recipients": " , "},
    )
    renamed = client.post(
        f"/alerts/channels/{channels['a-hook'].pk}/edit/",
        {"name": "admins", "kind": "email", "recipients": "a@example.org"},
    )

    assert (no_url.status_code, list(no_url.context["form"].errors)) == (400, ["url"])
    assert taken.status_code == 400
    assert taken.context["form"].non_field_errors() == ["an alert channel named 'b-hook' exists"]
    assert no_recipient.status_code == 400
    assert no_recipient.context["form"].errors["recipients"] == [
        "an e-mail channel needs at least one recipient"
    ]
    assert renamed.status_code == 400
    assert _state() == before


def test_an_admins_rule_firing_on_a_teams_table_is_shown_to_that_team_only(lake, alerting, client_as, api_as):
    channels, rules = alerting
    evaluate_rule(rules["every-failure"], timezone.now())  # an admin's rule, to the admin's channel
    channels["admins"].url = "https://secret.example.org/hook-token"
    channels["admins"].save()
    subjects = {name: f"process:{table.pk}:rewrite" for name, table in lake.tables.items()}
    assert set(AlertEpisode.objects.values_list("subject", flat=True)) == set(subjects.values())

    seen = {}
    for username in ("alice", "amy", "bob", "root"):
        page = client_as(lake.users[username]).get("/alerts/")
        listed = api_as(lake.users[username]).get("/api/v1/alert-episodes/")
        assert listed.status_code == 200
        rows = listed.json()["results"]
        on_page = {e.subject for e in page.context["episodes"]}
        assert on_page == {row["subject"] for row in rows}, username
        seen[username] = {name for name, subject in subjects.items() if subject in on_page}
        if username != "root":
            for text in (page.content.decode(), listed.content.decode()):
                assert "admins@example.org" not in text and "hook-token" not in text
        assert {(row["rule"], row["rule_team"]) for row in rows} <= {("every-failure", None)}
        assert set(rows[0]) == {
            "id",
            "rule",
            "rule_team",
            "subject",
            "message",
            "first_seen_at",
            "fired_at",
            "resolved_at",
        }

    assert seen == {
        "alice": {"a1", "a2"},
        "amy": {"a1", "a2"},
        "bob": {"b1", "b2", "b3"},
        "root": set(lake.tables),
    }
    # the deliveries stay each channel's: alice sees those to her team's channel, not the admin's
    delivered = api_as(lake.users["alice"]).get("/api/v1/alert-deliveries/").json()["results"]
    assert sorted((row["channel"], row["title"].rsplit(" ", 1)[1]) for row in delivered) == sorted(
        (channels["a-hook"].pk, subjects[name]) for name in ("a1", "a2")
    )
