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
(``TMPDIR``) and merged (``processes.maintenance.spill``), never held in Python sets; the orphans
found are spilled there too and read back to delete them. Peak memory stays flat with the number
of objects (docs/operating/workers.md gives the figures); progress reports the objects seen, their
bytes and the unreferenced candidates while it runs.

With ``trash-retention`` (off by default; a factory property, overridable per table) orphans are
moved into ``<table>/.lakewarden-trash/<process id>/`` instead of deleted (``storage.trash``) and can
be restored while it lasts: a file a writer committed after the cleanup took it (a slow writer, a
clock gone wrong) is put back and the table reads again.

``min-age`` is seconds or an ISO 8601 duration (``P3D``), and never less than an hour.

On an object store the location is listed through pyarrow (one recursive listing, paged by the
store) and an object's age is its ``LastModified`` time from that listing; orphans are deleted one
by one through the same file system. Paths are compared in one spelling (``s3a://`` as ``s3://``,
no trailing slash). This is also the safety net for what a killed rewrite left on a store: its
in-place files (``lakewarden-p<process>-...``) are unreferenced, so they go once older than
``min-age``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import os
import posixpath
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from processes.maintenance.retention import (
    AGE_SCHEMA,
    SUMMARY_LIST_LIMIT,
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
from processes.maintenance.spill import SortedRuns, Spilled, missing
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
from storage.io import PathNotAllowed, StoreOptions, filesystem, is_local, is_object_store, local_path
from storage.io import normalise as normalise_location
from storage.io import uri as location_uri
from storage.io.guard import KeptFiles, OutsideTable, PathGuard, kept_summary
from storage.trash import PRIVATE_FOLDERS

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from processes.runtime import TableRuntime

logger = logging.getLogger(__name__)

DEFAULT_MIN_AGE_SECONDS = 3 * 24 * 3600
MIN_AGE_FLOOR = dt.timedelta(hours=1)


def utcnow() -> dt.datetime:
    """The clock the minimum age is measured against (a seam for tests that cannot wait hours)."""
    return dt.datetime.now(dt.UTC)


def normalise(path: str) -> str:
    """A comparable spelling of a location: a local path for a plain path or ``file:`` URI, taken
    literally as pyiceberg's file IO does (no percent-decoding); the canonical URI of an object
    (``s3a://b/k`` -> ``s3://b/k``)."""
    if is_local(path):
        return posixpath.normpath(str(local_path(path, percent_decoded=False)))
    if is_object_store(path):
        return normalise_location(path)
    raise ValueError(f"{path}: orphan cleanup reaches local paths and object stores only")


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
        yield _comparable(table.metadata_location)
    yield from (_comparable(entry.metadata_file) for entry in metadata.metadata_log)
    yield from (_comparable(f.statistics_path) for f in metadata.statistics)
    yield from (_comparable(f.statistics_path) for f in metadata.partition_statistics)
    seen_manifests: set[str] = set()
    for position, snapshot in enumerate(metadata.snapshots):
        if context is not None:
            context.check_cancelled()
            context.report_progress(position, len(metadata.snapshots) + 1, "reading snapshot manifests")
        if snapshot.manifest_list:
            yield _comparable(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            yield _comparable(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                yield _comparable(entry.data_file.file_path)


def _comparable(path: str) -> str:
    try:
        return normalise(path)
    except PathNotAllowed:  # an odd key (``//``, ``%2F``...): compared as spelt
        return path


@dataclass(frozen=True)
class StoredFile:
    """A file under the table location: its comparable location, size and modification time."""

    location: str
    size: int
    mtime: float


def walk_files(root: str, guard: PathGuard | None = None) -> Iterator[os.DirEntry]:
    """Files under the local folder ``root``, Lakewarden's own folders (staging, trash) and the
    folders of tables nested in it (``guard.skips_folder``) excluded, symlinks not followed."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = os.scandir(folder)
        except FileNotFoundError:
            continue
        with entries:  # read as it goes: a folder of millions of files is never a list
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    private = folder == root and entry.name in PRIVATE_FOLDERS
                    if not private and not (guard is not None and guard.skips_folder(entry.path)):
                        stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    yield entry


def stored_files(
    root: str, storage: StoreOptions | None = None, guard: PathGuard | None = None
) -> Iterator[StoredFile]:
    """Files under ``root`` (a normalised location), Lakewarden's own folders (staging, trash)
    and nested tables' folders excluded: a directory walk locally, the store's listing
    (``LastModified`` as the time) on an object store."""
    if is_local(root):
        for entry in walk_files(root, guard):
            stat = entry.stat(follow_symlinks=False)
            yield StoredFile(posixpath.normpath(entry.path), stat.st_size, stat.st_mtime)
        return
    fs, base = filesystem(root, storage)
    private = tuple(f"{base}/{folder}/" for folder in PRIVATE_FOLDERS)
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File or info.path.startswith(private):
            continue
        try:
            location = normalise(location_uri(root, info.path))
        except PathNotAllowed:  # a key that cannot be named canonically is never deleted
            logger.warning("orphan cleanup leaves %s alone: its key is not canonical", info.path)
            continue
        if guard is not None and guard.skips_folder(location):
            continue
        # No age known: never old enough.
        mtime = info.mtime.timestamp() if info.mtime is not None else float("inf")
        yield StoredFile(location, info.size or 0, mtime)


class OrphanFiles:
    """The orphans a scan found, spilled to disk in path order (``Spilled``): their number,
    bytes and first paths (``summary_list``) known without reading them back; iterating yields
    ``StoredFile``s."""

    def __init__(self, path: str) -> None:
        self.spilled = Spilled(path)
        self.bytes = 0
        self.first: list[str] = []

    def append(self, stored: StoredFile) -> None:
        self.spilled.append((stored.location, stored.size, stored.mtime))
        self.bytes += stored.size
        if len(self.first) < SUMMARY_LIST_LIMIT:  # in path order: the first are the summary's
            self.first.append(stored.location)

    def __len__(self) -> int:
        return len(self.spilled)

    def __iter__(self) -> Iterator[StoredFile]:
        return (StoredFile(*item) for item in self.spilled)


@dataclass
class OrphanScan:
    """What a listing of the table location found: orphans old enough to delete (on disk, in
    ``folder``: use the scan in a ``with`` block, which removes it), the number of unreferenced
    files still too young, and the unreferenced files the guard keeps."""

    orphans: OrphanFiles
    young: int
    kept: KeptFiles
    folder: tempfile.TemporaryDirectory | None = None

    def close(self) -> None:
        self.orphans.spilled.close()
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None

    def __enter__(self) -> OrphanScan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
    does not name, in bounded memory: both sides are written as sorted runs to a temporary
    folder and merged (``processes.maintenance.spill``), never held in a set. Unreferenced files
    modified after ``cutoff`` are counted as young; the guard's refusals are kept."""
    folder = tempfile.TemporaryDirectory(prefix="lakewarden-orphans-")
    try:
        names = SortedRuns(folder.name, "referenced", unique=True)
        names.extend(referenced)
        names.spill()  # nothing of it in memory while listing
        listed = SortedRuns(folder.name, "listed")
        progress = ListingProgress(context)
        for stored in stored_files(root, storage, guard):
            listed.add((stored.location, stored.size, stored.mtime))
            progress.listed(stored.size)
        scan = OrphanScan(OrphanFiles(os.path.join(folder.name, "orphans")), 0, KeptFiles(), folder)
        for location, size, mtime in missing(listed, names, key=itemgetter(0)):
            progress.candidate(size)
            if mtime > cutoff:
                scan.young += 1
                continue
            reason = guard.refusal(location)
            if reason:
                scan.kept.add(location, reason)
            else:
                scan.orphans.append(StoredFile(location, size, mtime))
        progress.done(len(scan.orphans))
        scan.orphans.spilled.close()
        return scan
    except BaseException:
        folder.cleanup()
        raise


class ListingProgress:
    """Progress of a scan through the context: objects seen and their bytes while listing
    (total unknown: 0), then candidates (unreferenced files) and their bytes among the objects
    seen while comparing; cancellation checked as often."""

    EVERY = 10_000

    def __init__(self, context: ProcessContext | None) -> None:
        self.context = context
        self.seen = self.seen_bytes = self.candidates = self.candidate_bytes = 0

    def listed(self, size: int) -> None:
        self.seen += 1
        self.seen_bytes += size
        if self.context is not None and self.seen % self.EVERY == 0:
            self.context.check_cancelled()
            message = f"listing: {self.seen:,} objects seen, {self.seen_bytes:,} bytes"
            self.context.report_progress(self.seen, 0, message)

    def candidate(self, size: int) -> None:
        self.candidates += 1
        self.candidate_bytes += size
        if self.context is not None and self.candidates % self.EVERY == 0:
            self.context.check_cancelled()
            self.context.report_progress(self.candidates, self.seen, self._comparing())

    def _comparing(self) -> str:
        return (
            f"comparing: {self.seen:,} objects seen ({self.seen_bytes:,} bytes), "
            f"{self.candidates:,} unreferenced ({self.candidate_bytes:,} bytes)"
        )

    def done(self, orphans: int) -> None:
        if self.context is not None:
            message = f"{self._comparing()}, {orphans:,} old enough to remove"
            self.context.report_progress(self.candidates, self.seen, message)


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
        deleted = failed = 0
        for position, orphan in enumerate(orphans):  # read back from disk, in path order
            if position % 100 == 0:
                context.check_cancelled()
                context.report_progress(position, len(orphans), "deleting orphan files")
            try:
                deleted += context.guard.delete(orphan.location, storage)
            except OSError:
                failed += 1
                logger.warning("could not delete orphan file %s", orphan.location, exc_info=True)
        context.report_progress(len(orphans), len(orphans), "done")
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
            return None
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
