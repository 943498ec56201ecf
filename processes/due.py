"""Which tables a scheduler tick looks at and which are due, and when each looks again.

A tick reads the tables awake (never given a wake time, woken by now, or at a new snapshot:
``Snapshot``), then per (format, action) pair one query picks the due ones in the database from
the evaluation times and seen snapshots kept as ``TableState`` rows (``due_table_ids``). Each
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
from django.db import connection
from django.db.models import Count

from processes.models import ACTIVE_STATUSES, Process, TableState
from processes.sql_arrays import float_array, int_array, json_array
from storage.models import Table

if TYPE_CHECKING:
    from processes.scheduler import _Pair


def evaluated_key(action: str) -> str:
    return f"scheduler.{action}.evaluated_at"


def seen_snapshot_key(action: str) -> str:
    return f"scheduler.{action}.seen_instant"


#: "Not before a new snapshot": a wake time no tick reaches (a refresh blanks it).
NEVER = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)

#: The tables a tick looks at, per format: never given a wake time, woken by now, or at a new
#: snapshot; with their snapshots and whether their stored wake time passed at that snapshot.
_AWAKE_SQL = """
SELECT t.format, array_agg(t.id), array_agg(t.current_instant),
  array_agg(COALESCE(
    t.scheduler_wake_at IS NOT NULL AND t.scheduler_wake_at <= %(now)s AND t.scheduler_instant = t.current_instant,
    false))
FROM {table} t
WHERE t.scheduler_wake_at IS NULL OR t.scheduler_wake_at <= %(now)s
  OR t.current_instant IS DISTINCT FROM t.scheduler_instant
GROUP BY t.format
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
        self._counts: dict[str, int] | None = None
        with connection.cursor() as cursor:
            cursor.execute(_AWAKE_SQL.format(table=Table._meta.db_table), {"now": now})
            rows = cursor.fetchall()
        #: Format -> its awake tables.
        self.awake: dict[str, list[int]] = {table_format: ids for table_format, ids, _, _ in rows}
        #: Every awake table, the snapshot it is at, whether its stored wake time passed at it.
        self.ids = np.array([t for _, ids, _, _ in rows for t in ids], dtype=np.int64)
        self.instants = [i for _, _, instants, _ in rows for i in instants]
        self.settled = np.array([s for _, _, _, settled in rows for s in settled], dtype=bool)
        #: (table ids, wake times in epoch seconds) gathered per pair; NaN: not before a new snapshot.
        self.wakes: list[tuple[np.ndarray, np.ndarray]] = []
        #: (format, action) -> when each table the last due query found due was last evaluated.
        self.due_evaluated: dict[tuple[str, str], list[float | None]] = {}

    def table_count(self, table_format: str) -> int:
        if self._counts is None:
            self._counts = dict(Table.objects.order_by().values_list("format").annotate(n=Count("id")))
        return self._counts.get(table_format, 0)

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


#: Due-ness in the database, one query per (format, action) pair over the awake tables: not busy
#: with the action, not evaluated within the interval, and (``on_new_snapshot``) at a snapshot the
#: factory has not seen; never evaluated first, then longest waiting, then by id. Four arrays: the
#: due tables' ids and when each was last evaluated; the others' ids and when they may next be
#: due (``wake``; NULL: not before a new snapshot).
_DUE_SQL = """
SELECT array_agg(d.id ORDER BY COALESCE(d.evaluated, 0), d.id) FILTER (WHERE d.due),
  array_agg(d.evaluated ORDER BY COALESCE(d.evaluated, 0), d.id) FILTER (WHERE d.due),
  array_agg(d.id) FILTER (WHERE NOT d.due), array_agg(d.wake) FILTER (WHERE NOT d.due)
FROM (
  SELECT t.id, CASE WHEN jsonb_typeof(ev.value) = 'number' THEN (ev.value)::float8 END AS evaluated,
    NOT (t.id = ANY(%(busy)s::bigint[]))
    AND (jsonb_typeof(ev.value) IS DISTINCT FROM 'number' OR %(moment)s - (ev.value)::float8 >= %(interval)s)
    AND (NOT %(on_new_snapshot)s OR seen.value IS NULL OR seen.value <> to_jsonb(t.current_instant)) AS due,
    CASE WHEN t.id = ANY(%(busy)s::bigint[]) OR jsonb_typeof(ev.value) IS DISTINCT FROM 'number' THEN %(moment)s
         WHEN %(on_new_snapshot)s AND seen.value = to_jsonb(t.current_instant) THEN NULL
         ELSE (ev.value)::float8 + %(interval)s END AS wake
  FROM {table} t
  LEFT JOIN {state} ev ON ev.table_id = t.id AND ev.key = %(evaluated)s
  LEFT JOIN {state} seen ON seen.table_id = t.id AND seen.key = %(seen)s
  WHERE t.id = ANY(%(awake)s::bigint[])
) d
"""


def due_table_ids(snapshot: Snapshot, table_format, action, strategy, now, report) -> list[int]:
    """Tables due for (format, action), longest waiting first (when each was last evaluated, for
    the ranking's aging, kept in ``snapshot.due_evaluated``)."""
    report.tables_considered += snapshot.table_count(table_format)
    awake = snapshot.awake.get(table_format, [])
    if not awake:
        return []
    sql = _DUE_SQL.format(table=Table._meta.db_table, state=TableState._meta.db_table)
    params = {
        "evaluated": evaluated_key(action),
        "seen": seen_snapshot_key(action),
        "awake": int_array(awake),
        "busy": int_array(snapshot.busy.get(action, [])),
        "moment": now.timestamp(),
        "interval": strategy.interval.total_seconds(),
        "on_new_snapshot": bool(strategy.on_new_snapshot),
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        due, evaluated, not_due, wakes = cursor.fetchone()
    if not_due:  # when each may be due next (None: NaN, not before a new snapshot); the due
        # tables' wake times depend on whether the factory is asked (``wake_due``)
        snapshot.wake_no_later(not_due, np.array(wakes, dtype=np.float64))
    report.due += len(due or [])
    snapshot.due_evaluated[(table_format, action)] = evaluated or []
    return due or []


__all__ = ["NEVER", "Snapshot", "due_table_ids", "evaluated_key", "seen_snapshot_key"]
