"""The default estimate (``processes.ranking.default_estimate``) for many tables at once: the same
arithmetic over numpy columns of the facts the due tables' rows keep, so a tick ranks 100,000 due
tables without a Python object per table. ``tests/processes/test_ranking_tick.py`` checks it
equals the per-table estimate over a grid of tables.

Only a factory's own properties are read here: a table whose properties override one the
estimate or the minimum reads (``OWN_KEYS``) is estimated one by one (``processes.ranking``)."""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from django.db import connection

from processes.id_arrays import locate_sorted
from processes.maintenance.schemas import MIN_BENEFIT
from processes.models import TableState
from processes.plugin import (
    CHECKPOINT,
    EXPIRE_SNAPSHOTS,
    PURGE_DELETION_VECTORS,
    REWRITE,
    REWRITE_POSITION_DELETES,
    TableSummary,
)
from processes.sql_arrays import int_array
from storage.health import COMPACTABLE_MIN_FILES, MANY_FILES, MANY_SNAPSHOTS, WEIGHTS
from storage.models import Table

if TYPE_CHECKING:
    from processes.due import Snapshot

#: Table properties that change a table's estimate or minimum: such tables are estimated one by one.
OWN_KEYS = (MIN_BENEFIT, "min-input-files", "target-file-size", "delete-file-threshold")


@dataclass
class Facts:
    """The due tables' facts as columns (float64; a row per table, in the order of ``ids``)."""

    ids: np.ndarray
    files: np.ndarray
    small: np.ndarray
    #: Compactable small files as the refresh counted them (NaN: never counted).
    compactable: np.ndarray
    deletes: np.ndarray
    total_bytes: np.ndarray
    instants: np.ndarray

    def take(self, rows: np.ndarray) -> Facts:
        return Facts(*(column[rows] for column in self.__dict__.values()))


@dataclass
class Estimates:
    """Per table: the benefit in points (``ranking.benefit``), the bytes read plus written, and
    the parts of the benefit a decision's reason names."""

    benefit: np.ndarray
    moved: np.ndarray
    small_removed: np.ndarray
    deletes_removed: np.ndarray
    health_gain: np.ndarray


#: One row of columns (arrays in no particular order; ``DueFacts`` sorts them by id): a large
#: result as a handful of arrays costs the client a fraction of 100,000 rows of 15 values.
_FACTS_SQL = """
SELECT array_agg(t.id), array_agg(t.file_count::float8), array_agg(t.small_file_count::float8),
  array_agg(COALESCE(t.compactable_file_count::float8, 'NaN'::float8)), array_agg(t.delete_file_count::float8),
  array_agg(t.total_bytes::float8), array_agg(t.instant_count::float8),
  array_agg(EXTRACT(EPOCH FROM t.registered_at)::float8), array_agg(t.refreshed_at IS NOT NULL),
  array_agg(t.properties ?| %(own)s), array_agg(NULLIF(t.properties, '{{}}'::jsonb)),
  array_agg(t.format), array_agg(t.current_instant),
  array_agg(COALESCE(EXTRACT(EPOCH FROM t.last_maintenance_at)::float8, 'NaN'::float8)), array_agg({evaluated})
FROM {table} t {join}
WHERE t.id = ANY(%(ids)s::bigint[])
"""


class DueFacts:
    """The due tables' facts, read in one query, as numpy columns sorted by table id (the text
    columns too: ``formats``, ``instants``, ``properties``; ``summary`` builds one table's for
    the one-by-one estimates)."""

    #: Text columns: numpy object arrays, or read when first indexed (``of_snapshot``).
    instants: np.ndarray | _LazyColumn
    properties: np.ndarray | _LazyColumn

    def __init__(self, ids: list[int], evaluated_key: str | None) -> None:
        join = ""
        evaluated = "'NaN'::float8"
        if evaluated_key is not None:
            join = (
                f"LEFT JOIN {TableState._meta.db_table} ev ON ev.table_id = t.id AND ev.key = %(evaluated)s"
            )
            evaluated = "CASE WHEN jsonb_typeof(ev.value) = 'number' THEN (ev.value)::float8 ELSE 'NaN' END"
        sql = _FACTS_SQL.format(table=Table._meta.db_table, join=join, evaluated=evaluated)
        with connection.cursor() as cursor:
            cursor.execute(sql, {"ids": int_array(ids), "own": list(OWN_KEYS), "evaluated": evaluated_key})
            columns = [column or [] for column in cursor.fetchone()]
        order = np.argsort(np.array(columns[0], dtype=np.int64), kind="stable")
        self.ids = np.array(columns[0], dtype=np.int64)[order]
        numbers = [np.array(columns[i], dtype=np.float64)[order] for i in (1, 2, 3, 4, 5, 6, 7, 13, 14)]
        self.facts = Facts(self.ids, *numbers[:6])
        self.registered, self.maintained, self.evaluated = numbers[6:]
        self.refreshed = np.array(columns[8], dtype=bool)[order]
        self.own = np.array(columns[9], dtype=bool)[order]
        self.properties = _objects(columns[10], order)
        self.formats = _objects(columns[11], order)
        self.instants = _objects(columns[12], order)

    @classmethod
    def of_snapshot(cls, snapshot: Snapshot, due_ids: np.ndarray) -> DueFacts:
        """The facts of ``due_ids`` (sorted, every one awake) from the tick's awake scan: no query
        but for the text columns, read when first wanted (``_TextColumn``)."""
        self = cls.__new__(cls)
        rows = snapshot.rows_of(due_ids)
        self.ids = snapshot.ids[rows]
        numbers = [
            snapshot.column(name)[rows]
            for name in ("files", "small", "compactable", "deletes", "bytes", "snapshots")
        ]
        self.facts = Facts(self.ids, *numbers)
        self.registered = snapshot.column("registered")[rows]
        self.maintained = snapshot.column("maintained")[rows]
        self.evaluated = np.full(len(rows), np.nan)
        self.refreshed = snapshot.refreshed[rows]
        self.own = snapshot.own[rows]
        self.formats = np.array(snapshot.format_names, dtype=object)[snapshot.format_codes[rows]]
        texts = _TextColumns(self.ids, snapshot.instants[rows])
        self.instants, self.properties = texts.column("instant"), texts.column("properties")
        return self

    def summary(self, at: int) -> TableSummary:
        facts = self.facts
        compactable = None if math.isnan(facts.compactable[at]) else int(facts.compactable[at])
        maintained = self.maintained[at]
        return TableSummary(
            int(self.ids[at]), str(self.formats[at]), int(facts.files[at]), int(facts.small[at]), compactable,
            int(facts.deletes[at]), int(facts.total_bytes[at]), int(facts.instants[at]),
            None if math.isnan(maintained) else dt.datetime.fromtimestamp(float(maintained), tz=dt.UTC),
            json_object(self.properties[at]),
        )  # fmt: skip

    def locate(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(positions in ``ids`` of the tables still there, their rows here)."""
        at, present = locate_sorted(self.ids, ids)
        return np.nonzero(present)[0], at[present]


class _TextColumns:
    """The snapshot ids and properties of the due tables, read in one query when first wanted (a
    tick that asks a few factories never reads them). A table whose snapshot moved since the
    awake scan (its hash differs) gets no snapshot id (None): what was decided for it was decided
    on the facts of the one before, so it is not recorded as seen (it is due again next tick)."""

    def __init__(self, ids: np.ndarray, instants: np.ndarray) -> None:
        self.ids, self.hashes = ids, instants
        self.loaded: dict[str, np.ndarray] | None = None

    def column(self, name: str) -> _LazyColumn:
        return _LazyColumn(self, name)

    def load(self) -> dict[str, np.ndarray]:
        if self.loaded is None:
            sql = (
                "SELECT array_agg(t.id), array_agg(t.current_instant), array_agg(hashtextextended("
                "t.current_instant, 0)), array_agg(NULLIF(t.properties, '{}'::jsonb))"
                f" FROM {Table._meta.db_table} t WHERE t.id = ANY(%s::bigint[])"
            )
            with connection.cursor() as cursor:
                cursor.execute(sql, [int_array(self.ids.tolist())])
                ids, instants, hashes, properties = (column or [] for column in cursor.fetchone())
            found = np.array(ids, dtype=np.int64)
            order = np.argsort(found, kind="stable")
            found = found[order]
            instants = _objects(instants, order)
            scanned = self.hashes[locate_sorted(self.ids, found)[0]]  # found: some of self.ids
            instants[np.array(hashes, dtype=np.int64)[order] != scanned] = None
            self.loaded = {
                "instant": _reindexed(found, self.ids, instants),
                "properties": _reindexed(found, self.ids, _objects(properties, order)),
            }
        return self.loaded


class _LazyColumn:
    def __init__(self, columns: _TextColumns, name: str) -> None:
        self.columns, self.name = columns, name

    def __getitem__(self, row: int) -> Any:
        return self.columns.load()[self.name][row]


def _reindexed(found: np.ndarray, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` (in the order of ``found``) in the order of ``ids``; None for ids not found."""
    column = np.empty(len(ids), dtype=object)
    at, present = locate_sorted(found, ids)
    column[present] = values[at[present]]
    return column


def _objects(values: list[Any], order: np.ndarray) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column[order]


def default_estimates(
    facts: Facts,
    action: str,
    properties: dict[str, Any],
    *,
    target_default: float,
    deletes_actions: frozenset[str],
    kept_snapshots: int,
) -> Estimates:
    """``ranking.default_estimate`` for every row of ``facts`` with the factory's ``properties``."""
    files, small, instants = facts.files, facts.small, facts.instants
    compactable = np.where(np.isnan(facts.compactable), small, np.minimum(facts.compactable, small))
    average = np.divide(facts.total_bytes, files, out=np.zeros_like(files), where=files > 0)
    before = _fixable(files, instants, compactable)
    if action == REWRITE:
        merged = small if min_input_files(properties) < COMPACTABLE_MIN_FILES else compactable
        target = as_number(properties.get("target-file-size")) or target_default
        size = np.minimum(average, target)
        files_out = np.where(merged > 0, np.ceil(merged * size / target), 0.0)
        removed = np.maximum(0.0, merged - np.maximum(files_out, (merged > 0).astype(float)))
        after_compactable = np.minimum(0.0, small - merged)
        after = _fixable(files - removed, instants, after_compactable)
        moved = np.floor(merged * size)
        deletes = facts.deletes if as_number(properties.get("delete-file-threshold")) > 0 else 0.0
        gain = np.maximum(0.0, before - after)
        deletes = np.broadcast_to(deletes, files.shape)
        return Estimates(removed + deletes + gain, 2 * moved, removed, deletes, gain)
    if action in deletes_actions:
        deletes = facts.deletes
        removed = np.maximum(0.0, deletes - 1) if action == REWRITE_POSITION_DELETES else deletes
        moved = np.floor(deletes * average) if action == PURGE_DELETION_VECTORS else np.zeros_like(files)
        zero = np.zeros_like(files)
        return Estimates(removed.astype(float), 2 * moved, zero, removed.astype(float), zero)
    if action in (EXPIRE_SNAPSHOTS, CHECKPOINT):
        after = _fixable(files, np.minimum(instants, kept_snapshots), compactable)
        gain = np.maximum(0.0, before - after)
        return Estimates(gain, np.zeros_like(files), np.zeros_like(files), np.zeros_like(files), gain)
    zero = np.zeros_like(files)
    return Estimates(zero, zero, zero, zero, zero)


def json_object(value: Any) -> dict[str, Any]:
    """A jsonb object as a dict (a raw cursor may give its text); anything else as ``{}``."""
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, dict) else {}


def _fixable(files: np.ndarray, instants: np.ndarray, compactable: np.ndarray) -> np.ndarray:
    """``ranking._fixable_points`` over columns (``compactable`` already capped at small files)."""
    ratio = np.divide(compactable, files, out=np.zeros_like(files), where=files > 0)
    return (
        WEIGHTS["small_files"] * ratio * np.minimum(compactable / 20, 1.0)
        + WEIGHTS["file_count"] * np.minimum(files / MANY_FILES, 1.0) * (compactable > 0)
        + WEIGHTS["snapshots"] * np.minimum(instants / MANY_SNAPSHOTS, 1.0)
    )


def min_input_files(properties: dict[str, Any]) -> int:
    """The rewrite's ``min-input-files`` (its own default when unset)."""
    value = properties.get("min-input-files")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return COMPACTABLE_MIN_FILES


def as_number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


__all__ = [
    "DueFacts",
    "json_object",
    "OWN_KEYS",
    "Estimates",
    "Facts",
    "as_number",
    "default_estimates",
    "min_input_files",
]
