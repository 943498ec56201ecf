"""Benefit-ranked scheduling across actions (issue 31 item 2): every due (table, action) of a tick
competes for its resource group's free slots and budget in one order of benefit per cost, the
default estimate is computed over columns (and equals the per-table one), a factory's own
``estimate`` is asked for its own due tables only, and a tick's queries do not grow with the
number of due tables."""

from __future__ import annotations

import datetime as dt
import random

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from processes import registry
from processes.decisions import Decision, DecisionKind
from processes.estimates import Facts, default_estimates
from processes.groups.budget import usage
from processes.groups.models import DEFAULT_GROUP, ResourceGroup
from processes.models import Process, ProcessStatus
from processes.plugin import (
    CHECKPOINT,
    CONVERT_EQUALITY_DELETES,
    EXPIRE_SNAPSHOTS,
    PURGE_DELETION_VECTORS,
    REMOVE_DANGLING_DELETES,
    REWRITE,
    REWRITE_POSITION_DELETES,
    ProcessFactory,
    TableProcess,
    TableSummary,
    TriggerStrategy,
)
from processes.ranking import (
    DEFAULT_MIN_BENEFIT,
    DEFAULT_TARGET_FILE_SIZE,
    KEPT_SNAPSHOTS,
    OVERHEAD_SECONDS,
    Throughput,
    benefit,
    default_estimate,
)
from processes.registry import ConfiguredFactory
from processes.scheduler import schedule_tick
from storage.models import Table

pytestmark = pytest.mark.django_db

KIB = 1024
MIB = 1024 * KIB


class _Run(TableProcess):
    def run(self, context):  # these tests decide; no worker runs the processes
        raise NotImplementedError


class TwoActions(ProcessFactory):
    """Rewrite and expire-snapshots on Delta tables with the default estimate; every table asked
    gets a process."""

    name = "test-two-actions"
    default_properties = {"interval": 60, "parallelism": 10}

    def supported_actions(self):
        return {"delta": {REWRITE, EXPIRE_SNAPSHOTS}}

    def trigger_strategy(self, format, action):
        return TriggerStrategy(interval=dt.timedelta(seconds=60), parallelism=10)

    def trigger(self, runtime, action):
        return _Run(action, {})

    def recover(self, runtime, record):
        return _Run(record.action, record.params)


class OwnEstimate(TwoActions):
    """The same on Iceberg tables, with its own estimate (counting whom it was asked about)."""

    name = "test-own-estimate"
    asked: list[int] = []

    def supported_actions(self):
        return {"iceberg": {REWRITE}}

    def estimate(self, table, action):
        type(self).asked.append(table.id)
        return None  # the default stands


@pytest.fixture
def factories(monkeypatch):
    """Only these factories schedule; processes are created, not sent to a broker."""
    from processes import services

    installed = [ConfiguredFactory(name="test-two-actions", factory=TwoActions(), enabled=True, priority=0)]
    monkeypatch.setattr(registry, "configured_factories", lambda include_disabled=False: list(installed))
    monkeypatch.setattr(services, "process_enqueue", lambda process: None)
    return installed


def _table(name: str, *, small: int = 0, files: int | None = None, instants: int = 3, **facts) -> Table:
    files = small if files is None else files
    return Table.objects.create(
        name=name,
        identifier=f"ns.{name}",
        format=facts.pop("format", "delta"),
        location=f"/lake/{name}",
        current_instant="1",
        file_count=files,
        small_file_count=small,
        compactable_file_count=small if small >= 5 else 0,
        total_bytes=files * 100 * KIB,
        instant_count=instants,
        refreshed_at=timezone.now(),
        **facts,
    )


def _slots(count: int, **budget) -> ResourceGroup:
    ResourceGroup.objects.filter(name=DEFAULT_GROUP).update(max_concurrency=count, **budget)
    return ResourceGroup.objects.get(name=DEFAULT_GROUP)


def _started(report) -> list[tuple[str, str]]:
    return sorted(Process.objects.filter(pk__in=report.triggered).values_list("table__name", "action"))


def _decision(table: Table, action: str) -> Decision:
    return Decision.objects.filter(table=table, action=action).order_by("-id").first()


# --- across actions --------------------------------------------------------------------------------


def test_a_rewrite_of_200_small_files_takes_the_one_free_slot_before_an_expiry_of_2_snapshots(
    factories, settings
):
    _slots(1)
    poor = _table("poor", files=10, instants=12)  # expiry: 12 snapshots down to 10
    rich = _table("rich", small=200)  # rewrite: 200 small files into 1
    now = timezone.now()
    Table.objects.update(registered_at=now)  # due since now: no waiting to age the priorities

    report = schedule_tick(now=now)

    assert _started(report) == [("rich", REWRITE)]
    lost = _decision(poor, EXPIRE_SNAPSHOTS)
    assert (lost.kind, lost.group) == (DecisionKind.WAITING_SLOT, DEFAULT_GROUP)
    assert lost.reason == (
        f"resource group default had 1 free slot this tick and it went to work worth more per cost "
        f"(the last: rewrite on table {rich.pk}); it takes more as they finish"
    )
    winner = lost.numbers["lost_to"]
    assert (winner["table"], winner["action"]) == (rich.pk, REWRITE)
    # (199 small files + 40.3 health points + 1) / (5 s + 40,000 KiB at 32 MiB/s), against
    # (0.04 health points + 1) / 5 s: the rewrite's priority is about 186 times the expiry's
    assert lost.numbers["priority"] == pytest.approx(1.04 / OVERHEAD_SECONDS, rel=1e-3)
    assert winner["priority"] / lost.numbers["priority"] == pytest.approx(
        (199 + 40.3 + 1) / (OVERHEAD_SECONDS + 2 * 200 * 100 * KIB / (32 * MIB)) / 0.208, rel=1e-6
    )
    assert _decision(poor, REWRITE).kind == DecisionKind.BELOW_BENEFIT  # no small file: 0 points
    assert _decision(rich, REWRITE).kind == DecisionKind.RAN

    # the older order (ranking off): expire-snapshots comes first among the pairs, the poor table
    # first in line (never evaluated, lower id), so the expiry takes the slot
    settings.LAKEWARDEN_SCHEDULER_RANKING = False
    Process.objects.all().delete()
    Table.objects.all().delete()
    poor, rich = _table("poor2", files=10, instants=12), _table("rich2", small=200)
    assert _started(schedule_tick()) == [("poor2", EXPIRE_SNAPSHOTS)]


def test_the_groups_budgets_are_never_exceeded_by_work_of_several_actions(factories):
    group = _slots(3, compute_budget_seconds=1_000)
    now = timezone.now()
    spent = _table("spent")
    for minutes in (50, 40):  # two rewrites of 300 s in the hour: 600 s used, 300 s expected a run
        Process.objects.create(
            table=spent,
            action=REWRITE,
            factory="test-two-actions",
            status=ProcessStatus.SUCCESS,
            started_at=now - dt.timedelta(minutes=minutes),
            finished_at=now - dt.timedelta(minutes=minutes) + dt.timedelta(seconds=300),
            resource_group=group,
        )
    rewrites = [_table(f"r{i}", small=100 * (i + 1)) for i in range(3)]
    expiries = [_table(f"e{i}", files=10, instants=100 * (i + 2)) for i in range(3)]

    report = schedule_tick(now=now)

    # the richest rewrite fits the compute budget (600 + 300 <= 1,000), a second would not; the
    # expiries have no cost measured yet: the two best take the two slots left
    assert _started(report) == [("e1", EXPIRE_SNAPSHOTS), ("e2", EXPIRE_SNAPSHOTS), ("r2", REWRITE)]
    used = usage([group.pk], now=now)[group.pk]
    assert used.active == 3 == group.max_concurrency
    assert used.seconds + used.reserved(group, lambda g, a: 300.0 if a == REWRITE else 0.0) == 900
    held = _decision(rewrites[1], REWRITE)
    assert held.kind == DecisionKind.WAITING_BUDGET
    assert held.numbers["budget"] == "compute" and held.numbers["used_seconds"] == 600
    assert _decision(expiries[0], EXPIRE_SNAPSHOTS).kind == DecisionKind.WAITING_SLOT
    assert report.held == {DEFAULT_GROUP: len(report.triggered) and report.held[DEFAULT_GROUP]}
    assert report.held[DEFAULT_GROUP] >= 3  # r0, r1 for compute; e0 and the tables' other actions


def test_old_low_benefit_work_of_another_action_wins_a_slot_eventually(factories):
    _slots(1)
    start = timezone.now()
    low = _table("low", files=10, instants=12)
    Table.objects.filter(pk=low.pk).update(registered_at=start)
    fresh = TableSummary(0, "delta", 11, 11, 11, 0, 11 * 100 * KIB, 0)
    estimate = default_estimate(fresh, REWRITE, {})
    fresh_priority = (benefit(estimate) + 1) / Throughput().seconds(estimate)
    low_priority = (benefit(default_estimate(_summary(low), EXPIRE_SNAPSHOTS, {})) + 1) / OVERHEAD_SECONDS
    crossing = (fresh_priority / low_priority - 1) * 3600  # seconds of waiting for the low to pass
    ran_low_at = None
    for step in range(40):
        now = start + dt.timedelta(hours=2 * step)
        made = _table(f"fresh{step}", small=11, instants=0)
        Table.objects.filter(pk=made.pk).update(registered_at=now)
        report = schedule_tick(now=now)
        assert len(report.triggered) == 1  # the one slot, every tick
        started = Process.objects.get(pk=report.triggered[0])
        if (started.table_id, started.action) == (low.pk, EXPIRE_SNAPSHOTS):
            ran_low_at = now - start
            break
        assert started.action == REWRITE and started.table_id == made.pk
        Process.objects.filter(pk=started.pk).update(status=ProcessStatus.SUCCESS, finished_at=now)
        Table.objects.filter(pk=made.pk).update(small_file_count=0, compactable_file_count=0)

    # each fresh rewrite (priority about 6.4) wins until the expiry (about 0.21 x (1 + hours
    # waited)) passes it, after about 30 hours; the tick after that crossing runs it
    assert ran_low_at is not None
    assert crossing <= ran_low_at.total_seconds() < crossing + 2 * 3600


def _summary(table: Table) -> TableSummary:
    return TableSummary(
        table.pk, table.format, table.file_count, table.small_file_count, table.compactable_file_count,
        table.delete_file_count, table.total_bytes, table.instant_count,
    )  # fmt: skip


def test_a_ticks_queries_are_the_same_for_5_or_50_due_tables_of_two_actions(factories):
    _slots(1)
    counts = []
    for n in (5, 50):
        Process.objects.all().delete()
        Table.objects.all().delete()
        for i in range(n):
            _table(f"q{n}-{i}", small=10 + i, instants=20 + i)
        with CaptureQueriesContext(connection) as queries:
            report = schedule_tick()
        counts.append(len(queries))
        assert report.due == 2 * n and len(report.triggered) == 1
        # the richest rewrite took the slot; every other due run waits, decided
        assert _started(report) == [(f"q{n}-{n - 1}", REWRITE)]
        assert Decision.objects.filter(kind=DecisionKind.WAITING_SLOT).count() == 2 * n - 1
    assert counts[0] == counts[1]


def test_a_factorys_own_estimate_is_asked_about_its_own_due_tables_only(factories):
    factories.append(
        ConfiguredFactory(name="test-own-estimate", factory=OwnEstimate(), enabled=True, priority=0)
    )
    OwnEstimate.asked = []
    _slots(10)
    delta = [_table(f"d{i}", small=20) for i in range(3)]
    iceberg = [_table(f"i{i}", small=20, format="iceberg") for i in range(2)]

    report = schedule_tick()

    assert sorted(OwnEstimate.asked) == sorted(t.pk for t in iceberg)
    assert report.due == 2 * len(delta) + len(iceberg)


# --- the estimate over columns ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "action",
    [
        REWRITE,
        EXPIRE_SNAPSHOTS,
        CHECKPOINT,
        REWRITE_POSITION_DELETES,
        PURGE_DELETION_VECTORS,
        REMOVE_DANGLING_DELETES,
        CONVERT_EQUALITY_DELETES,
        "vacuum",
    ],
)
@pytest.mark.parametrize(
    "properties",
    [{}, {"min-input-files": 2}, {"target-file-size": 64 * MIB, "delete-file-threshold": 1}],
)
def test_the_estimate_over_columns_equals_the_per_table_estimate(action, properties):
    rng = random.Random(31)
    tables = []
    for i in range(400):
        files = rng.choice([0, 1, 3, 20, 300, 9_000, 20_000])
        small = rng.randrange(0, files + 1) if files else 0
        compactable = rng.choice([None, 0, small, small // 2])
        size = rng.choice([KIB, MIB, 200 * MIB])
        tables.append(
            TableSummary(
                i,
                "iceberg",
                files,
                small,
                compactable,
                rng.randrange(0, 50),
                files * size,
                rng.randrange(0, 900),
            )
        )
    facts = Facts(
        np.array([t.id for t in tables]),
        *(
            np.array([getattr(t, name) for t in tables], dtype=float)
            for name in ("file_count", "small_file_count")
        ),
        np.array([np.nan if t.compactable_file_count is None else t.compactable_file_count for t in tables]),
        *(
            np.array([getattr(t, name) for t in tables], dtype=float)
            for name in ("delete_file_count", "total_bytes", "instant_count")
        ),
    )

    found = default_estimates(
        facts,
        action,
        properties,
        target_default=DEFAULT_TARGET_FILE_SIZE,
        deletes_actions=frozenset(DEFAULT_MIN_BENEFIT),
        kept_snapshots=KEPT_SNAPSHOTS,
    )

    one_by_one = [default_estimate(t, action, properties) for t in tables]
    assert found.benefit.tolist() == pytest.approx([benefit(e) for e in one_by_one])
    assert found.moved.tolist() == [e.bytes_read + e.bytes_written for e in one_by_one]
    assert found.small_removed.tolist() == [e.small_files_removed for e in one_by_one]
    assert found.deletes_removed.tolist() == [e.delete_files_removed for e in one_by_one]
    assert any(b > 0 for b in found.benefit) or action in ("vacuum", CHECKPOINT)


def test_the_ticks_facts_from_its_awake_scan_equal_the_facts_query():
    """The tick reads the due tables' facts in its awake scan (packed records); the facts query
    (``DueFacts(ids)``) reads them row by row: the same numbers, flags and texts, including
    missing maintenance times, never-refreshed tables and overriding properties."""
    from processes.due import Snapshot
    from processes.estimates import DueFacts

    now = timezone.now()
    rng = random.Random(7)
    tables = Table.objects.bulk_create(
        Table(
            name=f"f{i}", format=("delta", "iceberg")[i % 2], location=f"/lake/f{i}",
            current_instant=f"snap-{i}", file_count=rng.randrange(0, 10**6), small_file_count=rng.randrange(0, 500),
            compactable_file_count=rng.randrange(0, 400), delete_file_count=rng.randrange(0, 90),
            total_bytes=rng.randrange(0, 2**50), instant_count=rng.randrange(0, 3000),
            last_maintenance_at=None if i % 3 else now - dt.timedelta(seconds=i * 7.5),
            refreshed_at=None if i % 4 == 1 else now,
            properties={"min-benefit": 3} if i % 5 == 0 else ({"owner": "x"} if i % 5 == 1 else {}),
        )
        for i in range(40)
    )  # fmt: skip
    Table.objects.filter(pk=tables[3].pk).update(registered_at=now - dt.timedelta(days=3, microseconds=250))
    ids = np.array(sorted(t.pk for t in tables))

    scanned = DueFacts.of_snapshot(Snapshot(now), ids)
    queried = DueFacts(ids.tolist(), None)

    assert scanned.ids.tolist() == queried.ids.tolist() == ids.tolist()
    for name in ("files", "small", "compactable", "deletes", "total_bytes", "instants"):
        assert getattr(scanned.facts, name).tolist() == getattr(queried.facts, name).tolist(), name
    np.testing.assert_allclose(scanned.registered, queried.registered, rtol=0, atol=1e-6)
    np.testing.assert_allclose(scanned.maintained, queried.maintained, rtol=0, atol=1e-6)
    assert np.isnan(scanned.maintained).sum() == 26  # never maintained: NaN in both
    assert scanned.refreshed.tolist() == queried.refreshed.tolist() and not scanned.refreshed.all()
    assert scanned.own.tolist() == queried.own.tolist() and scanned.own.sum() == 8
    assert list(scanned.formats) == list(queried.formats)
    for row in range(len(ids)):
        assert scanned.instants[row] == queried.instants[row]
        assert scanned.properties[row] == queried.properties[row]
        assert scanned.summary(row) == queried.summary(row)
