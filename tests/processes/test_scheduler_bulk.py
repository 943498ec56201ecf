"""The scheduler tick's bulk paths (issue 31, a tick at 100,000 due tables): once nothing left in
the ranked order can be asked, the walk settles the rest over columns (``_Walk._settle``) and
decides exactly what the one-by-one walk decides; each awake table's next wake time is gathered
as columns (the due queries', the due tables' by whether they were asked) and written in one
update."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from processes import registry, scheduler
from processes.decisions import Decision, DecisionKind
from processes.groups import services as group_services
from processes.groups.models import DEFAULT_GROUP, ResourceGroup
from processes.models import ACTIVE_STATUSES, Process, ProcessStatus, TableState
from processes.plugin import EXPIRE_SNAPSHOTS, REWRITE
from processes.registry import ConfiguredFactory
from processes.scheduler import NEVER, schedule_tick
from storage.models import Table
from tests.processes.test_ranking_tick import KIB, TwoActions

pytestmark = pytest.mark.django_db


@pytest.fixture
def factories(monkeypatch):
    """Only the two-action factory schedules (rewrite, expire-snapshots on Delta, interval 60 s,
    parallelism 10); processes are created, not sent to a broker."""
    from processes import services

    installed = [ConfiguredFactory(name="test-two-actions", factory=TwoActions(), enabled=True, priority=0)]
    monkeypatch.setattr(registry, "configured_factories", lambda include_disabled=False: list(installed))
    monkeypatch.setattr(services, "process_enqueue", lambda process: None)


def _tables(namespace: str, count: int, now: dt.datetime) -> list[Table]:
    """Tables of varied worth: rewrites of 10 to 10 + 7 (count - 1) small files, expiries of 12
    to 12 + 5 (count - 1) snapshots, some registered (due) earlier than others."""
    made = Table.objects.bulk_create(
        Table(
            name=f"{namespace}{i}",
            identifier=f"{namespace}.t{i}",
            format="delta",
            location=f"/lake/{namespace}/t{i}",
            current_instant="1",
            file_count=10 + 7 * i,
            small_file_count=10 + 7 * i,
            compactable_file_count=10 + 7 * i,
            total_bytes=(10 + 7 * i) * 100 * KIB,
            instant_count=12 + 5 * i,
            refreshed_at=now,
        )
        for i in range(count)
    )
    for i, table in enumerate(made):
        Table.objects.filter(pk=table.pk).update(registered_at=now - dt.timedelta(minutes=(i * 13) % 90))
    return made


def _outcome(report) -> dict:
    """What a tick decided, by table name: the runs started, every decision with its reason and
    numbers, the holds counted per group."""
    decisions = {  # a run's reason names its process, whose id differs from tick to tick
        (d.table.name, d.action): (d.kind, d.group, "" if d.kind == DecisionKind.RAN else d.reason, d.numbers)
        for d in Decision.objects.select_related("table")
    }
    started = sorted(Process.objects.filter(pk__in=report.triggered).values_list("table__name", "action"))
    held = {g.name: g.held.get("by_action") for g in ResourceGroup.objects.order_by("name")}
    return {"started": started, "decisions": decisions, "held": report.held, "by_action": held}


def _undo_tick() -> None:
    Decision.objects.all().delete()
    Process.objects.all().delete()
    TableState.objects.all().delete()
    Table.objects.update(scheduler_wake_at=None, scheduler_instant="")
    ResourceGroup.objects.update(held={})


def test_the_walk_settled_in_bulk_decides_what_the_walk_one_by_one_decides(factories, monkeypatch):
    now = timezone.now()
    ResourceGroup.objects.filter(name=DEFAULT_GROUP).update(max_concurrency=2)
    group_services.resource_group_create(name="small", namespace_patterns=["small"], max_concurrency=1)
    default_tables, small_tables = _tables("big", 30, now), _tables("small", 30, now)
    monkeypatch.setattr(scheduler, "WAITING_RECORDED", 7)  # a cap the bulk path meets mid-pair
    settled_at: list[int] = []
    settle = scheduler._Walk._settle

    def spy(walk, start, group_pks):
        settled_at.append(start)
        return settle(walk, start, group_pks)

    monkeypatch.setattr(scheduler._Walk, "_settle", spy)

    monkeypatch.setattr(scheduler, "WALK_CHUNK", 4)
    in_bulk = _outcome(schedule_tick(now=now))
    bulk_settled_at = list(settled_at)
    _undo_tick()
    settled_at.clear()
    monkeypatch.setattr(scheduler, "WALK_CHUNK", 10**9)  # checked once, at the start: one by one
    one_by_one = _outcome(schedule_tick(now=now))

    assert bulk_settled_at == [4] and settled_at == []  # 3 slots: full after the first 4 entries
    assert in_bulk == one_by_one
    # the best work of each group ran: rewrites of many small files that waited longest (due 68
    # and 81 minutes ago) before the larger ones of 28 and 29 due 4 and 17 minutes ago
    assert in_bulk["started"] == [("big26", REWRITE), ("big27", REWRITE), ("small27", REWRITE)]
    # 120 due (table, action): 3 ran, the other 117 held (60 per group, less what ran)
    assert in_bulk["held"] == {DEFAULT_GROUP: 58, "small": 59}
    assert in_bulk["by_action"] == {
        DEFAULT_GROUP: {REWRITE: 28, EXPIRE_SNAPSHOTS: 30},
        "small": {REWRITE: 29, EXPIRE_SNAPSHOTS: 30},
    }
    kinds: dict[str, int] = {}
    for kind, *_ in in_bulk["decisions"].values():
        kinds[kind] = kinds.get(kind, 0) + 1
    # 3 ran; 7 waiting decisions per (format, action) pair, the first in line; nothing else
    assert kinds == {DecisionKind.RAN: 3, DecisionKind.WAITING_SLOT: 14}
    kind, group, reason, numbers = in_bulk["decisions"][("small26", REWRITE)]
    assert (kind, group) == (DecisionKind.WAITING_SLOT, "small")
    assert reason == (
        "resource group small had 1 free slot this tick and it went to work worth more per cost "
        f"(the last: rewrite on table {small_tables[27].pk}); it takes more as they finish"
    )
    assert numbers["lost_to"]["table"] == small_tables[27].pk
    assert (numbers["group_slots"], numbers["max_concurrency"]) == (1, 1)
    # budgets never exceeded: no group runs more than its concurrency
    active = Process.objects.filter(status__in=ACTIVE_STATUSES)
    assert sorted(active.values_list("resource_group__name", flat=True)) == [
        DEFAULT_GROUP,
        DEFAULT_GROUP,
        "small",
    ]
    assert default_tables[0].pk not in {p.table_id for p in active}


def test_a_full_group_at_the_start_of_the_tick_settles_everything_in_bulk(factories, monkeypatch):
    now = timezone.now()
    group = ResourceGroup.objects.get(name=DEFAULT_GROUP)
    ResourceGroup.objects.filter(pk=group.pk).update(max_concurrency=1)
    busy, *waiting = _tables("ns", 5, now)
    Process.objects.create(
        table=busy,
        action=REWRITE,
        factory="test-two-actions",
        status=ProcessStatus.RUNNING,
        resource_group=group,
    )
    asked: list[int] = []
    monkeypatch.setattr(TwoActions, "trigger", lambda self, runtime, action: asked.append(runtime.table.pk))

    report = schedule_tick(now=now)

    assert asked == [] and report.triggered == []  # no factory asked: the group had no room
    # 9 due (table, action): busy's rewrite is running, its expiry and the others' two actions wait
    assert report.held == {DEFAULT_GROUP: 9}
    waits = Decision.objects.filter(kind=DecisionKind.WAITING_BUDGET)
    assert waits.count() == 9
    assert set(waits.values_list("reason", flat=True)) == {
        "resource group default is at its concurrency budget (1 of 1 processes active); it takes more as they finish"
    }
    assert {(d.numbers["active"], d.numbers["max_concurrency"]) for d in waits} == {(1, 1)}
    assert sorted(waits.filter(action=REWRITE).values_list("table_id", flat=True)) == [t.pk for t in waiting]


def test_the_wake_times_a_tick_writes(factories):
    now = timezone.now()
    ResourceGroup.objects.filter(name=DEFAULT_GROUP).update(max_concurrency=3)
    rich, poor, waiting = _tables("w", 3, now)[::-1]
    Table.objects.filter(pk=poor.pk).update(small_file_count=0, compactable_file_count=0)  # below the minimum
    Table.objects.filter(pk=rich.pk).update(instant_count=200)
    other = Table.objects.create(name="ice", format="iceberg", location="/lake/ice", current_instant="7")

    schedule_tick(now=now)

    wakes = dict(Table.objects.values_list("name", "scheduler_wake_at"))
    started = sorted(Process.objects.values_list("table__name", "action"))
    # the three best runs started: the two rewrites, the expiry of 200 snapshots
    assert started == [(waiting.name, REWRITE), (rich.name, EXPIRE_SNAPSHOTS), (rich.name, REWRITE)]
    # rich: both actions evaluated now, again after the 60 s interval
    assert wakes[rich.name] == now + dt.timedelta(seconds=60)
    # the others wait for a slot for their expiry (poor's rewrite is below the minimum: evaluated)
    assert wakes[waiting.name] == now and wakes[poor.name] == now
    assert wakes["ice"] == NEVER  # no pair for Iceberg tables: only a new snapshot wakes it
    instants = dict(Table.objects.values_list("name", "scheduler_instant"))
    assert instants == {rich.name: "1", poor.name: "1", waiting.name: "1", "ice": "7"}

    # the next tick, with the slots still taken: the waiting tables stay awake, their wake time
    # (passed already at the same snapshot) is not written again; rich stays asleep
    Table.objects.filter(pk=other.pk).update(current_instant="8")  # a new snapshot wakes it
    schedule_tick(now=now + dt.timedelta(seconds=10))
    wakes = dict(Table.objects.values_list("name", "scheduler_wake_at"))
    assert wakes[rich.name] == now + dt.timedelta(seconds=60)
    assert wakes[waiting.name] == now and wakes[poor.name] == now
    assert wakes["ice"] == NEVER and Table.objects.get(pk=other.pk).scheduler_instant == "8"
