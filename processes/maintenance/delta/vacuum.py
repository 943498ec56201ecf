"""Delta ``vacuum``: delete files the log no longer references, then checkpoint and clean the log.

The retention (``retention-hours``, default 168 h = 7 days) is never below the table's own
``delta.deletedFileRetentionDuration``: a factory or table property below it is raised to it, and
an explicit ``retention-hours`` parameter below it is refused with a message saying why (readers
of older versions within the table's promised retention would lose their files). Vacuum deletes
tombstoned files removed longer ago than the retention and, with ``full`` (the default, Delta's own
VACUUM semantics), files the log never named (what a writer killed before its commit left, such as a
rewrite's objects on S3) once their last-modified time is older than the retention. Afterwards
a checkpoint is written and log files older than ``delta.logRetentionDuration`` that the checkpoint makes redundant are removed
(``cleanup_metadata``). ``dry-run`` lists the files and changes nothing.

With ``trash-retention`` (off by default; a factory property, overridable per table) the files
vacuum would delete are moved into ``<table>/.lakewarden-trash/<process id>/`` instead
(``storage.trash``; deltalake lists them, Lakewarden moves them) and can be restored while it
lasts: every version whose log entries are still kept (``delta.logRetentionDuration``) reads
again, as before the vacuum. deltalake's own vacuum never looks inside dot-folders, so the trash is
not vacuumed.

The files to delete are the ones deltalake's ``DeltaTable.vacuum`` names (the same rules: live
files kept, top-level folders and files starting with ``_`` or ``.`` left alone except
``_change_data``, ``_delta_index`` and partition folders), found in bounded memory
(``processes.maintenance.listing``): the log's adds and removes (checkpoint and commits) are sorted
on disk by path, newest first, to tell live files, kept tombstones and expired ones; the whole table
location is listed (symlinks followed, as deltalake does, so what they lead to is reported) and
merged with them; every file to delete goes through the path guard, and what it refuses (a nested
table's files, files behind a symlink, outside the roots) is kept and reported. Unlike deltalake's,
the deletion vector files of live files are never deleted. Progress reports the objects seen, the
candidates and their bytes while listing.

On an object store the same runs with the table's storage options; the checkpoint and log cleanup
are deltalake's (a checkpoint is written under a name no other writer uses, and commits keep their
conditional put).
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from processes.maintenance.listing import (
    REMOVE,
    YOUNG,
    LocationScan,
    StoredFile,
    comparable,
    delete_all,
    normalise,
    scan,
    stored_files,
)
from processes.maintenance.retention import (
    TRASH_RETENTION,
    TRASH_RETENTION_SCHEMA,
    keep_in_trash,
    removal_preview,
    summary_list,
    trash_retention,
)
from processes.maintenance.schemas import (
    DRY_RUN,
    HOURS,
    INTERVAL,
    MAX_AGE_HOURS,
    PARALLELISM,
    UNIT,
    with_defaults,
)
from processes.maintenance.spill import SortedRuns
from processes.maintenance.targets import store_options
from processes.plugin import (
    VACUUM,
    Preview,
    ProcessContext,
    ProcessFactory,
    ProcessInputError,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.formats.delta.commit import open_version
from storage.io import StoreOptions, filesystem
from storage.io.guard import OutsideTable, PathGuard, kept_summary

if TYPE_CHECKING:
    from processes.runtime import TableRuntime

logger = logging.getLogger(__name__)

DEFAULT_RETENTION_HOURS = 168
_INTERVAL = re.compile(r"^\s*(?:interval\s+)?(\d+(?:\.\d+)?)\s*([a-z]+)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {
    "nanosecond": 1e-9,
    "microsecond": 1e-6,
    "millisecond": 1e-3,
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
    "week": 7 * 86400,
}


class RetentionTooShort(ValueError):
    pass


def table_retention_hours(configuration: dict[str, Any]) -> float | None:
    """The table's ``delta.deletedFileRetentionDuration`` in hours (``interval 7 days``), or None."""
    return interval_hours(configuration, "delta.deletedFileRetentionDuration")


def interval_hours(configuration: dict[str, Any], key: str) -> float | None:
    """A Delta interval property (``interval 30 days``) in hours, or None when it is not set."""
    value = configuration.get(key)
    if not value:
        return None
    match = _INTERVAL.match(str(value))
    unit = match.group(2).lower().rstrip("s") if match else ""
    if not match or unit not in _UNIT_SECONDS:
        raise ValueError(f"cannot read {key}={value!r}")
    return float(match.group(1)) * _UNIT_SECONDS[unit] / 3600


class DeltaVacuumProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(VACUUM, params)
        merged = {**DeltaVacuumFactory.default_properties, **config}
        self.configured_hours = float(merged["retention-hours"])
        self.requested_hours = float(params["retention-hours"]) if "retention-hours" in params else None
        self.dry_run = bool(params.get("dry-run", False))
        # Delta's own VACUUM semantics: files the log never named (a writer killed before its
        # commit, e.g. a rewrite's objects on S3) go too, once older than the retention by their
        # last-modified time. ``full: false`` keeps deltalake's lighter mode (tombstones only).
        self.full = bool(params.get("full", merged["full"]))
        self.trash = trash_retention(merged)

    def retention_hours(self, configuration: dict[str, Any]) -> int:
        own = table_retention_hours(configuration)
        # A table that sets none has Delta's default of 7 days, which deltalake enforces too.
        floor = DEFAULT_RETENTION_HOURS if own is None else own
        where = (
            "delta.deletedFileRetentionDuration" if own is not None else "Delta default, the table sets none"
        )
        if self.requested_hours is not None:
            if self.requested_hours < floor:
                raise RetentionTooShort(
                    f"retention-hours={self.requested_hours:g} is shorter than the table's own retention "
                    f"of {floor:g} hours ({where}); vacuum keeps removed files at least that long so "
                    "readers of recent versions keep working"
                )
            hours = self.requested_hours
        else:
            hours = max(self.configured_hours, floor)
        return math.ceil(hours)

    def run(self, context: ProcessContext) -> dict[str, Any]:
        from processes.maintenance.delta.rewrite import delta_table

        storage = store_options(context)
        table = delta_table(context.runtime.location, storage)
        hours = self.retention_hours(table.metadata().configuration)
        context.report_progress(0, 2, f"vacuum with a retention of {hours} h")
        try:
            found = vacuum_scan(
                context.runtime.location,
                hours=hours,
                full=self.full,
                guard=context.guard,
                context=context,
                storage=storage,
            )
        except OutsideTable as refused:
            raise ProcessInputError(f"nothing was deleted: {refused}") from None
        with found:
            summary = self._summary(found.scan, found.root, hours, table.version())
            if self.dry_run:
                return summary
            files = found.scan.removable
            if self.trash is not None:
                summary["trash_retention_seconds"] = int(self.trash.total_seconds())
                summary["trash"] = keep_in_trash(
                    context,
                    action=VACUUM,
                    retention=self.trash,
                    root=found.root,
                    files=[(f.location, f.size, _kind(f.location)) for f in files],
                    storage=storage,
                )
            else:
                # Lakewarden deletes, through the guard: deltalake's own vacuum would delete what it keeps.
                _, summary["delete_failures"] = delete_all(
                    context, files, len(files), storage, "vacuumable files"
                )
        context.check_cancelled()
        context.report_progress(1, 2, "checkpoint and log cleanup")
        table.update_incremental()
        log = table.table_uri.rstrip("/") + "/_delta_log"
        before = _log_files(log, storage)
        table.create_checkpoint()
        if context.guard.allows(normalise(log)):
            table.cleanup_metadata()
        else:
            summary["log_cleanup"] = f"skipped: the log folder is {context.guard.refusal(normalise(log))}"
        summary["checkpoint_version"] = table.version()
        summary["log_files_removed"] = len(before - _log_files(log, storage))
        context.report_progress(2, 2, "done")
        return summary

    def _summary(self, scan: LocationScan, root: str, hours: int, version: int) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "retention_hours": hours,
            "full": self.full,
            "vacuumed_files": len(scan.removable),
            "vacuumed_bytes": scan.removable.bytes,
            "too_young_to_delete": scan.young,
            "files": [relative_to(root, location) for location in scan.removable.first],
            "version": version,
            **kept_summary(scan.kept),
        }


# --- finding what to vacuum, in bounded memory ------------------------------------------------------

#: Tags of a location in the log, the smallest winning: live (an add is its newest action), a
#: tombstone removed within the retention, a tombstone removed longer ago.
LIVE, KEPT_TOMBSTONE, EXPIRED_TOMBSTONE = 0, 1, 2


@dataclass
class VacuumScan:
    """A vacuum's scan (``listing.LocationScan``: the files to delete, spilled) and the table's
    root in the scan's spelling; use it in a ``with`` block."""

    scan: LocationScan
    root: str

    def __enter__(self) -> VacuumScan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.scan.close()


def vacuum_scan(
    location: str,
    *,
    hours: float,
    full: bool,
    guard: PathGuard,
    now: float | None = None,
    context: ProcessContext | None = None,
    storage: StoreOptions | None = None,
) -> VacuumScan:
    """What a vacuum of the Delta table at ``location`` with a retention of ``hours`` deletes (the
    module docstring gives the rules), nothing deleted. ``OutsideTable`` when the table's
    location is one the guard refuses."""
    spec = open_version(location, storage=storage)
    root = normalise(spec.store.uri(spec.store.root))
    guard.check_location()
    guard.check(root, "vacuum")
    now = time.time() if now is None else now
    cutoff = now - hours * 3600
    snapshot = spec.state(spec.version).snapshot
    partition_columns = tuple(snapshot.metadata.get("partitionColumns") or ())

    def hidden(path: str) -> bool:
        return is_hidden(relative_to(root, path), partition_columns)

    def decide(stored: StoredFile, tag: int | None) -> str | None:
        if tag == LIVE or hidden(stored.location):
            return None
        if tag == EXPIRED_TOMBSTONE:
            return REMOVE
        if tag == KEPT_TOMBSTONE:
            return YOUNG
        if not full:
            return None
        return REMOVE if stored.mtime < cutoff else YOUNG

    with tempfile.TemporaryDirectory(prefix="lakewarden-vacuum-") as folder:
        references = log_references(spec.log.file_actions(snapshot), folder, cutoff_ms=cutoff * 1000)
        listed = stored_files(root, storage, hidden, follow_links=True)
        return VacuumScan(scan(listed, references, decide, guard=guard, context=context), root)


def log_references(actions: Iterable[Any], folder: str, *, cutoff_ms: float) -> Iterator[tuple[str, int]]:
    """(comparable location, tag) of every file the log names, replayed on disk: the actions
    sorted by path, newest version first (an add before a remove of the same version), so the
    first of each path is its state; a live file's deletion vector file is live too."""
    runs = SortedRuns(folder, "actions")
    for action in actions:
        vector = comparable(action.deletion_vector) if action.deletion_vector else None
        runs.add(
            (comparable(action.location), -action.version, not action.add, vector, action.deletion_timestamp)
        )
    for location, group in itertools.groupby(runs, key=itemgetter(0)):
        _, _, removed, vector, timestamp = next(group)
        if not removed:
            yield location, LIVE
            if vector is not None:
                yield vector, LIVE
        else:
            yield location, EXPIRED_TOMBSTONE if (timestamp or 0) < cutoff_ms else KEPT_TOMBSTONE


def is_hidden(relative: str, partition_columns: Iterable[str]) -> bool:
    """deltalake's rule for what vacuum never touches: a path (relative to the table) starting
    with ``_`` or ``.``, but not ``_delta_index``, ``_change_data`` or a partition column's name."""
    return (
        relative.startswith(("_", "."))
        and not relative.startswith(("_delta_index", "_change_data"))
        and not any(relative.startswith(column) for column in partition_columns)
    )


def relative_to(root: str, location: str) -> str:
    return location[len(root) + 1 :] if location.startswith(f"{root}/") else location


def _kind(location: str) -> str:
    return "deletion_vector" if location.rsplit("/", 1)[-1].startswith("deletion_vector_") else "data_file"


def _log_files(log: str, storage: StoreOptions | None = None) -> set[str]:
    """Names of the files in the table's log folder (local folder or object-store prefix)."""
    try:
        fs, path = filesystem(log, storage)
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except (OSError, ValueError):
        return set()
    return {info.base_name for info in infos if info.type == pafs.FileType.File}


#: Properties a run-now may override too.
RUN_PROPERTIES = {
    "retention-hours": {
        "type": "number",
        "minimum": 0,
        "maximum": MAX_AGE_HOURS,
        UNIT: HOURS,
        "description": "Removed files older than this go (raised to the table's delta.deletedFileRetentionDuration)",
    },
    "full": {
        "type": "boolean",
        "description": "Delta's full mode: untracked files older than the retention go too",
    },
}


class DeltaVacuumFactory(ProcessFactory):
    name = "delta-vacuum"
    description = "Vacuums Delta tables (never below their own retention) and cleans up their log"
    properties_schema = {
        "type": "object",
        "properties": {
            "interval": INTERVAL,
            "parallelism": PARALLELISM,
            **RUN_PROPERTIES,
            TRASH_RETENTION: TRASH_RETENTION_SCHEMA,
        },
    }
    default_properties = {
        "interval": 86400,
        "parallelism": 1,
        "retention-hours": DEFAULT_RETENTION_HOURS,
        "full": True,
        TRASH_RETENTION: 0,
    }
    properties_schema = with_defaults(properties_schema, default_properties)
    params_schema = {
        "type": "object",
        "properties": {
            "dry-run": DRY_RUN,
            **RUN_PROPERTIES,
        },
        "additionalProperties": False,
    }

    def supported_actions(self) -> dict[str, set[str]]:
        return {"delta": {VACUUM}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:
        return TriggerStrategy.from_properties(self.properties)

    def trigger(self, runtime: TableRuntime, action: str) -> TableProcess | None:
        return DeltaVacuumProcess({}, runtime.config)

    def recover(self, runtime: TableRuntime, record: ProcessRecord) -> TableProcess:
        return DeltaVacuumProcess(dict(record.params), runtime.config)

    def preview(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> Preview | None:
        """The files a vacuum would delete (or move to the trash) now and their bytes (the same
        scan as a run); nothing changed. A refused retention is a ``ProcessInputError``."""
        from processes.maintenance.delta.rewrite import delta_table

        storage = store_options(runtime)
        table = delta_table(runtime.location, storage)
        process = DeltaVacuumProcess(dict(params), runtime.config)
        try:
            hours = process.retention_hours(table.metadata().configuration)
        except RetentionTooShort as error:
            raise ProcessInputError(str(error)) from None
        try:
            found = vacuum_scan(
                runtime.location, hours=hours, full=process.full, guard=runtime.guard(), storage=storage
            )
        except OutsideTable as refused:
            return Preview(notes=[f"nothing would run: {refused}"])
        with found:
            files = found.scan.removable
            return removal_preview(
                len(files),
                files.bytes,
                {
                    "files": summary_list(files.first),
                    "retention_hours": hours,
                    "full": process.full,
                    "version": table.version(),
                    "too_young_to_delete": found.scan.young,
                    **kept_summary(found.scan.kept),
                },
                trash=process.trash,
                idle=None if len(files) else f"no file is vacuumable with a retention of {hours} h",
            )
