"""The Maintenance tab and ``GET /api/v1/tables/{id}/maintenance/`` show a table's decisions with
their reasons, the last and next evaluation, and the effective settings (issue 31 item 3)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from processes.decisions import DecisionKind, record
from processes.models import PluginConfig, Process
from processes.registry import configured_factories
from processes.scheduler import schedule_tick
from storage.models import Table

pytestmark = pytest.mark.django_db


def _configure(**properties) -> None:
    configured_factories()
    PluginConfig.objects.exclude(name="test-touch").update(enabled=False)
    PluginConfig.objects.filter(name="test-touch").update(
        properties={"parallelism": 1, "interval": 600, **properties}
    )


def _table(name: str, **extra) -> Table:
    return Table.objects.create(
        name=name, format="delta", location=f"/lake/{name}", file_count=10, current_instant="1", **extra
    )


@pytest.fixture
def decided(test_plugin):
    """Two tables after one tick: ``ran`` got the pair's only slot, ``waits`` waits for it;
    ``waits`` overrides min-files."""
    _configure()
    ran = _table("ran")
    waits = _table("waits", properties={"min-files": 3})
    now = timezone.now()
    schedule_tick(now=now)
    return ran, waits, now


def test_the_api_gives_each_actions_decisions_next_evaluation_and_effective_settings(decided, api_as, viewer):
    ran, waits, now = decided
    process = Process.objects.get(table=ran)

    body = api_as(viewer).get(f"/api/v1/tables/{waits.pk}/maintenance/").json()

    (touch,) = [a for a in body["actions"] if a["action"] == "touch"]
    assert (touch["state"], touch["factory"], touch["interval_seconds"]) == ("enabled", "test-touch", 600)
    settings = touch["settings"]  # the table's min-files override over the factory's 0
    assert (settings["min-files"], settings["interval"], settings["parallelism"]) == (3, 600, 1)
    (decision,) = touch["decisions"]
    assert (decision["kind"], decision["kind_label"], decision["process"], decision["repeats"]) == (
        "waiting-slot",
        "Waiting for a slot",
        None,
        1,
    )
    assert "runs at most 1 at once (the pair's parallelism)" in decision["reason"]
    assert (
        touch["last_evaluated_at"] is None
        and touch["next_evaluation"] == "at the next tick (due, waiting for a slot)"
    )

    ran_touch = next(
        a
        for a in api_as(viewer).get(f"/api/v1/tables/{ran.pk}/maintenance/").json()["actions"]
        if a["action"] == "touch"
    )
    assert ran_touch["decisions"][0]["kind"] == "ran" and ran_touch["decisions"][0]["process"] == process.pk
    assert ran_touch["active_process"] == process.pk
    assert dt.datetime.fromisoformat(ran_touch["last_evaluated_at"]) == now.replace(
        microsecond=now.microsecond
    )
    assert dt.datetime.fromisoformat(ran_touch["next_evaluation_at"]) == now + dt.timedelta(seconds=600)


def test_disabled_factories_actions_are_listed_disabled_with_the_reason(decided, api_as, viewer):
    _, waits, _ = decided
    actions = {
        a["action"]: a
        for a in api_as(viewer).get(f"/api/v1/tables/{waits.pk}/maintenance/").json()["actions"]
    }

    assert actions["vacuum"]["state"] == "disabled"
    assert actions["vacuum"]["note"] == "factory delta-vacuum is disabled (an admin enables it under Plugins)"
    assert actions["vacuum"]["decisions"] == []


def test_a_missing_table_is_404_and_an_anonymous_call_401(api_as, viewer):
    assert api_as(viewer).get("/api/v1/tables/999999/maintenance/").status_code == 404
    assert api_as(None).get("/api/v1/tables/1/maintenance/").status_code == 401


def test_the_tab_shows_the_last_decision_with_its_reason_and_the_history(decided, client_as, viewer):
    ran, waits, _ = decided
    record(
        waits.pk,
        "touch",
        DecisionKind.BELOW_BENEFIT,
        "benefit 0.4 is below the minimum 2",
        numbers={"benefit": 0.4, "minimum": 2},
    )

    page = client_as(viewer).get(f"/tables/{waits.pk}/maintenance/")

    assert page.status_code == 200
    html = page.content.decode()
    row = html[html.index('id="action-touch"') : html.index("</tr>", html.index('id="action-touch"'))]
    assert "Below the minimum benefit" in row and "benefit 0.4 is below the minimum 2" in row
    history = html[html.index('id="maintenance-history"') :]
    assert history.index("Below the minimum benefit") < history.index("Waiting for a slot")
    assert "<code>benefit=0.4</code>" in history and "<code>minimum=2</code>" in history
    assert f'hx-get="/tables/{waits.pk}/overrides/"' in html  # the overrides form, loaded into the tab
    assert 'class="active">Maintenance</a>' in html

    ran_page = (
        client_as(viewer).get(f"/tables/{ran.pk}/maintenance/", HTTP_HX_REQUEST="true").content.decode()
    )
    process = Process.objects.get(table=ran)
    assert f'<a href="/processes/{process.pk}/">#{process.pk}</a>' in ran_page
    assert "<html" not in ran_page  # the fragment alone for htmx


def test_a_table_never_evaluated_says_no_decisions_yet(test_plugin, client_as, viewer):
    _configure()
    table = _table("fresh")

    html = client_as(viewer).get(f"/tables/{table.pk}/maintenance/").content.decode()

    assert "No decisions yet" in html and "at the next tick (never evaluated)" in html


def test_the_api_reads_a_table_in_the_same_queries_whatever_its_history(test_plugin, api_as, viewer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from processes.decisions import KEEP, DecisionLog

    _configure()
    short, long = _table("short"), _table("long")
    record(short.pk, "touch", DecisionKind.NOTHING_TO_DO, "once")
    for i in range(KEEP + 5):
        log = DecisionLog()
        log.record(long.pk, "touch", DecisionKind.NOTHING_TO_DO, f"outcome {i}")
        log.record(long.pk, "vacuum", DecisionKind.WAITING_SLOT, f"outcome {i}")
        log.flush()
    api = api_as(viewer)
    api.get(f"/api/v1/tables/{short.pk}/maintenance/")  # warm: plugin rows, sessions

    counts, bodies = [], {}
    for table in (short, long):
        with CaptureQueriesContext(connection) as queries:
            bodies[table.name] = api.get(f"/api/v1/tables/{table.pk}/maintenance/").json()
        counts.append(len(queries))

    assert counts[0] == counts[1]
    touch = next(a for a in bodies["long"]["actions"] if a["action"] == "touch")
    assert [d["reason"] for d in touch["decisions"]] == [f"outcome {i}" for i in reversed(range(5, KEEP + 5))]


def test_a_wake_time_in_the_past_is_not_promised_as_a_future_one(test_plugin, client_as, viewer):
    _configure()
    table = _table("overslept")
    past = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    future = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)

    Table.objects.filter(pk=table.pk).update(scheduler_wake_at=past)
    html = client_as(viewer).get(f"/tables/{table.pk}/maintenance/").content.decode()
    assert "at its next tick (its wake time, 2026-01-02 03:04:05 UTC, has passed)" in html
    assert "2026-01-02 03:04:05 UTC at the latest" not in html

    Table.objects.filter(pk=table.pk).update(scheduler_wake_at=future)
    html = client_as(viewer).get(f"/tables/{table.pk}/maintenance/").content.decode()
    assert f"at {future:%Y-%m-%d %H:%M:%S} UTC at the latest" in html
