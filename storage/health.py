"""The table health score (0 healthy .. 100 needs attention now) from the facts a Table row keeps:
the landing page ranks tables by it, a plan preview predicts it after a process.

The score counts only work an enabled action of the table's format could do (issue 31): small
files only when they are *compactable* (in a partition holding at least ``COMPACTABLE_MIN_FILES``
of them, as the rewrite's planner asks by default) and a compacting action is enabled, snapshots
only when an action that trims them is enabled, staleness only when the format has any enabled
action. ``Remedies`` says which actions those are for a format (processes/health.py builds it from
the enabled factories); each reason names the action that would fix it, or says why none can."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from storage.wording import counted

# Weights of the health score (0 healthy .. 100 needs attention now); each part is capped.
WEIGHTS = {"small_files": 40, "file_count": 15, "snapshots": 10, "maintenance": 20, "failures": 15}
MANY_FILES, MANY_SNAPSHOTS, STALE_DAYS, MANY_FAILURES = 10_000, 500, 30, 3
#: A partition's small files are compactable from this many on (the rewrite's default
#: ``min-input-files``; one small file per partition is nothing to compact).
COMPACTABLE_MIN_FILES = 5


@dataclass(frozen=True)
class Remedies:
    """The enabled actions of one format that improve a part of the score ("" when none), and why
    none does where a factory declined it (``{part: reason}``)."""

    compact: str = ""
    trim_snapshots: str = ""
    actions: tuple[str, ...] = ()
    declined: dict[str, str] = field(default_factory=dict)


#: Every part counted (what a caller that knows no format's actions gets).
ALL_REMEDIES = Remedies(
    compact="rewrite", trim_snapshots="expire-snapshots", actions=("expire-snapshots", "rewrite")
)


@dataclass
class TableHealth:
    table: Any
    score: int
    reasons: list[str] = field(default_factory=list)
    last_maintenance: dt.datetime | None = None
    recent_failures: int = 0


@dataclass(slots=True)
class TableFacts:
    """The facts a health score reads (a Table row has them too); cheap to build by the thousand.
    ``compactable_file_count`` None: every small file counts as compactable."""

    file_count: int
    small_file_count: int
    instant_count: int
    compactable_file_count: int | None = None

    @property
    def small_file_ratio(self) -> float:
        return self.small_file_count / self.file_count if self.file_count else 0.0


def compactable_files(table: Any) -> int:
    """The table's compactable small files (its small files when it does not say)."""
    value = getattr(table, "compactable_file_count", None)
    return table.small_file_count if value is None else min(int(value), table.small_file_count)


def table_health(
    table: Any,
    last_maintenance: dt.datetime | None,
    recent_failures: int,
    now: dt.datetime,
    remedies: Remedies = ALL_REMEDIES,
) -> TableHealth:
    compactable = compactable_files(table)
    compact = 1.0 if remedies.compact else 0.0
    # A handful of small files is no problem (nothing to compact); the ratio counts fully from 20 on.
    few = min(compactable / 20, 1.0)
    ratio = compactable / table.file_count if table.file_count else 0.0
    parts: dict[str, float] = {
        "small_files": ratio * few * compact,
        "file_count": min(table.file_count / MANY_FILES, 1.0) * (compact if compactable else 0.0),
        "snapshots": min(table.instant_count / MANY_SNAPSHOTS, 1.0)
        * (1.0 if remedies.trim_snapshots else 0.0),
        "maintenance": 1.0
        if last_maintenance is None
        else min((now - last_maintenance).total_seconds() / 86400 / STALE_DAYS, 1.0),
        "failures": min(recent_failures / MANY_FAILURES, 1.0),
    }
    # A tiny table needs little maintenance: the weight grows with its files up to 50.
    parts["maintenance"] *= min(table.file_count / 50, 1.0) * (1.0 if remedies.actions else 0.0)
    score = round(sum(WEIGHTS[name] * value for name, value in parts.items()))
    reasons = _file_reasons(table, compactable, parts, remedies)
    if table.instant_count >= MANY_SNAPSHOTS / 2:
        reasons.append(
            f"{counted(table.instant_count, 'snapshot')} kept: " + _remedy(remedies, "trim_snapshots")
        )
    reasons += _maintenance_reasons(table, last_maintenance, parts, remedies, now)
    if recent_failures:
        failed = counted(recent_failures, "failed process", "failed processes")
        reasons.append(f"{failed} in 7 days: fix the cause and retry")
    return TableHealth(table, score, reasons, last_maintenance, recent_failures)


def _remedy(remedies: Remedies, part: str) -> str:
    action = getattr(remedies, part)
    if action:
        return f"{action} would fix it"
    return remedies.declined.get(part) or "no enabled action of this format can"


def _file_reasons(table: Any, compactable: int, parts: dict[str, float], remedies: Remedies) -> list[str]:
    reasons = []
    small = table.small_file_count
    files = counted(table.file_count, "file")
    if small and compactable:
        share = f"{compactable / table.file_count:.0%} of {files}"
        if remedies.compact:
            reasons.append(f"{share} are small and compactable: {remedies.compact} would fix it")
        else:  # said plainly: nothing here compacts them, and why
            reasons.append(f"{share} are small, but {_remedy(remedies, 'compact')}")
    elif small:
        reasons.append(
            f"{counted(small, 'small file')}, but no partition has {COMPACTABLE_MIN_FILES}: nothing to compact"
        )
    if table.file_count >= MANY_FILES / 2:
        remedy = _remedy(remedies, "compact") if compactable else "none is compactable"
        reasons.append(f"{files}: {remedy}")
    return reasons


def _maintenance_reasons(
    table: Any, last_maintenance: dt.datetime | None, parts: dict[str, float], remedies: Remedies, now
) -> list[str]:
    if not table.file_count:
        return []
    if not remedies.actions:
        return ["no enabled action maintains tables of this format"]
    enabled = ", ".join(remedies.actions)
    if last_maintenance is None:
        return [f"never maintained (enabled: {enabled})"]
    if parts["maintenance"] >= 0.25:
        return [f"last maintained {(now - last_maintenance).days} days ago (enabled: {enabled})"]
    return []
