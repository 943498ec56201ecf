"""The scheduler tick: which (table, action) pairs are due, within parallelism, one active each.

Bounded queries whatever the number of tables: one for active processes, one counting tables per
format, then per (format, action) pair one query that picks the due tables in the database (from
the evaluation times and seen snapshots kept as ``TableState`` rows); factories are only asked
about tables that are due.

Resource groups (processes/groups): each due table's group is resolved in a bounded batch; a
group without a free slot or compute left holds its tables back (they stay due, counted on the
group's row and logged) and its factories are not asked; a process is created only after
``budget.admit`` under the group's row lock agreed, and is sent to the group's queue.

A table whose ``manual-actions`` property names an action (or is ``"*"``) is left to operators for
it: the scheduler counts it as evaluated and never triggers it ("run now" and the preview still
work), so a table can be kept as it is on purpose.

Each due (table, action) gets a decision (``processes.decisions``): ran, nothing to do, waiting for
a slot or for budget, manual only, declined, failed; all written in one flush at the end of the
tick (at most ``WAITING_RECORDED`` waiting decisions per pair, the first in line).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from dataclasses import dataclass, field

from django.core.cache import cache
from django.db import DatabaseError, connection, transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from processes.decisions import DecisionKind, DecisionLog, record, recording
from processes.decisions.waits import budget_wait
from processes.groups.budget import BudgetExhausted
from processes.groups.models import ResourceGroup
from processes.groups.tick import TickGroups
from processes.models import ACTIVE_STATUSES, Process, ProcessStatus, ProcessTrigger, TableState
from processes.ranking import rank_due
from processes.registry import ConfiguredFactory, coordinators
from processes.runtime import TableRuntime
from processes.services import process_create
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
    running_by_pair: dict[tuple[str, str], int] = {}
    for table_format, action in snapshot.active:
        running_by_pair[(table_format, action)] = running_by_pair.get((table_format, action), 0) + 1
    with recording(log):
        for (table_format, action), configured in sorted(pairs.items(), key=lambda kv: -kv[1].priority):
            strategy = configured.factory.trigger_strategy(table_format, action)
            running = running_by_pair.get((table_format, action), 0)
            due_ids = _due_table_ids(snapshot, table_format, action, strategy, now, report)
            if not due_ids:
                continue
            free = strategy.parallelism - running
            evaluated = _evaluate(configured, action, due_ids, free, report, groups) if free > 0 else []
            report.skipped_busy += len(due_ids) - len(evaluated)
            _record_evaluations(evaluated, action, now)
            asked = {table.pk for table in evaluated}
            _record_slot_waits(log, due_ids, asked, table_format, action, strategy.parallelism, running)
            for table_id in due_ids:  # asked: again after the interval; left waiting: next tick
                snapshot.wake_no_later(table_id, now + strategy.interval if table_id in asked else now)
    snapshot.save_wakes()
    report.held = groups.save()
    report.decisions = _flush(log)
    return report


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


def _record_slot_waits(log, due_ids, asked, table_format, action, parallelism, running) -> None:
    """Due tables neither asked nor decided otherwise wait for one of the pair's slots."""
    recorded = 0
    for table_id in due_ids:
        if recorded >= WAITING_RECORDED:
            break
        if table_id in asked or log.has(table_id, action):
            continue
        log.record(
            table_id,
            action,
            DecisionKind.WAITING_SLOT,
            f"{action} on {table_format} tables runs at most {parallelism} at once (the pair's "
            f"parallelism); {running} were running and this tick started the others it could",
            numbers={"parallelism": parallelism, "running": running},
        )
        recorded += 1


def _evaluate(
    configured: ConfiguredFactory, action: str, due_ids: list[int], free: int, report, groups: TickGroups
) -> list[Table]:
    """Ask the factory about due tables in order until ``free`` processes were created; a table
    whose resource group has no room is held back unasked (it stays due)."""
    due_ids = _with_room(groups, action, due_ids)
    # Benefit per cost first (processes/ranking.py); those below the minimum benefit are evaluated, unasked.
    ranked = rank_due(
        configured,
        action,
        due_ids,
        now=groups.now,
        evaluated_key=evaluated_key(action),
        groups_of=groups.group_of_due,
    )
    evaluated: list[Table] = list(ranked.below_minimum)
    due_ids = ranked.order
    position = 0
    held_recorded = 0
    # A factory that declines a table frees no slot: keep asking, a batch of rows at a time.
    while free > 0 and position < len(due_ids):
        batch = due_ids[position : position + max(free, EVALUATION_BATCH)]
        position += len(batch)
        tables = Table.objects.in_bulk(batch)
        for table_id in batch:
            table = tables.get(table_id)
            if table is None:
                continue
            if free <= 0:
                break
            group = groups.group_of_due[table_id]
            problem = groups.refusal(group, action)
            if problem is not None:  # filled by this tick
                groups.hold(group, action, problem.message)
                if held_recorded < WAITING_RECORDED:
                    _record_budget_wait(groups, table_id, action, group, problem)
                    held_recorded += 1
                continue
            evaluated.append(table)
            if _trigger_one(configured, table, action, report, groups, group):
                free -= 1
    return evaluated


def _with_room(groups: TickGroups, action: str, due_ids: list[int]) -> list[int]:
    """The due tables whose group has room now; the others are held back, counted per group."""
    groups.group_of_due = groups.resolve(due_ids)
    full: dict[int, BudgetExhausted | None] = {}
    kept = []
    recorded = 0
    for table_id in due_ids:
        group = groups.group_of_due[table_id]
        if group.pk not in full:
            full[group.pk] = groups.refusal(group, action)
        problem = full[group.pk]
        if problem is None:
            kept.append(table_id)
        else:
            groups.hold(group, action, problem.message)
            if recorded < WAITING_RECORDED:
                _record_budget_wait(groups, table_id, action, group, problem)
                recorded += 1
    return kept


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
        awake = Table.objects.filter(
            Q(scheduler_wake_at=None)
            | Q(scheduler_wake_at__lte=now)
            | ~Q(current_instant=F("scheduler_instant"))
        ).order_by()
        for table_id, table_format, instant in awake.values_list("pk", "format", "current_instant"):
            self.awake.setdefault(table_format, []).append(table_id)
            self.instants[table_id] = instant
        self.wakes: dict[int, dt.datetime] = dict.fromkeys(self.instants, NEVER)

    def table_count(self, table_format: str) -> int:
        if self._counts is None:
            self._counts = dict(Table.objects.order_by().values_list("format").annotate(n=Count("id")))
        return self._counts.get(table_format, 0)

    def wake_no_later(self, table_id: int, moment: dt.datetime) -> None:
        if table_id in self.wakes and moment < self.wakes[table_id]:
            self.wakes[table_id] = moment

    def save_wakes(self) -> None:
        """One update, with the snapshot each wake time was computed at: a table whose snapshot
        moves (meanwhile or later) is awake again whatever its wake time."""
        if not self.wakes:
            return
        ids = list(self.wakes)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Table._meta.db_table} t SET scheduler_wake_at = v.wake, scheduler_instant = v.instant"
                " FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[]) AS v(id, instant, wake)"
                " WHERE t.id = v.id AND t.current_instant = v.instant",
                [ids, [self.instants[i] for i in ids], [self.wakes[i] for i in ids]],
            )


def _record_evaluations(tables: list[Table], action: str, now: dt.datetime) -> None:
    """One upsert for all evaluated tables: when, and at which snapshot."""
    rows = []
    for table in tables:
        rows.append(TableState(table=table, key=evaluated_key(action), value=now.timestamp()))
        rows.append(TableState(table=table, key=seen_snapshot_key(action), value=table.current_instant))
    if rows:
        TableState.objects.bulk_create(
            rows, update_conflicts=True, unique_fields=["table", "key"], update_fields=["value", "updated_at"]
        )


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
       ELSE (ev.value)::float8 + %(interval)s END
FROM {table} t
LEFT JOIN {state} ev ON ev.table_id = t.id AND ev.key = %(evaluated)s
LEFT JOIN {state} seen ON seen.table_id = t.id AND seen.key = %(seen)s
WHERE t.id = ANY(%(awake)s)
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
        "awake": awake,
        "busy": snapshot.busy.get(action, []),
        "moment": now.timestamp(),
        "interval": strategy.interval.total_seconds(),
        "on_new_snapshot": bool(strategy.on_new_snapshot),
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    due = []
    for table_id, is_due, wake in rows:
        if is_due:
            due.append(table_id)  # its wake time depends on whether the factory is asked
        elif wake is not None:
            snapshot.wake_no_later(table_id, dt.datetime.fromtimestamp(wake, tz=dt.UTC))
    report.due += len(due)
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
