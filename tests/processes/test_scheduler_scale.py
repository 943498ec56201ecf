"""The scheduler at scale (issue 17): due tables are chosen in the database, with a number of
queries that does not grow with the number of tables, and exactly the tables the per-table rule
(evaluated within the interval, snapshot already seen, busy with the action) leaves due."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from processes.models import Process, ProcessStatus, TableState
from processes.plugin import TriggerStrategy
from processes.scheduler import (
    TickReport,
    _due_table_ids,
    _Snapshot,
    evaluated_key,
    schedule_tick,
    seen_snapshot_key,
)
from storage.models import Table
from tests.processes.test_scheduler import _configure, _tables

pytestmark = pytest.mark.django_db

ACTION = "touch"


def _reference_due(tables, states, busy, strategy, now) -> list[int]:
    """The per-table rule the tick applied in Python before issue 17 (its executable spec)."""
    due = []
    for table in tables:
        if table.pk in busy:
            continue
        state = states.get(table.pk, {})
        evaluated = state.get(evaluated_key(ACTION))
        if evaluated is not None and now.timestamp() - float(evaluated) < strategy.interval.total_seconds():
            continue
        if strategy.on_new_snapshot and state.get(seen_snapshot_key(ACTION)) == table.current_instant:
            continue
        due.append((float(evaluated or 0), table.pk))
    return [pk for _, pk in sorted(due)]


@pytest.fixture
def mix():
    """Delta tables in every state the rule distinguishes, and Iceberg tables that never count."""
    now = timezone.now()
    tables = Table.objects.bulk_create(
        Table(name=f"m{i}", format="delta", location=f"/lake/m{i}", current_instant=str(i % 3))
        for i in range(12)
    )
    Table.objects.bulk_create(
        Table(name=f"i{i}", format="iceberg", location=f"/lake/i{i}", current_instant="0") for i in range(3)
    )
    ages = [None, 10, 50, 700, 700, 3000, None, 5, 900, 1200, 700, 40]  # seconds since evaluated
    seen = ["0", "1", None, "0", "x", "2", None, "1", "2", "0", "1", None]
    rows = []
    for table, age, instant in zip(tables, ages, seen, strict=True):
        if age is not None:
            rows.append(TableState(table=table, key=evaluated_key(ACTION), value=now.timestamp() - age))
        if instant is not None:
            rows.append(TableState(table=table, key=seen_snapshot_key(ACTION), value=instant))
    rows.append(TableState(table=tables[4], key=evaluated_key("other"), value=now.timestamp()))
    TableState.objects.bulk_create(rows)
    busy = {tables[3].pk}
    Process.objects.create(table=tables[3], action=ACTION, factory="t", status=ProcessStatus.RUNNING)
    Process.objects.create(table=tables[5], action="other", factory="t", status=ProcessStatus.RUNNING)
    Process.objects.create(table=tables[8], action=ACTION, factory="t", status=ProcessStatus.SUCCESS)
    return tables, busy, now


@pytest.mark.parametrize("by_id", [True, False], ids=["state-by-id", "state-of-every-table"])
@pytest.mark.parametrize("on_new_snapshot", [False, True])
@pytest.mark.parametrize("interval", [30, 600])
def test_the_database_picks_the_tables_the_per_table_rule_picks(
    mix, on_new_snapshot, interval, by_id, monkeypatch
):
    """Both ways the due query reads the evaluation state (by the awake tables' ids, or every row
    of the pairs' keys when most tables are awake) pick the tables the rule picks."""
    if not by_id:
        monkeypatch.setattr("processes.due.STATE_BY_ID", 0)
    tables, busy, now = mix
    strategy = TriggerStrategy(interval=dt.timedelta(seconds=interval), on_new_snapshot=on_new_snapshot)
    states: dict[int, dict] = {}
    for table_id, key, value in TableState.objects.values_list("table_id", "key", "value"):
        states.setdefault(table_id, {})[key] = value
    expected = _reference_due(tables, states, busy, strategy, now)

    report = TickReport()
    due = _due_table_ids(_Snapshot(now), "delta", ACTION, strategy, now, report)

    assert due == expected
    assert report.due == len(expected) and report.tables_considered == 12
    assert expected  # the mix leaves some tables due and keeps others back in every case
    assert len(expected) < len(tables) - len(busy)


def test_never_evaluated_tables_come_first_then_the_longest_waiting(mix):
    tables, _, now = mix
    strategy = TriggerStrategy(interval=dt.timedelta(seconds=600))

    due = _due_table_ids(_Snapshot(now), "delta", ACTION, strategy, now, TickReport())

    never = sorted(t.pk for t, i in zip(tables, range(12), strict=True) if i in (0, 6))
    assert due[:2] == never
    assert due[2:] == [tables[5].pk, tables[9].pk, tables[8].pk, tables[4].pk, tables[10].pk]


def test_an_idle_tick_over_2000_tables_uses_the_same_few_queries_as_over_20(test_plugin):
    _configure(parallelism=10, interval=3600, **{"min-files": 100})  # the factory declines every table
    _tables(20, file_count=10)
    schedule_tick()
    with CaptureQueriesContext(connection) as small:
        schedule_tick(now=timezone.now() + dt.timedelta(seconds=30))
    Table.objects.bulk_create(
        Table(name=f"b{i}", format="delta", location=f"/lake/b{i}", current_instant="1", file_count=10)
        for i in range(1980)
    )
    first = schedule_tick()

    with CaptureQueriesContext(connection) as large:
        report = schedule_tick(now=timezone.now() + dt.timedelta(seconds=30))

    assert first.due == 1980 and first.triggered == []
    assert report.tables_considered == 2000 and report.due == 0
    assert len(large.captured_queries) == len(small.captured_queries) <= 6


def test_an_idle_table_is_looked_at_again_when_its_interval_passes_or_the_configuration_changes(test_plugin):
    _configure(parallelism=10, interval=3600, **{"min-files": 100})  # the factory declines every table
    _tables(3, file_count=10)
    now = timezone.now()
    schedule_tick(now=now)
    asleep = schedule_tick(now=now + dt.timedelta(seconds=120))
    _configure(parallelism=10, interval=60, **{"min-files": 100})

    shortened = schedule_tick(now=now + dt.timedelta(seconds=120))
    again = schedule_tick(now=now + dt.timedelta(seconds=150))
    after_interval = schedule_tick(now=now + dt.timedelta(seconds=181))

    assert (asleep.due, shortened.due, again.due, after_interval.due) == (0, 3, 0, 3)
    assert set(Table.objects.values_list("scheduler_wake_at", flat=True)) == {
        now + dt.timedelta(seconds=181 + 60)
    }


def test_a_snapshot_that_moves_after_the_awake_scan_is_not_recorded_as_seen(mix):
    """The facts of a tick are the awake scan's; the snapshot ids recorded as evaluated are read
    later (only when wanted). A table whose snapshot moved in between gets none: what was decided
    for it was decided at the snapshot before, so it must be due again at the new one."""
    from processes.due import Snapshot
    from processes.estimates import DueFacts

    tables, _, now = mix
    snapshot = Snapshot(now)
    moved, kept = tables[1], tables[2]
    Table.objects.filter(pk=moved.pk).update(current_instant="99")

    facts = DueFacts.of_snapshot(snapshot, np.array(sorted([moved.pk, kept.pk])))

    rows = {int(table_id): row for row, table_id in enumerate(facts.ids)}
    assert facts.instants[rows[moved.pk]] is None
    assert facts.instants[rows[kept.pk]] == kept.current_instant == "2"
    assert list(facts.formats) == ["delta", "delta"]


def test_wake_times_are_written_in_place_without_new_index_entries(test_plugin):
    """A tick that looks at many tables writes each one's wake time. No index holds the wake time
    and pages keep 30% free (``fillfactor``), so those writes are heap-only updates as far as a
    page's room goes (in one pass over full pages of small rows: about 3 in 7), not each a new
    row version with an entry in every index of the wide table (20 s for 100,000 tables when it
    was: every one of them)."""
    _configure(parallelism=1, interval=3600, **{"min-files": 100})  # the factory declines every table
    _tables(40)

    def counts() -> tuple[int, int]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_stat_get_xact_tuples_updated(c.oid), pg_stat_get_xact_tuples_hot_updated(c.oid),"
                " c.reloptions FROM pg_class c WHERE c.relname = %s",
                [Table._meta.db_table],
            )
            updated, hot, options = cursor.fetchone()
        assert options == ["fillfactor=70"]
        return updated, hot

    updated_before, hot_before = counts()

    schedule_tick()

    assert Table.objects.filter(scheduler_wake_at=None).count() == 0
    updated, hot = (
        after - before for after, before in zip(counts(), (updated_before, hot_before), strict=True)
    )
    assert updated == 40
    assert hot >= 40 * 3 // 10  # with an index on the wake time: none
    with connection.cursor() as cursor:
        indexed = [
            name
            for name, definition in connection.introspection.get_constraints(
                cursor, Table._meta.db_table
            ).items()
            if "scheduler_wake_at" in definition["columns"] or "scheduler_instant" in definition["columns"]
        ]
    assert indexed == []


def test_the_awake_scan_gives_each_formats_tables_sorted_with_their_counts():
    """The scan packs one value per format; the tick reads every awake table sorted by id, each
    with its format, and each format's count (ids far apart, formats interleaved)."""
    from processes.due import Snapshot

    ids = [7, 2**20 + 3, 3 * 2**20 + 1]
    Table.objects.bulk_create(
        Table(
            id=table_id,
            name=f"b{table_id}",
            format="delta",
            location=f"/lake/b{table_id}",
            current_instant="1",
        )
        for table_id in ids
    )
    Table.objects.create(
        id=2**20 + 9, name="ice", format="iceberg", location="/lake/ice", current_instant="1"
    )

    snapshot = Snapshot(timezone.now())

    assert snapshot.awake == {"delta": ids, "iceberg": [2**20 + 9]}
    assert (snapshot.table_count("delta"), snapshot.table_count("iceberg")) == (3, 1)
    assert snapshot.ids.tolist() == sorted([*ids, 2**20 + 9])
    assert [snapshot.format_names[c] for c in snapshot.format_codes] == ["delta", "delta", "iceberg", "delta"]
