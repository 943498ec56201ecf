"""The table process plugin API: everything a plugin author needs is in this module.

A plugin is a ``ProcessFactory`` subclass registered under the ``lakewarden.process_factories``
entry-point group::

    [project.entry-points."lakewarden.process_factories"]
    my-factory = "my_package.factory:MyFactory"

Lakewarden instantiates the factory without arguments, then calls ``configure(properties)`` with
the properties an admin set (validated first against ``properties_schema``, a JSON Schema, merged
over ``default_properties``). The scheduler asks ``supported_actions()`` which (format, action)
pairs the factory serves and ``trigger_strategy(format, action)`` how often; for each due table it
calls ``trigger(runtime, action)``, which returns a ``TableProcess`` describing the work, or None
when there is nothing to do. The process's ``params`` are stored in the process history row; a
worker rebuilds the process from that row with ``recover(runtime, record)`` and calls
``run(context)``. ``run`` returns a summary dict (shown in the console) and must:

- call ``context.check_cancelled()`` between steps (it raises ``ProcessCancelled``);
- call ``context.report_progress(done, total, message)`` so operators see progress;
- delete, move or write only paths ``context.guard`` allows (``storage.io.guard.PathGuard``:
  inside the table's own location and the allowed roots, not inside another registered table,
  not through a symlink). A file the metadata names elsewhere is left in place and reported in
  the summary under ``kept`` (``PathGuard.split``); ``context.guard.delete(path, storage)`` is
  the delete that checks first;
- on a local table, write new files only under ``context.staging_dir`` until the commit, and move
  the files it commits out of staging into the table's data folder (a rename: staging lives under
  the table location, on the same filesystem) just before committing atomically through the format
  library, as the last step. The executor deletes the staging folder when the process ends,
  whatever the outcome, so nothing committed may stay in it;
- on an object store (no rename there), write new files in place under the table's data prefix
  with names unique to the attempt (``processes.maintenance.outputs``: invisible until a commit names
  them), and delete them when the commit does not land. A failed or cancelled run leaves the table
  exactly as it was either way.

Per-table values the factory needs across runs (last seen snapshot...) are ``StateKey``s declared in
``state_keys`` and read/written through ``runtime.get_state(key)`` / ``runtime.set_state(key, value)``.
"""

from __future__ import annotations

import abc
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from processes.runtime import TableRuntime
    from storage.io.guard import PathGuard
    from storage.spec import SpecTable

# --- actions -------------------------------------------------------------------------------------

REWRITE = "rewrite"
EXPIRE_SNAPSHOTS = "expire-snapshots"
CLEAN_ORPHAN_FILES = "clean-orphan-files"
VACUUM = "vacuum"
PURGE_DELETION_VECTORS = "purge-deletion-vectors"
CHECKPOINT = "checkpoint"
COMPUTE_STATISTICS = "compute-statistics"
REWRITE_MANIFESTS = "rewrite-manifests"
REWRITE_POSITION_DELETES = "rewrite-position-deletes"
REMOVE_DANGLING_DELETES = "remove-dangling-deletes"
CONVERT_EQUALITY_DELETES = "convert-equality-deletes"

_ACTIONS: dict[str, str] = {
    REWRITE: "Compact small files into files of the target size",
    EXPIRE_SNAPSHOTS: "Expire old snapshots and delete the files only they reference",
    CLEAN_ORPHAN_FILES: "Delete files under the table location that no snapshot references",
    VACUUM: "Delete files the Delta log no longer references, then clean up the log",
    PURGE_DELETION_VECTORS: "Rewrite files whose deletion vectors delete a large share of their rows",
    CHECKPOINT: "Write a checkpoint of the Delta log and remove log files older than the log retention",
    COMPUTE_STATISTICS: "Compute per-column distinct-value sketches into a Puffin statistics file",
    REWRITE_MANIFESTS: "Rewrite data manifests clustered by partition, at the target manifest size",
    REWRITE_POSITION_DELETES: "Compact each partition's position delete files into one, without dead entries",
    REMOVE_DANGLING_DELETES: "Remove delete files that no live data file can match",
    CONVERT_EQUALITY_DELETES: "Replace equality delete files by position deletes of the rows they delete",
}


def register_action(name: str, description: str) -> str:
    """Register an action name (plugins call this at import time for actions of their own)."""
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        raise ValueError(f"action names use letters, digits, '-' and '_': {name!r}")
    _ACTIONS.setdefault(name, description)
    return name


def known_actions() -> dict[str, str]:
    return dict(_ACTIONS)


# --- strategy and state ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TriggerStrategy:
    """How the scheduler triggers one (format, action) pair.

    interval: evaluate a table at most this often.
    on_new_snapshot: also require a snapshot the factory has not seen (no new data, no work).
    parallelism: at most this many processes of the pair running at once, across all tables.
    """

    interval: dt.timedelta = dt.timedelta(hours=1)
    on_new_snapshot: bool = False
    parallelism: int = 1

    @classmethod
    def from_properties(cls, properties: dict[str, Any], *, on_new_snapshot: bool = False) -> TriggerStrategy:
        """The strategy a factory's ``interval`` (seconds) and ``parallelism`` properties describe."""
        return cls(
            interval=dt.timedelta(seconds=int(properties["interval"])),
            on_new_snapshot=on_new_snapshot,
            parallelism=int(properties["parallelism"]),
        )

    def __post_init__(self) -> None:
        if self.parallelism < 1:
            raise ValueError("parallelism must be at least 1")
        if self.interval.total_seconds() <= 0:
            raise ValueError("interval must be positive")


@dataclass(frozen=True)
class StateKey:
    """A typed per-table value, persisted per (table, key)."""

    name: str
    type: type = str
    default: Any = None


# --- processes -------------------------------------------------------------------------------------


class ProcessCancelled(Exception):
    """Raised by ``context.check_cancelled()`` once cancel (or kill) was requested."""


class ProcessInputError(Exception):
    """A failure no retry can mend: parameters or properties that do not fit this table (an unknown
    sort column, a z-order on a partition column, a partition spec id the table does not have).
    Raised by ``ProcessFactory.validate`` it refuses the submission (HTTP 400, nothing created);
    raised by ``TableProcess.run`` it ends the process FAILED without an automatic retry."""


@dataclass
class Preview:
    """What a process would do, answered without doing it (``ProcessFactory.preview``).

    Counts are what the plan says now; ``files_out``/``bytes_out`` are expectations (target sizes).
    ``details`` holds action-specific facts shown as they are (e.g. per-group rows, manifests in and
    out, snapshots to expire); ``notes`` are sentences for the operator ("nothing to do: ...")."""

    groups: int = 0
    files_in: int = 0
    bytes_in: int = 0
    files_out: int = 0
    bytes_out: int = 0
    objects_to_delete: int = 0
    bytes_to_delete: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TableSummary:
    """The facts of a table the scheduler ranks work by, as the last refresh kept them on the table
    row (no listing of the store: read for every due table in one query)."""

    id: int
    format: str
    file_count: int = 0
    small_file_count: int = 0
    compactable_file_count: int | None = None
    delete_file_count: int = 0
    total_bytes: int = 0
    instant_count: int = 0
    last_maintenance_at: dt.datetime | None = None
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass
class Estimate:
    """What one run of an action on a table is predicted to gain and to cost
    (``ProcessFactory.estimate``; ``processes/ranking.py`` builds the default from ``TableSummary``).

    Gains: ``small_files_removed``, ``delete_files_removed``, ``bytes_reclaimed``,
    ``manifests_merged`` and ``health_gain`` (points of the health score, storage/health.py).
    Cost: ``bytes_read`` and ``bytes_written``; the scheduler turns them into worker-seconds with
    the throughput the action's past runs measured. ``seconds`` set by a factory is used as is."""

    small_files_removed: int = 0
    delete_files_removed: int = 0
    bytes_reclaimed: int = 0
    manifests_merged: int = 0
    health_gain: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float | None = None


class ProcessContext(abc.ABC):
    """What a running process gets from the executor."""

    process_id: int
    staging_dir: Path
    runtime: TableRuntime

    @property
    @abc.abstractmethod
    def spark(self):
        """The worker's Spark session (created on first use), tagged so cancel can interrupt it."""

    @property
    def table(self) -> SpecTable:
        """The table through the spec API."""
        return self.runtime.load()

    @property
    def guard(self) -> PathGuard:
        """The rule for what this process may delete, move or write (``storage.io.guard``)."""
        return self.runtime.guard()

    @abc.abstractmethod
    def check_cancelled(self) -> None:
        """Raise ``ProcessCancelled`` if cancel or kill was requested."""

    @abc.abstractmethod
    def report_progress(self, done: int, total: int, message: str = "") -> None:
        """Record progress; shown live in the console."""

    def checkpoint(self, name: str) -> None:
        """Mark a named step (``"after-write"``, ``"before-commit"``): checks for cancellation and
        honours failpoints (``LAKEWARDEN_FAILPOINTS=before-commit=sleep:30``), which the fault
        tests use to stop a worker at an exact step. Call it right before committing."""
        self.check_cancelled()


class TableProcess(abc.ABC):
    """One unit of work on one table. ``params`` must be JSON-serialisable."""

    def __init__(self, action: str, params: dict[str, Any] | None = None) -> None:
        self.action = action
        self.params = dict(params or {})

    @abc.abstractmethod
    def run(self, context: ProcessContext) -> dict[str, Any]:
        """Do the work; return a summary (files and bytes in/out, what was deleted...)."""


# --- factories -------------------------------------------------------------------------------------


class ProcessFactory(abc.ABC):
    """Plugin: turns table runtimes into table processes for the pairs it supports."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    #: JSON Schema of the factory's properties (admin-editable, overridable per table).
    properties_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    default_properties: ClassVar[dict[str, Any]] = {}
    #: JSON Schema of the parameters a manual "run now" may pass, per action.
    params_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    state_keys: ClassVar[tuple[StateKey, ...]] = ()
    #: Whether a newly discovered factory starts enabled (a factory that overlaps another's pairs
    #: should start disabled, or the start-up conflict check refuses both).
    enabled_by_default: ClassVar[bool] = True

    def __init__(self) -> None:
        self.properties: dict[str, Any] = dict(self.default_properties)

    def configure(self, properties: dict[str, Any]) -> None:
        """Receive the validated properties (defaults already merged in)."""
        self.properties = {**self.default_properties, **properties}

    @abc.abstractmethod
    def supported_actions(self) -> dict[str, set[str]]:
        """``{format: {action, ...}}``, e.g. ``{"iceberg": {"rewrite"}}``."""

    @abc.abstractmethod
    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy: ...

    @abc.abstractmethod
    def trigger(self, runtime: TableRuntime, action: str) -> TableProcess | None:
        """The process to run now on this table, or None when there is nothing worth doing; say why
        with ``return runtime.nothing_to_do("nothing to do: ...")`` (or ``runtime.decline(reason)``
        when the table does not take the action): the scheduler keeps it as its decision."""

    @abc.abstractmethod
    def recover(self, runtime: TableRuntime, record: ProcessRecord) -> TableProcess:
        """Rebuild the process from its history row (to run it, retry it or resume it)."""

    def validate(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> None:
        """Check ``params`` (already schema-valid) against this table before a process is created:
        columns that must exist, spec ids, combinations the table cannot take. Raise
        ``ProcessInputError`` with the reason; nothing is created then. Default: nothing to check."""
        return None

    def preview(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> Preview | None:
        """What a process for (this table, ``action``, ``params``) would do, computed from metadata
        without writing or deleting anything; None when the factory offers no preview."""
        return None

    def estimate(self, table: TableSummary, action: str) -> Estimate | None:
        """The predicted benefit and cost of running ``action`` on ``table`` now, from its facts
        alone (called for every due table in a scheduler tick: no metadata or store reads here).
        None (the default): the scheduler's estimate from the facts (``processes.ranking``)."""
        return None

    def declined_actions(self) -> dict[str, dict[str, str]]:
        """``{format: {action: reason}}``: actions deliberately not offered for a format (e.g.
        compaction of Paimon primary-key tables, which is the format's own writers' job). The
        console shows them, with the reason, where it offers actions. Default: none."""
        return {}

    def pairs(self) -> set[tuple[str, str]]:
        return {(fmt, action) for fmt, actions in self.supported_actions().items() for action in actions}


@dataclass(frozen=True)
class ProcessRecord:
    """The plain view of a process history row a factory sees in ``recover``."""

    id: int
    action: str
    params: dict[str, Any] = field(default_factory=dict)
    attempt: int = 1
    trigger: str = "schedule"
