"""The scheduler tick: which (table, action) pairs are due, within parallelism, one active each.

Bounded queries whatever the number of tables: one for active processes, one counting tables per
format, then per (format, action) pair one query that picks the due tables in the database (from
the evaluation times and seen snapshots kept as ``TableState`` rows), one resolving the due
tables' groups, two ranking them; factories are only asked about tables that are due.

Every due (table, action) of every pair is ranked in one order of benefit per cost
(``processes.ranking.rank_tick``) and the tick walks it: a run is asked when its pair has a free
slot (``parallelism``) and its resource group (processes/groups) has room; otherwise it is held
back (it stays due, counted on the group's row and logged) and its factory is not asked. So a
group's free slots and budget go to its best work whatever the action. A process is created only
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

from django.core.cache import cache
from django.db import DatabaseError, connection, transaction
from django.db.models import Count
from django.utils import timezone

from processes.decisions import DecisionKind, DecisionLog, record, recording
from processes.decisions.waits import budget_wait
from processes.groups.budget import BudgetExhausted
from processes.groups.models import ResourceGroup
from processes.groups.tick import TickGroups
from processes.models import ACTIVE_STATUSES, Process, ProcessStatus, ProcessTrigger, TableState
from processes.plugin import TriggerStrategy
from processes.ranking import PairDue, TickRanking, rank_tick
from processes.registry import ConfiguredFactory, coordinators
from processes.runtime import TableRuntime
from processes.services import process_create
from processes.sql_arrays import float_array, int_array, json_array
from storage.errors import Conflict, InvalidInput
from storage.models import Table

logger = logging.getLogger(__name__)


EVALUATION_BATCH = 100
#: Waiting decisions (slot, budget) recorded per (format, action) per tick: the first in line.
WAITING_RECORDED = 200


def evaluated_key(action: str) -> str:
    return f"scheduler.{action}.evaluated_at"


def seen_snapshot_key(action: str) -> str:
    return f"scheduler.{action}.seen_instant"


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


#: "Not before a new snapshot": a wake time no tick reaches (a refresh blanks it).
NEVER = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)
PAIRS_CACHE_KEY = "lakewarden:scheduler:pairs:v1"


def schedule_tick(*, now: dt.datetime | None = None) -> TickReport:
    now = now or timezone.now()
    report = TickReport()
    pairs = coordinators()
    report.pairs = len(pairs)
    _wake_all_if_configuration_changed(pairs)
    snapshot = _Snapshot(now)
    groups = TickGroups(now)
    log = DecisionLog(now)
    with recording(log):
        due = _due_pairs(pairs, snapshot, now, report)
        open_pairs = [pair for pair in due if pair.free > 0]
        for pair in due:
            if pair.free <= 0:  # no slot of its own: its tables wait, unranked, as they came
                _record_slot_waits(log, pair, pair.due.ids)
        if open_pairs:
            groups.group_of_due = groups.resolve(sorted({t for pair in open_pairs for t in pair.due.ids}))
            # Benefit per cost across every pair (processes/ranking.py): a resource group's free
            # slots and budget go to its best work whatever the action.
            ranking = rank_tick([pair.due for pair in open_pairs], now=now, groups_of=groups.group_of_due)
            _Walk(open_pairs, ranking, report, groups, log).run()
        _record_evaluations(due, now)
        for pair in due:
            report.skipped_busy += len(pair.due.ids) - len(pair.asked)
            after = now + pair.strategy.interval
            for table_id in pair.due.ids:  # asked: again after the interval; left waiting: next tick
                snapshot.wake_no_later(table_id, after if table_id in pair.asked else now)
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


def _due_pairs(pairs, snapshot: _Snapshot, now: dt.datetime, report: TickReport) -> list[_Pair]:
    """The pairs with due tables, in the order of their factories' priority (one query each)."""
    running: dict[tuple[str, str], int] = {}
    for key in snapshot.active:
        running[key] = running.get(key, 0) + 1
    due = []
    ordered = sorted(pairs.items(), key=lambda kv: -kv[1].priority)
    for index, ((table_format, action), configured) in enumerate(ordered):
        strategy = configured.factory.trigger_strategy(table_format, action)
        ids = _due_table_ids(snapshot, table_format, action, strategy, now, report)
        if not ids:
            continue
        evaluated = snapshot.due_evaluated.pop((table_format, action), [])
        pair_due = PairDue(configured, table_format, action, strategy.interval, ids, evaluated, index)
        busy = running.get((table_format, action), 0)
        due.append(_Pair(pair_due, strategy, busy, strategy.parallelism - busy))
    return due


class _Walk:
    """Down the tick's ranked order: each due (table, action) is asked when its pair has a free
    slot and its resource group has room; otherwise it waits (a decision for the first
    ``WAITING_RECORDED`` in line of each pair). A factory that finds nothing to do frees no slot:
    the walk goes on to the next in line."""

    def __init__(self, pairs: list[_Pair], ranking: TickRanking, report, groups: TickGroups, log) -> None:
        self.pairs = {pair.due.index: pair for pair in pairs}
        self.ranking, self.report, self.groups, self.log = ranking, report, groups, log
        self.rows: dict[int, Table] = {}
        #: Resource group id -> (table id, action, priority) of the last run it admitted this tick.
        self.last_admitted: dict[int, tuple[int, str, float | None]] = {}
        self.slots_at_start: dict[int, int] = {}

    def run(self) -> None:
        for index, below in self.ranking.below_minimum.items():
            self.pairs[index].asked.update(below)
        order, priorities, group_of = self.ranking.order, self.ranking.priorities, self.groups.group_of_due
        # Each group's answer for an action stands until the walk admits something (or a race
        # refuses it): asked once per (group, action) in between, the holds counted in bulk.
        refusals: dict[tuple[int, str], BudgetExhausted | None] = {}
        held: dict[tuple[int, str], tuple[ResourceGroup, BudgetExhausted, int]] = {}
        for position, (index, table_id) in enumerate(order):
            pair = self.pairs[index]
            action = pair.due.action
            if pair.free <= 0:
                if pair.waits_recorded < WAITING_RECORDED:
                    _record_slot_waits(self.log, pair, [table_id])
                continue
            group = group_of[table_id]
            key = (id(group), action)
            if key not in refusals:
                if group.pk not in self.slots_at_start:
                    self.slots_at_start[group.pk] = self.groups.usage[group.pk].slots_left(group)
                refusals[key] = self.groups.refusal(group, action)
            problem = refusals[key]
            if problem is not None:
                held[key] = (group, problem, held[key][2] + 1 if key in held else 1)
                if pair.waits_recorded < WAITING_RECORDED:
                    pair.waits_recorded += 1
                    self._record_wait(
                        table_id, action, group, problem, priorities[position] if priorities else None
                    )
                continue
            table = self._table(position)
            if table is None:  # deleted meanwhile
                continue
            pair.asked[table_id] = table.current_instant
            started = _trigger_one(pair.due.configured, table, action, self.report, self.groups, group)
            refusals.clear()
            if started:
                pair.free -= 1
                priority = round(priorities[position], 6) if priorities else None
                self.last_admitted[group.pk] = (table_id, action, priority)
        for (_, action), (group, problem, count) in held.items():
            self.groups.hold(group, action, problem.message, count)

    def _table(self, position: int) -> Table | None:
        """The table row of the entry at ``position``, read with the next ones in line (a batch)."""
        table_id = self.ranking.order[position][1]
        if table_id not in self.rows:
            batch = [t for _, t in self.ranking.order[position : position + EVALUATION_BATCH]]
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


#: The tables a tick looks at: never given a wake time, woken by now, or at a new snapshot.
_AWAKE_SQL = """
SELECT t.id, t.format, t.current_instant,
  t.scheduler_wake_at IS NOT NULL AND t.scheduler_wake_at <= %(now)s AND t.scheduler_instant = t.current_instant
FROM {table} t
WHERE t.scheduler_wake_at IS NULL OR t.scheduler_wake_at <= %(now)s
  OR t.current_instant IS DISTINCT FROM t.scheduler_instant
"""


class _Snapshot:
    """What one tick reads once: active processes, the number of tables per format and the
    tables awake (their wake time passed or blank); only those are looked at. Each awake table
    gets the earliest time any of its pairs may become due as its next wake time."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now
        self.active: list[tuple[str, str]] = []
        self.busy: dict[str, list[int]] = {}  # action -> tables with an active process for it
        for table_id, table_format, action in Process.objects.filter(status__in=ACTIVE_STATUSES).values_list(
            "table_id", "table__format", "action"
        ):
            self.active.append((table_format, action))
            self.busy.setdefault(action, []).append(table_id)
        self._counts: dict[str, int] | None = None
        self.awake: dict[str, list[int]] = {}
        self.instants: dict[int, str] = {}
        #: Awake tables whose stored wake time has passed at their current snapshot: a wake time
        #: of now again changes nothing for them, so it is not written again.
        self.settled: set[int] = set()
        with connection.cursor() as cursor:
            cursor.execute(_AWAKE_SQL.format(table=Table._meta.db_table), {"now": now})
            rows = cursor.fetchall()
        for table_id, table_format, instant, settled in rows:
            self.awake.setdefault(table_format, []).append(table_id)
            self.instants[table_id] = instant
            if settled:
                self.settled.add(table_id)
        self.wakes: dict[int, dt.datetime] = dict.fromkeys(self.instants, NEVER)
        #: (format, action) -> when each table the last due query found due was last evaluated.
        self.due_evaluated: dict[tuple[str, str], list[float | None]] = {}

    def table_count(self, table_format: str) -> int:
        if self._counts is None:
            self._counts = dict(Table.objects.order_by().values_list("format").annotate(n=Count("id")))
        return self._counts.get(table_format, 0)

    def wake_no_later(self, table_id: int, moment: dt.datetime) -> None:
        if table_id in self.wakes and moment < self.wakes[table_id]:
            self.wakes[table_id] = moment

    def save_wakes(self) -> None:
        """One update, with the snapshot each wake time was computed at: a table whose snapshot
        moves (meanwhile or later) is awake again whatever its wake time. Tables left waiting
        whose wake time had passed already keep it (no write)."""
        now = self.now
        ids = [i for i, wake in self.wakes.items() if not (wake <= now and i in self.settled)]
        if not ids:
            return
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Table._meta.db_table} t SET scheduler_wake_at = to_timestamp(v.wake),"
                " scheduler_instant = v.instant"
                " FROM ROWS FROM (unnest(%s::bigint[]), jsonb_array_elements_text(%s::jsonb),"
                " unnest(%s::float8[])) AS v(id, instant, wake)"
                " WHERE t.id = v.id AND t.current_instant = v.instant",
                [
                    int_array(ids),
                    json_array(self.instants[i] for i in ids),
                    float_array(self.wakes[i].timestamp() for i in ids),
                ],
            )


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


#: Due-ness in the database, one query per (format, action) pair over the awake tables: not busy
#: with the action, not evaluated within the interval, and (``on_new_snapshot``) at a snapshot the
#: factory has not seen; never evaluated first, then longest waiting, then by id. ``wake`` is when
#: the pair may next be due (NULL: not before a new snapshot).
_DUE_SQL = """
SELECT t.id,
  NOT (t.id = ANY(%(busy)s))
  AND (jsonb_typeof(ev.value) IS DISTINCT FROM 'number' OR %(moment)s - (ev.value)::float8 >= %(interval)s)
  AND (NOT %(on_new_snapshot)s OR seen.value IS NULL OR seen.value <> to_jsonb(t.current_instant)),
  CASE WHEN t.id = ANY(%(busy)s) OR jsonb_typeof(ev.value) IS DISTINCT FROM 'number' THEN %(moment)s
       WHEN %(on_new_snapshot)s AND seen.value = to_jsonb(t.current_instant) THEN NULL
       ELSE (ev.value)::float8 + %(interval)s END,
  CASE WHEN jsonb_typeof(ev.value) = 'number' THEN (ev.value)::float8 END
FROM {table} t
LEFT JOIN {state} ev ON ev.table_id = t.id AND ev.key = %(evaluated)s
LEFT JOIN {state} seen ON seen.table_id = t.id AND seen.key = %(seen)s
WHERE t.id = ANY(%(awake)s::bigint[])
ORDER BY CASE WHEN jsonb_typeof(ev.value) = 'number' THEN (ev.value)::float8 ELSE 0 END, t.id
"""


def _due_table_ids(snapshot: _Snapshot, table_format, action, strategy, now, report) -> list[int]:
    """Tables due for (format, action), longest waiting first."""
    report.tables_considered += snapshot.table_count(table_format)
    awake = snapshot.awake.get(table_format, [])
    if not awake:
        return []
    sql = _DUE_SQL.format(table=Table._meta.db_table, state=TableState._meta.db_table)
    params = {
        "evaluated": evaluated_key(action),
        "seen": seen_snapshot_key(action),
        "awake": int_array(awake),
        "busy": snapshot.busy.get(action, []),
        "moment": now.timestamp(),
        "interval": strategy.interval.total_seconds(),
        "on_new_snapshot": bool(strategy.on_new_snapshot),
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    due = []
    evaluated = []
    for table_id, is_due, wake, evaluated_at in rows:
        if is_due:
            due.append(table_id)  # its wake time depends on whether the factory is asked
            evaluated.append(evaluated_at)
        elif wake is not None:
            snapshot.wake_no_later(table_id, dt.datetime.fromtimestamp(wake, tz=dt.UTC))
    report.due += len(due)
    snapshot.due_evaluated[(table_format, action)] = evaluated  # for the ranking's aging
    return due


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


__all__ = ["schedule_tick", "TickReport", "ProcessStatus", "MANUAL_ACTIONS", "is_manual", "manual_actions"]
