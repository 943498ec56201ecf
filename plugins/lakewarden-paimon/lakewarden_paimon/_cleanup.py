"""Paimon snapshot expiry and orphan-file cleanup, planned from metadata before anything is deleted.

Expiry follows Paimon's ``ExpireSnapshotsImpl``: with ``snapshot.num-retained.min`` (``retain_min``),
``snapshot.num-retained.max`` (``retain_max``) and ``snapshot.time-retained`` (``older_than_ms``),
snapshots older than the newest ``retain_max`` always go; of the rest, those before the newest
``retain_min`` go while they are older than the time retained (the first younger one stops it);
at most ``expire_limit`` per run. The latest snapshot is never expired.

A data file is deleted when an expired snapshot's successor removed it (a DELETE entry in the
successor's delta manifest list), unless the first kept snapshot or a tag still lists it (a
compaction that only moves a file to another level removes and re-adds the same file). Manifest
lists and manifests go when no kept snapshot or tag names them. Snapshot files are deleted first,
oldest first, so a run that stops half-way leaves a readable table whose earliest snapshots are
the kept ones and, at worst, unreferenced files for ``clean-orphan-files``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lakewarden_paimon import _meta
from lakewarden_paimon._files import Files

#: Folders of a table that hold metadata orphan cleanup never touches (snapshots, schemas, tags,
#: branches, consumers) or does not understand yet (index and statistics files).
PROTECTED_FOLDERS = frozenset(
    {"snapshot", "schema", "tag", "branch", "consumer", "service", "index", "statistics", "changelog"}
)


@dataclass
class ExpirePlan:
    snapshots: list[int] = field(default_factory=list)
    data_files: dict[str, int] = field(default_factory=dict)  # path -> bytes
    metadata_files: dict[str, int] = field(default_factory=dict)
    kept: list[int] = field(default_factory=list)


def expire_range(
    ids: list[int],
    times_ms: Callable[[int], int],
    *,
    retain_min: int,
    retain_max: int,
    older_than_ms: int,
    expire_limit: int,
) -> list[int]:
    """The snapshot ids Paimon's rules expire, oldest first."""
    if not ids or retain_min < 1 or retain_max < retain_min:
        raise ValueError("retain-min must be at least 1 and retain-max at least retain-min")
    earliest, latest = ids[0], ids[-1]
    lowest = max(latest - retain_max + 1, earliest)
    end = min(latest - retain_min + 1, earliest + expire_limit)
    stop = end
    for snapshot_id in range(lowest, end):
        if snapshot_id in ids and older_than_ms <= times_ms(snapshot_id):
            stop = snapshot_id
            break
    return [i for i in ids if i < stop]


def _names(store: Any, snapshot: Any) -> set[str]:
    """Manifest lists and manifests a snapshot names (file names in ``manifest/``)."""
    names = set(_meta.manifest_list_names(snapshot))
    if snapshot.index_manifest:
        names.add(snapshot.index_manifest)
    for list_name in _meta.manifest_list_names(snapshot):
        names.update(m.file_name for m in _meta.manifests(store, list_name))
    return names


def _live_paths(store: Any, snapshot: Any) -> set[str]:
    return {_meta.data_file_path(store, e) for e in _meta.live_entries(store, snapshot)}


def plan_expire(store: Any, files: Files, expired: list[int]) -> ExpirePlan:
    """What expiring ``expired`` (oldest first, a prefix of the snapshots) deletes."""
    ids = _meta.snapshot_ids(store)
    kept = [i for i in ids if i not in set(expired)]
    plan = ExpirePlan(snapshots=list(expired), kept=kept)
    if not expired:
        return plan
    tags = list(_meta.tag_snapshots(store).values())
    needed = {files.path(p) for p in _live_paths(store, _meta.load_snapshot(store, kept[0]))}
    for tag in tags:
        needed |= {files.path(p) for p in _live_paths(store, tag)}
    for snapshot_id in [*expired[1:], kept[0]]:
        delta = _meta.load_snapshot(store, snapshot_id).delta_manifest_list
        for entry in _meta.entries(store, [delta]):
            location = _meta.data_file_path(store, entry)
            if entry.kind == _meta.DELETE and files.path(location) not in needed:
                plan.data_files[location] = files.size(location)
    used: set[str] = set()
    for snapshot in [*(_meta.load_snapshot(store, i) for i in kept), *tags]:
        used |= _names(store, snapshot)
    for snapshot_id in expired:
        for name in _names(store, _meta.load_snapshot(store, snapshot_id)) - used:
            location = files.child("manifest", name)
            plan.metadata_files[location] = files.size(location)
    return plan


def execute_expire(
    store: Any, files: Files, plan: ExpirePlan, check: Callable[[], None] = lambda: None
) -> int:
    """Delete what ``plan`` names: snapshot files oldest first, then data and manifest files."""
    for snapshot_id in plan.snapshots:
        check()
        files.remove(files.child("snapshot", f"snapshot-{snapshot_id}"))
    if plan.kept:
        files.write_text(files.child("snapshot", "EARLIEST"), str(plan.kept[0]))
    deleted = 0
    for location in [*plan.data_files, *plan.metadata_files]:
        check()
        deleted += files.remove(location)
    return deleted


def referenced_files(store: Any, files: Files) -> set[str]:
    """Every file any snapshot or tag names: manifest lists, manifests and data files (those its
    entries add or remove, with their extra files), as file-system paths."""
    snapshots = [_meta.load_snapshot(store, i) for i in _meta.snapshot_ids(store)]
    used: set[str] = set()
    for snapshot in [*snapshots, *_meta.tag_snapshots(store).values()]:
        used |= {files.path(files.child("manifest", name)) for name in _names(store, snapshot)}
        for entry in _meta.entries(store, _meta.manifest_list_names(snapshot)):
            path = files.path(_meta.data_file_path(store, entry))
            used.add(path)
            folder = path.rsplit("/", 1)[0]
            used.update(f"{folder}/{extra}" for extra in entry.file.extra_files or ())
    return used


def plan_orphans(store: Any, files: Files, older_than_ms: int) -> dict[str, int]:
    """Files under the table's manifest and data folders that nothing references and that were
    last modified before ``older_than_ms`` (a writer's files are unreferenced until it commits)."""
    used = referenced_files(store, files)
    orphans: dict[str, int] = {}
    for top in sorted(files.folders()):
        if top in PROTECTED_FOLDERS or top.startswith("."):
            continue
        for info in files.walk(files.child(top)):
            if "/." in info.path[len(files.root) :]:
                continue  # hidden folders: a process's staging
            modified_ms = info.mtime.timestamp() * 1000 if info.mtime is not None else older_than_ms
            if info.path not in used and modified_ms < older_than_ms:
                orphans[files.location_of(info.path)] = int(info.size or 0)
    return orphans


def now_ms() -> int:
    return int(time.time() * 1000)
