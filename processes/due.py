"""Which tables a scheduler tick looks at and which are due, and when each looks again.

A tick reads the tables awake (never given a wake time, woken by now, or at a new snapshot:
``Snapshot``) in one scan that also counts the tables per format and packs, per awake table, the
facts the ranking reads and what decides its resource group: one bytea per format that numpy reads
in place (``AWAKE_RECORD``), so 100,000 awake tables cost the client a copy, not a parse per value.
Then one query reads the evaluation times (and, for pairs that wait for a new snapshot, the seen
snapshots) kept as ``TableState`` rows, packed the same way, and the due tables of every
(format, action) pair are decided over columns (``Snapshot.load_due``; ``due_table_ids`` hands out
a pair's). Each awake table gets the earliest moment any of its pairs may be due again as its next
wake time: gathered as columns (the due query gives those of the tables not due, ``wake_due``
those of the due ones by whether the factory was asked), reduced per table in numpy and written by
one update (``Snapshot.save_wakes``); no Python work per table.

Snapshots are compared by a 64-bit hash of their id (``hashtextextended``) in both queries and in
the wake update's guard; the ids themselves are read only for the tables recorded as evaluated
(``estimates.DueFacts.of_snapshot``).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import numpy as np
from django.db import connection

from processes.id_arrays import locate_sorted
from processes.models import ACTIVE_STATUSES, Process, TableState
from processes.sql_arrays import float_array, int_array
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

#: One packed record per awake table (what Postgres writes with ``int8send``: big-endian, fixed
#: width), read with ``np.frombuffer``: a bytea per format costs the client a copy, where 100,000
#: rows or a dozen arrays of text cost it a parse per value (0.4 s at 100,000 tables). Timestamps
#: are ``timestamptz_send``'s microseconds since 2000-01-01 (``-infinity``: none); ``instant`` and
#: ``namespace`` are ``hashtextextended`` of the snapshot id and of the namespace. File counts go
#: as 32-bit integers, capped at 2^31-1 (a table of more files is ranked as one of that many; the
#: estimate's points saturate far below); bytes, ids and times as 64-bit.
AWAKE_RECORD = np.dtype(
    [
        ("id", ">i8"), ("instant", ">i8"), ("files", ">i4"), ("small", ">i4"), ("compactable", ">i4"),
        ("deletes", ">i4"), ("bytes", ">i8"), ("snapshots", ">i4"), ("registered", ">i8"),
        ("maintained", ">i8"), ("catalog", ">i8"), ("namespace", ">i8"), ("flags", ">i2"),
    ]
)  # fmt: skip
#: ``flags`` bits: refreshed at least once, properties override the estimate (``OWN_KEYS``), the
#: stored wake time had passed at this snapshot (``settled``: rewriting it changes nothing).
REFRESHED, OWN, SETTLED = 1, 2, 4
#: Seconds from 1970-01-01 to Postgres's epoch (2000-01-01).
PG_EPOCH = 946_684_800.0

#: The tables a tick looks at, per format: never given a wake time, woken by now, or at a new
#: snapshot, each as an ``AWAKE_RECORD`` (its facts, its group's inputs, its snapshot); and how
#: many tables each format has (the same scan: the report's "considered"). The record is built
#: only for awake rows (an idle tick packs nothing). One bytea per format: 78 bytes per awake table,
#: so Postgres's 1 GB limit on a value is met at about 13 million awake tables of one format (the
#: tick then fails with Postgres's error, having written nothing). Grouping by blocks of ids as well
#: was tried: the planner, estimating a group per table, sorted every row to disk (50 ms to 180 ms
#: for an idle tick at 100,000 tables).
_AWAKE_SQL = """
WITH rules AS (
  SELECT COALESCE(bool_or(g.namespace_patterns <> '[]'::jsonb), false) AS patterns FROM {group} g
)
SELECT t.format, count(*), string_agg(
    int8send(t.id) || int8send(hashtextextended(t.current_instant, 0))
    || int4send(LEAST(t.file_count, {most})::int4) || int4send(LEAST(t.small_file_count, {most})::int4)
    || int4send(LEAST(COALESCE(t.compactable_file_count, -1), {most})::int4)
    || int4send(LEAST(t.delete_file_count, {most})::int4) || int8send(t.total_bytes) || int4send(t.instant_count)
    || timestamptz_send(t.registered_at) || timestamptz_send(COALESCE(t.last_maintenance_at, '-infinity'))
    || int8send(COALESCE(t.catalog_id, 0))
    || int8send(CASE WHEN (SELECT patterns FROM rules) THEN hashtextextended({namespace}, 0) ELSE 0 END)
    || int2send(((t.refreshed_at IS NOT NULL)::int + 2 * COALESCE(t.properties ?| %(own)s, false)::int
      + 4 * t.settled::int)::int2),
  ''::bytea) FILTER (WHERE t.awake),
  (SELECT patterns FROM rules)
FROM (
  SELECT t.*,
    t.scheduler_wake_at IS NULL OR t.scheduler_wake_at <= %(now)s
      OR t.current_instant IS DISTINCT FROM t.scheduler_instant AS awake,
    COALESCE(t.scheduler_wake_at IS NOT NULL AND t.scheduler_wake_at <= %(now)s
      AND t.scheduler_instant = t.current_instant, false) AS settled
  FROM {table} t
) t
GROUP BY t.format
"""


def _epoch(microseconds: np.ndarray) -> np.ndarray:
    """``timestamptz_send`` values as epoch seconds (NaN for ``-infinity``)."""
    seconds = microseconds.astype(np.float64) / 1e6 + PG_EPOCH
    return np.where(microseconds == np.iinfo(np.int64).min, np.nan, seconds)


def _scan_awake(now: dt.datetime) -> list[tuple[str, int, bytes | None, bool]]:
    """``_AWAKE_SQL``'s rows: (format, tables in its block, packed records, namespaces hashed)."""
    from processes.estimates import OWN_KEYS
    from processes.groups.membership import NAMESPACE_SQL
    from processes.groups.models import ResourceGroup

    sql = _AWAKE_SQL.format(
        table=Table._meta.db_table,
        group=ResourceGroup._meta.db_table,
        namespace=NAMESPACE_SQL,
        most=np.iinfo(np.int32).max,
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, {"now": now, "own": list(OWN_KEYS)})
        return cursor.fetchall()


class Snapshot:
    """What one tick reads once: active processes, the number of tables per format and the
    tables awake (their wake time passed or blank) with their facts and what decides their group
    (one scan, packed records: ``AWAKE_RECORD``); only those are looked at. Each awake table gets
    the earliest time any of its pairs may become due as its next wake time: gathered as columns
    (the due query gives those of tables not due, ``wake_due`` those of the due ones), reduced per
    table and written by one update (``save_wakes``)."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now
        self.active: list[tuple[str, str]] = []
        self.busy: dict[str, list[int]] = {}  # action -> tables with an active process for it
        for table_id, table_format, action in Process.objects.filter(status__in=ACTIVE_STATUSES).values_list(
            "table_id", "table__format", "action"
        ):
            self.active.append((table_format, action))
            self.busy.setdefault(action, []).append(table_id)
        scanned = _scan_awake(now)
        self._counts: dict[str, int] = {table_format: n for table_format, n, _, _ in scanned}
        #: Whether the scan hashed the namespaces (a group had patterns when it ran).
        self.namespaces_hashed = any(hashed for _, _, _, hashed in scanned)
        parts = [
            (fmt, np.frombuffer(bytes(packed), dtype=AWAKE_RECORD)) for fmt, _, packed, _ in scanned if packed
        ]
        #: The format names, and each awake table's as an index into them.
        self.format_names: list[str] = [fmt for fmt, _ in parts]
        records = np.concatenate([p for _, p in parts]) if parts else np.zeros(0, dtype=AWAKE_RECORD)
        codes = np.repeat(np.arange(len(parts), dtype=np.int64), [len(p) for _, p in parts])
        order = np.argsort(records["id"], kind="stable")
        #: Every awake table (sorted by id) and its columns: native integers, epoch seconds.
        self.records = records[order]
        self.format_codes = codes[order]
        self.ids = self.records["id"].astype(np.int64)
        #: Each awake table's snapshot (a 64-bit hash of its id: ``hashtextextended``).
        self.instants = self.records["instant"].astype(np.int64)
        flags = self.records["flags"].astype(np.int64)
        self.settled = (flags & SETTLED) != 0
        self.refreshed = (flags & REFRESHED) != 0
        self.own = (flags & OWN) != 0
        #: Format -> its awake tables (sorted by id).
        self.awake: dict[str, list[int]] = {}
        self._rows: dict[str, np.ndarray] = {}
        for code, fmt in enumerate(self.format_names):
            rows = np.nonzero(self.format_codes == code)[0]
            self._rows[fmt] = rows
            self.awake[fmt] = self.ids[rows].tolist()
        #: (format, action) -> (due ids, when each was last evaluated), read by ``load_due``.
        self._due: dict[tuple[str, str], tuple[list[int], np.ndarray]] = {}
        #: (table ids, wake times in epoch seconds) gathered per pair; NaN: not before a new snapshot.
        self.wakes: list[tuple[np.ndarray, np.ndarray]] = []
        #: (format, action) -> when each table the last due query found due was last evaluated.
        self.due_evaluated: dict[tuple[str, str], np.ndarray] = {}

    def table_count(self, table_format: str) -> int:
        return self._counts.get(table_format, 0)

    def column(self, name: str) -> np.ndarray:
        """An ``AWAKE_RECORD`` column of every awake table (in the order of ``ids``) as native
        numbers: timestamps as epoch seconds, counts as floats (``compactable`` NaN: not counted)."""
        values = self.records[name].astype(np.int64)
        if name in ("registered", "maintained"):
            return _epoch(values)
        if name == "compactable":
            return np.where(values < 0, np.nan, values.astype(np.float64))
        if name in ("catalog", "namespace"):
            return values
        return values.astype(np.float64)

    def union(self, id_lists: list[list[int]]) -> np.ndarray:
        """The awake tables in any of ``id_lists``, sorted (a mask over the awake rows: no sort)."""
        mask = np.zeros(len(self.ids), dtype=bool)
        for ids in id_lists:
            mask[self.rows_of(np.asarray(ids, dtype=np.int64))] = True
        return self.ids[mask]

    def rows_of(self, table_ids: np.ndarray) -> np.ndarray:
        """The rows (positions in ``ids``) of ``table_ids``, all of them awake tables."""
        return np.searchsorted(self.ids, np.asarray(table_ids, dtype=np.int64))

    def load_due(self, pairs: list[tuple[str, str, TriggerStrategy]]) -> None:
        """Which awake tables are due for each (format, action, strategy), for every pair in one
        query (``_STATE_SQL``: the evaluation times and seen snapshots of the pairs' actions, as
        packed records), joined to the awake tables and decided over columns (``_decide``); the
        others' next wake times are gathered (``wake_no_later``)."""
        wanted = [(f, a, s) for f, a, s in pairs if self.awake.get(f) and (f, a) not in self._due]
        if not wanted:
            return
        # the seen snapshots only where a strategy waits for a new one
        seen_keys = {seen_snapshot_key(a) for _, a, s in wanted if s.on_new_snapshot}
        keys = sorted({evaluated_key(a) for _, a, _ in wanted} | seen_keys)
        params: dict[str, object] = {"keys": keys, "seen": [key in seen_keys for key in keys]}
        where = ""
        total = sum(self._counts.values())
        if len(self.ids) <= STATE_BY_ID or len(self.ids) * 4 < total:
            # few awake: their rows by the (table, key) index, not every table's
            where = " WHERE s.table_id = ANY(%(ids)s::bigint[])"
            params["ids"] = int_array(self.ids.tolist())
        sql = _STATE_SQL.format(state=TableState._meta.db_table, where=where)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            found = {keys[index - 1]: bytes(packed) for index, packed in cursor}
        state = {key: _StateColumn(packed, key in seen_keys) for key, packed in found.items()}
        empty = _StateColumn(b"", False)
        for table_format, action, strategy in wanted:
            rows = self._rows[table_format]
            ids = self.ids[rows]
            evaluated = state.get(evaluated_key(action), empty).evaluated(ids)
            seen = state.get(seen_snapshot_key(action), empty).seen(ids, self.instants[rows])
            self._decide(table_format, action, strategy, ids, evaluated, seen)

    def _decide(self, table_format, action, strategy, ids, evaluated, seen) -> None:
        """Due: not busy with the action, not evaluated within the interval, and (``on_new_snapshot``)
        at a snapshot the factory has not seen; never evaluated first, then longest waiting, then
        by id. The others may be due again: busy or never evaluated, at once; at a seen snapshot
        (``on_new_snapshot``), not before a new one (NaN); else when the interval has passed."""
        ids = np.asarray(ids, dtype=np.int64)
        evaluated = np.asarray(evaluated, dtype=np.float64)
        seen = np.asarray(seen, dtype=bool)
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
                " scheduler_instant = t.current_instant"
                " FROM ROWS FROM (unnest(%s::bigint[]), unnest(%s::bigint[]), unnest(%s::float8[]))"
                " AS v(id, instant, wake)"
                " WHERE t.id = v.id AND hashtextextended(t.current_instant, 0) = v.instant",
                [
                    int_array(self.ids[write].tolist()),
                    int_array(self.instants[write].tolist()),
                    float_array(earliest[write].tolist()),
                ],
            )


class _StateColumn:
    """One ``TableState`` key's values as ``_STATE_SQL`` packs them (numbers, or for a
    seen-snapshot key the hashes of strings), looked up by table id."""

    def __init__(self, packed: bytes, texts: bool) -> None:
        records = np.frombuffer(packed, dtype=STATE_TEXT if texts else STATE_NUMBER)
        ids = records["table_id"].astype(np.int64)
        order = np.argsort(ids, kind="stable")
        self.ids = ids[order]
        self.values = records["value"][order].astype(np.int64 if texts else np.float64)

    def evaluated(self, table_ids: np.ndarray) -> np.ndarray:
        """When each table was evaluated (epoch seconds; NaN: never, or not a number)."""
        if not len(self.ids):
            return np.full(len(table_ids), np.nan)
        at, present = locate_sorted(self.ids, table_ids)
        return np.where(present, self.values[at], np.nan)

    def seen(self, table_ids: np.ndarray, instants: np.ndarray) -> np.ndarray:
        """Whether each table's stored snapshot (a JSON string) is ``instants`` (their hashes)."""
        if not len(self.ids):
            return np.zeros(len(table_ids), dtype=bool)
        at, present = locate_sorted(self.ids, table_ids)
        return present & (self.values[at] == instants)


#: A ``TableState`` value as ``_STATE_SQL`` packs it: the table, and the value as a number (NaN:
#: not one) or, for a seen-snapshot key, the hash of the value as a string (``NOT_TEXT``: not one).
STATE_NUMBER = np.dtype([("table_id", ">i8"), ("value", ">f8")])
STATE_TEXT = np.dtype([("table_id", ">i8"), ("value", ">i8")])
NOT_TEXT = np.iinfo(np.int64).min

#: What due-ness is decided from: the pairs' evaluation times and seen snapshots (``TableState``
#: keys; ``%(seen)s`` says which are seen snapshots), a packed record per row, one bytea per key
#: (``%(keys)s``'s position, from 1).
_STATE_SQL = f"""
SELECT k.i, string_agg(int8send(s.table_id) || CASE WHEN k.seen
    THEN int8send(CASE WHEN jsonb_typeof(s.value) = 'string' THEN hashtextextended(s.value #>> '{{{{}}}}', 0)
      ELSE {NOT_TEXT} END)
    ELSE float8send(CASE WHEN jsonb_typeof(s.value) = 'number' THEN (s.value)::float8 ELSE 'NaN' END) END,
  ''::bytea)
FROM unnest(%(keys)s::text[], %(seen)s::bool[]) WITH ORDINALITY AS k(key, seen, i)
JOIN (SELECT * FROM {{state}} s{{where}}) s ON s.key = k.key
GROUP BY k.i
"""

#: Up to this many awake tables, the due query reads their state rows by id (the index); beyond,
#: and when they are a quarter of the tables or more, every row of the pairs' keys.
STATE_BY_ID = 10_000


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
