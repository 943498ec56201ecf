"""Recording decisions: a ``DecisionLog`` collects a tick's decisions and writes them in a fixed
number of queries whatever their number (``flush``); ``record`` adds one to the log of the tick
running now (``recording``), or writes it at once outside a tick.

The same outcome again (kind, reason and group unchanged since the last decision of that
(table, action)) only moves the last row's ``last_at`` and ``repeats``; a new outcome is a new row,
and each (table, action) keeps its last ``KEEP`` rows (older ones are pruned in the same flush,
looking only at the pairs it wrote)."""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.utils import timezone

from processes.decisions.models import Decision, DecisionKind
from storage.models import Table

#: Decisions kept per (table, action).
KEEP = 20


@dataclass
class Pending:
    table_id: int
    action: str
    kind: str
    reason: str
    group: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)
    process_id: int | None = None


#: The last decision of each (table, action) given: one step down the (table, action, -id) index
#: per pair (a filter on every table's and every action's rows read the cross product).
_LAST_SQL = """
SELECT d.id, v.table_id, v.action, d.kind, d.reason, d."group"
FROM jsonb_to_recordset(%s::jsonb) AS v(table_id bigint, action text)
CROSS JOIN LATERAL (
  SELECT k.id, k.kind, k.reason, k."group" FROM {decision} k
  WHERE k.table_id = v.table_id AND k.action = v.action ORDER BY k.id DESC LIMIT 1
) d
"""

_REPEAT_SQL = """
UPDATE {decision} d SET last_at = %s, repeats = d.repeats + 1, numbers = v.numbers, process_id = NULL
FROM jsonb_to_recordset(%s::jsonb) AS v(id bigint, numbers jsonb) WHERE d.id = v.id
"""

_INSERT_SQL = """
INSERT INTO {decision} (table_id, action, kind, reason, "group", numbers, process_id, at, last_at, repeats)
SELECT v.table_id, v.action, v.kind, v.reason, v.grp, v.numbers, v.process_id, %s, %s, 1
FROM jsonb_to_recordset(%s::jsonb)
  AS v(table_id bigint, action text, kind text, reason text, grp text, numbers jsonb, process_id bigint)
JOIN {table} t ON t.id = v.table_id
"""

#: Per (table, action) given, the rows past the newest ``KEEP`` (found through the
#: (table, action, -id) index: the cut is the id at offset ``KEEP``, none for a short history).
_PRUNE_SQL = """
DELETE FROM {decision} d
USING (
  SELECT v.table_id, v.action,
    (SELECT k.id FROM {decision} k WHERE k.table_id = v.table_id AND k.action = v.action
     ORDER BY k.id DESC OFFSET %s LIMIT 1) AS cut
  FROM jsonb_to_recordset(%s::jsonb) AS v(table_id bigint, action text)
) c
WHERE c.cut IS NOT NULL AND d.table_id = c.table_id AND d.action = c.action AND d.id <= c.cut
"""


#: The decision kinds (``DecisionKind.values`` builds its list at every call).
_KINDS = frozenset(DecisionKind.values)


class DecisionLog:
    """The decisions of one tick, written by ``flush`` in at most four queries."""

    def __init__(self, now: dt.datetime | None = None) -> None:
        self.now = now or timezone.now()
        self.pending: dict[tuple[int, str], Pending] = {}

    def record(
        self,
        table_id: int,
        action: str,
        kind: str,
        reason: str,
        *,
        group: str | None = None,
        numbers: dict[str, Any] | None = None,
        process_id: int | None = None,
    ) -> None:
        """The decision for (``table_id``, ``action``) this tick (a later one replaces it)."""
        if kind not in _KINDS:
            raise ValueError(f"unknown decision kind {kind!r}: one of {', '.join(DecisionKind.values)}")
        self.pending[(table_id, action)] = Pending(
            table_id, action, str(kind), reason, group or "", dict(numbers or {}), process_id
        )

    def has(self, table_id: int, action: str) -> bool:
        """Whether this log already holds a decision for (``table_id``, ``action``)."""
        return (table_id, action) in self.pending

    def __len__(self) -> int:
        return len(self.pending)

    def flush(self) -> int:
        """Writes the collected decisions (those of tables deleted meanwhile are dropped); returns
        how many new rows were inserted."""
        if not self.pending:
            return 0
        pending, self.pending = self.pending, {}
        table = Decision._meta.db_table
        keys = [{"table_id": table_id, "action": action} for table_id, action in pending]
        with connection.cursor() as cursor:
            cursor.execute(_LAST_SQL.format(decision=table), [_json(keys)])
            last: dict[tuple[int, str], tuple[int, tuple[str, str, str]]] = {
                (t, a): (pk, (kind, reason, group)) for pk, t, a, kind, reason, group in cursor.fetchall()
            }
        repeated: dict[int, Pending] = {}
        new: list[Pending] = []
        for key, decision in pending.items():
            before = last.get(key)
            outcome = (decision.kind, decision.reason, decision.group)
            if decision.kind != DecisionKind.RAN and before is not None and before[1] == outcome:
                repeated[before[0]] = decision
            else:
                new.append(decision)
        inserted = 0
        with connection.cursor() as cursor:
            if repeated:
                ids = list(repeated)
                rows = [{"id": i, "numbers": repeated[i].numbers} for i in ids]
                cursor.execute(_REPEAT_SQL.format(decision=table), [self.now, _json(rows)])
            if new:
                cursor.execute(
                    _INSERT_SQL.format(decision=table, table=Table._meta.db_table),
                    [self.now, self.now, _json([_row(d) for d in new])],
                )
                inserted = cursor.rowcount
                cursor.execute(
                    _PRUNE_SQL.format(decision=table),
                    [KEEP, _json([{"table_id": d.table_id, "action": d.action} for d in new])],
                )
        return inserted


def _json(value: Any) -> str:
    return json.dumps(value, default=str)


def _row(decision: Pending) -> dict[str, Any]:
    """One decision as ``_INSERT_SQL``'s JSON record set reads it (one parameter for all rows: a
    list per column was quoted by psycopg one element at a time)."""
    return {
        "table_id": decision.table_id, "action": decision.action, "kind": decision.kind,
        "reason": decision.reason, "grp": decision.group, "numbers": decision.numbers,
        "process_id": decision.process_id,
    }  # fmt: skip


_current: contextvars.ContextVar[DecisionLog | None] = contextvars.ContextVar("decision_log", default=None)


@contextlib.contextmanager
def recording(log: DecisionLog) -> Iterator[DecisionLog]:
    """Within the block, ``record`` adds to ``log`` (the scheduler tick flushes it at the end)."""
    token = _current.set(log)
    try:
        yield log
    finally:
        _current.reset(token)


def record(
    table_id: int,
    action: str,
    kind: str,
    reason: str,
    *,
    group: str | None = None,
    numbers: dict[str, Any] | None = None,
    process_id: int | None = None,
) -> None:
    """Record a decision about (``table_id``, ``action``): in the running tick's log (written once
    at the end of the tick), or at once when no tick is running. ``kind`` is a ``DecisionKind``
    value; ``numbers`` the figures behind it, e.g. ``{"benefit": 0.4, "minimum": 2.0}`` for
    ``DecisionKind.BELOW_BENEFIT``."""
    log = _current.get()
    if log is not None:
        log.record(table_id, action, kind, reason, group=group, numbers=numbers, process_id=process_id)
        return
    once = DecisionLog()
    once.record(table_id, action, kind, reason, group=group, numbers=numbers, process_id=process_id)
    once.flush()
