"""Iceberg ``expire-snapshots``: drop old snapshots, then the files only they reached.

Kept: every snapshot younger than ``max-age``, the ``min-snapshots`` newest snapshots of every
branch's history, and every branch head and tag (pyiceberg refuses to expire those anyway). The
rest are removed from the metadata with pyiceberg's ``expire_snapshots``. Only after that commit
are files deleted, and only those reached from an expired snapshot (its manifest list, its
manifests, the data and delete files in them) that no remaining snapshot reaches: the remaining set
is computed from the refreshed metadata, so a snapshot committed concurrently protects its files
too. ``dry-run`` computes the same lists and changes nothing.

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
from typing import TYPE_CHECKING, Any

from processes.maintenance.errors import InputError
from processes.maintenance.iceberg.orphans import normalise
from processes.maintenance.retention import (
    AGE_SCHEMA,
    TRASH_RETENTION,
    TRASH_RETENTION_SCHEMA,
    described,
    keep_in_trash,
    parse_duration,
    removal_preview,
    summary_list,
    trash_checked,
    trash_retention,
)
from processes.maintenance.schemas import DRY_RUN, INTERVAL, MAX_COUNT, PARALLELISM, with_defaults
from processes.maintenance.targets import iceberg_catalog_table, iceberg_commit_target, store_options
from processes.plugin import (
    EXPIRE_SNAPSHOTS,
    Preview,
    ProcessContext,
    ProcessFactory,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.io.guard import KeptFiles, OutsideTable, PathGuard, kept_summary

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from processes.runtime import TableRuntime
    from storage.io import StoreOptions

logger = logging.getLogger(__name__)

DEFAULT_MAX_AGE_SECONDS = 5 * 24 * 3600


class _ManifestCache:
    """Manifest entries read once per run, whichever snapshots share the manifest."""

    def __init__(self, io: FileIO) -> None:
        self.io = io
        self._entries: dict[str, list[tuple[int, str, int]]] = {}
        #: Sizes in bytes known from the metadata (content files, manifests).
        self.sizes: dict[str, int] = {}

    def manifests(self, snapshot: Snapshot) -> list[Any]:
        found = list(snapshot.manifests(self.io))
        self.sizes.update((m.manifest_path, int(m.manifest_length)) for m in found)
        return found

    def entries(self, manifest: Any) -> list[tuple[int, str, int]]:
        """(status, file path, content) of every entry, deleted ones included."""
        path = manifest.manifest_path
        if path not in self._entries:
            entries = list(manifest.fetch_manifest_entry(self.io, discard_deleted=False))
            self.sizes.update((e.data_file.file_path, int(e.data_file.file_size_in_bytes)) for e in entries)
            self._entries[path] = [
                (int(e.status), e.data_file.file_path, int(e.data_file.content)) for e in entries
            ]
        return self._entries[path]

    def size(self, path: str) -> int:
        """The file's size: from the metadata, else (manifest lists) from the file itself."""
        if path not in self.sizes:
            try:
                self.sizes[path] = len(self.io.new_input(path))
            except OSError:
                self.sizes[path] = 0
        return self.sizes[path]


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


def reachable_files(snapshots: list[Any], cache: _ManifestCache, *, live_only: bool) -> dict[str, set[str]]:
    """Paths reached from ``snapshots``: manifest lists, manifests, content files (live entries
    only when ``live_only``: a deleted entry is a file the snapshot no longer needs)."""
    found: dict[str, set[str]] = {
        "manifest_lists": set(),
        "manifests": set(),
        "data_files": set(),
        "delete_files": set(),
    }
    for snapshot in snapshots:
        if snapshot.manifest_list:
            found["manifest_lists"].add(snapshot.manifest_list)
        for manifest in cache.manifests(snapshot):
            found["manifests"].add(manifest.manifest_path)
            for status, path, content in cache.entries(manifest):
                if live_only and status == 2:  # DELETED
                    continue
                found["data_files" if content == 0 else "delete_files"].add(path)
    return found


KINDS = ("data_files", "delete_files", "manifests", "manifest_lists")


def doomed_files(
    candidates: dict[str, set[str]], remaining: list[Any], cache: _ManifestCache
) -> dict[str, list[str]]:
    """The ``candidates`` no ``remaining`` snapshot reaches, in any role, per kind."""
    keep = reachable_files(remaining, cache, live_only=True)
    protected = set().union(*keep.values())
    return {kind: sorted(paths - protected) for kind, paths in candidates.items()}


def guarded(doomed: dict[str, list[str]], guard: PathGuard) -> tuple[dict[str, list[str]], KeptFiles]:
    """The doomed files the guard lets this table delete, per kind, and the rest (kept where they
    are: another table's files, files outside the table's location or the allowed roots)."""
    kept = KeptFiles()
    return {kind: guard.split(paths, kept)[0] for kind, paths in doomed.items()}, kept


def plan_expiry(
    table: Table, *, max_age: dt.timedelta, min_snapshots: int
) -> tuple[list[int], dict, _ManifestCache]:
    """(snapshot ids to expire, the files only they reach per kind, the manifest cache), from the
    metadata as it is now; nothing is changed."""
    expired_ids = snapshots_to_expire(
        table.metadata, max_age=max_age, min_snapshots=min_snapshots, now=dt.datetime.now(dt.UTC)
    )
    cache = _ManifestCache(table.io)
    if not expired_ids:
        return [], {kind: [] for kind in KINDS}, cache
    expired = [table.metadata.snapshot_by_id(i) for i in expired_ids]
    remaining = [s for s in table.metadata.snapshots if s.snapshot_id not in set(expired_ids)]
    candidates = reachable_files(expired, cache, live_only=False)
    return expired_ids, doomed_files(candidates, remaining, cache), cache


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
            return {**summary, **_counts({}), "kept_snapshots": len(table.metadata.snapshots)}
        expired = [table.metadata.snapshot_by_id(i) for i in expired_ids]
        cache = _ManifestCache(table.io)
        context.report_progress(0, 3, f"reading the manifests of {len(expired)} expired snapshots")
        candidates = reachable_files(expired, cache, live_only=False)
        context.check_cancelled()

        if self.dry_run:
            remaining = [s for s in table.metadata.snapshots if s.snapshot_id not in set(expired_ids)]
        else:
            context.report_progress(1, 3, "expiring snapshots")
            with self._trash_checked(context, table, candidates, cache):
                remaining = _expire(table, expired_ids)
        # A file a remaining snapshot reaches in any role is never deleted, nor one the guard keeps.
        doomed, kept = guarded(doomed_files(candidates, remaining, cache), context.guard)
        summary["kept_snapshots"] = len(remaining)
        summary.update(_counts(doomed))
        summary["files"] = {kind: summary_list(paths) for kind, paths in doomed.items()}
        summary.update(kept_summary(kept))
        if self.dry_run:
            return summary

        if self.trash is not None:
            context.report_progress(2, 3, "moving unreachable files to the trash")
            summary["trash"] = self._keep_in_trash(context, table, doomed, cache)
        else:
            context.report_progress(2, 3, "deleting unreachable files")
            storage = store_options(context.runtime, table)
            summary["delete_failures"] = _delete_files(context.guard, storage, doomed)
        context.report_progress(3, 3, "done")
        return summary

    def _trash_checked(
        self, context: ProcessContext, table: Table, candidates: dict, cache: _ManifestCache
    ) -> contextlib.AbstractContextManager:
        """With trash on: the manifest is written before the commit (a store refusing the trash
        fails the process with nothing changed) and removed again if the commit fails."""
        if self.trash is None:
            return contextlib.nullcontext()
        allowed, _ = guarded({kind: sorted(candidates[kind]) for kind in KINDS}, context.guard)
        return trash_checked(
            context,
            action=EXPIRE_SNAPSHOTS,
            root=normalise(table.location()),
            files=[(normalise(p), cache.sizes.get(p, 0), kind) for kind in KINDS for p in allowed[kind]],
            storage=store_options(context.runtime, table),
        )

    def _keep_in_trash(
        self, context: ProcessContext, table: Table, doomed: dict, cache: _ManifestCache
    ) -> dict:
        files = [(normalise(path), cache.size(path), kind) for kind in KINDS for path in doomed[kind]]
        assert self.trash is not None
        return keep_in_trash(
            context,
            action=EXPIRE_SNAPSHOTS,
            retention=self.trash,
            root=normalise(table.location()),
            files=files,
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


def _counts(doomed: dict[str, Any]) -> dict[str, int]:
    return {f"deleted_{kind}": len(doomed.get(kind, ())) for kind in KINDS}


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
            return None  # no catalog to commit through
        process = IcebergExpireProcess({}, runtime.config)
        due = snapshots_to_expire(
            table.metadata,
            max_age=process.max_age,
            min_snapshots=process.min_snapshots,
            now=dt.datetime.now(dt.UTC),
        )
        return process if due else None

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
        expired_ids, doomed, cache = plan_expiry(
            table, max_age=process.max_age, min_snapshots=process.min_snapshots
        )
        doomed, kept = guarded(doomed, runtime.guard())
        files = [path for kind in KINDS for path in doomed[kind]]
        return removal_preview(
            len(files),
            sum(cache.size(path) for path in files),
            {
                "snapshots_to_expire": expired_ids,
                "snapshots_removed": len(expired_ids),  # read by the health prediction
                "kept_snapshots": len(table.metadata.snapshots) - len(expired_ids),
                **_counts(doomed),
                **kept_summary(kept),
            },
            trash=process.trash,
            idle=None if expired_ids else "no snapshot is older than max-age beyond the kept ones",
        )


def _delete_files(guard: PathGuard, storage: StoreOptions | None, doomed: dict[str, list[str]]) -> int:
    """Delete the unreachable files (through the guard, which checks each path again); the
    number that could not be deleted. Content files first, manifest lists last: an interrupted
    run leaves metadata that still lists what remains (deleted files were unreachable anyway)."""
    failed = 0
    for kind in ("data_files", "delete_files", "manifests", "manifest_lists"):
        for path in doomed[kind]:
            try:
                guard.delete(path, storage)
            except (OSError, OutsideTable):
                failed += 1
                logger.warning("could not delete %s", path, exc_info=True)
    return failed
