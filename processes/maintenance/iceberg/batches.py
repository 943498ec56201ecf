"""Partial progress of an Iceberg rewrite (``partial-progress``, ``max-commits``), as Iceberg's
``RewriteDataFiles`` offers it: the planned file groups are spread over at most ``max-commits``
batches (their sizes differ by one group at most, in plan order), and each batch is written and
committed as its own ``replace`` snapshot as soon as its groups are written. A long rewrite then
keeps what it finished when a late commit conflicts or the worker dies: a conflict fails only its
own batch (its files are deleted, the other batches go on, and the run re-plans once what is left,
as a rewrite without partial progress does); a retry plans from the table as it is, so it rewrites
only what no batch committed.

``Batching`` reads the two settings, ``split`` cuts a plan into batch plans, ``BatchContext`` is
the process context a batch's writer reports progress through (the groups of the earlier batches
counted, the batch named), ``PartialProgress`` keeps what landed and what failed for the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from processes.maintenance.planning import CompactionPlan
from processes.maintenance.schemas import MAX_COUNT

if TYPE_CHECKING:
    from processes.plugin import ProcessContext

PARTIAL_PROGRESS, MAX_COMMITS = "partial-progress", "max-commits"
PARTIAL_PROGRESS_SCHEMA: dict[str, Any] = {
    PARTIAL_PROGRESS: {
        "type": "boolean",
        "description": "Commit file groups in batches as they are written (a late conflict or a lost"
        " worker keeps the committed batches)",
    },
    MAX_COMMITS: {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_COUNT,
        "description": "With partial-progress: the most commits one rewrite makes (groups are spread over them)",
    },
}
PARTIAL_PROGRESS_DEFAULTS: dict[str, Any] = {PARTIAL_PROGRESS: False, MAX_COMMITS: 10}


@dataclass(frozen=True)
class Batching:
    partial: bool = False
    max_commits: int = 10

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Batching:
        merged = {**PARTIAL_PROGRESS_DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
        max_commits = int(merged[MAX_COMMITS])
        if max_commits < 1:
            raise ValueError(f"{MAX_COMMITS} must be at least 1 (got {max_commits})")
        return cls(partial=bool(merged[PARTIAL_PROGRESS]), max_commits=max_commits)

    def split(self, plan: CompactionPlan) -> list[CompactionPlan]:
        """The batches of ``plan``: the whole plan without partial progress, else its groups in
        plan order over ``min(max_commits, groups)`` batches of sizes differing by one at most."""
        if not self.partial or len(plan.groups) <= 1:
            return [plan]
        count = min(self.max_commits, len(plan.groups))
        size, extra = divmod(len(plan.groups), count)
        batches, start = [], 0
        for number in range(count):
            end = start + size + (1 if number < extra else 0)
            batches.append(CompactionPlan(plan.instant, plan.groups[start:end], plan.ordering))
            start = end
        return batches


class BatchContext:
    """The process context as one batch's writer sees it: progress counts ``done_before`` groups
    (and commits) of the earlier batches out of ``total`` and names the batch; everything else is
    the process's context."""

    def __init__(self, context: ProcessContext, *, done_before: int, total: int, label: str) -> None:
        self._context, self._done_before, self._total, self._label = context, done_before, total, label

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def report_progress(self, done: int, total: int, message: str = "") -> None:
        self._context.report_progress(self._done_before + done, self._total, f"{self._label}: {message}")


@dataclass
class PartialProgress:
    """What the batches of a rewrite did, across its attempts (a re-plan numbers groups anew)."""

    committed: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    groups: list[Any] = field(default_factory=list)  # the committed RewriteGroups
    written: list[Any] = field(default_factory=list)  # their WrittenGroups
    commits: int = 0  # catalog commits tried

    def landed(
        self, attempt: int, number: int, batch: CompactionPlan, written: list[Any], snapshot_id: int
    ) -> None:
        self.committed.append(
            {
                "attempt": attempt,
                "batch": number,
                "snapshot_id": snapshot_id,
                "groups": [g.index for g in batch.groups],
                "files_in": batch.files_in,
                "files_out": sum(len(w.files) for w in written),
            }
        )
        self.groups += batch.groups
        self.written += written

    def conflicted(self, attempt: int, number: int, batch: CompactionPlan, reason: str) -> None:
        self.failed.append(
            {
                "attempt": attempt,
                "batch": number,
                "groups": [g.index for g in batch.groups],
                "files_in": batch.files_in,
                "reason": reason,
            }
        )

    def failed_in(self, attempt: int) -> bool:
        return any(f["attempt"] == attempt for f in self.failed)

    def plan(self, instant: Any, ordering: Any) -> CompactionPlan:
        """The committed groups as one plan (what the summary counts)."""
        return CompactionPlan(instant, list(self.groups), ordering)

    def report(self, batches: int) -> dict[str, Any]:
        return {"batches": batches, "committed": self.committed, "failed": self.failed}

    def describe(self) -> str:
        """A sentence naming the committed batches (for a failure that ends the run after them)."""
        snapshots = ", ".join(str(c["snapshot_id"]) for c in self.committed)
        return f"{len(self.committed)} batch(es) of {len(self.groups)} file group(s) stay committed (snapshots {snapshots})"


class RewritePartiallyCommitted(RuntimeError):
    """A partial-progress rewrite failed after some of its batches committed (they stay)."""
