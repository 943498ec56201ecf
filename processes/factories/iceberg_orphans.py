"""Iceberg ``clean-orphan-files``: delete files under the table location that nothing references.

Referenced: the current metadata file and every metadata file of the metadata log,
``version-hint.text``, the statistics and partition-statistics files, and for every snapshot its
manifest list, its manifests and every data and delete file they list (deleted entries included:
a file a manifest still names is never an orphan). Files younger than ``min-age`` (default 3 days:
a writer may have written a file and not committed it yet) and everything under the
``.lakewarden-staging`` folder (active processes' staging, cleaned by the executor) are left alone.
``dry-run`` lists the orphans without deleting them.

``min-age`` is seconds or an ISO 8601 duration (``P3D``), and never less than an hour.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import posixpath
from collections.abc import Iterator
from typing import Any

from processes.factories.retention import AGE_SCHEMA, parse_duration, summary_list
from processes.plugin import (
    CLEAN_ORPHAN_FILES,
    ProcessContext,
    ProcessFactory,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.io import is_local, local_path

logger = logging.getLogger(__name__)

STAGING_FOLDER = ".lakewarden-staging"
DEFAULT_MIN_AGE_SECONDS = 3 * 24 * 3600
MIN_AGE_FLOOR = dt.timedelta(hours=1)


def normalise(path: str) -> str:
    """A comparable local path for a plain path or a ``file:`` URI (``file:/x``, ``file:///x``),
    taken literally as pyiceberg's file IO does (no percent-decoding)."""
    if not is_local(path):
        raise ValueError(f"{path} is not on a local filesystem; orphan cleanup needs local table storage")
    return posixpath.normpath(str(local_path(path, percent_decoded=False)))


def referenced_paths(table: Any, context: ProcessContext | None = None) -> set[str]:
    """Every path the table's metadata references (see the module docstring)."""
    metadata = table.metadata
    io = table.io
    found: set[str] = set()
    if table.metadata_location:
        found.add(table.metadata_location)
    found.update(entry.metadata_file for entry in metadata.metadata_log)
    found.update(f.statistics_path for f in metadata.statistics)
    found.update(f.statistics_path for f in metadata.partition_statistics)
    seen_manifests: set[str] = set()
    for position, snapshot in enumerate(metadata.snapshots):
        if context is not None:
            context.check_cancelled()
            context.report_progress(position, len(metadata.snapshots) + 1, "reading snapshot manifests")
        if snapshot.manifest_list:
            found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            found.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                found.add(entry.data_file.file_path)
    return {normalise(p) for p in found}


def walk_files(root: str) -> Iterator[os.DirEntry]:
    """Files under ``root``, the staging folder excluded, symlinks not followed."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if not (folder == root and entry.name == STAGING_FOLDER):
                    stack.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                yield entry


def find_orphans(
    table: Any, *, min_age: dt.timedelta, now: dt.datetime, context=None
) -> tuple[list[str], int, int]:
    """(orphan paths old enough to delete, their bytes, unreferenced files still too young)."""
    root = normalise(table.location())
    referenced = referenced_paths(table, context)
    root_hint = posixpath.join(root, "metadata", "version-hint.text")
    referenced.add(root_hint)
    cutoff = (now - min_age).timestamp()
    orphans, size, young = [], 0, 0
    for entry in walk_files(root):
        path = posixpath.normpath(entry.path)
        if path in referenced:
            continue
        stat = entry.stat(follow_symlinks=False)
        if stat.st_mtime > cutoff:
            young += 1
            continue
        orphans.append(path)
        size += stat.st_size
    return orphans, size, young


class IcebergOrphanFilesProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(CLEAN_ORPHAN_FILES, params)
        merged = {**IcebergOrphanFilesFactory.default_properties, **config, **params}
        self.min_age = max(parse_duration(merged["min-age"]), MIN_AGE_FLOOR)
        self.dry_run = bool(merged.get("dry-run", False))

    def run(self, context: ProcessContext) -> dict[str, Any]:
        table = context.table.pyiceberg_table
        if hasattr(table, "refresh"):
            try:
                table.refresh()
            except NotImplementedError:  # a table opened from its metadata file is current already
                pass
        now = dt.datetime.now(dt.UTC)
        orphans, size, young = find_orphans(table, min_age=self.min_age, now=now, context=context)
        context.check_cancelled()
        summary: dict[str, Any] = {
            "dry_run": self.dry_run,
            "min_age_seconds": int(self.min_age.total_seconds()),
            "orphan_files": len(orphans),
            "orphan_bytes": size,
            "too_young_to_delete": young,
            "files": summary_list(orphans),
        }
        if self.dry_run:
            return summary
        deleted = failed = 0
        for position, path in enumerate(orphans):
            if position % 100 == 0:
                context.check_cancelled()
                context.report_progress(position, len(orphans), "deleting orphan files")
            try:
                os.remove(path)
                deleted += 1
            except FileNotFoundError:
                pass
            except OSError:
                failed += 1
                logger.warning("could not delete orphan file %s", path, exc_info=True)
        context.report_progress(len(orphans), len(orphans), "done")
        return {**summary, "deleted_files": deleted, "delete_failures": failed}


class IcebergOrphanFilesFactory(ProcessFactory):
    name = "iceberg-clean-orphan-files"
    description = "Deletes files under an Iceberg table's location that no metadata references"
    properties_schema = {
        "type": "object",
        "properties": {
            "interval": {"type": "integer", "minimum": 60},
            "parallelism": {"type": "integer", "minimum": 1},
            "min-age": AGE_SCHEMA,
        },
    }
    default_properties = {"interval": 7 * 86400, "parallelism": 1, "min-age": DEFAULT_MIN_AGE_SECONDS}
    params_schema = {
        "type": "object",
        "properties": {"dry-run": {"type": "boolean"}, "min-age": AGE_SCHEMA},
        "additionalProperties": False,
    }

    def supported_actions(self) -> dict[str, set[str]]:
        return {"iceberg": {CLEAN_ORPHAN_FILES}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:
        return TriggerStrategy.from_properties(self.properties)

    def trigger(self, runtime: Any, action: str) -> TableProcess | None:
        # Listing the whole location is the work itself: the interval is the only gate.
        location = runtime.location
        if "://" in location and not location.startswith("file:"):
            return None
        return IcebergOrphanFilesProcess({}, runtime.config)

    def recover(self, runtime: Any, record: ProcessRecord) -> TableProcess:
        return IcebergOrphanFilesProcess(dict(record.params), runtime.config)
