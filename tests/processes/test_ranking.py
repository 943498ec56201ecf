"""Benefit-ranked scheduling (issue 31 item 2): due tables asked in order of benefit per cost, work
below the minimum benefit skipped with its decision recorded, waiting work aged so it is run, the
group's budgets kept, and a bounded number of queries whatever the number of due tables."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from processes.decisions import Decision, DecisionKind, DecisionLog, recording
from processes.groups import services as groups
from processes.models import PluginConfig, Process, ProcessStatus
from processes.overrides import table_overrides_update
from processes.plugin import REWRITE, Estimate, TableSummary
from processes.ranking import (
    DEFAULT_THROUGHPUT,
    OVERHEAD_SECONDS,
    Throughput,
    benefit,
    default_estimate,
    measured_throughput,
    rank_due,
)
from processes.registry import configured_factories, validate_properties
from processes.scheduler import evaluated_key, schedule_tick
from storage.errors import InvalidInput
from storage.health import TableFacts, table_health
from storage.models import Table

pytestmark = pytest.mark.django_db

KIB = 1024
MIB = 1024 * KIB


def _table(name: str, *, small: int, files: int | None = None, size: int = 100 * KIB, **facts) -> Table:
    files = small if files is None else files
    return Table.objects.create(
        name=name,
        format="delta",
        location=f"/lake/{name}",
        current_instant="1",
        file_count=files,
        small_file_count=small,
        # as a refresh counts them: small files in a partition holding at least 5 of them
        compactable_file_count=small if small >= 5 else 0,
        total_bytes=files * size,
        refreshed_at=timezone.now(),
        **facts,
    )


def _touch(**properties) -> None:
    """Only the test factory schedules (its estimate: each small file but one removed)."""
    configured_factories()
    PluginConfig.objects.exclude(name="test-touch").update(enabled=False)
    PluginConfig.objects.filter(name="test-touch").update(properties={"interval": 60, **properties})


def _delta_rewrite():
    return next(c for c in configured_factories(include_disabled=True) if c.name == "delta-rewrite")


def _finish_all(now: dt.datetime) -> None:
    """The pending processes succeed, and their tables' small files are compacted away."""
    pending = Process.objects.filter(status=ProcessStatus.PENDING)
    Table.objects.filter(pk__in=pending.values("table_id")).update(
        small_file_count=0, compactable_file_count=0
    )
    pending.update(status=ProcessStatus.SUCCESS, started_at=now, finished_at=now)


# --- the estimate from a table's facts -------------------------------------------------------------


def test_the_default_rewrite_estimate_counts_the_small_files_a_compaction_removes():
    table = TableSummary(
        id=1,
        format="delta",
        file_count=2_000,
        small_file_count=2_000,
        compactable_file_count=2_000,
        total_bytes=2_000 * MIB,
    )

    estimate = default_estimate(table, REWRITE, {"target-file-size": 128 * MIB})

    # 2,000 files of 1 MiB fill 16 files of 128 MiB: 1,984 removed, 2,000 MiB read and written
    assert estimate.small_files_removed == 1_984
    assert estimate.bytes_read == estimate.bytes_written == 2_000 * MIB
    assert estimate.health_gain == pytest.approx(43)  # small files 40 of 40, file count 3 of 15
    assert benefit(estimate) == pytest.approx(1_984 + 43)


@pytest.mark.parametrize(
    ("files", "small", "compactable", "instants", "action"),
    [
        (2_000, 2_000, 2_000, 3, REWRITE),
        (300, 40, 12, 20, REWRITE),
        (9_000, 8_000, 8_000, 900, REWRITE),
        (50, 0, 0, 800, "expire-snapshots"),
        (10, 3, 0, 3, REWRITE),
    ],
)
def test_the_health_gain_is_what_the_health_score_says_the_run_changes(
    files, small, compactable, instants, action
):
    table = TableSummary(1, "delta", files, small, compactable, 0, files * MIB, instants)
    estimate = default_estimate(table, action, {"target-file-size": 128 * MIB})
    after = TableFacts(
        files - estimate.small_files_removed,
        small - (compactable if action == REWRITE else 0),
        min(instants, 10) if action != REWRITE else instants,
        0 if action == REWRITE else compactable,
    )
    now = timezone.now()  # maintained now before and after: staleness is not what a run gains
    score = table_health(TableFacts(files, small, instants, compactable), now, 0, now).score
    assert estimate.health_gain == pytest.approx(score - table_health(after, now, 0, now).score, abs=1)


def _run(table: Table, seconds: float, moved: int, *, status: str = ProcessStatus.SUCCESS) -> None:
    Process.objects.create(
        table=table,
        action=REWRITE,
        factory="delta-rewrite",
        status=status,
        finished_at=timezone.now(),
        measured={"cost": {"worker_seconds": seconds, "bytes_read": moved // 2, "bytes_written": moved // 2}},
    )


def test_cost_is_fitted_to_the_measured_seconds_and_bytes_of_the_actions_past_runs():
    table = _table("measured", small=10)
    assert measured_throughput(REWRITE) == Throughput(DEFAULT_THROUGHPUT, 0, OVERHEAD_SECONDS)
    _run(table, 30, 40 * MIB)  # 20 s to start and commit, then 4 MiB per worker-second
    _run(table, 50, 120 * MIB)
    # two runs: their bytes over their seconds beyond the default overhead
    assert measured_throughput(REWRITE).bytes_per_second == pytest.approx(160 * MIB / (25 + 45))
    _run(table, 120, 400 * MIB)
    _run(table, 1, 10**12, status=ProcessStatus.FAILED)  # a failed run measures nothing

    measured = measured_throughput(REWRITE)

    assert measured.runs == 3
    assert measured.overhead == pytest.approx(20)
    assert measured.bytes_per_second == pytest.approx(4 * MIB)
    assert measured.seconds(Estimate(bytes_read=20 * MIB, bytes_written=20 * MIB)) == pytest.approx(30)
    assert measured.seconds(Estimate(seconds=7)) == 7  # a factory's own figure stands
    assert measured_throughput("expire-snapshots") == Throughput(DEFAULT_THROUGHPUT, 0, OVERHEAD_SECONDS)


# --- ranking ---------------------------------------------------------------------------------------


def test_a_table_with_2000_small_files_is_asked_before_one_with_2_and_one_with_20():
    two = _table("two", small=2)
    twenty = _table("twenty", small=20)
    many = _table("many", small=2_000)

    ranked = rank_due(
        _delta_rewrite(),
        REWRITE,
        [two.pk, twenty.pk, many.pk],  # as the due query gives them: longest waiting first
        now=timezone.now(),
        evaluated_key=evaluated_key(REWRITE),
    )

    assert ranked.order == [many.pk, twenty.pk]
    assert [t.pk for t in ranked.below_minimum] == [two.pk]  # 2 files into 1: 1 point, under 4
    assert ranked.shortfall[two.pk][1] == 4.0 and ranked.shortfall[two.pk][0] < 4
    assert ranked.priority[many.pk] > ranked.priority[twenty.pk]


def test_a_rewrite_configured_for_fewer_input_files_is_not_skipped_for_its_small_tables():
    """The rewrite's minimum follows its ``min-input-files`` (a run of the fewest files it takes is
    worth it), and the stored compactable figure (partitions of 5 or more) does not hide what a
    rewrite configured for 2 files would merge."""
    three = _table("three", small=3)  # compactable 0 as a refresh counts it
    one = _table("one", small=1)
    configured_factories()  # the configuration rows
    PluginConfig.objects.filter(name="delta-rewrite").update(properties={"min-input-files": 2})

    ranked = rank_due(
        _delta_rewrite(),
        REWRITE,
        [three.pk, one.pk],
        now=timezone.now(),
        evaluated_key=evaluated_key(REWRITE),
    )

    assert ranked.order == [three.pk]  # 3 small files into 1: 2 points, over the minimum of 1
    assert [t.pk for t in ranked.below_minimum] == [one.pk]
    assert ranked.shortfall[one.pk][1] == 1.0
    # by default (5 input files) the same table is below the minimum of 4
    PluginConfig.objects.filter(name="delta-rewrite").update(properties={})
    default = rank_due(
        _delta_rewrite(), REWRITE, [three.pk], now=timezone.now(), evaluated_key=evaluated_key(REWRITE)
    )
    assert default.order == [] and default.shortfall[three.pk][1] == 4.0


def test_below_the_minimum_benefit_is_skipped_evaluated_and_its_decision_recorded(test_plugin):
    _touch(parallelism=5, **{"min-benefit": 10})
    few = _table("few", small=3)  # 2 small files removed: 2 points
    enough = _table("enough", small=40)

    report = schedule_tick()

    assert [p.table_id for p in Process.objects.filter(pk__in=report.triggered)] == [enough.pk]
    decision = Decision.objects.get(table=few, action="touch")
    assert decision.kind == DecisionKind.BELOW_BENEFIT
    assert decision.numbers["benefit"] == 2 and decision.numbers["minimum"] == 10
    assert "below the minimum benefit of 10" in decision.reason
    # counted as evaluated: not due again before the interval, so not decided again
    again = schedule_tick(now=timezone.now() + dt.timedelta(seconds=30))
    assert again.due == 0
    # a table's override lowers the minimum for that table
    table_overrides_update(table=few, overrides={"min-benefit": 1})
    later = schedule_tick(now=timezone.now() + dt.timedelta(seconds=120))
    assert [p.table_id for p in Process.objects.filter(pk__in=later.triggered)] == [few.pk]


def test_a_below_minimum_table_whose_snapshot_moves_during_the_tick_is_not_recorded_as_evaluated(
    test_plugin, monkeypatch
):
    """The tick ranks on the awake scan's facts and reads snapshot ids later: a table whose snapshot
    moves in between gets its decision but no evaluation record, so it is due again at once."""
    from processes.estimates import DueFacts
    from processes.models import TableState
    from processes.scheduler import evaluated_key

    _touch(parallelism=5, **{"min-benefit": 10})
    few = _table("few", small=3)
    stays = _table("stays", small=3)
    scanned = DueFacts.of_snapshot

    def then_a_commit(snapshot, ids):
        facts = scanned(snapshot, ids)
        Table.objects.filter(pk=few.pk).update(current_instant="moved")  # another writer commits
        return facts

    monkeypatch.setattr(DueFacts, "of_snapshot", staticmethod(then_a_commit))

    report = schedule_tick()

    assert set(
        Decision.objects.filter(kind=DecisionKind.BELOW_BENEFIT).values_list("table_id", flat=True)
    ) == {
        few.pk,
        stays.pk,
    }
    assert set(TableState.objects.filter(key=evaluated_key("touch")).values_list("table_id", flat=True)) == {
        stays.pk
    }
    assert report.due == 2 and report.skipped_busy == 0
    monkeypatch.undo()
    again = schedule_tick(now=timezone.now() + dt.timedelta(seconds=30))
    assert again.due == 1  # the moved one, at its new snapshot


def test_a_bad_minimum_benefit_is_refused_with_the_property_named(test_plugin):
    from processes.registry import factory_classes

    with pytest.raises(InvalidInput, match="min-benefit: -1 is less than the minimum of 0"):
        validate_properties(factory_classes()["delta-rewrite"], {"min-benefit": -1})
    with pytest.raises(InvalidInput, match="min-benefit: 'lots' is not of type 'number'"):
        validate_properties(factory_classes()["test-touch"], {"min-benefit": "lots"})
    table = _table("kept", small=3)
    _touch()
    with pytest.raises(InvalidInput, match="min-benefit"):
        table_overrides_update(table=table, overrides={"min-benefit": -5})
    table.refresh_from_db()
    assert "min-benefit" not in table.properties
    assert validate_properties(factory_classes()["delta-rewrite"], {})["min-benefit"] is None


def test_a_low_benefit_table_waiting_behind_fresh_richer_work_is_eventually_run(test_plugin):
    _touch(parallelism=1, interval=1)
    start = timezone.now()
    low = _table("low", small=2)  # 1 point; every hour a fresh table with 100 small files arrives
    Table.objects.filter(pk=low.pk).update(registered_at=start)
    ran_low_at = None
    for hour in range(80):
        now = start + dt.timedelta(hours=hour)
        fresh = _table(f"fresh{hour}", small=101)
        Table.objects.filter(pk=fresh.pk).update(registered_at=now)
        report = schedule_tick(now=now)
        chosen = [p.table_id for p in Process.objects.filter(pk__in=report.triggered)]
        assert len(chosen) == 1
        _finish_all(now)
        if chosen == [low.pk]:
            ran_low_at = hour
            break

    # fresh work wins at first; the low table's priority (1+1)/5 x (1 + hours waited) passes a
    # fresh table's (100+1)/5 after about 50 hours of waiting
    assert ran_low_at is not None and 40 <= ran_low_at <= 60


def test_ranked_work_fills_the_groups_slots_and_never_exceeds_them(test_plugin):
    _touch(parallelism=10)
    groups.resource_group_create(name="small", namespace_patterns=["*"], max_concurrency=2)
    tables = [_table(f"g{i}", small=small) for i, small in enumerate([5, 300, 50, 2_000, 8])]
    for i, table in enumerate(tables):
        Table.objects.filter(pk=table.pk).update(identifier=f"ns.g{i}")

    report = schedule_tick()

    chosen = {p.table_id for p in Process.objects.filter(pk__in=report.triggered)}
    assert chosen == {tables[3].pk, tables[1].pk}  # the two richest, 2,000 and 300 small files
    assert Process.objects.filter(status=ProcessStatus.PENDING).count() == 2
    assert report.held == {"small": 3}
    # the next tick, with both still pending, adds nothing
    again = schedule_tick(now=timezone.now() + dt.timedelta(seconds=120))
    assert again.triggered == [] and Process.objects.filter(status=ProcessStatus.PENDING).count() == 2


def test_ranking_reads_the_same_two_queries_for_10_or_500_due_tables():
    factory = _delta_rewrite()
    counts = []
    for n in (10, 500):
        tables = Table.objects.bulk_create(
            Table(
                name=f"q{n}-{i}",
                format="delta",
                location=f"/lake/q{n}/{i}",
                current_instant="1",
                file_count=100,
                small_file_count=i % 50,
                compactable_file_count=i % 50,
                total_bytes=100 * MIB,
                refreshed_at=timezone.now(),
            )
            for i in range(n)
        )
        # as in a tick: decisions are kept in the tick's log, written once at its end
        with recording(DecisionLog(timezone.now())), CaptureQueriesContext(connection) as queries:
            ranked = rank_due(
                factory,
                REWRITE,
                [t.pk for t in tables],
                now=timezone.now(),
                evaluated_key=evaluated_key(REWRITE),
            )
        counts.append(len(queries))
        assert len(ranked.order) + len(ranked.below_minimum) == n
        # 0 to 4 small files: 0 to 3.5 points, under the rewrite's 4
        assert len(ranked.below_minimum) == sum(1 for i in range(n) if i % 50 < 5)
    assert counts[0] == counts[1] == 2


def test_the_interval_order_is_kept_when_ranking_is_off(settings):
    settings.LAKEWARDEN_SCHEDULER_RANKING = False
    two = _table("two", small=2)
    many = _table("many", small=2_000)

    ranked = rank_due(
        _delta_rewrite(), REWRITE, [two.pk, many.pk], now=timezone.now(), evaluated_key=evaluated_key(REWRITE)
    )

    assert ranked.order == [two.pk, many.pk] and ranked.below_minimum == []
