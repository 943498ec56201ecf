"""The scheduler tick: due tables only, one active process per (table, action), parallelism."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from processes.models import PluginConfig, Process, ProcessStatus, ProcessTrigger
from processes.registry import configured_factories
from processes.scheduler import schedule_tick
from storage.models import Table

pytestmark = pytest.mark.django_db


def _tables(count: int, *, file_count: int = 10) -> list[Table]:
    return Table.objects.bulk_create(
        Table(
            name=f"t{i}", format="delta", location=f"/lake/t{i}", file_count=file_count, current_instant="1"
        )
        for i in range(count)
    )


def _configure(**properties) -> None:
    """Only the test factory schedules here (the built-in ones would evaluate the tables too)."""
    configured_factories()
    PluginConfig.objects.exclude(name="test-touch").update(enabled=False)
    PluginConfig.objects.filter(name="test-touch").update(properties=properties)


def test_a_tick_triggers_due_tables_up_to_the_parallelism(test_plugin):
    _configure(parallelism=2)
    _tables(5)

    report = schedule_tick()

    assert len(report.triggered) == 2
    assert report.skipped_busy == 3
    processes = Process.objects.all()
    assert {p.status for p in processes} == {ProcessStatus.PENDING}
    assert {p.trigger for p in processes} == {ProcessTrigger.SCHEDULE}


def test_a_table_with_an_active_process_is_not_triggered_again(test_plugin):
    _configure(parallelism=10, interval=1)
    _tables(1)
    schedule_tick()

    later = timezone.now() + dt.timedelta(seconds=5)
    report = schedule_tick(now=later)

    assert report.triggered == []
    assert Process.objects.count() == 1


def test_a_table_is_evaluated_again_only_after_the_interval(test_plugin):
    _configure(parallelism=10, interval=600, **{"min-files": 100})  # factory declines: too few files
    _tables(3, file_count=10)
    now = timezone.now()

    first = schedule_tick(now=now)
    soon = schedule_tick(now=now + dt.timedelta(seconds=60))
    later = schedule_tick(now=now + dt.timedelta(seconds=601))

    assert (first.due, soon.due, later.due) == (3, 0, 3)
    assert Process.objects.count() == 0


def test_on_new_snapshot_triggers_only_when_the_table_moved(test_plugin):
    _configure(parallelism=10, interval=1, **{"on-new-snapshot": True})
    (table,) = _tables(1)
    now = timezone.now()
    schedule_tick(now=now)
    Process.objects.update(status=ProcessStatus.SUCCESS)

    unchanged = schedule_tick(now=now + dt.timedelta(seconds=10))
    Table.objects.filter(pk=table.pk).update(current_instant="2")
    moved = schedule_tick(now=now + dt.timedelta(seconds=20))

    assert unchanged.triggered == [] and len(moved.triggered) == 1


def test_a_disabled_factory_triggers_nothing(test_plugin):
    _configure(parallelism=10)
    PluginConfig.objects.filter(name="test-touch").update(enabled=False)
    _tables(3)

    assert schedule_tick().triggered == []


def test_a_tick_over_many_idle_tables_uses_a_bounded_number_of_queries(
    test_plugin, django_assert_max_num_queries
):
    _configure(parallelism=10, interval=3600, **{"min-files": 100})  # the factory declines every table
    _tables(300, file_count=10)
    first = schedule_tick()

    with django_assert_max_num_queries(12):
        report = schedule_tick(now=timezone.now() + dt.timedelta(seconds=30))

    assert first.due == 300 and first.triggered == []
    assert report.tables_considered == 300 and report.due == 0
