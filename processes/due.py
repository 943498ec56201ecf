"""Which tables a scheduler tick looks at and which are due, and when each looks again.

A tick reads the tables awake (never given a wake time, woken by now, or at a new snapshot:
``Snapshot``; the same scan counts the tables per format), then one query picks the due ones of
every (format, action) pair in the database from the evaluation times and seen snapshots kept as
``TableState`` rows (``Snapshot.load_due``; ``due_table_ids`` hands out a pair's). Each
awake table gets the earliest moment any of its pairs may be due again as its next wake time:
gathered as columns (the due queries give those of the tables not due, ``wake_due`` those of the
due ones by whether the factory was asked), reduced per table in numpy and written by one update
(``Snapshot.save_wakes``); no Python work per table.
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import TYPE_CHECKING

import numpy as np
from django.db import connection, transaction

from processes.models import ACTIVE_STATUSES, Process, TableState
from processes.sql_arrays import float_array, int_array, json_array
from storage.models import Table

if TYPE_CHECKING:
    from processes.plugin import TriggerStrategy
    from processes.scheduler import _Pair


def evaluated_key(action: str) -> str:
    return f"scheduler.{action}.evaluated_at"


def seen_snapshot_key(action: str) -> str:
    return f"scheduler.{action}.seen_instant"


#: "Not before a new snapshot": a wake time no tick reaches (a refresh blanks it).
NEVER = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)

#: The tables a tick looks at, per format: never given a wake time, woken by now, or at a new
#: snapshot; with their snapshots and whether their stored wake time passed at that snapshot; and
#: how many tables each format has (the same scan: the report's "considered").
_AWAKE_SQL = """
SELECT a.format, a.n, a.ids, a.instants, a.settled FROM (
  SELECT t.format, count(*) AS n,
    array_agg(t.id) FILTER (WHERE t.awake) AS ids, array_agg(t.current_instant) FILTER (WHERE t.awake) AS instants,
    array_agg(COALESCE(
      t.scheduler_wake_at IS NOT NULL AND t.scheduler_wake_at <= %(now)s AND t.scheduler_instant = t.current_instant,
      false)) FILTER (WHERE t.awake) AS settled
  FROM (
    SELECT t.format, t.id, t.current_instant, t.scheduler_wake_at, t.scheduler_instant,
      t.scheduler_wake_at IS NULL OR t.scheduler_wake_at <= %(now)s
        OR t.current_instant IS DISTINCT FROM t.scheduler_instant AS awake
    FROM {table} t
  ) t
  GROUP BY t.format
) a
"""


class Snapshot:
    """What one tick reads once: active processes, the number of tables per format and the
    tables awake (their wake time passed or blank); only those are looked at. Each awake table
    gets the earliest time any of its pairs may become due as its next wake time: gathered as
    columns (the due queries give those of tables not due, ``wake_due`` those of the due ones),
    reduced per table and written by one update (``save_wakes``)."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now
        self.active: list[tuple[str, str]] = []
        self.busy: dict[str, list[int]] = {}  # action -> tables with an active process for it
        for table_id, table_format, action in Process.objects.filter(status__in=ACTIVE_STATUSES).values_list(
            "table_id", "table__format", "action"
        ):
            self.active.append((table_format, action))
            self.busy.setdefault(action, []).append(table_id)
        with connection.cursor() as cursor:
            cursor.execute(_AWAKE_SQL.format(table=Table._meta.db_table), {"now": now})
            rows = [
                (fmt, n, ids or [], instants or [], settled or [])
                for fmt, n, ids, instants, settled in cursor
            ]
        self._counts: dict[str, int] = {table_format: n for table_format, n, _, _, _ in rows}
        #: Format -> its awake tables.
        self.awake: dict[str, list[int]] = {table_format: ids for table_format, _, ids, _, _ in rows if ids}
        #: Every awake table, the snapshot it is at, whether its stored wake time passed at it.
        self.ids = np.array([t for _, _, ids, _, _ in rows for t in ids], dtype=np.int64)
        self.formats = [fmt for fmt, _, ids, _, _ in rows for _ in ids]
        self.instants = [i for _, _, _, instants, _ in rows for i in instants]
        self.settled = np.array([s for _, _, _, _, settled in rows for s in settled], dtype=bool)
        #: (format, action) -> (due ids, when each was last evaluated), read by ``load_due``.
        self._due: dict[tuple[str, str], tuple[list[int], np.ndarray]] = {}
        #: (table ids, wake times in epoch seconds) gathered per pair; NaN: not before a new snapshot.
        self.wakes: list[tuple[np.ndarray, np.ndarray]] = []
        #: (format, action) -> when each table the last due query found due was last evaluated.
        self.due_evaluated: dict[tuple[str, str], np.ndarray] = {}

    def table_count(self, table_format: str) -> int:
        return self._counts.get(table_format, 0)

    def load_due(self, pairs: list[tuple[str, str, TriggerStrategy]]) -> None:
        """Which awake tables are due for each (format, action, strategy), for every pair in one
        query (``_DUE_SQL``: per pair, each awake table's last evaluation and whether the factory
        saw its snapshot), decided over columns (``_decide``); the others' next wake times are
        gathered (``wake_no_later``)."""
        wanted = [(f, a, s) for f, a, s in pairs if self.awake.get(f) and (f, a) not in self._due]
        if not wanted:
            return
        params = {
            "ids": int_array(self.ids.tolist()),
            "formats": json_array(self.formats),
            "instants": json_array(self.instants),
            "pair": int_array(range(len(wanted))),
            "pair_format": json_array(f for f, _, _ in wanted),
            "evaluated": json_array(evaluated_key(a) for _, a, _ in wanted),
            "seen": json_array(seen_snapshot_key(a) for _, a, _ in wanted),
        }
        sql = _DUE_SQL.format(state=TableState._meta.db_table)
        with transaction.atomic(), connection.cursor() as cursor:
            # two hash joins over every (table, pair) row: in memory, not in batches on disk
            cursor.execute(
                "SELECT set_config('work_mem', %s, true), set_config('jit', 'off', true)", [DUE_WORK_MEM]
            )
            cursor.execute(sql, params)
            found = {index: rest for index, *rest in cursor}
        for index, (table_format, action, strategy) in enumerate(wanted):
            ids, evaluated, seen = found.get(index, (None, None, None))
            self._decide(table_format, action, strategy, ids or [], evaluated or [], seen or [])

    def _decide(self, table_format, action, strategy, ids, evaluated, seen) -> None:
        """Due: not busy with the action, not evaluated within the interval, and (``on_new_snapshot``)
        at a snapshot the factory has not seen; never evaluated first, then longest waiting, then
        by id. The others may be due again: busy or never evaluated, at once; at a seen snapshot
        (``on_new_snapshot``), not before a new one (NaN); else when the interval has passed."""
        ids = np.array(ids, dtype=np.int64)
        evaluated = np.array([np.nan if v is None else v for v in evaluated], dtype=np.float64)
        seen = np.array(seen, dtype=bool)
        moment, interval = self.now.timestamp(), strategy.interval.total_seconds()
        busy = np.isin(ids, np.array(self.busy.get(action, []), dtype=np.int64))
        never = np.isnan(evaluated)
        waited = never | (moment - np.where(never, moment, evaluated) >= interval)
        kept = seen if strategy.on_new_snapshot else np.zeros(len(ids), dtype=bool)
        due = ~busy & waited & ~kept
        wake = np.where(busy | never, moment, np.where(kept, np.nan, evaluated + interval))
        if (~due).any():  # the due tables' wake times depend on whether the factory is asked (``wake_due``)
            self.wake_no_later(ids[~due], wake[~due])
        due_ids, due_evaluated = ids[due], evaluated[due]
        order = np.lexsort((due_ids, np.where(np.isnan(due_evaluated), 0.0, due_evaluated)))
        self._due[(table_format, action)] = (due_ids[order].tolist(), due_evaluated[order])

    def wake_no_later(self, table_ids: list[int] | np.ndarray, moments: np.ndarray | float) -> None:
        """``table_ids`` are to be looked at again by ``moments`` (epoch seconds) at the latest."""
        ids = np.asarray(table_ids, dtype=np.int64)
        self.wakes.append((ids, np.broadcast_to(np.array(moments, dtype=np.float64), ids.shape)))

    def wake_due(self, pair: _Pair) -> None:
        """The pair's due tables: asked, again after the interval; left waiting, at the next tick."""
        due = np.asarray(pair.due.ids, dtype=np.int64)
        asked = np.isin(due, np.fromiter(pair.asked, dtype=np.int64, count=len(pair.asked)))
        moment = self.now.timestamp()
        self.wake_no_later(due, np.where(asked, moment + pair.strategy.interval.total_seconds(), moment))

    def save_wakes(self) -> None:
        """One update, with the snapshot each wake time was computed at: a table whose snapshot
        moves (meanwhile or later) is awake again whatever its wake time. Each table's earliest
        wake over its pairs (``NEVER`` when none gave one); tables left waiting whose wake time had
        passed already keep it (no write)."""
        if not len(self.ids):
            return
        ids = np.concatenate([self.ids] + [w[0] for w in self.wakes])
        never = NEVER.timestamp()
        moments = np.concatenate([np.full(len(self.ids), never)] + [w[1] for w in self.wakes])
        moments = np.where(np.isnan(moments), never, moments)
        order = np.lexsort((moments, ids))
        ids, moments = ids[order], moments[order]
        first = np.ones(len(ids), dtype=bool)
        first[1:] = ids[1:] != ids[:-1]
        ids, moments = ids[first], moments[first]  # the earliest per table, in the order of ids
        at = np.searchsorted(ids, self.ids)  # every awake table is in ids
        earliest = moments[at]
        write = ~((earliest <= self.now.timestamp()) & self.settled)
        if not write.any():
            return
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Table._meta.db_table} t SET scheduler_wake_at = to_timestamp(v.wake),"
                " scheduler_instant = v.instant"
                " FROM ROWS FROM (unnest(%s::bigint[]), jsonb_array_elements_text(%s::jsonb),"
                " unnest(%s::float8[])) AS v(id, instant, wake)"
                " WHERE t.id = v.id AND t.current_instant = v.instant",
                [
                    int_array(self.ids[write].tolist()),
                    json_array(itertools.compress(self.instants, write.tolist())),
                    float_array(earliest[write].tolist()),
                ],
            )


#: What due-ness is decided from, one query for every (format, action) pair over the awake tables
#: (given as arrays: ids, formats, snapshots; no scan of the tables' own wide rows): a row per pair
#: with three arrays, each awake table of its format, when the action was last evaluated on it
#: (NULL: never, or not a number) and whether the factory saw its current snapshot.
_DUE_SQL = """
WITH awake AS (
  SELECT * FROM ROWS FROM (unnest(%(ids)s::bigint[]), jsonb_array_elements_text(%(formats)s::jsonb),
    jsonb_array_elements(%(instants)s::jsonb)) AS a(id, format, instant)
), pairs AS (
  SELECT * FROM ROWS FROM (unnest(%(pair)s::int[]), jsonb_array_elements_text(%(pair_format)s::jsonb),
    jsonb_array_elements_text(%(evaluated)s::jsonb), jsonb_array_elements_text(%(seen)s::jsonb))
    AS p(pair, format, evaluated_key, seen_key)
)
SELECT p.pair, array_agg(a.id),
  array_agg(CASE WHEN jsonb_typeof(ev.value) = 'number' THEN (ev.value)::float8 END),
  array_agg(COALESCE(seen.value = a.instant, false))
FROM awake a
JOIN pairs p ON p.format = a.format
LEFT JOIN {state} ev ON ev.table_id = a.id AND ev.key = p.evaluated_key
LEFT JOIN {state} seen ON seen.table_id = a.id AND seen.key = p.seen_key
GROUP BY p.pair
"""

#: The memory the due query's hash joins may take (``SET LOCAL``): at 100,000 awake tables and five
#: pairs the default 4 MB split them into 16 batches written to disk.
DUE_WORK_MEM = "64MB"


def due_table_ids(snapshot: Snapshot, table_format, action, strategy, now, report) -> list[int]:
    """Tables due for (format, action), longest waiting first (when each was last evaluated, for
    the ranking's aging, kept in ``snapshot.due_evaluated``). Read by ``Snapshot.load_due`` (for
    every pair of a tick at once; here for this pair alone when the tick did not)."""
    report.tables_considered += snapshot.table_count(table_format)
    if not snapshot.awake.get(table_format):
        return []
    snapshot.load_due([(table_format, action, strategy)])
    due, evaluated = snapshot._due.pop((table_format, action))
    report.due += len(due)
    snapshot.due_evaluated[(table_format, action)] = evaluated
    return due


__all__ = ["NEVER", "Snapshot", "due_table_ids", "evaluated_key", "seen_snapshot_key"]
