"""What one scheduler tick knows of the resource groups: every group's rules and usage read once,
a due table's group, whether the group has room for one more run of an action, and what it held
back (kept on the group's row for the capacity page, and logged). The authoritative check is
``budget.admit`` under the group's row lock when the process is created; this view lets the tick
skip a full group without asking factories about its tables.

Nothing is read before the first due table (an idle tick costs no query here); a tick that held
work leaves a mark in the cache, so the next tick clears the group's ``held`` even when it finds
nothing due."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np
from django.core.cache import cache

from processes.groups.budget import BudgetExhausted, Usage, expected_seconds, refusal, usage
from processes.groups.membership import (
    GroupRules,
    assigned_groups,
    group_mapping,
    namespaces_by_hash,
    tables_by_group,
)
from processes.groups.models import ResourceGroup
from processes.id_arrays import locate_sorted

if TYPE_CHECKING:
    from processes.due import Snapshot

logger = logging.getLogger("processes.scheduler")
HELD_KEY = "lakewarden:groups:held"


class GroupsOf(Mapping[int, ResourceGroup]):
    """table id -> group over columns (sorted ids, their groups' pks): no dict of 100,000 entries."""

    def __init__(self, ids: np.ndarray, pks: np.ndarray, groups: dict[int, ResourceGroup]) -> None:
        self.ids, self.pks, self.groups = ids, pks, groups

    def __getitem__(self, table_id: int) -> ResourceGroup:
        at = int(np.searchsorted(self.ids, table_id))
        if at >= len(self.ids) or self.ids[at] != table_id:
            raise KeyError(table_id)
        return self.groups[int(self.pks[at])]

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids.tolist())

    def __len__(self) -> int:
        return len(self.ids)


class TickGroups:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now
        self._rules: GroupRules | None = None
        self._usage: dict[int, Usage] | None = None
        self._costs: dict[tuple[int, str], float] = {}
        self.held: dict[int, dict[str, int]] = {}
        self.reasons: dict[int, str] = {}
        #: The group of each table due this tick (resolved once for every pair with a free slot).
        self.group_of_due: Mapping[int, ResourceGroup] = {}
        self._resolved: tuple[np.ndarray, np.ndarray] = (np.zeros(0, dtype=np.int64),) * 2

    @property
    def rules(self) -> GroupRules:
        if self._rules is None:
            self._rules = GroupRules.load()
        return self._rules

    @property
    def usage(self) -> dict[int, Usage]:
        if self._usage is None:
            self._usage = usage(list(self.rules.groups), now=self.now)
        return self._usage

    def resolve(self, table_ids: list[int]) -> dict[int, ResourceGroup]:
        """table id -> its group (one query); ``group_pks`` then answers for arrays of them."""
        found = tables_by_group(table_ids, self.rules) if table_ids else []
        ids = np.array([t for _, members in found for t in members], dtype=np.int64)
        pks = np.repeat(np.array([g.pk for g, _ in found], dtype=np.int64), [len(m) for _, m in found])
        order = np.argsort(ids)
        self._resolved = (ids[order], pks[order])
        return group_mapping(found)

    def resolve_awake(self, snapshot: Snapshot, table_ids: np.ndarray) -> GroupsOf:
        """table id -> its group, for awake tables (``table_ids`` sorted), from the awake scan's
        columns (catalog, namespace hash) and the explicit assignments (every one, one query: a
        handful of rows). The rules are matched once per distinct combination; the namespaces
        themselves are read (one query, by their hashes) only when a group has namespace
        patterns. ``group_pks`` then answers as after ``resolve``."""
        rules = self.rules
        ids = np.asarray(table_ids, dtype=np.int64)
        if rules.patterns and not snapshot.namespaces_hashed:  # a pattern made since the scan
            self.resolve(ids.tolist())
            known, pks = self._resolved
            # a table deleted since the scan is not in the answer: the default group's, not a
            # neighbour's (the walk skips it; only the held counts see it)
            at, present = locate_sorted(known, ids)
            every = np.full(len(ids), rules.default.pk, dtype=np.int64)
            every[present] = pks[at[present]]
            self._resolved = (ids, every)
            return GroupsOf(ids, every, rules.groups)
        rows = snapshot.rows_of(ids)
        catalog, assigned = snapshot.column("catalog")[rows], assigned_groups(ids)
        hashes = snapshot.column("namespace")[rows] if rules.patterns else np.zeros(len(ids), dtype=np.int64)
        # each column's distinct values, then their combinations as one integer (dense codes)
        columns = [np.unique(column, return_inverse=True) for column in (catalog, assigned, hashes)]
        code = np.zeros(len(ids), dtype=np.int64)
        for values, inverse in columns:
            code = code * len(values) + np.asarray(inverse).reshape(-1)
        combos, inverse = np.unique(code, return_inverse=True)
        names = namespaces_by_hash(columns[2][0].tolist()) if rules.patterns and len(ids) else {}
        found = []
        for combo in combos.tolist():
            combo, at_hash = divmod(combo, len(columns[2][0]))
            at_catalog, at_assigned = divmod(combo, len(columns[1][0]))
            catalog_id, group_id = int(columns[0][0][at_catalog]), int(columns[1][0][at_assigned])
            group = rules.groups.get(group_id) if group_id else None
            namespace = names.get(int(columns[2][0][at_hash]), "")
            found.append(group or rules.group_by_namespace(catalog_id or None, namespace))
        pks = np.array([group.pk for group in found], dtype=np.int64)[np.asarray(inverse).reshape(-1)]
        self._resolved = (ids, pks)
        return GroupsOf(ids, pks, rules.groups)

    def group_pks(self, table_ids: np.ndarray) -> np.ndarray:
        """The group (its pk) of each of ``table_ids``, all resolved by ``resolve`` before."""
        ids, pks = self._resolved
        return pks[np.minimum(np.searchsorted(ids, table_ids), max(len(ids) - 1, 0))]

    def cost(self, group: ResourceGroup, action: str) -> float:
        key = (group.pk, action)
        if key not in self._costs:
            self._costs[key] = expected_seconds(group, action)
        return self._costs[key]

    def refusal(self, group: ResourceGroup, action: str) -> BudgetExhausted | None:
        used = self.usage[group.pk]
        return refusal(group, used, self.cost(group, action), used.reserved(group, self.cost))

    def hold(self, group: ResourceGroup, action: str, reason: str, count: int = 1) -> None:
        by_action = self.held.setdefault(group.pk, {})
        by_action[action] = by_action.get(action, 0) + count
        self.reasons[group.pk] = reason

    def admitted(self, group: ResourceGroup, action: str) -> None:
        """One more PENDING process of ``action`` in ``group`` (as ``usage`` will count it)."""
        used = self.usage[group.pk]
        used.active += 1
        used.by_action[action] = used.by_action.get(action, 0) + 1
        used.pending_by_action[action] = used.pending_by_action.get(action, 0) + 1

    def save(self) -> dict[str, int]:
        """Each group's ``held`` row field (one update per group that holds work or held some
        before) and a log line per group holding work; returns group name -> runs held back."""
        if self._rules is None and not _held_before():
            return {}  # idle, and no tick left a hold to clear
        report = {}
        for pk, group in self.rules.groups.items():
            by_action = self.held.get(pk, {})
            if by_action:
                total = sum(by_action.values())
                report[group.name] = total
                reason = self.reasons[pk]
                logger.info(
                    "resource group %s held back %d due run(s) %s: %s", group.name, total, by_action, reason
                )
                value = {"at": self.now.isoformat(), "count": total, "by_action": by_action, "reason": reason}
            elif group.held:
                value = {}
            else:
                continue
            ResourceGroup.objects.filter(pk=pk).update(held=value)
        _mark_held(bool(report))
        return report


def _held_before() -> bool:
    try:
        return cache.get(HELD_KEY) is not False
    except Exception:  # no cache: look at the groups
        return True


def _mark_held(held: bool) -> None:
    try:
        cache.set(HELD_KEY, held, timeout=None)
    except Exception:
        logger.warning("the scheduler cannot note whether it held work", exc_info=True)
