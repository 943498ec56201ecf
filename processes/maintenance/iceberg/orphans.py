"""Iceberg ``clean-orphan-files``: delete files under the table location that nothing references.

Referenced: the current metadata file and every metadata file of the metadata log,
``version-hint.text``, the statistics and partition-statistics files, and for every snapshot its
manifest list, its manifests and every data and delete file they list (deleted entries included:
a file a manifest still names is never an orphan). Files younger than ``min-age`` (default 3 days:
a writer may have written a file and not committed it yet) and everything under the
``.lakewarden-staging`` folder (active processes' staging, cleaned by the executor) and the
``.lakewarden-trash`` folder (files kept by trash, purged by their own task) are left alone.
``dry-run`` lists the orphans without deleting them.

The whole table location is listed (not only ``data/``) and compared in bounded memory: what the
metadata references and what the location holds are written as sorted runs to a temporary folder
(``TMPDIR``) and merged (``processes.maintenance.listing``), never held in Python sets; the orphans
found are spilled there too and read back to delete them. Peak memory stays flat with the number
of objects (docs/operating/workers.md gives the figures); progress reports the objects seen, their
bytes and the unreferenced candidates while it runs.

With ``trash-retention`` (off by default; a factory property, overridable per table) orphans are
moved into ``<table>/.lakewarden-trash/<process id>/`` instead of deleted (``storage.trash``) and can
be restored while it lasts: a file a writer committed after the cleanup took it (a slow writer, a
clock gone wrong) is put back and the table reads again.

``min-age`` is seconds or an ISO 8601 duration (``P3D``), and never less than an hour.

On S3 the location is listed a page of 1,000 keys at a time (object_store's ListObjectsV2, memory
flat with the number of objects; other object stores through pyarrow's listing, whole) and an
object's age is its ``LastModified`` time from that listing; orphans are deleted one by one, each
by its key exactly as listed. Paths are compared in one spelling (``s3a://`` as ``s3://``,
no trailing slash). This is also the safety net for what a killed rewrite left on a store: its
in-place files (``lakewarden-p<process>-...``) are unreferenced, so they go once older than
``min-age``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from processes.maintenance import listing
from processes.maintenance.listing import (
    REMOVE,
    YOUNG,
    ListingProgress,
    LocationScan,
    Removable,
    StoredFile,
    comparable,
    delete_all,
    normalise,
    walk_files,
)
from processes.maintenance.retention import (
    AGE_SCHEMA,
    TRASH_RETENTION,
    TRASH_RETENTION_SCHEMA,
    described,
    keep_in_trash,
    parse_duration,
    removal_preview,
    summary_list,
    trash_retention,
)
from processes.maintenance.schemas import DRY_RUN, INTERVAL, PARALLELISM, with_defaults
from processes.maintenance.targets import store_options
from processes.plugin import (
    CLEAN_ORPHAN_FILES,
    Preview,
    ProcessContext,
    ProcessFactory,
    ProcessInputError,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.formats.iceberg import IcebergSpecTable
from storage.io import StoreOptions, is_local, is_object_store
from storage.io.guard import OutsideTable, PathGuard, kept_summary

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from processes.runtime import TableRuntime

logger = logging.getLogger(__name__)

#: The scan's result under the names orphan cleanup gave them first.
OrphanScan = LocationScan
OrphanFiles = Removable
__all__ = ["ListingProgress", "StoredFile", "normalise", "scan_location", "stored_files", "walk_files"]

DEFAULT_MIN_AGE_SECONDS = 3 * 24 * 3600
MIN_AGE_FLOOR = dt.timedelta(hours=1)


def utcnow() -> dt.datetime:
    """The clock the minimum age is measured against (a seam for tests that cannot wait hours)."""
    return dt.datetime.now(dt.UTC)


def referenced_paths(table: Table, context: ProcessContext | None = None) -> set[str]:
    """Every path the table's metadata references (see the module docstring), as a set: for
    tests and small tables; the cleanup itself streams ``iter_referenced`` to disk."""
    return set(iter_referenced(table, context))


def iter_referenced(table: Table, context: ProcessContext | None = None) -> Iterator[str]:
    """Every path the table's metadata references, comparable (``normalise``), repeats possible:
    one manifest's entries in memory at a time (and the set of manifest paths already read)."""
    metadata = table.metadata
    io = table.io
    if table.metadata_location:
        yield comparable(table.metadata_location)
    yield from (comparable(entry.metadata_file) for entry in metadata.metadata_log)
    yield from (comparable(f.statistics_path) for f in metadata.statistics)
    yield from (comparable(f.statistics_path) for f in metadata.partition_statistics)
    seen_manifests: set[str] = set()
    for position, snapshot in enumerate(metadata.snapshots):
        if context is not None:
            context.check_cancelled()
            context.report_progress(position, len(metadata.snapshots) + 1, "reading snapshot manifests")
        if snapshot.manifest_list:
            yield comparable(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            yield comparable(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                yield comparable(entry.data_file.file_path)


def stored_files(
    root: str, storage: StoreOptions | None = None, guard: PathGuard | None = None
) -> Iterator[StoredFile]:
    """Files under ``root`` (a normalised location), Lakewarden's own folders (staging, trash)
    and nested tables' folders excluded, symlinks not followed (``listing.stored_files``)."""
    return listing.stored_files(root, storage, listing.private_or_nested(root, guard))


def find_orphans(
    table: Table,
    *,
    guard: PathGuard,
    min_age: dt.timedelta,
    now: dt.datetime,
    context=None,
    storage: StoreOptions | None = None,
) -> OrphanScan:
    """The orphans under the table location. The location the metadata names must be one the
    guard allows (``OutsideTable`` otherwise: a metadata location moved out of the table's
    registered location or the allowed roots); so must every orphan, the rest is kept."""
    root = normalise(table.location())
    guard.check_location()
    guard.check(root, "clean orphan files under")
    hint = normalise(f"{root}/metadata/version-hint.text")
    referenced = itertools.chain(iter_referenced(table, context), [hint])
    return scan_location(
        root, referenced, guard=guard, cutoff=(now - min_age).timestamp(), context=context, storage=storage
    )


def scan_location(
    root: str,
    referenced: Iterable[str],
    *,
    guard: PathGuard,
    cutoff: float,
    context: ProcessContext | None = None,
    storage: StoreOptions | None = None,
) -> OrphanScan:
    """The files under ``root`` that ``referenced`` (comparable paths, any order, repeats allowed)
    does not name, in bounded memory (``listing.scan``: both sides sorted on disk and merged,
    never a set). Unreferenced files modified after ``cutoff`` are counted as young; the guard's
    refusals are kept."""

    def decide(stored: StoredFile, tag: object) -> str | None:
        if tag is not None:
            return None
        return YOUNG if stored.mtime > cutoff else REMOVE

    references = ((path, 0) for path in referenced)
    return listing.scan(stored_files(root, storage, guard), references, decide, guard=guard, context=context)


def _refreshed(table: Any) -> Any:
    if hasattr(table, "refresh"):
        try:
            table.refresh()
        except NotImplementedError:  # a table opened from its metadata file is current already
            pass
    return table


class IcebergOrphanFilesProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(CLEAN_ORPHAN_FILES, params)
        merged = {**IcebergOrphanFilesFactory.default_properties, **config, **params}
        self.min_age = max(parse_duration(merged["min-age"]), MIN_AGE_FLOOR)
        self.dry_run = bool(merged.get("dry-run", False))
        self.trash = trash_retention(merged)

    def run(self, context: ProcessContext) -> dict[str, Any]:
        spec_table = context.table
        assert isinstance(spec_table, IcebergSpecTable)  # the factory offers Iceberg tables only
        table = _refreshed(spec_table.pyiceberg_table)
        storage = store_options(context.runtime, table)
        try:
            scan = find_orphans(
                table,
                guard=context.guard,
                min_age=self.min_age,
                now=utcnow(),
                context=context,
                storage=storage,
            )
        except OutsideTable as refused:
            raise ProcessInputError(f"nothing was deleted: {refused}") from None
        with scan:
            return self._remove(context, table, scan, storage)

    def _remove(
        self, context: ProcessContext, table: Any, scan: OrphanScan, storage: StoreOptions | None
    ) -> dict[str, Any]:
        orphans, young = scan.orphans, scan.young
        context.check_cancelled()
        summary: dict[str, Any] = {
            "dry_run": self.dry_run,
            "min_age_seconds": int(self.min_age.total_seconds()),
            "orphan_files": len(orphans),
            "orphan_bytes": orphans.bytes,
            "too_young_to_delete": young,
            "files": summary_list(orphans.first),
            **kept_summary(scan.kept),
        }
        if self.dry_run:
            return summary
        if self.trash is not None:
            context.report_progress(0, len(orphans), "moving orphan files to the trash")
            trash = keep_in_trash(
                context,
                action=CLEAN_ORPHAN_FILES,
                retention=self.trash,
                root=normalise(table.location()),
                files=[(orphan.location, orphan.size, "orphan") for orphan in orphans],
                storage=storage,
            )
            context.report_progress(len(orphans), len(orphans), "done")
            return {**summary, "trash": trash, "deleted_files": 0, "delete_failures": trash["failed"]}
        deleted, failed = delete_all(context, orphans, len(orphans), storage, "orphan files")
        return {**summary, "deleted_files": deleted, "delete_failures": failed}


MIN_AGE_SCHEMA = described(
    AGE_SCHEMA, "Only unreferenced files older than this are orphans (seconds or ISO 8601)"
)


class IcebergOrphanFilesFactory(ProcessFactory):
    name = "iceberg-clean-orphan-files"
    description = "Deletes files under an Iceberg table's location that no metadata references"
    properties_schema = {
        "type": "object",
        "properties": {
            "interval": INTERVAL,
            "parallelism": PARALLELISM,
            "min-age": MIN_AGE_SCHEMA,
            TRASH_RETENTION: TRASH_RETENTION_SCHEMA,
        },
    }
    default_properties = {
        "interval": 7 * 86400,
        "parallelism": 1,
        "min-age": DEFAULT_MIN_AGE_SECONDS,
        TRASH_RETENTION: 0,
    }
    properties_schema = with_defaults(properties_schema, default_properties)
    params_schema = {
        "type": "object",
        "properties": {
            "dry-run": DRY_RUN,
            "min-age": MIN_AGE_SCHEMA,
        },
        "additionalProperties": False,
    }

    def supported_actions(self) -> dict[str, set[str]]:
        return {"iceberg": {CLEAN_ORPHAN_FILES}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:
        return TriggerStrategy.from_properties(self.properties)

    def trigger(self, runtime: TableRuntime, action: str) -> TableProcess | None:
        # Listing the whole location is the work itself: the interval is the only gate.
        location = runtime.location
        if not (is_local(location) or is_object_store(location)):
            return runtime.decline(
                "the table's location is neither local nor on an object store Lakewarden lists"
            )
        return IcebergOrphanFilesProcess({}, runtime.config)

    def recover(self, runtime: TableRuntime, record: ProcessRecord) -> TableProcess:
        return IcebergOrphanFilesProcess(dict(record.params), runtime.config)

    def preview(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> Preview | None:
        """The orphans a run would delete (or move to the trash) now and their bytes: the location
        is listed and the metadata read, nothing changed."""
        table = getattr(runtime.load(), "pyiceberg_table", None)
        if table is None:
            return None
        process = IcebergOrphanFilesProcess(dict(params), runtime.config)
        table = _refreshed(table)
        try:
            scan = find_orphans(
                table,
                guard=runtime.guard(),
                min_age=process.min_age,
                now=utcnow(),
                storage=store_options(runtime, table),
            )
        except OutsideTable as refused:
            return Preview(notes=[f"nothing would run: {refused}"])
        with scan:
            orphans, young = scan.orphans, scan.young
            return removal_preview(
                len(orphans),
                orphans.bytes,
                {
                    "files": summary_list(orphans.first),
                    "too_young_to_delete": young,
                    "min_age_seconds": int(process.min_age.total_seconds()),
                    **kept_summary(scan.kept),
                },
                trash=process.trash,
                idle=None if len(orphans) else "no unreferenced file is older than min-age",
            )
