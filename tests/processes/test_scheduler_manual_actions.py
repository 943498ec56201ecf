"""A table's ``manual-actions`` property keeps the scheduler off it for those actions (the demo
leaves one table that way so a newcomer's first Preview has work to show)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from processes.models import PluginConfig, Process, TableState
from processes.registry import configured_factories
from processes.scheduler import evaluated_key, manual_actions, schedule_tick
from storage.models import Table

pytestmark = pytest.mark.django_db


def _configure(**properties) -> None:
    configured_factories()
    PluginConfig.objects.exclude(name="test-touch").update(enabled=False)
    PluginConfig.objects.filter(name="test-touch").update(properties=properties)


def _table(name: str, **properties) -> Table:
    return Table.objects.create(
        name=name,
        format="delta",
        location=f"/lake/{name}",
        file_count=10,
        current_instant="1",
        properties=properties,
    )


@pytest.mark.parametrize("value", ["*", "touch", ["touch"], "rewrite, touch"])
def test_a_table_naming_the_action_in_manual_actions_is_never_triggered(test_plugin, value):
    _configure(parallelism=10, interval=1)
    kept = _table("kept", **{"manual-actions": value})
    other = _table("other")
    now = timezone.now()

    first = schedule_tick(now=now)
    later = schedule_tick(now=now + dt.timedelta(seconds=5))

    assert list(Process.objects.values_list("table_id", flat=True)) == [other.pk]
    assert first.triggered and later.triggered == []
    # counted as evaluated: not looked at again before the interval, like a declining factory
    assert TableState.objects.filter(table=kept, key=evaluated_key("touch")).exists()


def test_other_actions_and_other_values_leave_the_table_to_the_scheduler(test_plugin):
    _configure(parallelism=10, interval=1)
    _table("rewrite-only", **{"manual-actions": ["rewrite"]})
    _table("not-a-list", **{"manual-actions": 7})

    report = schedule_tick()

    assert len(report.triggered) == 2


def test_manual_actions_reads_strings_lists_and_nothing():
    def names(value):
        return manual_actions(Table(properties={} if value is None else {"manual-actions": value}))

    assert names(None) == set()
    assert names("*") == {"*"}
    assert names(" rewrite , vacuum,") == {"rewrite", "vacuum"}
    assert names(["rewrite", ""]) == {"rewrite"}
    assert names({"rewrite": True}) == set()


def test_run_now_still_works_on_a_manual_table(test_plugin):
    from processes.services import process_create

    _configure(parallelism=10, interval=1)
    table = _table("kept", **{"manual-actions": "*"})

    process = process_create(table=table, action="touch", params={})

    assert process.table_id == table.pk
