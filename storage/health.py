"""The table health score (0 healthy .. 100 needs attention now) from the facts a Table row keeps:
the landing page ranks tables by it, a plan preview predicts it after a process."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

# Weights of the health score (0 healthy .. 100 needs attention now); each part is capped.
WEIGHTS = {"small_files": 40, "file_count": 15, "snapshots": 10, "maintenance": 20, "failures": 15}
MANY_FILES, MANY_SNAPSHOTS, STALE_DAYS, MANY_FAILURES = 10_000, 500, 30, 3


@dataclass
class TableHealth:
    table: Any
    score: int
    reasons: list[str] = field(default_factory=list)
    last_maintenance: dt.datetime | None = None
    recent_failures: int = 0


@dataclass(slots=True)
class TableFacts:
    """The facts a health score reads (a Table row has them too); cheap to build by the thousand."""

    file_count: int
    small_file_count: int
    instant_count: int

    @property
    def small_file_ratio(self) -> float:
        return self.small_file_count / self.file_count if self.file_count else 0.0


def table_health(
    table: Any, last_maintenance: dt.datetime | None, recent_failures: int, now: dt.datetime
) -> TableHealth:
    # A handful of small files is no problem (nothing to compact); the ratio counts fully from 20 on.
    few = min(table.small_file_count / 20, 1.0)
    parts: dict[str, float] = {
        "small_files": table.small_file_ratio * few,
        "file_count": min(table.file_count / MANY_FILES, 1.0),
        "snapshots": min(table.instant_count / MANY_SNAPSHOTS, 1.0),
        "maintenance": 1.0
        if last_maintenance is None
        else min((now - last_maintenance).total_seconds() / 86400 / STALE_DAYS, 1.0),
        "failures": min(recent_failures / MANY_FAILURES, 1.0),
    }
    # A tiny table needs little maintenance: the weight grows with its files up to 50.
    parts["maintenance"] *= min(table.file_count / 50, 1.0)
    score = round(sum(WEIGHTS[name] * value for name, value in parts.items()))
    reasons = []
    if table.small_file_count:
        reasons.append(f"{table.small_file_ratio:.0%} of {table.file_count:,} files are small")
    if parts["file_count"] >= 0.5:
        reasons.append(f"{table.file_count:,} files")
    if parts["snapshots"] >= 0.5:
        reasons.append(f"{table.instant_count:,} snapshots kept")
    if last_maintenance is None and table.file_count:
        reasons.append("never maintained")
    elif last_maintenance is not None and parts["maintenance"] >= 0.25:
        reasons.append(f"last maintained {(now - last_maintenance).days} days ago")
    if recent_failures:
        reasons.append(f"{recent_failures} failed process{'es' if recent_failures > 1 else ''} in 7 days")
    return TableHealth(table, score, reasons, last_maintenance, recent_failures)
