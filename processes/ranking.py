"""Benefit-ranked scheduling: in which order a tick asks about its due (table, action) work.

Every due (table, action) of a tick, of every (format, action) pair, is ranked in one order
(``rank_tick``): within a resource group they compete for its free slots and budget whatever the
action. Each gets an ``Estimate`` (``processes.plugin``): the factory's own
(``ProcessFactory.estimate``, called for that factory's due tables only) or the default from the
facts the table row keeps (small files removed, delete files removed, bytes reclaimed, health
gain; bytes to read and write), computed over numpy columns for all due tables at once
(``processes.estimates``; ``default_estimate`` is the same for one table). Its **benefit** is one
number, in points::

    small files removed + delete files removed + manifests merged
      + bytes reclaimed / 16 MiB + health gain (score points)

and its **cost** is worker-seconds: a fixed part plus the bytes to read and write at a
throughput, both fitted to the worker-seconds and bytes the action's last successful runs
measured (``Process.measured``); ``OVERHEAD_SECONDS`` and ``DEFAULT_THROUGHPUT`` before the first.
Work is asked in order of **priority** = (benefit + 1) / cost x (1 + waited / ``AGING``), where
``waited`` is the time since the table became due: work that keeps waiting climbs past fresh,
richer work, so nothing starves. A table whose benefit is below the action's minimum (the
factory property ``min-benefit``, or the table's override of the same name;
``DEFAULT_MIN_BENEFIT``) is not asked: the scheduler counts it as evaluated, so it is looked at
again after the interval or a new snapshot, and records the decision with both numbers
(``processes.decisions``). A table never refreshed (its facts unknown) is not skipped.

Bounded: one query reads the facts of every due table (none in a tick: the awake scan packed
them, ``DueFacts.of_snapshot``), one the recent runs of every action; nothing lists the store. ``LAKEWARDEN_SCHEDULER_RANKING=false`` keeps the older order (pairs by
factory priority, within a pair longest since its last evaluation first) and skips nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from django.conf import settings
from django.db import connection

from processes.decisions import DecisionKind, record
from processes.estimates import (
    DueFacts,
    Estimates,
    as_number,
    default_estimates,
    json_object,
    min_input_files,
)
from processes.maintenance.schemas import MIN_BENEFIT
from processes.models import Process, ProcessStatus
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
        inputs = min_input_files({**factory.properties, **(table.properties or {})})
        return float(max(0, inputs - 1))
    return DEFAULT_MIN_BENEFIT.get(action, 0.0)


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
    return _throughput(list(costs))


_COSTS_SQL = """
SELECT a.action, r.cost FROM unnest(%(actions)s::text[]) AS a(action)
CROSS JOIN LATERAL (
  SELECT p.measured -> 'cost' AS cost FROM {process} p
  WHERE p.action = a.action AND p.status = %(success)s AND p.measured ? 'cost'
  ORDER BY p.id DESC LIMIT %(runs)s
) r
"""


def measured_throughputs(actions: list[str]) -> dict[str, Throughput]:
    """``measured_throughput`` of each of ``actions`` in one query."""
    costs: dict[str, list[Any]] = {action: [] for action in actions}
    if actions:
        with connection.cursor() as cursor:
            cursor.execute(
                _COSTS_SQL.format(process=Process._meta.db_table),
                {"actions": list(actions), "success": str(ProcessStatus.SUCCESS), "runs": CALIBRATION_RUNS},
            )
            for action, cost in cursor.fetchall():
                costs[action].append(json_object(cost))
    return {action: _throughput(found) for action, found in costs.items()}


def _throughput(costs: list[Any]) -> Throughput:
    points = []
    for cost in costs:
        if isinstance(cost, dict) and as_number(cost.get("worker_seconds")) > 0:
            moved = as_number(cost.get("bytes_read")) + as_number(cost.get("bytes_written"))
            points.append((moved, as_number(cost.get("worker_seconds"))))
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


def default_estimate(table: TableSummary, action: str, properties: dict[str, Any]) -> Estimate:
    """The estimate from the table's facts: what the action could improve of them."""
    average = table.total_bytes / table.file_count if table.file_count else 0.0
    compactable = _compactable(table)
    if action == REWRITE:
        if min_input_files(properties) < COMPACTABLE_MIN_FILES:
            # The stored figure counts partitions of COMPACTABLE_MIN_FILES small files or more; a
            # rewrite configured to take fewer may merge any small file.
            compactable = table.small_file_count
        target = as_number(properties.get("target-file-size")) or DEFAULT_TARGET_FILE_SIZE
        size = min(average, target)
        files_out = math.ceil(compactable * size / target) if compactable else 0
        removed = max(0, compactable - max(files_out, 1 if compactable else 0))
        after = TableFacts(
            table.file_count - removed, table.small_file_count - compactable, table.instant_count, 0
        )
        moved = int(compactable * size)
        deletes = table.delete_file_count if as_number(properties.get("delete-file-threshold")) > 0 else 0
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


@dataclass
class PairDue:
    """One (format, action) pair's due tables as the due query gave them (longest waiting first)."""

    configured: ConfiguredFactory
    table_format: str
    action: str
    interval: dt.timedelta | None
    ids: list[int]
    #: When each was last evaluated (epoch seconds; None or NaN: never), in the order of ``ids``; None:
    #: read with the facts (``rank_due``).
    evaluated: list[float | None] | np.ndarray | None = None
    #: The pair's place in the order of factory priority (the older order; breaks ties).
    index: int = 0


@dataclass
class TickRanking:
    """Every due (table, action) of a tick in one order across pairs, and per pair index those
    below the minimum benefit (evaluated unasked, their decisions recorded). The order is kept as
    columns (pair index, table id, priority): the walk reads as far as it needs."""

    #: Pair index and table id of each entry, highest priority first.
    pair_index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    table_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: The priority of each entry (None when ranking is off).
    priority: np.ndarray | None = None
    #: Pair index -> (table id, snapshot) of its due tables below the minimum.
    below_minimum: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    shortfall: dict[int, dict[int, tuple[float, float]]] = field(default_factory=dict)

    @property
    def order(self) -> list[tuple[int, int]]:
        """(pair index, table id), highest priority first."""
        return list(zip(self.pair_index.tolist(), self.table_ids.tolist(), strict=True))

    @property
    def priorities(self) -> list[float]:
        return [] if self.priority is None else self.priority.tolist()


def rank_tick(
    pairs: list[PairDue],
    *,
    now: dt.datetime,
    groups_of: Mapping[int, Any] | None = None,
    throughputs: Mapping[str, Throughput] | None = None,
    evaluated_key: str | None = None,
    facts: DueFacts | None = None,
) -> TickRanking:
    """Every pair's due tables in one order of priority, highest first (within a resource group
    they compete for its free slots and budget), without those below the minimum benefit. Two
    queries whatever the number of tables and pairs: the facts of every due table, the measured
    runs of every action; the default estimate is computed over columns (``processes.estimates``),
    a factory's own ``estimate`` called for its own due tables only. ``facts``: the facts of (at
    least) every pair's due tables from what the tick read already (``DueFacts.of_snapshot``),
    instead of their query."""
    if not settings.LAKEWARDEN_SCHEDULER_RANKING:
        ordered = sorted(pairs, key=lambda p: p.index)
        return TickRanking(
            np.array([p.index for p in ordered for _ in p.ids], dtype=np.int64),
            np.array([t for p in ordered for t in p.ids], dtype=np.int64),
        )
    ranking = TickRanking()
    pairs = [p for p in pairs if p.ids]
    if not pairs:
        return ranking
    if facts is not None:
        columns = facts
    else:
        due_ids = np.unique(np.concatenate([np.asarray(p.ids, dtype=np.int64) for p in pairs]))
        columns = DueFacts(due_ids.tolist(), evaluated_key)
    measured = throughputs or measured_throughputs(sorted({p.action for p in pairs}))
    parts = [_rank_pair(p, columns, measured[p.action], now, ranking, groups_of or {}) for p in pairs]
    index, ids, priority, position = (np.concatenate([part[i] for part in parts]) for i in range(4))
    order = np.lexsort((position, index, -priority))
    ranking.pair_index, ranking.table_ids, ranking.priority = index[order], ids[order], priority[order]
    for pair_index, shortfall in ranking.shortfall.items():
        logger.info(
            "%s: %d due table(s) below the minimum benefit (table: (benefit, minimum)) %s",
            pairs[0].action if len(pairs) == 1 else pair_index,
            len(shortfall),
            dict(list(shortfall.items())[:20]),
        )
    return ranking


def _rank_pair(
    pair: PairDue,
    columns: DueFacts,
    throughput: Throughput,
    now: dt.datetime,
    ranking: TickRanking,
    groups_of: Mapping[int, Any],
) -> tuple[np.ndarray, ...]:
    """(pair index, table id, priority, position) of the pair's due tables at or above the minimum."""
    factory, action = pair.configured.factory, pair.action
    position, at = columns.locate(pair.ids)
    count = len(at)
    gained, seconds, minimum = np.zeros(count), np.zeros(count), np.zeros(count)
    own_estimate = type(factory).estimate is not ProcessFactory.estimate
    one_by_one = np.ones(count, dtype=bool) if own_estimate else columns.own[at]
    plain = ~one_by_one
    found = None
    if plain.any():
        found = default_estimates(
            columns.facts.take(at[plain]),
            action,
            factory.properties or {},
            target_default=DEFAULT_TARGET_FILE_SIZE,
            deletes_actions=frozenset(DEFAULT_MIN_BENEFIT),
            kept_snapshots=KEPT_SNAPSHOTS,
        )
        gained[plain] = found.benefit
        seconds[plain] = throughput.overhead + found.moved / throughput.bytes_per_second
        minimum[plain] = min_benefit(factory, action, TableSummary(0, pair.table_format))
    estimates: dict[int, Estimate] = {}
    for i in np.nonzero(one_by_one)[0].tolist():
        summary = columns.summary(int(at[i]))
        estimates[i] = _estimate(factory, summary, action)
        gained[i] = benefit(estimates[i])
        seconds[i] = throughput.seconds(estimates[i])
        minimum[i] = min_benefit(factory, action, summary)
    below = (gained < minimum) & columns.refreshed[at]  # never refreshed: its facts are not known yet
    if below.any():
        _plain_estimates(below & plain, plain, found, estimates)
        for i, table_row in zip(np.nonzero(below)[0].tolist(), at[below].tolist(), strict=True):
            table_id, instant = int(columns.ids[table_row]), columns.instants[table_row]
            group = getattr(groups_of.get(table_id), "name", None)
            _skip(ranking, pair.index, (table_id, instant), action, estimates[i], float(minimum[i]), group)
    keep = ~below
    waited = _waited(pair, columns, position, at, now)
    priority = (gained + 1) / np.maximum(seconds, 0.001) * (1 + waited / AGING.total_seconds())
    return (
        np.full(int(keep.sum()), pair.index, dtype=np.int64),
        columns.ids[at][keep],
        priority[keep],
        position[keep],
    )


def _waited(pair: PairDue, columns: DueFacts, position: np.ndarray, at: np.ndarray, now: dt.datetime):
    """Seconds each due table has waited since it became due: since its last evaluation plus the
    interval, or since it was registered when never evaluated."""
    if pair.evaluated is None:
        evaluated = columns.evaluated[at]
    else:
        values = pair.evaluated
        if not isinstance(values, np.ndarray):
            values = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        evaluated = values[position]
    interval = pair.interval
    if interval is None:  # rank_due: the pair's format is its tables'
        table_format = columns.formats[int(at[0])] if len(at) else pair.table_format
        interval = pair.configured.factory.trigger_strategy(table_format, pair.action).interval
    due_since = np.where(np.isnan(evaluated), columns.registered[at], evaluated + interval.total_seconds())
    return np.maximum(0.0, now.timestamp() - due_since)


def _plain_estimates(
    wanted: np.ndarray, plain: np.ndarray, found: Estimates | None, estimates: dict[int, Estimate]
) -> None:
    """Adds to ``estimates`` the ``wanted`` rows' (of the plain ones, estimated as columns in
    ``found``), for the reasons of their decisions."""
    if found is None or not wanted.any():
        return
    parts = np.zeros((4, len(plain)))
    parts[:, plain] = [found.small_removed, found.deletes_removed, found.health_gain, found.moved / 2]
    for i in np.nonzero(wanted)[0].tolist():
        small, deletes, gain, half = parts[:, i].tolist()
        estimates[i] = Estimate(int(small), int(deletes), health_gain=gain, bytes_read=int(half))
        estimates[i].bytes_written = int(half)


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
    """One pair's ``due_ids`` (one format's, longest waiting first) by priority, highest first,
    without those below the minimum benefit (``rank_tick`` for a single pair). Two queries."""
    if not due_ids or not settings.LAKEWARDEN_SCHEDULER_RANKING:
        return Ranked(list(due_ids))
    ranking = rank_tick(
        [PairDue(configured, "", action, None, list(due_ids))],
        now=now,
        groups_of=groups_of,
        throughputs={action: throughput} if throughput else None,
        evaluated_key=evaluated_key,
    )
    order = [table_id for _, table_id in ranking.order]
    return Ranked(
        order,
        [Table(pk=t, current_instant=instant) for t, instant in ranking.below_minimum.get(0, [])],
        ranking.shortfall.get(0, {}),
        dict(zip(order, ranking.priorities, strict=True)),
    )


def _skip(
    ranking: TickRanking,
    pair_index: int,
    table: tuple[int, str],
    action: str,
    estimate: Estimate,
    minimum: float,
    group: str | None,
) -> None:
    """``table`` is below the minimum benefit: evaluated unasked, its decision recorded."""
    gained = benefit(estimate)
    ranking.below_minimum.setdefault(pair_index, []).append(table)
    ranking.shortfall.setdefault(pair_index, {})[table[0]] = (round(gained, 2), minimum)
    record(
        table[0],
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


_ESTIMATE_FIELDS = [f.name for f in dataclasses.fields(Estimate)]


def _numbers(estimate: Estimate) -> dict[str, Any]:
    return {key: value for key in _ESTIMATE_FIELDS if (value := getattr(estimate, key))}


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
    "measured_throughputs",
    "PairDue",
    "rank_due",
    "rank_tick",
    "TickRanking",
]
