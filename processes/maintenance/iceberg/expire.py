"""Iceberg ``expire-snapshots``: drop old snapshots, then the files only they reached.

Kept: every snapshot younger than ``max-age``, the ``min-snapshots`` newest snapshots of every
branch's history, and every branch head and tag (pyiceberg refuses to expire those anyway). The
rest are removed from the metadata with pyiceberg's ``expire_snapshots``. Only after that commit
are files deleted, and only those reached from an expired snapshot (its manifest list, its
manifests, the data and delete files in them) that no remaining snapshot reaches: the remaining set
is computed from the refreshed metadata, so a snapshot committed concurrently protects its files
too. ``dry-run`` computes the same lists and changes nothing.

What the expired snapshots reach and what the remaining ones reach are written as sorted runs to
a temporary folder (``TMPDIR``) and merged (``processes.maintenance.spill``), never held in Python
sets: memory holds one manifest's entries at a time and the set of manifest paths read, whatever
the number of files; the files to delete are spilled there too, per kind, and read back to delete
them (docs/operating/workers.md gives the figures).

``max-age`` is seconds or an ISO 8601 duration (``P5D``), default 5 days.

With ``trash-retention`` (off by default; a factory property, overridable per table) the files are
moved into ``<table>/.lakewarden-trash/<process id>/`` instead (``storage.trash``), kept that long
and restorable: the expired snapshots stay expired, but any older metadata file that names them
(time travel through it) reads them again once restored.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from processes.maintenance.errors import InputError
from processes.maintenance.listing import BoundedKept, normalise
from processes.maintenance.retention import (
    AGE_SCHEMA,
    SUMMARY_LIST_LIMIT,
    TRASH_RETENTION,
    TRASH_RETENTION_SCHEMA,
    described,
    keep_in_trash,
    parse_duration,
    removal_preview,
    trash_checked,
    trash_retention,
)
from processes.maintenance.schemas import DRY_RUN, INTERVAL, MAX_COUNT, PARALLELISM, with_defaults
from processes.maintenance.spill import SortedRuns, Spilled, missing
from processes.maintenance.targets import (
    NO_CATALOG,
    iceberg_catalog_table,
    iceberg_commit_target,
    store_options,
)
from processes.plugin import (
    EXPIRE_SNAPSHOTS,
    Preview,
    ProcessContext,
    ProcessFactory,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.io.guard import OutsideTable, PathGuard, kept_summary
from storage.wording import counted

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from processes.runtime import TableRuntime
    from storage.io import StoreOptions

logger = logging.getLogger(__name__)

DEFAULT_MAX_AGE_SECONDS = 5 * 24 * 3600


def snapshots_to_expire(
    metadata: TableMetadata, *, max_age: dt.timedelta, min_snapshots: int, now: dt.datetime
) -> list[int]:
    """Ids of the snapshots the rules above let go, oldest first."""
    cutoff_ms = (now - max_age).timestamp() * 1000
    kept: set[int] = set()
    for ref in metadata.refs.values():
        kept.add(ref.snapshot_id)
        if str(getattr(ref.snapshot_ref_type, "value", ref.snapshot_ref_type)) != "branch":
            continue
        current = metadata.snapshot_by_id(ref.snapshot_id)
        depth = 0
        while current is not None and depth < min_snapshots:
            kept.add(current.snapshot_id)
            depth += 1
            parent = current.parent_snapshot_id
            current = metadata.snapshot_by_id(parent) if parent is not None else None
    candidates = [s for s in metadata.snapshots if s.snapshot_id not in kept and s.timestamp_ms < cutoff_ms]
    return [s.snapshot_id for s in sorted(candidates, key=lambda s: s.timestamp_ms)]


KINDS = ("data_files", "delete_files", "manifests", "manifest_lists")
DATA_FILES, DELETE_FILES, MANIFESTS, MANIFEST_LISTS = range(4)
_DELETED = 2  # a manifest entry's status


def reached(snapshots: Iterable[Snapshot], io: FileIO, *, live_only: bool) -> Iterator[tuple[str, int, int]]:
    """(path, kind, size) of what ``snapshots`` reach: manifest lists (size -1: not known from the
    metadata), manifests, content files (live entries only when ``live_only``: a deleted entry
    is a file the snapshot no longer needs); repeats possible. One manifest's entries in memory at
    a time, and the set of manifest paths already read."""
    read: set[str] = set()
    for snapshot in snapshots:
        if snapshot.manifest_list:
            yield snapshot.manifest_list, MANIFEST_LISTS, -1
        for manifest in snapshot.manifests(io):
            yield manifest.manifest_path, MANIFESTS, int(manifest.manifest_length)
            if manifest.manifest_path in read:
                continue
            read.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                if live_only and int(entry.status) == _DELETED:
                    continue
                content = entry.data_file
                kind = DATA_FILES if int(content.content) == 0 else DELETE_FILES
                yield content.file_path, kind, int(content.file_size_in_bytes)


class Candidates:
    """What the expired snapshots reach, sorted on disk (``spill.SortedRuns``) in a temporary
    folder: use it in a ``with`` block, which removes the folder. Iterable more than once."""

    def __init__(self, expired: Iterable[Snapshot], io: FileIO) -> None:
        self.folder = tempfile.TemporaryDirectory(prefix="lakewarden-expire-")
        self.io = io
        self.runs = SortedRuns(self.folder.name, "candidates", unique=True)
        self.runs.extend(reached(expired, io, live_only=False))
        self.runs.spill()

    def __iter__(self) -> Iterator[tuple[str, int, int]]:
        return iter(self.runs)

    def size(self, path: str, size: int) -> int:
        """``size``, or (a manifest list) the file's own; 0 when it cannot be read."""
        if size >= 0:
            return size
        try:
            return len(self.io.new_input(path))
        except OSError:
            return 0

    def doomed(self, remaining: Iterable[Snapshot], guard: PathGuard) -> Doomed:
        """The candidates no ``remaining`` snapshot reaches in any role, per kind, that the guard
        lets this table delete (the rest kept: another table's files, files outside the table's
        location or the allowed roots): a merge of two sorted streams, never a set of paths."""
        protected = SortedRuns(self.folder.name, "protected", unique=True)
        protected.extend(path for path, _, _ in reached(remaining, self.io, live_only=True))
        doomed = Doomed(self.folder.name)
        for path, kind, size in missing(self, protected, key=itemgetter(0)):
            reason = guard.refusal(path)
            if reason:
                doomed.kept.add(path, reason)
            else:
                doomed.add(kind, path, self.size(path, size))
        doomed.close()
        return doomed

    def close(self) -> None:
        self.folder.cleanup()

    def __enter__(self) -> Candidates:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Doomed:
    """The files to delete per kind, spilled to disk in path order: counts, bytes and the first
    paths of each kind known without reading them back; and the ones the guard keeps."""

    def __init__(self, folder: str) -> None:
        self.spilled = {kind: Spilled(os.path.join(folder, f"doomed-{kind}")) for kind in KINDS}
        self.first: dict[str, list[str]] = {kind: [] for kind in KINDS}
        self.bytes = 0
        self.kept = BoundedKept()

    def add(self, kind: int, path: str, size: int) -> None:
        name = KINDS[kind]
        self.spilled[name].append((path, size))
        self.bytes += size
        if len(self.first[name]) < SUMMARY_LIST_LIMIT:
            self.first[name].append(path)

    def close(self) -> None:
        for spilled in self.spilled.values():
            spilled.close()

    def counts(self) -> dict[str, int]:
        return {f"deleted_{kind}": len(self.spilled[kind]) for kind in KINDS}

    def __len__(self) -> int:
        return sum(len(spilled) for spilled in self.spilled.values())

    def files(self) -> Iterator[tuple[str, int, str]]:
        """(path, size, kind), content files first, manifest lists last."""
        for kind in KINDS:
            yield from ((path, size, kind) for path, size in self.spilled[kind])


def plan_expiry(
    table: Table, *, max_age: dt.timedelta, min_snapshots: int, guard: PathGuard
) -> tuple[list[int], Candidates | None, Doomed | None]:
    """(snapshot ids to expire, their candidates, the files only they reach), from the metadata
    as it is now; nothing is changed. Close the candidates (a ``with`` block) when done."""
    expired_ids = snapshots_to_expire(
        table.metadata, max_age=max_age, min_snapshots=min_snapshots, now=dt.datetime.now(dt.UTC)
    )
    if not expired_ids:
        return [], None, None
    expired = [table.metadata.snapshot_by_id(i) for i in expired_ids]
    remaining = [s for s in table.metadata.snapshots if s.snapshot_id not in set(expired_ids)]
    candidates = Candidates(expired, table.io)  # type: ignore[arg-type]
    return expired_ids, candidates, candidates.doomed(remaining, guard)


class IcebergExpireProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(EXPIRE_SNAPSHOTS, params)
        merged = {**IcebergExpireSnapshotsFactory.default_properties, **config, **params}
        self.max_age = parse_duration(merged["max-age"])
        self.min_snapshots = max(1, int(merged["min-snapshots"]))
        self.dry_run = bool(merged.get("dry-run", False))
        self.trash = trash_retention(merged)

    def run(self, context: ProcessContext) -> dict[str, Any]:
        table = iceberg_commit_target(context.table, context.guard)
        table.refresh()
        now = dt.datetime.now(dt.UTC)
        expired_ids = snapshots_to_expire(
            table.metadata, max_age=self.max_age, min_snapshots=self.min_snapshots, now=now
        )
        summary: dict[str, Any] = {
            "dry_run": self.dry_run,
            "max_age_seconds": int(self.max_age.total_seconds()),
            "min_snapshots": self.min_snapshots,
            "expired_snapshots": expired_ids,
        }
        if self.trash is not None:
            summary["trash_retention_seconds"] = int(self.trash.total_seconds())
        if not expired_ids:
            return {**summary, **_counts(), "kept_snapshots": len(table.metadata.snapshots)}
        expired = [table.metadata.snapshot_by_id(i) for i in expired_ids]
        context.report_progress(0, 3, f"reading the manifests of {counted(len(expired), 'expired snapshot')}")
        with Candidates(expired, table.io) as candidates:  # type: ignore[arg-type]
            context.check_cancelled()
            if self.dry_run:
                remaining = [s for s in table.metadata.snapshots if s.snapshot_id not in set(expired_ids)]
            else:
                context.report_progress(1, 3, "expiring snapshots")
                with self._trash_checked(context, table, candidates):
                    remaining = _expire(table, expired_ids)
            # A file a remaining snapshot reaches in any role is never deleted, nor one the guard keeps.
            doomed = candidates.doomed(remaining, context.guard)
            summary["kept_snapshots"] = len(remaining)
            summary.update(doomed.counts())
            summary["files"] = {kind: doomed.first[kind] for kind in KINDS}
            summary.update(kept_summary(doomed.kept))
            if self.dry_run:
                return summary
            storage = store_options(context.runtime, table)
            if self.trash is not None:
                context.report_progress(2, 3, "moving unreachable files to the trash")
                summary["trash"] = keep_in_trash(
                    context,
                    action=EXPIRE_SNAPSHOTS,
                    retention=self.trash,
                    root=normalise(table.location()),
                    files=[(normalise(path), size, kind) for path, size, kind in doomed.files()],
                    storage=storage,
                )
            else:
                context.report_progress(2, 3, "deleting unreachable files")
                summary["delete_failures"] = _delete_files(context.guard, storage, doomed)
        context.report_progress(3, 3, "done")
        return summary

    def _trash_checked(
        self, context: ProcessContext, table: Table, candidates: Candidates
    ) -> contextlib.AbstractContextManager:
        """With trash on: the manifest is written before the commit (a store refusing the trash
        fails the process with nothing changed) and removed again if the commit fails."""
        if self.trash is None:
            return contextlib.nullcontext()
        allowed = sorted(
            (
                (normalise(path), candidates.size(path, size), KINDS[kind])
                for path, kind, size in candidates
                if context.guard.allows(path)
            ),
            key=lambda file: KINDS.index(file[2]),
        )
        return trash_checked(
            context,
            action=EXPIRE_SNAPSHOTS,
            root=normalise(table.location()),
            files=allowed,
            storage=store_options(context.runtime, table),
        )


def _expire(table: Table, expired_ids: list[int]) -> list[Any]:
    """Commit the expiry; the snapshots that remain (concurrent commits included)."""
    table.maintenance.expire_snapshots().by_ids(expired_ids).commit()
    table.refresh()
    remaining = list(table.metadata.snapshots)
    still_there = {s.snapshot_id for s in remaining} & set(expired_ids)
    if still_there:
        raise RuntimeError(f"snapshots {sorted(still_there)} were not expired")
    return remaining


def _counts() -> dict[str, int]:
    return {f"deleted_{kind}": 0 for kind in KINDS}


#: Properties a run-now may override too.
RUN_PROPERTIES = {
    "max-age": described(AGE_SCHEMA, "Snapshots older than this expire (seconds or ISO 8601 duration)"),
    "min-snapshots": {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_COUNT,
        "description": "The newest snapshots always kept",
    },
}


class IcebergExpireSnapshotsFactory(ProcessFactory):
    name = "iceberg-expire-snapshots"
    description = "Expires old Iceberg snapshots and deletes the files only they reference"
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
        "max-age": DEFAULT_MAX_AGE_SECONDS,
        "min-snapshots": 1,
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
        return {"iceberg": {EXPIRE_SNAPSHOTS}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:
        return TriggerStrategy.from_properties(self.properties)

    def trigger(self, runtime: TableRuntime, action: str) -> TableProcess | None:
        table = iceberg_catalog_table(runtime)
        if table is None:
            return runtime.nothing_to_do(NO_CATALOG)
        process = IcebergExpireProcess({}, runtime.config)
        due = snapshots_to_expire(
            table.metadata,
            max_age=process.max_age,
            min_snapshots=process.min_snapshots,
            now=dt.datetime.now(dt.UTC),
        )
        if not due:
            return runtime.nothing_to_do(
                f"nothing to do: no snapshot is older than {process.max_age} beyond the newest "
                f"{process.min_snapshots} kept"
            )
        return process

    def recover(self, runtime: TableRuntime, record: ProcessRecord) -> TableProcess:
        return IcebergExpireProcess(dict(record.params), runtime.config)

    def preview(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> Preview | None:
        """The snapshots a run would expire now and the files (and bytes) it would delete, or
        move to the trash; read from the metadata, nothing changed."""
        spec_table = runtime.load()
        if getattr(spec_table, "pyiceberg_table", None) is None:
            return None
        try:
            table = iceberg_commit_target(spec_table)
        except InputError:  # no catalog: targets' one rule says so
            return Preview(notes=["nothing would run: expiring snapshots needs a catalog to commit"])
        process = IcebergExpireProcess(dict(params), runtime.config)
        expired_ids, candidates, doomed = plan_expiry(
            table, max_age=process.max_age, min_snapshots=process.min_snapshots, guard=runtime.guard()
        )
        with candidates or contextlib.nullcontext():
            return removal_preview(
                len(doomed) if doomed else 0,
                doomed.bytes if doomed else 0,
                {
                    "snapshots_to_expire": expired_ids,
                    "snapshots_removed": len(expired_ids),  # read by the health prediction
                    "kept_snapshots": len(table.metadata.snapshots) - len(expired_ids),
                    **(doomed.counts() if doomed else _counts()),
                    **(kept_summary(doomed.kept) if doomed else {}),
                },
                trash=process.trash,
                idle=None if expired_ids else "no snapshot is older than max-age beyond the kept ones",
            )


def _delete_files(guard: PathGuard, storage: StoreOptions | None, doomed: Doomed) -> int:
    """Delete the unreachable files (through the guard, which checks each path again); the
    number that could not be deleted. Content files first, manifest lists last: an interrupted
    run leaves metadata that still lists what remains (deleted files were unreachable anyway)."""
    failed = 0
    for path, _, _ in doomed.files():
        try:
            guard.delete(path, storage)
        except (OSError, OutsideTable):
            failed += 1
            logger.warning("could not delete %s", path, exc_info=True)
    return failed
