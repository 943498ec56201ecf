"""The scheduler tick: which (table, action) pairs are due, within parallelism, one active each.

Bounded queries whatever the number of tables: per (format, action) pair one query for candidate
tables, one for active processes and one for evaluation times; factories are only asked about
tables that are due.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from django.utils import timezone

from processes.models import ACTIVE_STATUSES, Process, ProcessStatus, ProcessTrigger, TableState
from processes.registry import ConfiguredFactory, coordinators
from processes.runtime import TableRuntime
from processes.services import process_create
from storage.errors import Conflict, InvalidInput
from storage.models import Table

logger = logging.getLogger(__name__)


EVALUATION_BATCH = 100


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
    errors: dict[str, str] = field(default_factory=dict)


def schedule_tick(*, now: dt.datetime | None = None) -> TickReport:
    now = now or timezone.now()
    report = TickReport()
    pairs = coordinators()
    report.pairs = len(pairs)
    snapshot = _Snapshot()
    running_by_pair: dict[tuple[str, str], int] = {}
    for table_format, action in snapshot.active:
        running_by_pair[(table_format, action)] = running_by_pair.get((table_format, action), 0) + 1
    for (table_format, action), configured in sorted(pairs.items(), key=lambda kv: -kv[1].priority):
        strategy = configured.factory.trigger_strategy(table_format, action)
        free = strategy.parallelism - running_by_pair.get((table_format, action), 0)
        due_ids = _due_table_ids(snapshot, table_format, action, strategy, now, report)
        if not due_ids:
            continue
        if free <= 0:
            report.skipped_busy += len(due_ids)
            continue
        evaluated: list[Table] = []
        position = 0
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
                evaluated.append(table)
                if _trigger_one(configured, table, action, report):
                    free -= 1
        report.skipped_busy += len(due_ids) - len(evaluated)
        _record_evaluations(evaluated, action, now)
    return report


class _Snapshot:
    """What one tick reads, once per format: candidate tables, scheduler states, active processes.

    Three queries per format whatever the number of pairs; nothing per table."""

    def __init__(self) -> None:
        self._tables: dict[str, list[tuple[int, str]]] = {}
        self._states: dict[str, dict[int, dict]] = {}
        self.active: list[tuple[str, str]] = []
        self.active_tables: set[tuple[int, str]] = set()
        for table_id, table_format, action in Process.objects.filter(status__in=ACTIVE_STATUSES).values_list(
            "table_id", "table__format", "action"
        ):
            self.active.append((table_format, action))
            self.active_tables.add((table_id, action))

    def tables(self, table_format: str) -> list[tuple[int, str]]:
        if table_format not in self._tables:
            self._tables[table_format] = list(
                Table.objects.filter(format=table_format).order_by("pk").values_list("pk", "current_instant")
            )
        return self._tables[table_format]

    def states(self, table_format: str) -> dict[int, dict]:
        if table_format not in self._states:
            states: dict[int, dict] = {}
            rows = TableState.objects.filter(key__startswith="scheduler.", table__format=table_format)
            for table_id, key, value in rows.values_list("table_id", "key", "value"):
                states.setdefault(table_id, {})[key] = value
            self._states[table_format] = states
        return self._states[table_format]


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


def _due_table_ids(snapshot: _Snapshot, table_format, action, strategy, now, report) -> list[int]:
    """Tables due for (format, action), longest waiting first."""
    tables = snapshot.tables(table_format)
    report.tables_considered += len(tables)
    states = snapshot.states(table_format)
    evaluated_name, seen_name = evaluated_key(action), seen_snapshot_key(action)
    interval = strategy.interval.total_seconds()
    moment = now.timestamp()
    due: list[tuple[float, int]] = []
    for table_id, current_instant in tables:
        if (table_id, action) in snapshot.active_tables:
            continue
        state = states.get(table_id, {})
        evaluated = state.get(evaluated_name)
        if evaluated is not None and moment - float(evaluated) < interval:
            continue
        if strategy.on_new_snapshot and state.get(seen_name) == current_instant:
            continue
        due.append((float(evaluated or 0), table_id))
    due.sort()
    report.due += len(due)
    return [table_id for _, table_id in due]


def _trigger_one(configured: ConfiguredFactory, table: Table, action: str, report: TickReport) -> bool:
    runtime = TableRuntime(table, configured.factory.properties, states=None)
    try:
        table_process = configured.factory.trigger(runtime, action)
    except Exception as error:  # a plugin's bug must not stop the tick for other tables
        logger.exception("factory %s failed to evaluate %s on table %s", configured.name, action, table.pk)
        report.errors[f"{table.pk}:{action}"] = f"{type(error).__name__}: {error}"
        table_process = None
    if table_process is None:
        return False
    try:
        process = process_create(
            table=table, action=action, params=table_process.params, trigger=ProcessTrigger.SCHEDULE
        )
    except (Conflict, InvalidInput) as error:
        report.errors[f"{table.pk}:{action}"] = error.message
        return False
    report.triggered.append(process.pk)
    return True


__all__ = ["schedule_tick", "TickReport", "ProcessStatus"]
