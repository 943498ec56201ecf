"""Every maintenance decision explained (issue 31 item 3): a real tick on Postgres records, per due
(table, action), what it decided and why; a repeated outcome stays one row, each (table, action)
keeps a bounded history, and the tick's queries do not grow with the number of tables."""

from __future__ import annotations

import datetime as dt
import difflib

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from processes.decisions import KEEP, Decision, DecisionKind, DecisionLog, record
from processes.groups import services
from processes.models import PluginConfig, Process, ProcessStatus
from processes.registry import configured_factories
from processes.scheduler import schedule_tick
from storage.models import Table

pytestmark = pytest.mark.django_db


def _tables(count: int, *, prefix: str = "t", file_count: int = 10, properties=None) -> list[Table]:
    return Table.objects.bulk_create(
        Table(
            name=f"{prefix}{i}",
            identifier=f"{prefix}.t{i}",
            format="delta",
            location=f"/lake/{prefix}/t{i}",
            file_count=file_count,
            current_instant="1",
            properties=properties or {},
        )
        for i in range(count)
    )


def _configure(**properties) -> None:
    configured_factories()
    PluginConfig.objects.exclude(name="test-touch").update(enabled=False)
    PluginConfig.objects.filter(name="test-touch").update(
        properties={"parallelism": 10, "interval": 1, **properties}
    )


def _last(table: Table, action: str = "touch") -> Decision:
    return Decision.objects.filter(table=table, action=action).order_by("-id").first()


def test_a_run_is_recorded_with_its_process_and_the_tables_left_wait_for_a_slot(test_plugin):
    _configure(parallelism=1)
    tables = _tables(3)

    report = schedule_tick()

    (process,) = Process.objects.all()
    ran = _last(Table.objects.get(pk=process.table_id))
    assert (ran.kind, ran.process_id, ran.reason) == (
        DecisionKind.RAN,
        process.pk,
        f"process {process.pk} started",
    )
    assert ran.group == "default"
    waiting = [_last(t) for t in tables if t.pk != process.table_id]
    assert {d.kind for d in waiting} == {DecisionKind.WAITING_SLOT}
    assert waiting[0].reason == (
        "touch on delta tables runs at most 1 at once (the pair's parallelism); 0 were running and "
        "this tick started the others it could"
    )
    assert waiting[0].numbers == {"parallelism": 1, "running": 0}
    assert report.decisions == 3


def test_a_factory_that_gives_no_reason_is_recorded_as_nothing_to_do_saying_so(test_plugin):
    _configure(**{"min-files": 100})
    (table,) = _tables(1, file_count=10)

    schedule_tick()

    decision = _last(table)
    assert decision.kind == DecisionKind.NOTHING_TO_DO
    assert decision.reason == "factory test-touch found nothing to do (it gave no reason)"


def test_a_manual_only_action_is_recorded_as_such(test_plugin):
    _configure()
    (table,) = _tables(1, properties={"manual-actions": ["touch"]})

    schedule_tick()

    decision = _last(table)
    assert decision.kind == DecisionKind.MANUAL_ONLY
    assert (
        decision.reason
        == "the table's manual-actions override names touch: only operators start it (Run now)"
    )
    assert Process.objects.count() == 0


def test_a_factory_that_declines_or_fails_is_recorded_with_its_reason(test_plugin, monkeypatch):
    from lakewarden_test_plugin import TouchFactory

    _configure()
    declined, failing = _tables(2)

    def trigger(self, runtime, action):
        if runtime.table.pk == failing.pk:
            raise RuntimeError("metadata unreadable")
        return runtime.decline("primary-key tables are compacted by their writers")

    monkeypatch.setattr(TouchFactory, "trigger", trigger)
    report = schedule_tick()

    assert (_last(declined).kind, _last(declined).reason) == (
        DecisionKind.DECLINED,
        "primary-key tables are compacted by their writers",
    )
    assert (_last(failing).kind, _last(failing).reason) == (
        DecisionKind.FAILED,
        "factory test-touch failed: RuntimeError: metadata unreadable",
    )
    assert report.errors == {f"{failing.pk}:touch": "RuntimeError: metadata unreadable"}


def test_a_full_concurrency_budget_is_recorded_as_waiting_for_budget_naming_the_group(test_plugin):
    _configure()
    tables = _tables(3, prefix="small")
    services.resource_group_create(name="small", namespace_patterns=["small"], max_concurrency=1)

    schedule_tick()
    started = Process.objects.get().table_id
    # the first tick's losers lost the group's one free slot to the run it started (test_ranking_tick);
    # the next tick finds the group at its concurrency budget before it starts anything
    schedule_tick(now=timezone.now() + dt.timedelta(seconds=2))

    held = [_last(t) for t in tables if t.pk != started]
    assert Process.objects.count() == 1
    assert {(d.kind, d.group) for d in held} == {(DecisionKind.WAITING_BUDGET, "small")}
    assert held[0].reason == (
        "resource group small is at its concurrency budget (1 of 1 processes active); it takes more as they finish"
    )
    assert held[0].numbers == {"budget": "concurrency", "active": 1, "max_concurrency": 1}


def test_a_spent_compute_budget_says_when_the_rolling_hour_frees_room(test_plugin):
    _configure()
    (table,) = _tables(1, prefix="c")
    group = services.resource_group_create(name="c", namespace_patterns=["c"], compute_budget_seconds=100)
    now = timezone.now()
    Process.objects.create(  # 20 minutes inside the hour; another action, so touch's expected cost is 0
        table=table,
        action="vacuum",
        factory="test-touch",
        status=ProcessStatus.SUCCESS,
        started_at=now - dt.timedelta(minutes=50),
        finished_at=now - dt.timedelta(minutes=30),
        resource_group=group,
    )

    schedule_tick(now=now)

    decision = _last(table)
    until = now + dt.timedelta(minutes=30)  # the run has left the hour then
    assert (decision.kind, decision.group) == (DecisionKind.WAITING_BUDGET, "c")
    assert decision.numbers == {
        "budget": "compute",
        "used_seconds": 1200.0,
        "budget_seconds": 100,
        "reserved_seconds": 0,
        "expected_seconds": 0,
        "until": until.isoformat(),
    }
    assert decision.reason == (
        "resource group c used 1,200 of its 100 worker-seconds in the last hour; it takes more as older runs "
        f"leave the rolling hour; room again at {until:%Y-%m-%d %H:%M:%S} UTC at the latest"
    )


def test_a_below_benefit_decision_keeps_both_numbers():
    (table,) = _tables(1)

    record(
        table.pk,
        "touch",
        DecisionKind.BELOW_BENEFIT,
        "benefit 0.4 is below the minimum 2",
        group="default",
        numbers={"benefit": 0.4, "minimum": 2},
    )

    decision = _last(table)
    assert (decision.kind, decision.numbers, decision.group) == (
        DecisionKind.BELOW_BENEFIT,
        {"benefit": 0.4, "minimum": 2},
        "default",
    )


def test_an_unknown_kind_is_refused_and_nothing_is_written():
    (table,) = _tables(1)
    with pytest.raises(ValueError, match="unknown decision kind 'maybe'"):
        record(table.pk, "touch", "maybe", "?")
    assert Decision.objects.count() == 0


def test_the_same_outcome_again_is_one_row_counting_its_repeats(test_plugin):
    _configure(**{"min-files": 100})
    (table,) = _tables(1)
    now = timezone.now()

    for seconds in (0, 5, 10):
        schedule_tick(now=now + dt.timedelta(seconds=seconds))

    (decision,) = Decision.objects.filter(table=table)
    assert (decision.repeats, decision.at, decision.last_at) == (3, now, now + dt.timedelta(seconds=10))


def test_a_decision_for_a_table_deleted_meanwhile_is_dropped():
    kept, deleted = _tables(2)
    log = DecisionLog()
    for table in (kept, deleted):
        log.record(table.pk, "touch", DecisionKind.NOTHING_TO_DO, "idle")
    deleted.delete()

    assert log.flush() == 1
    assert list(Decision.objects.values_list("table_id", "reason")) == [(kept.pk, "idle")]


def test_the_history_of_each_table_and_action_stays_bounded():
    tables = _tables(2)
    for i in range(KEEP + 15):
        log = DecisionLog()
        for table in tables:
            log.record(table.pk, "touch", DecisionKind.NOTHING_TO_DO, f"outcome {i}")
            log.record(table.pk, "vacuum", DecisionKind.NOTHING_TO_DO, "always the same")
        log.flush()

    for table in tables:
        kept = list(Decision.objects.filter(table=table, action="touch").values_list("reason", flat=True))
        assert kept == [f"outcome {i}" for i in reversed(range(15, KEEP + 15))]
        assert Decision.objects.get(table=table, action="vacuum").repeats == KEEP + 15


def test_waiting_decisions_are_recorded_for_the_first_in_line_only(test_plugin):
    from processes.scheduler import WAITING_RECORDED

    _configure(parallelism=1)
    tables = _tables(WAITING_RECORDED + 50)

    report = schedule_tick()

    kinds = dict(Decision.objects.values_list("table_id", "kind"))
    assert report.due == len(tables)
    assert list(kinds.values()).count(DecisionKind.RAN) == 1
    assert list(kinds.values()).count(DecisionKind.WAITING_SLOT) == WAITING_RECORDED
    # the last ones in line wait without a row of their own this tick
    assert sum(1 for t in tables if t.pk not in kinds) == 49


def test_a_table_that_is_not_due_gets_no_decision(test_plugin):
    _configure(interval=600, **{"min-files": 100})
    (table,) = _tables(1)
    now = timezone.now()
    schedule_tick(now=now)

    report = schedule_tick(now=now + dt.timedelta(seconds=60))

    assert (report.due, report.decisions) == (0, 0)
    (decision,) = Decision.objects.filter(table=table)
    assert (decision.repeats, decision.last_at) == (1, now)


def _tick_queries(count: int, prefix: str) -> tuple[list[str], int]:
    """The SQL of one tick over ``count`` new due tables, and the decisions it recorded. (A run
    sharing its cache keys with another run beside it saw one more query now and then: the
    wake-all ``UPDATE`` after the other run changed the configuration fingerprint. Runs on their
    own test database have their own keys: tests/xdist_worker.py.)"""
    _tables(count, prefix=prefix)
    with CaptureQueriesContext(connection) as queries:
        report = schedule_tick(now=timezone.now() + dt.timedelta(hours=len(prefix)))
    return [q["sql"][:80] for q in queries.captured_queries], report.decisions


def test_the_ticks_queries_do_not_grow_with_the_number_of_tables_decided(test_plugin):
    _configure(**{"min-files": 100}, parallelism=1)
    schedule_tick()  # warm: plugin rows, configuration fingerprint, default group

    few, few_decided = _tick_queries(5, "a")
    Table.objects.all().delete()
    many, many_decided = _tick_queries(80, "bb")

    assert (few_decided, many_decided) == (5, 80)
    assert len(few) == len(many), "\n".join(difflib.unified_diff(few, many, lineterm=""))


def test_a_flush_writes_any_number_of_decisions_in_the_same_few_queries():
    tables = _tables(120)
    counts = []
    for size in (3, 120):
        for reason in ("first", "first", "second"):  # new rows, repeats, new rows again
            log = DecisionLog()
            for table in tables[:size]:
                log.record(table.pk, "touch", DecisionKind.NOTHING_TO_DO, reason)
            with CaptureQueriesContext(connection) as queries:
                log.flush()
            counts.append(len(queries))

    assert counts == [3, 2, 3, 3, 2, 3]  # last decisions; then insert + prune, or one update


# --- built-in factories on real tables -------------------------------------------------------------


def _only(factory: str) -> None:
    configured_factories()
    PluginConfig.objects.exclude(name=factory).update(enabled=False)
    PluginConfig.objects.filter(name=factory).update(enabled=True)


def test_a_built_in_factory_says_why_there_is_nothing_to_do_on_a_real_delta_table(make_delta):
    _only("delta-rewrite")
    table, _ = make_delta(files=3)
    table.properties = {**table.properties, "min-benefit": 0}  # ask the factory, whatever the benefit
    table.save(update_fields=["properties"])

    schedule_tick()

    decision = _last(table, "rewrite")
    assert decision.kind == DecisionKind.NOTHING_TO_DO
    assert decision.reason.startswith("nothing to do: no partition has 5 files under 16777216 bytes")
    assert Process.objects.count() == 0


def test_a_real_delta_table_below_the_minimum_benefit_keeps_both_numbers(make_delta):
    _only("delta-rewrite")
    table, _ = make_delta(files=3)

    schedule_tick()

    decision = _last(table, "rewrite")
    assert decision.kind == DecisionKind.BELOW_BENEFIT
    assert decision.numbers["minimum"] == 4 and decision.numbers["benefit"] < 4
    assert "below the minimum benefit of 4" in decision.reason


def test_a_delta_checkpoint_with_too_few_commits_says_how_many(make_delta):
    _only("delta-checkpoint")
    table, _ = make_delta(files=3)

    schedule_tick()

    decision = _last(table, "checkpoint")
    assert decision.kind == DecisionKind.NOTHING_TO_DO
    assert decision.reason.startswith(
        "nothing to do: 3 commit(s) since the last checkpoint, fewer than min-commits"
    )
