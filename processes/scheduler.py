"""The scheduler tick: which (table, action) pairs are due, within parallelism, one active each.

Bounded queries whatever the number of tables: one for active processes, one reading the awake
tables (counting tables per format, and packing each awake table's facts and group inputs), then
one for every (format, action) pair at once that reads what due-ness is decided from (the
evaluation times and seen snapshots kept as ``TableState`` rows: ``processes.due``, which also
writes every awake table's next wake time in one update), a few for the groups (their rules and
explicit assignments; the due tables' groups come from the awake scan), one for the actions'
measured costs; factories are only asked about tables that are due.

Every due (table, action) of every pair is ranked in one order of benefit per cost
(``processes.ranking.rank_tick``) and the tick walks it: a run is asked when its pair has a free
slot (``parallelism``) and its resource group (processes/groups) has room; otherwise it is held
back (it stays due, counted on the group's row and logged) and its factory is not asked. So a
group's free slots and budget go to its best work whatever the action. Once nothing left in line
can be asked, the rest is settled over columns (``_Walk._settle``): at 100,000 due tables the
walk does Python work for the few it asks and the waits it records, not for every table. A process is created only
after ``budget.admit`` under the group's row lock agreed, and is sent to the group's queue.

A table whose ``manual-actions`` property names an action (or is ``"*"``) is left to operators for
it: the scheduler counts it as evaluated and never triggers it ("run now" and the preview still
work), so a table can be kept as it is on purpose.

Each due (table, action) gets a decision (``processes.decisions``): ran, nothing to do, waiting for
a slot (the pair's, or the group's free slots taken by work ranked first this tick) or for budget,
manual only, declined, failed; all written in one flush at the end of the tick (at most
``WAITING_RECORDED`` waiting decisions per pair, the first in line).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from dataclasses import dataclass, field

import numpy as np
from django.core.cache import cache
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from processes.decisions import DecisionKind, DecisionLog, record, recording
from processes.decisions.waits import budget_wait
from processes.due import NEVER, Snapshot, due_table_ids, evaluated_key, seen_snapshot_key
from processes.estimates import DueFacts
from processes.groups.budget import BudgetExhausted
from processes.groups.models import ResourceGroup
from processes.groups.tick import TickGroups
from processes.models import ProcessStatus, ProcessTrigger, TableState
from processes.plugin import TriggerStrategy
from processes.ranking import PairDue, TickRanking, rank_tick
from processes.registry import ConfiguredFactory, coordinators
from processes.runtime import TableRuntime
from processes.services import process_create
from processes.sql_arrays import int_array, json_array
from storage.errors import Conflict, InvalidInput
from storage.models import Table

logger = logging.getLogger(__name__)


EVALUATION_BATCH = 100
#: Ranked entries the walk takes at a time before it checks whether the rest can only wait.
WALK_CHUNK = 256
#: Waiting decisions (slot, budget) recorded per (format, action) per tick: the first in line.
WAITING_RECORDED = 200


@dataclass
class TickReport:
    pairs: int = 0
    tables_considered: int = 0
    due: int = 0
    triggered: list[int] = field(default_factory=list)
    skipped_busy: int = 0
    #: Resource group name -> due runs held back for its budgets this tick.
    held: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    #: Decision rows this tick inserted (a repeated outcome updates its row instead).
    decisions: int = 0


PAIRS_CACHE_KEY = "lakewarden:scheduler:pairs:v1"


def schedule_tick(*, now: dt.datetime | None = None) -> TickReport:
    now = now or timezone.now()
    report = TickReport()
    pairs = coordinators()
    report.pairs = len(pairs)
    _wake_all_if_configuration_changed(pairs)
    snapshot = Snapshot(now)
    groups = TickGroups(now)
    log = DecisionLog(now)
    with recording(log):
        due = _due_pairs(pairs, snapshot, now, report)
        open_pairs = [pair for pair in due if pair.free > 0]
        for pair in due:
            if pair.free <= 0:  # no slot of its own: its tables wait, unranked, as they came
                _record_slot_waits(log, pair, pair.due.ids)
        if open_pairs:
            due_ids = snapshot.union([pair.due.ids for pair in open_pairs])
            groups.group_of_due = groups.resolve_awake(snapshot, due_ids)
            # Benefit per cost across every pair (processes/ranking.py): a resource group's free
            # slots and budget go to its best work whatever the action; the facts are the awake
            # scan's.
            ranking = rank_tick(
                [pair.due for pair in open_pairs],
                now=now,
                groups_of=groups.group_of_due,
                facts=DueFacts.of_snapshot(snapshot, due_ids),
            )
            _Walk(open_pairs, ranking, report, groups, log).run()
        _record_evaluations(due, now)
        for pair in due:
            report.skipped_busy += len(pair.due.ids) - len(pair.asked) - pair.unrecorded
            snapshot.wake_due(pair)
    snapshot.save_wakes()
    report.held = groups.save()
    report.decisions = _flush(log)
    return report


@dataclass
class _Pair:
    """A (format, action) pair with due tables in this tick."""

    due: PairDue
    strategy: TriggerStrategy
    running: int
    free: int
    #: Evaluated this tick (asked, or below the minimum benefit): table id -> its snapshot.
    asked: dict[int, str] = field(default_factory=dict)
    waits_recorded: int = 0
    #: Evaluated this tick but not recorded: their snapshot moved since the awake scan.
    unrecorded: int = 0


def _due_pairs(pairs, snapshot: Snapshot, now: dt.datetime, report: TickReport) -> list[_Pair]:
    """The pairs with due tables, in the order of their factories' priority (one query each)."""
    running: dict[tuple[str, str], int] = {}
    for key in snapshot.active:
        running[key] = running.get(key, 0) + 1
    due = []
    ordered = sorted(pairs.items(), key=lambda kv: -kv[1].priority)
    strategies = [configured.factory.trigger_strategy(fmt, action) for (fmt, action), configured in ordered]
    # every pair's due tables in one query (processes/due.py)
    snapshot.load_due(
        [(fmt, action, strategy) for ((fmt, action), _), strategy in zip(ordered, strategies, strict=True)]
    )
    for index, ((table_format, action), configured) in enumerate(ordered):
        strategy = strategies[index]
        ids = due_table_ids(snapshot, table_format, action, strategy, now, report)
        if not ids:
            continue
        evaluated: np.ndarray | None = snapshot.due_evaluated.pop((table_format, action), None)
        pair_due = PairDue(configured, table_format, action, strategy.interval, ids, evaluated, index)
        busy = running.get((table_format, action), 0)
        due.append(_Pair(pair_due, strategy, busy, strategy.parallelism - busy))
    return due


class _Walk:
    """Down the tick's ranked order: each due (table, action) is asked when its pair has a free
    slot and its resource group has room; otherwise it waits (a decision for the first
    ``WAITING_RECORDED`` in line of each pair). A factory that finds nothing to do frees no slot:
    the walk goes on to the next in line.

    Once nothing left in line can be asked (every pair left has no free slot or its group refuses
    the action: a group's answer changes only when the walk asks a factory), the rest is settled
    in bulk (``_settle``): the holds counted per (group, action) over columns, the waiting
    decisions of the first in line of each pair recorded; no Python work per remaining table."""

    def __init__(self, pairs: list[_Pair], ranking: TickRanking, report, groups: TickGroups, log) -> None:
        self.pairs = {pair.due.index: pair for pair in pairs}
        self.ranking, self.report, self.groups, self.log = ranking, report, groups, log
        self.rows: dict[int, Table] = {}
        #: Resource group id -> (table id, action, priority) of the last run it admitted this tick.
        self.last_admitted: dict[int, tuple[int, str, float | None]] = {}
        self.slots_at_start: dict[int, int] = {}
        #: Each group's answer for an action stands until the walk asks a factory (or a race
        #: refuses it): asked once per (group pk, action) in between, the holds counted in bulk.
        self.refusals: dict[tuple[int, str], BudgetExhausted | None] = {}
        self.held: dict[tuple[int, str], tuple[ResourceGroup, BudgetExhausted, int]] = {}

    def run(self) -> None:
        for index, below in self.ranking.below_minimum.items():
            # a table whose snapshot moved since the awake scan is not recorded as evaluated
            pair = self.pairs[index]
            pair.asked.update((t, instant) for t, instant in below if instant is not None)
            pair.unrecorded += sum(1 for _, instant in below if instant is None)
        ranking = self.ranking
        count = len(ranking.table_ids)
        if count:
            group_pks = self.groups.group_pks(ranking.table_ids)
            # Each (pair, group) in line and the last position it appears at: what may still be
            # asked. Over dense codes (few pairs, few groups): no sort of every entry.
            known = np.array(sorted(self.groups.rules.groups), dtype=np.int64)
            codes = ranking.pair_index * len(known) + np.searchsorted(known, group_pks)
            last = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
            np.maximum.at(last, codes, np.arange(count, dtype=np.int64))
            present = np.nonzero(last >= 0)[0]
            combos = ((present // len(known)) << 32) | known[present % len(known)]
            self.last_at = dict(zip(combos.tolist(), last[present].tolist(), strict=True))
            for start in range(0, count, WALK_CHUNK):
                if self._settled(start):
                    self._settle(start, group_pks)
                    break
                self._walk(start, min(count, start + WALK_CHUNK))
        for (_, action), (group, problem, count) in self.held.items():
            self.groups.hold(group, action, problem.message, count)

    def _walk(self, start: int, end: int) -> None:
        ranking, group_of = self.ranking, self.groups.group_of_due
        priorities = None if ranking.priority is None else ranking.priority[start:end].tolist()
        entries = zip(
            ranking.pair_index[start:end].tolist(), ranking.table_ids[start:end].tolist(), strict=True
        )
        for offset, (index, table_id) in enumerate(entries):
            pair = self.pairs[index]
            action = pair.due.action
            if pair.free <= 0:
                if pair.waits_recorded < WAITING_RECORDED:
                    _record_slot_waits(self.log, pair, [table_id])
                continue
            group = group_of.get(table_id)
            if group is None:  # deleted since the awake scan (the membership query left it out)
                continue
            problem = self._refusal(group, action)
            mine = None if priorities is None else priorities[offset]
            if problem is not None:
                self._hold(pair, table_id, group, problem, mine)
                continue
            table = self._table(start + offset)
            if table is None:  # deleted meanwhile
                continue
            pair.asked[table_id] = table.current_instant
            started = _trigger_one(pair.due.configured, table, action, self.report, self.groups, group)
            self.refusals.clear()
            if started:
                pair.free -= 1
                self.last_admitted[group.pk] = (table_id, action, None if mine is None else round(mine, 6))

    def _refusal(self, group: ResourceGroup, action: str) -> BudgetExhausted | None:
        key = (group.pk, action)
        if key not in self.refusals:
            if group.pk not in self.slots_at_start:
                self.slots_at_start[group.pk] = self.groups.usage[group.pk].slots_left(group)
            self.refusals[key] = self.groups.refusal(group, action)
        return self.refusals[key]

    def _refused(self, group: ResourceGroup, action: str) -> BudgetExhausted:
        """The refusal ``_settled`` found for (``group``, ``action``)."""
        problem = self._refusal(group, action)
        if problem is None:  # _settle runs only once every (group, action) left in line is refused
            raise RuntimeError(f"resource group {group.name} has room for {action}: the walk is not settled")
        return problem

    def _hold(
        self, pair: _Pair, table_id: int, group: ResourceGroup, problem: BudgetExhausted, mine: float | None
    ) -> None:
        """The due run of ``pair`` on ``table_id`` is held back by ``group``."""
        self._count_held(group, pair.due.action, problem, 1)
        if pair.waits_recorded < WAITING_RECORDED:
            pair.waits_recorded += 1
            self._record_wait(table_id, pair.due.action, group, problem, mine)

    def _count_held(self, group: ResourceGroup, action: str, problem: BudgetExhausted, count: int) -> None:
        key = (group.pk, action)
        self.held[key] = (group, problem, self.held[key][2] + count if key in self.held else count)

    def _settled(self, start: int) -> bool:
        """Whether nothing from ``start`` on can be asked this tick."""
        groups = self.groups.rules.groups
        for combo, last in self.last_at.items():
            if last < start:
                continue
            pair = self.pairs[combo >> 32]
            if pair.free > 0 and self._refusal(groups[combo & 0xFFFFFFFF], pair.due.action) is None:
                return False
        return True

    def _settle(self, start: int, group_pks: np.ndarray) -> None:
        """Everything from ``start`` on waits, as the walk would have decided one by one: per pair
        the first in line get their waiting decisions (up to ``WAITING_RECORDED`` in all), and the
        holds of the others are counted per group over the columns."""
        ranking, groups = self.ranking, self.groups.rules.groups
        indexes, ids, pks = ranking.pair_index[start:], ranking.table_ids[start:], group_pks[start:]
        for index, pair in self.pairs.items():
            at = np.nonzero(indexes == index)[0]
            if not len(at):
                continue
            head = at[: max(0, WAITING_RECORDED - pair.waits_recorded)]
            if pair.free <= 0:  # waiting for one of the pair's own slots: not the group's hold
                _record_slot_waits(self.log, pair, ids[head].tolist())
                continue
            action = pair.due.action
            priorities = (
                [None] * len(head) if ranking.priority is None else ranking.priority[start + head].tolist()
            )
            for table_id, pk, mine in zip(ids[head].tolist(), pks[head].tolist(), priorities, strict=True):
                group = groups[pk]
                self._hold(pair, table_id, group, self._refused(group, action), mine)
            found, counts = np.unique(pks[at[len(head) :]], return_counts=True)
            for pk, count in zip(found.tolist(), counts.tolist(), strict=True):
                self._count_held(groups[pk], action, self._refused(groups[pk], action), count)

    def _table(self, position: int) -> Table | None:
        """The table row of the entry at ``position``, read with the next ones in line (a batch)."""
        table_id = int(self.ranking.table_ids[position])
        if table_id not in self.rows:
            batch = self.ranking.table_ids[position : position + EVALUATION_BATCH].tolist()
            self.rows = Table.objects.in_bulk(batch)
        return self.rows.get(table_id)

    def _record_wait(
        self, table_id: int, action: str, group: ResourceGroup, problem: BudgetExhausted, mine: float | None
    ) -> None:
        winner = self.last_admitted.get(group.pk)
        if problem.kind != "slot" or winner is None:
            _record_budget_wait(self.groups, table_id, action, group, problem)
            return
        # The group had room when the tick began: this run lost its free slots to work ranked first.
        slots = self.slots_at_start[group.pk]
        won_by = f"{winner[1]} on table {winner[0]}"
        ahead = "worth more per cost" if winner[2] is not None else "ahead in line"
        numbers: dict[str, object] = {"group_slots": slots, "max_concurrency": group.max_concurrency}
        numbers["lost_to"] = {"table": winner[0], "action": winner[1], "priority": winner[2]}
        if mine is not None:
            numbers["priority"] = round(mine, 6)
        record(
            table_id,
            action,
            DecisionKind.WAITING_SLOT,
            f"resource group {group.name} had {slots} free slot{'s' if slots != 1 else ''} this tick and "
            f"{'they' if slots != 1 else 'it'} went to work {ahead} (the last: {won_by}); it takes more "
            "as they finish",
            group=group.name,
            numbers=numbers,
        )


def _flush(log: DecisionLog) -> int:
    """The tick's decisions, written last: a failure to keep them is logged, never the tick's."""
    count = len(log)
    if not count:
        return 0  # an idle tick: no query, not even a savepoint
    try:
        with transaction.atomic():
            return log.flush()
    except DatabaseError:
        logger.exception("the scheduler could not record its %d decision(s)", count)
        return 0


def _record_slot_waits(log: DecisionLog, pair: _Pair, table_ids: list[int]) -> None:
    """Due tables neither asked nor decided otherwise wait for one of the pair's slots."""
    action, parallelism = pair.due.action, pair.strategy.parallelism
    for table_id in table_ids:
        if pair.waits_recorded >= WAITING_RECORDED:
            break
        if table_id in pair.asked or log.has(table_id, action):
            continue
        log.record(
            table_id,
            action,
            DecisionKind.WAITING_SLOT,
            f"{action} on {pair.due.table_format} tables runs at most {parallelism} at once (the pair's "
            f"parallelism); {pair.running} were running and this tick started the others it could",
            numbers={"parallelism": parallelism, "running": pair.running},
        )
        pair.waits_recorded += 1


def _record_budget_wait(
    groups: TickGroups, table_id: int, action: str, group: ResourceGroup, problem: BudgetExhausted
) -> None:
    reason, numbers = budget_wait(groups, group, action, problem)
    record(table_id, action, DecisionKind.WAITING_BUDGET, reason, group=group.name, numbers=numbers)


def _wake_all_if_configuration_changed(pairs: dict[tuple[str, str], ConfiguredFactory]) -> None:
    """Wake times assume the pairs, intervals and properties they were computed with: when those
    change (a factory enabled, an interval shortened), every table is looked at again once."""
    described = []
    for (table_format, action), configured in sorted(pairs.items()):
        strategy = configured.factory.trigger_strategy(table_format, action)
        properties = sorted((str(k), repr(v)) for k, v in (configured.factory.properties or {}).items())
        described.append((table_format, action, configured.name, repr(strategy), properties))
    fingerprint = hashlib.sha256(repr(described).encode()).hexdigest()
    try:
        known = cache.get(PAIRS_CACHE_KEY)
    except Exception:  # an unreachable cache: look at every table, as after a change
        logger.warning("the scheduler cannot read its configuration fingerprint", exc_info=True)
        known = None
    if known != fingerprint:
        Table.objects.exclude(scheduler_wake_at=None).update(scheduler_wake_at=None)
        try:
            cache.set(PAIRS_CACHE_KEY, fingerprint, timeout=None)
        except Exception:
            logger.warning("the scheduler cannot keep its configuration fingerprint", exc_info=True)


_EVALUATED_SQL = """
INSERT INTO {state} (table_id, key, value, updated_at)
SELECT v.table_id, v.key, v.value, %s
FROM ROWS FROM (unnest(%s::bigint[]), jsonb_array_elements_text(%s::jsonb), jsonb_array_elements(%s::jsonb))
  AS v(table_id, key, value)
JOIN {table} t ON t.id = v.table_id
ON CONFLICT (table_id, key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at
"""


def _record_evaluations(pairs: list[_Pair], now: dt.datetime) -> None:
    """One upsert for every table evaluated this tick: when, and at which snapshot."""
    ids: list[int] = []
    keys: list[str] = []
    values: list[object] = []
    moment = now.timestamp()
    for pair in pairs:
        evaluated, seen = evaluated_key(pair.due.action), seen_snapshot_key(pair.due.action)
        for table_id, instant in pair.asked.items():
            ids += [table_id, table_id]
            keys += [evaluated, seen]
            values += [moment, instant]
    if ids:
        sql = _EVALUATED_SQL.format(state=TableState._meta.db_table, table=Table._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(sql, [timezone.now(), int_array(ids), json_array(keys), json_array(values)])


#: The table property naming the actions the scheduler leaves to operators on that table.
MANUAL_ACTIONS = "manual-actions"


def manual_actions(table: Table) -> set[str]:
    """The actions the scheduler never triggers on ``table`` (``{"*"}``: every action), from its
    ``manual-actions`` property: ``"*"``, an action name, a comma-separated string or a list."""
    value = (table.properties or {}).get(MANUAL_ACTIONS)
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list | tuple):
        return set()
    return {str(item).strip() for item in value if str(item).strip()}


def is_manual(table: Table, action: str) -> bool:
    names = manual_actions(table)
    return "*" in names or action in names


def _trigger_one(
    configured: ConfiguredFactory,
    table: Table,
    action: str,
    report: TickReport,
    groups: TickGroups,
    group: ResourceGroup,
) -> bool:
    def decide(kind: str, reason: str, **extra) -> None:
        record(table.pk, action, kind, reason, group=group.name, **extra)

    if is_manual(table, action):
        decide(
            DecisionKind.MANUAL_ONLY,
            f"the table's {MANUAL_ACTIONS} override names {action}: only operators start it (Run now)",
        )
        return False  # evaluated (so not looked at again before the interval), never triggered
    runtime = TableRuntime(table, configured.factory.properties, states=None)
    try:
        table_process = configured.factory.trigger(runtime, action)
    except Exception as error:  # a plugin's bug must not stop the tick for other tables
        logger.exception("factory %s failed to evaluate %s on table %s", configured.name, action, table.pk)
        report.errors[f"{table.pk}:{action}"] = f"{type(error).__name__}: {error}"
        decide(DecisionKind.FAILED, f"factory {configured.name} failed: {type(error).__name__}: {error}")
        return False
    if table_process is None:
        if runtime.declined:
            decide(
                DecisionKind.DECLINED, runtime.reason or f"factory {configured.name} declines {action} here"
            )
        else:
            decide(
                DecisionKind.NOTHING_TO_DO,
                runtime.reason or f"factory {configured.name} found nothing to do (it gave no reason)",
            )
        return False
    try:
        process = process_create(
            table=table, action=action, params=table_process.params, trigger=ProcessTrigger.SCHEDULE
        )
    except BudgetExhausted as error:  # another tick or a manual run took the room meanwhile
        groups.usage[group.pk].active = max(groups.usage[group.pk].active, group.max_concurrency)
        groups.hold(group, action, error.message)
        _record_budget_wait(groups, table.pk, action, group, error)
        return False
    except (Conflict, InvalidInput) as error:
        report.errors[f"{table.pk}:{action}"] = error.message
        decide(DecisionKind.FAILED, error.message)
        return False
    groups.admitted(group, action)
    report.triggered.append(process.pk)
    decide(DecisionKind.RAN, f"process {process.pk} started", process_id=process.pk)
    return True


#: The names tests and tools knew these by before they moved to ``processes.due``.
_Snapshot, _due_table_ids = Snapshot, due_table_ids

__all__ = [
    "schedule_tick",
    "TickReport",
    "ProcessStatus",
    "MANUAL_ACTIONS",
    "NEVER",
    "evaluated_key",
    "is_manual",
    "manual_actions",
    "seen_snapshot_key",
]
