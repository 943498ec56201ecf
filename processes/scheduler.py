"""The scheduler tick: which (table, action) pairs are due, within parallelism, one active each.

Bounded queries whatever the number of tables: per (format, action) pair one query for candidate
tables, one for active processes and one for evaluation times; factories are only asked about
tables that are due.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from django.db.models import Count
from django.utils import timezone

from console.errors import Conflict, InvalidInput
from console.models import Table
from processes.models import ACTIVE_STATUSES, Process, ProcessStatus, ProcessTrigger, TableState
from processes.registry import ConfiguredFactory, coordinators
from processes.runtime import TableRuntime
from processes.services import process_create

logger = logging.getLogger(__name__)


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
    running_by_pair = {
        (row["table__format"], row["action"]): row["n"]
        for row in Process.objects.filter(status__in=ACTIVE_STATUSES)
        .values("table__format", "action")
        .annotate(n=Count("id"))
    }
    for (table_format, action), configured in sorted(pairs.items(), key=lambda kv: -kv[1].priority):
        strategy = configured.factory.trigger_strategy(table_format, action)
        free = strategy.parallelism - running_by_pair.get((table_format, action), 0)
        due_tables = _due_tables(table_format, action, strategy, now, report)
        if not due_tables:
            continue
        if free <= 0:
            report.skipped_busy += len(due_tables)
            continue
        evaluated: list[Table] = []
        for table, _state in due_tables:
            if free <= 0:
                report.skipped_busy += 1
                continue
            evaluated.append(table)
            if _trigger_one(configured, table, action, report):
                free -= 1
        _record_evaluations(evaluated, action, now)
    return report


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


def _due_tables(table_format, action, strategy, now, report) -> list[tuple[Table, dict]]:
    tables = list(
        Table.objects.filter(format=table_format).only(
            "id", "current_instant", "format", "location", "identifier", "name", "properties", "catalog_id"
        )
    )
    report.tables_considered += len(tables)
    if not tables:
        return []
    keys = (evaluated_key(action), seen_snapshot_key(action))
    states: dict[int, dict] = {}
    for table_id, key, value in TableState.objects.filter(
        key__in=keys, table__format=table_format
    ).values_list("table_id", "key", "value"):
        states.setdefault(table_id, {})[key] = value
    active = set(
        Process.objects.filter(
            action=action, table__format=table_format, status__in=ACTIVE_STATUSES
        ).values_list("table_id", flat=True)
    )
    due = []
    interval = strategy.interval.total_seconds()
    for table in tables:
        if table.pk in active:
            continue
        state = states.get(table.pk, {})
        evaluated = state.get(evaluated_key(action))
        if evaluated is not None and now.timestamp() - float(evaluated) < interval:
            continue
        if strategy.on_new_snapshot and state.get(seen_snapshot_key(action)) == table.current_instant:
            continue
        due.append((table, state))
    due.sort(key=lambda pair: float(pair[1].get(evaluated_key(action)) or 0))  # longest waiting first
    report.due += len(due)
    return due


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
