"""The trash folder of a table: what a maintenance process would have deleted, kept for a while.

Plain Python (no Django). A batch lives under ``<table>/.lakewarden-trash/<process id>/``: first its
manifest (``.lakewarden-manifest.json``: every file's original location, size and kind) is
written, then each file is moved there, keeping its path relative to the table
(``data/region=eu/x.parquet``; a file outside the table location goes under ``_outside/``). On a
local disk a move is a rename; on an object store (no rename there) it is a copy, checked by
size, then a delete of the original. Restoring moves every file back to its original location;
purging deletes the batch folder.

Locations are given in one comparable spelling: a plain absolute path on a local disk, the
canonical URI (``s3://bucket/key``) on an object store.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import posixpath
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import pyarrow.fs as pafs

from storage.io import StoreOptions, filesystem, is_local, join

logger = logging.getLogger(__name__)

TRASH_FOLDER = ".lakewarden-trash"
STAGING_FOLDER = ".lakewarden-staging"
#: Folders under a table location that hold Lakewarden's own files, never the table's.
PRIVATE_FOLDERS = (TRASH_FOLDER, STAGING_FOLDER)
MANIFEST_NAME = ".lakewarden-manifest.json"
OUTSIDE = "_outside"


class TrashConflict(Exception):
    """A restore that cannot put every file back as it was; nothing was moved."""


class TrashUnavailable(Exception):
    """The store refuses the trash folder (e.g. an S3 Tables-style table bucket, which takes only
    the table's own data and metadata keys); nothing was moved."""


@dataclass(frozen=True)
class TrashEntry:
    """One file of a batch: where it was (``original``), where it is in the batch (``trashed``,
    relative to the batch folder), its size in bytes and its kind (``data_files``, ``orphan``...)."""

    original: str
    trashed: str
    size: int
    kind: str


@dataclass
class MoveReport:
    """What a move (to the trash or back) did: files and bytes moved, per kind, and failures."""

    files: int = 0
    bytes: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def add(self, entry: TrashEntry) -> None:
        self.files += 1
        self.bytes += entry.size
        self.kinds[entry.kind] = self.kinds.get(entry.kind, 0) + 1


def batch_location(root: str, process_id: int) -> str:
    """``<root>/.lakewarden-trash/<process id>``."""
    return join(root, TRASH_FOLDER, str(int(process_id)))


def is_private(relative: str) -> bool:
    """True for a path (relative to a table location) inside Lakewarden's own folders."""
    return relative.split("/", 1)[0] in PRIVATE_FOLDERS


def plan_entries(root: str, files: Iterable[tuple[str, int, str]]) -> list[TrashEntry]:
    """Entries for (location, size, kind) triples, in the order given (moved and restored in
    that order): relative to ``root`` when under it, else under ``_outside/``. ``root`` and the
    locations must be spelt alike (the caller's one comparable spelling)."""
    entries, seen = [], set()
    for position, (location, size, kind) in enumerate(files):
        if location in seen:
            continue
        seen.add(location)
        prefix = root.rstrip("/") + "/"
        if location.startswith(prefix) and not is_private(location[len(prefix) :]):
            relative = location[len(prefix) :]
        else:
            relative = f"{OUTSIDE}/{position:06d}-{posixpath.basename(location)}"
        entries.append(TrashEntry(location, relative, int(size), kind))
    return entries


def write_manifest(batch: str, entries: list[TrashEntry], storage: StoreOptions | None, **facts) -> None:
    """Write (or replace) the batch manifest, before any file moves."""
    fs, path = filesystem(batch, storage)
    if is_local(batch):
        fs.create_dir(path, recursive=True)
    body = {
        "version": 1,
        "written": dt.datetime.now(dt.UTC).isoformat(),
        **facts,
        "entries": [asdict(e) for e in entries],
    }
    with fs.open_output_stream(f"{path}/{MANIFEST_NAME}") as out:
        out.write(json.dumps(body, indent=1).encode())


def prepare_batch(
    root: str, process_id: int, files: Iterable[tuple[str, int, str]], storage: StoreOptions | None, **facts
) -> tuple[str, list[TrashEntry]]:
    """Plan the batch of ``files`` and write its manifest (before anything moves): (the batch
    location, its entries). ``TrashUnavailable`` when the store refuses the manifest."""
    batch = batch_location(root, process_id)
    entries = plan_entries(root, files)
    try:
        write_manifest(batch, entries, storage, table=root, process=process_id, **facts)
    except OSError as error:
        raise TrashUnavailable(
            f"the store refuses the trash folder {batch} ({' '.join(str(error).split())[:300]}): "
            "set trash-retention to 0 for this table to delete instead"
        ) from error
    return batch, entries


def read_manifest(batch: str, storage: StoreOptions | None, *, digest: str | None = None) -> list[TrashEntry]:
    """The entries of a batch's manifest; ``FileNotFoundError`` when the batch has none. With
    ``digest`` (``manifest_digest`` as recorded when the manifest was written),
    ``TrashConflict`` when the manifest was changed since: it lives in the table folder, so
    whoever can write the table could make a restore move other files."""
    fs, path = filesystem(batch, storage)
    with fs.open_input_stream(f"{path}/{MANIFEST_NAME}") as handle:
        raw = handle.read()
    if digest is not None and hashlib.sha256(raw).hexdigest() != digest:
        raise TrashConflict(f"the manifest of {batch} was changed after Lakewarden wrote it")
    body = json.loads(raw)
    return [TrashEntry(**e) for e in body["entries"]]


def manifest_digest(batch: str, storage: StoreOptions | None) -> str:
    """The SHA-256 of the batch's manifest as it is now (recorded by the bookkeeping)."""
    fs, path = filesystem(batch, storage)
    with fs.open_input_stream(f"{path}/{MANIFEST_NAME}") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _size(fs: pafs.FileSystem, path: str) -> int | None:
    info = fs.get_file_info(path)
    return info.size if info.type == pafs.FileType.File else None


def _move(source: str, target: str, storage: StoreOptions | None, size: int) -> None:
    """A rename on a local disk; copy, size check, delete on an object store."""
    fs, src = filesystem(source, storage)
    target_fs, dst = filesystem(target, storage)
    if is_local(source) and is_local(target):
        target_fs.create_dir(posixpath.dirname(dst), recursive=True)
        fs.move(src, dst)
        return
    if type(fs) is not type(target_fs):
        raise OSError(f"cannot move {source} to {target}: different stores")
    fs.copy_file(src, dst)
    copied = _size(target_fs, dst)
    if copied != size:
        raise OSError(f"the copy of {source} at {target} has {copied} bytes, not {size}")
    fs.delete_file(src)


def move_to_trash(batch: str, entries: list[TrashEntry], storage: StoreOptions | None) -> MoveReport:
    """Move each entry's file into ``batch``. A file already gone is reported missing; one that
    cannot be moved is reported failed (and stays where it was)."""
    report = MoveReport()
    for entry in entries:
        fs, src = filesystem(entry.original, storage)
        size = _size(fs, src)
        if size is None:
            report.missing.append(entry.original)
            continue
        try:
            _move(entry.original, join(batch, entry.trashed), storage, size)
        except FileNotFoundError:
            report.missing.append(entry.original)
            continue
        except OSError:
            logger.warning("could not move %s to the trash", entry.original, exc_info=True)
            report.failed.append(entry.original)
            continue
        report.add(TrashEntry(entry.original, entry.trashed, size, entry.kind))
    return report


def restore_plan(
    batch: str, entries: list[TrashEntry], storage: StoreOptions | None
) -> list[tuple[TrashEntry, int]]:
    """The entries to move back, with their trashed copy's size; ``TrashConflict`` naming the
    files that cannot be put back as they were (a copy lost from the trash, another file now at
    the original location)."""
    todo, lost, taken = [], [], []
    for entry in entries:
        fs, original = filesystem(entry.original, storage)
        trash_fs, trashed = filesystem(join(batch, entry.trashed), storage)
        at_origin, in_trash = _size(fs, original), _size(trash_fs, trashed)
        if in_trash is None:
            if at_origin is None:
                lost.append(entry.original)
            continue  # already in place (a move that never happened, or an earlier restore)
        if at_origin is None:
            todo.append((entry, in_trash))
        elif at_origin != in_trash:
            taken.append(entry.original)
        # Same size at both ends: an interrupted copy-then-delete; the original stays.
    problems = []
    if lost:
        problems.append(f"{len(lost)} file(s) are neither in the trash nor in place: {', '.join(lost[:5])}")
    if taken:
        problems.append(f"{len(taken)} original location(s) hold another file now: {', '.join(taken[:5])}")
    if problems:
        raise TrashConflict("; ".join(problems))
    return todo


def restore_batch(batch: str, entries: list[TrashEntry], storage: StoreOptions | None) -> MoveReport:
    """Move every trashed file of the batch back (checked first by ``restore_plan``, so a conflict
    moves nothing), then delete the batch folder."""
    report = MoveReport()
    for entry, size in restore_plan(batch, entries, storage):
        _move(join(batch, entry.trashed), entry.original, storage, size)
        report.add(TrashEntry(entry.original, entry.trashed, size, entry.kind))
    purge_batch(batch, storage)
    return report


def purge_batch(batch: str, storage: StoreOptions | None) -> None:
    """Delete the batch folder and everything in it (nothing there is harmless)."""
    fs, path = filesystem(batch, storage)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return
    fs.delete_dir(path)
