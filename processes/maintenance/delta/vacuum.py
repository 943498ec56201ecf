"""Delta ``vacuum``: delete files the log no longer references, then checkpoint and clean the log.

The retention (``retention-hours``, default 168 h = 7 days) is never below the table's own
``delta.deletedFileRetentionDuration``: a factory or table property below it is raised to it, and
an explicit ``retention-hours`` parameter below it is refused with a message saying why (readers
of older versions within the table's promised retention would lose their files). deltalake's
vacuum deletes tombstoned files older than the retention and, with ``full`` (the default, Delta's
own VACUUM semantics), files the log never named (what a writer killed before its commit left, such
as a rewrite's objects on S3) once their last-modified time is older than the retention. Afterwards
a checkpoint is written and log files older than ``delta.logRetentionDuration`` that the checkpoint makes redundant are removed
(``cleanup_metadata``). ``dry-run`` lists the files and changes nothing.

With ``trash-retention`` (off by default; a factory property, overridable per table) the files
vacuum would delete are moved into ``<table>/.lakewarden-trash/<process id>/`` instead
(``storage.trash``; deltalake lists them, Lakewarden moves them) and can be restored while it
lasts: every version whose log entries are still kept (``delta.logRetentionDuration``) reads
again, as before the vacuum. deltalake's own vacuum never looks inside dot-folders, so the trash is
not vacuumed.

On an object store the same runs through deltalake with the table's storage options; the
checkpoint and log cleanup are deltalake's (a checkpoint is written under a name no other writer
uses, and commits keep their conditional put).
"""

from __future__ import annotations

import logging
import math
import re
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

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
from storage.io import StoreOptions, filesystem, join, normalise
from storage.io.guard import KeptFiles, OutsideTable, PathGuard, kept_summary

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
        root = normalise(table.table_uri)
        try:
            context.guard.check_location()
            context.guard.check(root, "vacuum")
        except OutsideTable as refused:
            raise ProcessInputError(f"nothing was deleted: {refused}") from None
        files, kept = guarded_files(root, self.vacuumable(table, hours), context.guard)
        context.check_cancelled()
        summary: dict[str, Any] = {
            "dry_run": self.dry_run,
            "retention_hours": hours,
            "full": self.full,
            "vacuumed_files": len(files),
            "files": summary_list(list(files)),
            "version": table.version(),
            **kept_summary(kept),
        }
        if self.dry_run:
            return summary
        if self.trash is not None:
            summary["trash_retention_seconds"] = int(self.trash.total_seconds())
            summary["trash"] = self._keep_in_trash(context, table, files, storage)
        else:
            # deltalake lists, Lakewarden deletes: its own vacuum would delete what the guard keeps.
            summary["delete_failures"] = delete_guarded(context, root, files, storage)
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

    def vacuumable(self, table: Any, hours: int) -> list[str]:
        """What deltalake's vacuum would delete (paths relative to the table), nothing deleted.
        Directory markers (empty objects named ``prefix/``, which pyarrow leaves on a store when a
        delete empties a "folder"; deltalake lists the table's own as ``""``) are no table files."""
        found = table.vacuum(
            retention_hours=hours, dry_run=True, enforce_retention_duration=True, full=self.full
        )
        return [path for path in found if path and not path.endswith("/")]

    def _keep_in_trash(
        self, context: ProcessContext, table: Any, files: list[str], storage: StoreOptions | None
    ) -> dict:
        root = normalise(table.table_uri)
        assert self.trash is not None
        return keep_in_trash(
            context,
            action=VACUUM,
            retention=self.trash,
            root=root,
            files=sized_files(root, files, storage),
            storage=storage,
        )


def guarded_files(root: str, relative: list[str], guard: PathGuard) -> tuple[list[str], KeptFiles]:
    """(the files, relative to the table ``root``, that the guard lets this table remove; the
    rest, kept where they are: nested tables' files, files behind a symlink, ``../`` paths)."""
    return guard.split(relative, path=lambda relative_path: join(root, relative_path))


def delete_guarded(
    context: ProcessContext, root: str, relative: list[str], storage: StoreOptions | None
) -> int:
    """Delete files relative to the table ``root`` through the guard; the number that failed."""
    failed = 0
    for position, path in enumerate(relative):
        if position % 100 == 0:
            context.check_cancelled()
            context.report_progress(0, 2, f"deleting {len(relative) - position} vacuumable file(s)")
        try:
            context.guard.delete(join(root, path), storage)
        except (OSError, OutsideTable):
            failed += 1
            logger.warning("could not delete %s", path, exc_info=True)
    return failed


def sized_files(root: str, relative: list[str], storage: StoreOptions | None) -> list[tuple[str, int, str]]:
    """(location, size, kind) of files relative to the table ``root``; a file gone has size 0."""
    locations = [join(root, path) for path in relative]
    fs, base = filesystem(root, storage)
    infos = fs.get_file_info([f"{base}/{path}" for path in relative]) if relative else []
    return [
        (location, info.size if info.type == pafs.FileType.File else 0, _kind(location))
        for location, info in zip(locations, infos, strict=True)
    ]


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
        """The files a vacuum would delete (or move to the trash) now and their bytes, from
        deltalake's dry run; nothing changed. A refused retention is a ``ProcessInputError``."""
        from processes.maintenance.delta.rewrite import delta_table

        storage = store_options(runtime)
        table = delta_table(runtime.location, storage)
        process = DeltaVacuumProcess(dict(params), runtime.config)
        try:
            hours = process.retention_hours(table.metadata().configuration)
        except RetentionTooShort as error:
            raise ProcessInputError(str(error)) from None
        root = normalise(table.table_uri)
        guard = runtime.guard()
        try:
            guard.check_location()
            guard.check(root, "vacuum")
        except OutsideTable as refused:
            return Preview(notes=[f"nothing would run: {refused}"])
        relative, kept = guarded_files(root, process.vacuumable(table, hours), guard)
        files = sized_files(root, relative, storage)
        return removal_preview(
            len(files),
            sum(size for _, size, _ in files),
            {
                "files": summary_list([location for location, _, _ in files]),
                "retention_hours": hours,
                "full": process.full,
                "version": table.version(),
                **kept_summary(kept),
            },
            trash=process.trash,
            idle=None if files else f"no file is vacuumable with a retention of {hours} h",
        )
