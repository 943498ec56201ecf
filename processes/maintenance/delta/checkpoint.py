"""Delta ``checkpoint``: write a checkpoint at the current version, then remove the log files
the table's log retention lets go.

Checkpoint: deltalake's ``create_checkpoint`` (a classic parquet checkpoint and
``_last_checkpoint``) at the version the process read. Before anything is removed, the checkpoint
is read back with the spec API's own log reader and compared with the replay of the commits it
stands for (the same live files with the same deletion vectors, the same protocol, schema,
partitioning and configuration); a checkpoint that disagrees is deleted again (with a
``_last_checkpoint`` naming it) and the process fails, having removed nothing.

Log cleanup (Delta's metadata cleanup, with the fix Delta Spark made in delta-io/delta#4146): the
log retention is ``delta.logRetentionDuration`` (Delta's default 30 days). The versions to keep are
the oldest commit younger than the retention and every later one, and each must stay readable
(time travel): so the newest checkpoint at or below the oldest kept version is the floor, and only
files of versions below it go (commits, checkpoints, checksums, compacted logs ending below it).
Without such a checkpoint nothing is removed, so a log entry the latest checkpoint does not cover is
never removed. A commit's age is its file's modification time (as Delta Spark and delta-rs use
without in-commit timestamps); ``_last_checkpoint``, sidecars and unknown files are never touched.
``dry-run`` writes nothing and lists what would go (as if the checkpoint existed).

Refused with the reason: tables with the ``v2Checkpoint`` feature (deltalake writes classic
checkpoints, and sidecars are not cleaned here) and tables needing a writer feature Lakewarden does
not implement (``delta_commit.check_writable``). The same works on object stores through
deltalake's checkpoint with the table's storage options and pyarrow's file system.
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from processes.maintenance.delta.rewrite import delta_table
from processes.maintenance.delta.vacuum import interval_hours
from processes.maintenance.errors import InputError
from processes.maintenance.retention import summary_list
from processes.maintenance.schemas import DRY_RUN, INTERVAL, MAX_COUNT, PARALLELISM, with_defaults
from processes.maintenance.targets import store_options
from processes.plugin import (
    CHECKPOINT,
    Preview,
    ProcessContext,
    ProcessFactory,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.formats.delta.commit import (
    CommitRefused,
    check_writable,
    file_key,
    live_files,
    open_version,
    table_shape,
)
from storage.io.guard import kept_summary
from storage.wording import counted

if TYPE_CHECKING:
    from processes.runtime import TableRuntime
    from storage.io import StoreOptions

DEFAULT_LOG_RETENTION_HOURS = 30 * 24
_VERSIONED = re.compile(r"^(\d{20})\.(?:json|crc|checkpoint\.parquet|checkpoint\.\d+\.\d+\.parquet)$")
_V2_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F-]+\.(?:json|parquet)$")
_COMPACTED = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")


class CheckpointMismatch(Exception):
    """The written checkpoint does not hold the state of the commits it stands for."""


def log_retention_hours(properties: dict[str, Any]) -> float:
    hours = interval_hours(properties, "delta.logRetentionDuration")
    return DEFAULT_LOG_RETENTION_HOURS if hours is None else hours


def _check_checkpointable(spec: Any) -> None:
    protocol = spec.state(spec.version).snapshot.protocol
    where = f"Delta table {spec.location_uri}"
    if "v2Checkpoint" in (protocol.get("writerFeatures") or ()):
        raise CommitRefused(
            f"{where} uses v2 checkpoints (v2Checkpoint feature); deltalake writes classic checkpoints "
            "and Lakewarden does not clean sidecars: the table is left as it is"
        )
    check_writable(protocol, where)


def _versioned(name: str) -> int | None:
    """The version a log file belongs to (the end of a compacted range), or None."""
    match = _VERSIONED.match(name) or _V2_CHECKPOINT.match(name)
    if match:
        return int(match.group(1))
    match = _COMPACTED.match(name)
    return int(match.group(2)) if match else None


def expired_log_files(
    log: Any, retention_hours: float, *, now: float | None = None, checkpoint_at: int | None = None
) -> tuple[int | None, list[str]]:
    """(floor, file-system paths of the log files below it) under the rules of the module
    docstring; ``checkpoint_at`` counts a checkpoint not written yet (dry run)."""
    cutoff = (time.time() if now is None else now) - retention_hours * 3600
    first_kept = log.latest
    for version in sorted(log.commits):
        mtime = log.commits[version].mtime_ns
        if mtime is None or mtime / 1e9 >= cutoff:
            first_kept = version
            break
    checkpoints = set(log.checkpoints) | ({checkpoint_at} if checkpoint_at is not None else set())
    floor = max((c for c in checkpoints if c <= first_kept), default=None)
    if floor is None:
        return None, []
    found = []
    for info in log.store.fs.get_file_info(pafs.FileSelector(log.log_path)):
        version = _versioned(info.base_name) if info.type == pafs.FileType.File else None
        if version is not None and version < floor:
            found.append((version, info.base_name, info.path))
    return floor, [path for _, _, path in sorted(found)]


def write_checkpoint(location: str, spec: Any, storage: StoreOptions | None) -> None:
    """deltalake's checkpoint at ``spec.version``, read back and compared with the replay."""
    table = delta_table(location, storage)
    table.load_as_version(spec.version)
    existed = spec.version in spec.log.checkpoints
    table.create_checkpoint()
    try:
        verify_checkpoint(location, spec, storage)
    except CheckpointMismatch:
        if not existed:
            _remove_checkpoint(open_version(location, storage=storage).log, spec.version)
        raise


def verify_checkpoint(location: str, spec: Any, storage: StoreOptions | None) -> None:
    """The checkpoint at ``spec.version`` holds what the replay ``spec`` read holds."""
    fresh = open_version(location, spec.version, storage)
    checkpoint = fresh.log.checkpoint_for(spec.version)
    where = f"the checkpoint of {spec.location_uri} at version {spec.version}"
    if checkpoint is None or checkpoint.version != spec.version:
        raise CheckpointMismatch(f"{where} was not written")
    store = fresh.store
    written = {
        file_key(store.uri(store.data_path(add["path"])), add)
        for add in fresh.log.checkpoint_adds(checkpoint)
    }
    expected = set(live_files(spec))
    if written != expected:
        raise CheckpointMismatch(
            f"{where} lists {len(written)} live files where the log replay has {len(expected)} "
            f"({len(written ^ expected)} differ); it was removed and the log left as it was"
        )
    if table_shape(fresh.state(spec.version).snapshot) != table_shape(spec.state(spec.version).snapshot):
        raise CheckpointMismatch(f"{where} holds another protocol or metadata than the log; it was removed")


def _remove_checkpoint(log: Any, version: int) -> None:
    checkpoint = log.checkpoints.get(version)
    for path in checkpoint.paths if checkpoint is not None else ():
        log.store.fs.delete_file(path)
    last = f"{log.log_path}/_last_checkpoint"
    try:
        with log.store.fs.open_input_stream(last) as stream:
            names_it = json.loads(stream.read()).get("version") == version
    except (OSError, ValueError, AttributeError):
        return
    if names_it:
        log.store.fs.delete_file(last)


class DeltaCheckpointProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(CHECKPOINT, params)
        merged = {**DeltaCheckpointFactory.default_properties, **config}
        self.dry_run = bool(params.get("dry-run", False))
        self.cleanup = bool(params.get("cleanup-log", merged["cleanup-log"]))

    def run(self, context: ProcessContext) -> dict[str, Any]:
        location, storage = context.runtime.location, store_options(context)
        spec = open_version(location, storage=storage)
        _check_checkpointable(spec)
        hours = log_retention_hours(spec.definition.properties)
        summary: dict[str, Any] = {
            "dry_run": self.dry_run,
            "version": spec.version,
            "checkpoint_version": spec.version,
            "checkpoint_created": False,
            "log_retention_hours": hours,
        }
        if not self.dry_run:
            # the checkpoint and _last_checkpoint go to the log: never through a link out of the table
            context.guard.check(spec.store.uri(spec.store.table_path("_delta_log/_last_checkpoint")), "write")
            context.report_progress(0, 2, f"checkpoint at version {spec.version}")
            write_checkpoint(location, spec, storage)
            summary["checkpoint_created"] = True
        context.check_cancelled()
        log = open_version(location, storage=storage).log
        floor: int | None = None
        doomed: list[str] = []
        if self.cleanup:
            floor, doomed = expired_log_files(log, hours, checkpoint_at=spec.version)
        removable, kept = context.guard.split([log.store.uri(p) for p in doomed])
        if not self.dry_run:
            context.report_progress(1, 2, f"removing {counted(len(removable), 'expired log file')}")
            for location in removable:
                context.guard.delete(location, storage)  # gone already: another cleaner took it
        summary.update(
            cleanup_floor=floor,
            log_files_removed=len(removable),
            files=summary_list(removable),
            **kept_summary(kept),
        )
        context.report_progress(2, 2, "done")
        return summary


class DeltaCheckpointFactory(ProcessFactory):
    name = "delta-checkpoint"
    description = "Writes Delta log checkpoints and removes log files older than the log retention"
    default_properties = {"interval": 86400, "parallelism": 1, "min-commits": 10, "cleanup-log": True}
    properties_schema = with_defaults(
        {
            "type": "object",
            "properties": {
                "interval": INTERVAL,
                "parallelism": PARALLELISM,
                "min-commits": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_COUNT,
                    "description": "Scheduled runs wait for this many commits after the latest checkpoint",
                },
                "cleanup-log": {
                    "type": "boolean",
                    "description": "Remove log files older than delta.logRetentionDuration (default 30 days)"
                    " that a checkpoint makes redundant",
                },
            },
        },
        default_properties,
    )
    params_schema = {
        "type": "object",
        "properties": {
            "dry-run": DRY_RUN,
            "cleanup-log": {
                "type": "boolean",
                "description": "Override the cleanup-log property for this run",
            },
        },
        "additionalProperties": False,
    }

    def supported_actions(self) -> dict[str, set[str]]:
        return {"delta": {CHECKPOINT}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:
        return TriggerStrategy.from_properties(self.properties, on_new_snapshot=True)

    def trigger(self, runtime: TableRuntime, action: str) -> TableProcess | None:
        spec = open_version(runtime.location, storage=store_options(runtime))
        try:
            _check_checkpointable(spec)
        except CommitRefused as refused:
            return runtime.nothing_to_do(f"nothing would run: {refused}")
        minimum = int({**self.default_properties, **runtime.config}["min-commits"])
        since = spec.version - max(spec.log.checkpoints, default=-1)
        if since < minimum:
            return runtime.nothing_to_do(
                f"nothing to do: {since} commit(s) since the last checkpoint, fewer than min-commits {minimum}"
            )
        return DeltaCheckpointProcess({}, runtime.config)

    def recover(self, runtime: TableRuntime, record: ProcessRecord) -> TableProcess:
        return DeltaCheckpointProcess(dict(record.params), runtime.config)

    def preview(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> Preview | None:
        """What a run would do (its dry run, read from the log): the checkpoint written at the
        current version from the commits since the last checkpoint, the log files removed."""
        spec = open_version(runtime.location, storage=store_options(runtime))
        try:
            _check_checkpointable(spec)
        except CommitRefused as refused:
            raise InputError(str(refused)) from None
        process = DeltaCheckpointProcess(dict(params), runtime.config)
        hours = log_retention_hours(spec.definition.properties)
        floor: int | None = None
        doomed: list[str] = []
        if process.cleanup:
            floor, doomed = expired_log_files(spec.log, hours, checkpoint_at=spec.version)
        last = max((v for v in spec.log.checkpoints if v < spec.version), default=-1)
        exists = spec.version in spec.log.checkpoints
        sizes = [info.size or 0 for info in spec.log.store.fs.get_file_info(doomed)]
        preview = Preview(
            files_in=len([v for v in spec.log.commits if last < v <= spec.version]),
            files_out=0 if process.dry_run else 1,
            objects_to_delete=0 if process.dry_run else len(doomed),
            bytes_to_delete=0 if process.dry_run else sum(sizes),
            details={
                "version": spec.version,
                "previous_checkpoint": None if last < 0 else last,
                "log_retention_hours": hours,
                "cleanup_floor": floor,
                "log_files_removed": len(doomed),
                "files": summary_list([spec.log.store.uri(p) for p in doomed]),
            },
        )
        if process.dry_run:
            preview.notes.append("dry run: nothing is written or removed, the summary lists what would go")
        if exists:
            preview.notes.append(f"version {spec.version} has a checkpoint already: it is written again")
        return preview


__all__ = ["DeltaCheckpointFactory", "expired_log_files", "verify_checkpoint"]
