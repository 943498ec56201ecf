"""Benefit-ranked scheduling: which due tables of a (format, action) pair the scheduler asks first.

For each due table the scheduler gets an ``Estimate`` (``processes.plugin``): the factory's own
(``ProcessFactory.estimate``) or the default built here from the facts the table row keeps (small
files removed, delete files removed, bytes reclaimed, health gain; bytes to read and write). Its
**benefit** is one number, in points::

    small files removed + delete files removed + manifests merged
      + bytes reclaimed / 16 MiB + health gain (score points)

and its **cost** is worker-seconds: a fixed part plus the bytes to read and write at a
throughput, both fitted to the worker-seconds and bytes the action's last successful runs measured
(``Process.measured``); ``OVERHEAD_SECONDS`` and ``DEFAULT_THROUGHPUT`` before the first. Due
tables are asked in order of **priority** = (benefit + 1) / cost x (1 + waited / ``AGING``), where ``waited`` is the time
since the table became due: a table that keeps waiting climbs past fresh, richer work, so nothing
starves. A table whose benefit is below the action's minimum (the factory property
``min-benefit``, or the table's override of the same name; ``DEFAULT_MIN_BENEFIT``) is not asked:
the scheduler counts it as evaluated, so it is looked at again after the interval or a new
snapshot, and records the decision with both numbers (``processes.decisions``). A table never
refreshed (its facts unknown) is not skipped.

Bounded: one query reads the facts and the last evaluation of every due table of the pair, one
the action's recent runs; nothing lists the store. ``LAKEWARDEN_SCHEDULER_RANKING=false`` keeps
the older order (longest since its last evaluation first) and skips nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection

from processes.decisions import DecisionKind, record
from processes.maintenance.schemas import MIN_BENEFIT
from processes.models import Process, ProcessStatus, TableState
from processes.plugin import (
    CHECKPOINT,
    CONVERT_EQUALITY_DELETES,
    EXPIRE_SNAPSHOTS,
    PURGE_DELETION_VECTORS,
    REMOVE_DANGLING_DELETES,
    REWRITE,
    REWRITE_POSITION_DELETES,
    Estimate,
    ProcessFactory,
    TableSummary,
)
from storage.health import COMPACTABLE_MIN_FILES, MANY_FILES, MANY_SNAPSHOTS, WEIGHTS, TableFacts
from storage.models import Table

if TYPE_CHECKING:
    from processes.registry import ConfiguredFactory

logger = logging.getLogger("processes.scheduler")

#: Points below which a run is not worth starting, per action, when the factory's properties do not
#: say (others: 0, never skipped). A compaction must remove at least 4 small files (5 into 1, the
#: rewrite's ``min-input-files``); a delete-file action at least one delete file.
DEFAULT_MIN_BENEFIT: dict[str, float] = {
    REWRITE: 4.0,
    PURGE_DELETION_VECTORS: 1.0,
    REWRITE_POSITION_DELETES: 1.0,
    REMOVE_DANGLING_DELETES: 1.0,
    CONVERT_EQUALITY_DELETES: 1.0,
}
RECLAIMED_BYTES_PER_POINT = 16 * 1024 * 1024
#: Worker-seconds every run costs whatever its size (start, plan, commit).
OVERHEAD_SECONDS = 5.0
#: Bytes per worker-second assumed before an action has a measured successful run.
DEFAULT_THROUGHPUT = 32 * 1024 * 1024
#: Runs whose measured cost calibrates the throughput of an action.
CALIBRATION_RUNS = 20
#: Each AGING of waiting since due adds the table's own priority once more.
AGING = dt.timedelta(hours=1)
#: Snapshots a trimming action is assumed to leave (their retention is per table).
KEPT_SNAPSHOTS = 10
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024


def min_benefit(factory: ProcessFactory, action: str, table: TableSummary) -> float:
    """The minimum benefit for ``action`` on ``table``: its override, the factory's property, the
    default of the action."""
    for source in (table.properties, factory.properties):
        value = (source or {}).get(MIN_BENEFIT)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return float(value)
    if action == REWRITE:  # a rewrite of the fewest files its trigger takes is worth running
        inputs = _min_input_files({**factory.properties, **(table.properties or {})})
        return float(max(0, inputs - 1))
    return DEFAULT_MIN_BENEFIT.get(action, 0.0)


def _min_input_files(properties: dict[str, Any]) -> int:
    """The rewrite's ``min-input-files`` (its own default when unset)."""
    value = properties.get("min-input-files")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return COMPACTABLE_MIN_FILES


def benefit(estimate: Estimate) -> float:
    return (
        estimate.small_files_removed
        + estimate.delete_files_removed
        + estimate.manifests_merged
        + estimate.bytes_reclaimed / RECLAIMED_BYTES_PER_POINT
        + max(0.0, estimate.health_gain)
    )


@dataclass(frozen=True)
class Throughput:
    """What one more run of an action costs: a fixed part (start, plan, commit) plus its bytes at
    a throughput, both measured on the action's past runs, or the defaults before there are any."""

    bytes_per_second: float = DEFAULT_THROUGHPUT
    runs: int = 0
    overhead: float = OVERHEAD_SECONDS

    def seconds(self, estimate: Estimate) -> float:
        if estimate.seconds is not None:
            return max(0.001, float(estimate.seconds))
        return self.overhead + (estimate.bytes_read + estimate.bytes_written) / self.bytes_per_second


def measured_throughput(action: str) -> Throughput:
    """The cost of ``action`` fitted to its last ``CALIBRATION_RUNS`` successful runs (one query):
    worker-seconds = overhead + bytes read and written / throughput, a least-squares line when
    their sizes differ enough, else their bytes over their seconds with the default overhead."""
    costs = (
        Process.objects.filter(action=action, status=ProcessStatus.SUCCESS, measured__has_key="cost")
        .order_by("-id")
        .values_list("measured__cost", flat=True)[:CALIBRATION_RUNS]
    )
    points = []
    for cost in costs:
        if isinstance(cost, dict) and _number(cost.get("worker_seconds")) > 0:
            moved = _number(cost.get("bytes_read")) + _number(cost.get("bytes_written"))
            points.append((moved, _number(cost.get("worker_seconds"))))
    moving = [(b, t) for b, t in points if b > 0]
    if not moving:
        return Throughput(runs=len(points))
    fitted = _fit(points)
    if fitted is not None:
        return Throughput(fitted[1], len(points), fitted[0])
    overhead = min(OVERHEAD_SECONDS, min(t for _, t in moving))
    spent = sum(t - overhead for _, t in moving)
    rate = sum(b for b, _ in moving) / spent if spent > 0 else DEFAULT_THROUGHPUT
    return Throughput(rate, len(points), overhead)


def _fit(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(overhead seconds, bytes per second) of the least-squares line through (bytes, seconds),
    or None when the runs do not pin one down (fewer than 3, sizes alike, or a slope or an
    intercept that makes no sense)."""
    if len(points) < 3:
        return None
    mean_b = sum(b for b, _ in points) / len(points)
    mean_t = sum(t for _, t in points) / len(points)
    spread = sum((b - mean_b) ** 2 for b, _ in points)
    if spread <= 0 or math.sqrt(spread / len(points)) < 0.1 * max(mean_b, 1.0):
        return None
    slope = sum((b - mean_b) * (t - mean_t) for b, t in points) / spread
    overhead = mean_t - slope * mean_b
    if slope <= 0 or overhead < 0:
        return None
    return overhead, 1 / slope


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def default_estimate(table: TableSummary, action: str, properties: dict[str, Any]) -> Estimate:
    """The estimate from the table's facts: what the action could improve of them."""
    average = table.total_bytes / table.file_count if table.file_count else 0.0
    compactable = _compactable(table)
    if action == REWRITE:
        if _min_input_files(properties) < COMPACTABLE_MIN_FILES:
            # The stored figure counts partitions of COMPACTABLE_MIN_FILES small files or more; a
            # rewrite configured to take fewer may merge any small file.
            compactable = table.small_file_count
        target = _number(properties.get("target-file-size")) or DEFAULT_TARGET_FILE_SIZE
        size = min(average, target)
        files_out = math.ceil(compactable * size / target) if compactable else 0
        removed = max(0, compactable - max(files_out, 1 if compactable else 0))
        after = TableFacts(
            table.file_count - removed, table.small_file_count - compactable, table.instant_count, 0
        )
        moved = int(compactable * size)
        deletes = table.delete_file_count if _number(properties.get("delete-file-threshold")) > 0 else 0
        return Estimate(
            small_files_removed=removed,
            delete_files_removed=deletes,
            health_gain=_health_gain(table, after),
            bytes_read=moved,
            bytes_written=moved,
        )
    if action in DEFAULT_MIN_BENEFIT:  # the delete-file actions
        # position deletes compact into one per partition; the others may remove every one
        removed = (
            max(0, table.delete_file_count - 1)
            if action == REWRITE_POSITION_DELETES
            else table.delete_file_count
        )
        moved = int(table.delete_file_count * average) if action == PURGE_DELETION_VECTORS else 0
        return Estimate(
            delete_files_removed=removed,
            health_gain=0.0,
            bytes_read=moved,
            bytes_written=moved,
        )
    after = _facts(table)
    if action in (EXPIRE_SNAPSHOTS, CHECKPOINT):
        after = TableFacts(
            after.file_count, after.small_file_count, min(table.instant_count, KEPT_SNAPSHOTS), compactable
        )
    return Estimate(health_gain=_health_gain(table, after))


def _compactable(table: TableSummary | TableFacts) -> int:
    value = table.compactable_file_count
    return table.small_file_count if value is None else min(value, table.small_file_count)


def _facts(table: TableSummary) -> TableFacts:
    return TableFacts(table.file_count, table.small_file_count, table.instant_count, _compactable(table))


def _health_gain(table: TableSummary, after: TableFacts) -> float:
    """Health score points a run gains: the parts of ``storage.health.table_health`` it changes
    (small files, file count, snapshots). Staleness is not credited: a run with nothing to change
    would otherwise look worth 20 points. Inlined for speed (tests check it against the score)."""
    return max(0.0, _fixable_points(_facts(table)) - _fixable_points(after))


def _fixable_points(facts: TableFacts) -> float:
    compactable = _compactable(facts)
    ratio = compactable / facts.file_count if facts.file_count else 0.0
    return (
        WEIGHTS["small_files"] * ratio * min(compactable / 20, 1.0)
        + WEIGHTS["file_count"] * min(facts.file_count / MANY_FILES, 1.0) * (1.0 if compactable else 0.0)
        + WEIGHTS["snapshots"] * min(facts.instant_count / MANY_SNAPSHOTS, 1.0)
    )


@dataclass
class Ranked:
    """A pair's due tables in the order to ask the factory, and those below the minimum benefit."""

    order: list[int]
    below_minimum: list[Table] = field(default_factory=list)
    #: Table id -> (benefit, minimum) of those below it, for the decision's reason.
    shortfall: dict[int, tuple[float, float]] = field(default_factory=dict)
    priority: dict[int, float] = field(default_factory=dict)


_DUE_FACTS_SQL = """
SELECT t.id, t.format, t.file_count, t.small_file_count, t.compactable_file_count, t.delete_file_count,
  t.total_bytes, t.instant_count, t.last_maintenance_at, t.properties, t.current_instant, t.registered_at,
  CASE WHEN jsonb_typeof(ev.value) = 'number' THEN (ev.value)::float8 END, t.refreshed_at IS NOT NULL
FROM {table} t LEFT JOIN {state} ev ON ev.table_id = t.id AND ev.key = %(evaluated)s
WHERE t.id = ANY(%(ids)s)
"""


def rank_due(
    configured: ConfiguredFactory,
    action: str,
    due_ids: list[int],
    *,
    now: dt.datetime,
    evaluated_key: str,
    throughput: Throughput | None = None,
    groups_of: Mapping[int, Any] | None = None,
) -> Ranked:
    """``due_ids`` (one format's, longest waiting first) by priority, highest first, without
    those below the minimum benefit. Two queries whatever the number of tables."""
    if not due_ids or not settings.LAKEWARDEN_SCHEDULER_RANKING:
        return Ranked(list(due_ids))
    factory = configured.factory
    throughput = throughput or measured_throughput(action)
    ranked = Ranked([])
    waiting: list[tuple[float, int, int]] = []
    with connection.cursor() as cursor:
        cursor.execute(
            _DUE_FACTS_SQL.format(table=Table._meta.db_table, state=TableState._meta.db_table),
            {"ids": list(due_ids), "evaluated": evaluated_key},
        )
        rows = cursor.fetchall()
    position = {table_id: i for i, table_id in enumerate(due_ids)}
    interval: dt.timedelta | None = None
    for row in rows:
        table = _summary(row)
        if interval is None:
            interval = factory.trigger_strategy(table.format, action).interval
        estimate = _estimate(factory, table, action)
        gained = benefit(estimate)
        minimum = min_benefit(factory, action, table)
        if gained < minimum and row[13]:  # never refreshed: its facts are not known yet
            group = groups_of.get(table.id) if groups_of else None
            _skip(ranked, table, row[10], action, estimate, minimum, getattr(group, "name", None))
            continue
        due_since = (
            dt.datetime.fromtimestamp(row[12], tz=dt.UTC) + interval if row[12] is not None else row[11]
        )
        waited = max(0.0, (now - due_since).total_seconds()) if due_since else 0.0
        priority = (gained + 1) / throughput.seconds(estimate) * (1 + waited / AGING.total_seconds())
        ranked.priority[table.id] = priority
        waiting.append((-priority, position[table.id], table.id))
    ranked.order = [table_id for _, _, table_id in sorted(waiting)]
    if ranked.shortfall:
        logger.info(
            "%s: %d due table(s) below the minimum benefit (table: (benefit, minimum)) %s",
            action,
            len(ranked.shortfall),
            dict(list(ranked.shortfall.items())[:20]),
        )
    return ranked


def _skip(
    ranked: Ranked,
    table: TableSummary,
    instant: str,
    action: str,
    estimate: Estimate,
    minimum: float,
    group: str | None,
) -> None:
    """``table`` is below the minimum benefit: evaluated unasked, its decision recorded."""
    gained = benefit(estimate)
    ranked.below_minimum.append(Table(pk=table.id, format=table.format, current_instant=instant))
    ranked.shortfall[table.id] = (round(gained, 2), minimum)
    record(
        table.id,
        action,
        str(DecisionKind.BELOW_BENEFIT),
        f"a run is predicted to gain {gained:,.1f} points, below the minimum benefit of {minimum:,g}"
        f" ({_gains(estimate)})",
        group=group,
        numbers={"benefit": round(gained, 2), "minimum": minimum, **_numbers(estimate)},
    )


def _gains(estimate: Estimate) -> str:
    parts = [
        f"{estimate.small_files_removed:,} small files removed",
        f"{estimate.delete_files_removed:,} delete files removed",
        f"{estimate.health_gain:,.0f} health points",
    ]
    if estimate.bytes_reclaimed:
        parts.append(f"{estimate.bytes_reclaimed:,} bytes reclaimed")
    if estimate.manifests_merged:
        parts.append(f"{estimate.manifests_merged:,} manifests merged")
    return ", ".join(parts)


def _numbers(estimate: Estimate) -> dict[str, Any]:
    return {key: value for key, value in dataclasses.asdict(estimate).items() if value}


def _summary(row: tuple[Any, ...]) -> TableSummary:
    return TableSummary(
        id=row[0],
        format=row[1],
        file_count=row[2],
        small_file_count=row[3],
        compactable_file_count=row[4],
        delete_file_count=row[5],
        total_bytes=row[6],
        instant_count=row[7],
        last_maintenance_at=row[8],
        properties=_properties(row[9]),
    )


def _properties(value: Any) -> dict[str, Any]:
    if isinstance(value, str):  # a jsonb column read through a raw cursor
        value = json.loads(value)
    return value if isinstance(value, dict) else {}


def _estimate(factory: ProcessFactory, table: TableSummary, action: str) -> Estimate:
    try:
        own = factory.estimate(table, action)
    except Exception:  # a plugin's bug must not stop the tick: the facts' estimate stands in
        logger.exception("factory %s failed to estimate %s on table %s", factory.name, action, table.id)
        own = None
    if own is not None:
        return own
    return default_estimate(table, action, {**factory.properties, **table.properties})


__all__ = [
    "DEFAULT_MIN_BENEFIT",
    "Ranked",
    "Throughput",
    "benefit",
    "default_estimate",
    "measured_throughput",
    "min_benefit",
    "rank_due",
]
