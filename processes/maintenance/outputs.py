"""Where a rewrite writes its new files, and how they are taken back when its commit does not land.

Local tables (a path or ``file:`` URI): ``StagingOutputs``. Groups are written into the process's
staging folder under the table location and renamed into the data folder just before the commit
(``publish``: cheap and atomic on one filesystem); the executor deletes the staging folder when
the process ends.

Object stores (``s3://``...): ``ObjectStoreOutputs``. There is no rename on an object store, so
nothing is staged: each group is written straight under the table's data prefix, next to the
group's first input file, under a name unique to the attempt
(``lakewarden-p<process>-<uuid>-g<group>-<part>.parquet``). No reader sees such an object until a
commit names it. When the commit does not land (a failure, a conflict, a cancel), every object
under those prefixes whose name starts with the attempt's prefix is deleted, which takes back the
complete files of finished groups and the partial ones of a task that failed midway. A worker
killed mid-rewrite cannot clean up: the next rewrite of the table (its automatic retry, say) sweeps
them (``sweep_leftovers``: objects of a process that has ended, which the table does not
reference), and orphan cleanup (after its minimum age) is the safety net.

Both write only where the table's path guard allows (``storage.io.guard``): a group whose first
input lives outside the table's location (a ``../other/`` path in a hostile Delta log, an Iceberg
file added from elsewhere), inside a nested table or behind a symlink is written under the table's
own ``data/`` folder instead (``relocated`` names such files: their log path is relative to the
table, not to the input's folder).
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

import pyarrow.fs as pafs

from processes.maintenance import listing
from processes.maintenance.spill import Spilled
from storage.io import StoreOptions, filesystem, is_local, is_object_store, join
from storage.io import local_path as io_local_path
from storage.io.guard import PathGuard

logger = logging.getLogger(__name__)


def local_path(path: str) -> str:
    """The filesystem path of a local path or ``file:`` URI (object stores are refused with
    ``PathNotAllowed``, a ``ValueError``). Like pyiceberg's file IO, the URI path is taken
    literally (not percent-decoded)."""
    return str(io_local_path(path, percent_decoded=False))


def publish(staged: Path, directory: str) -> str:
    """Move a staged file into the table's data folder under a fresh name keeping its extension
    (``.parquet``, ``.orc``, ``.puffin``); returns its path. A rename within the table location:
    cheap, and atomic on one filesystem."""
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(directory, f"{uuid.uuid4()}-compacted{Path(staged).suffix or '.parquet'}")
    os.replace(staged, target)
    return target


def unpublish(paths: Iterable[str]) -> None:
    """Delete published files that no commit references (after a failed commit)."""
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError:
            logger.warning("could not delete unreferenced file %s", path, exc_info=True)


class OutputGroup(Protocol):
    """What ``target`` reads of a group (a ``RewriteGroup``, or one file's worth of deletes): its
    index and its input files (the new ones go beside the first)."""

    @property
    def index(self) -> int: ...

    @property
    def paths(self) -> list[str]: ...


class _Placement:
    """Where new files go: beside an input when the guard allows that folder, else the table's
    own ``data/`` folder (checked too: ``OutsideTable`` when even that is refused)."""

    guard: PathGuard | None
    relocated: set[str]

    def _placed(self, directory: str) -> str:
        if self.guard is None or self.guard.allows(directory):
            return directory
        fallback = join(self.guard.location, "data")
        self.guard.check(fallback, "write new files in")
        return fallback


class StagingOutputs(_Placement):
    """Local tables: stage, then rename into place (see the module docstring)."""

    in_place = False

    def __init__(self, staging: Path, guard: PathGuard | None = None) -> None:
        self.staging = Path(staging)
        self.storage: StoreOptions | None = None
        self.published: list[str] = []
        self.keep = False
        self.guard = guard
        self.relocated = set()

    def prepare(self) -> None:
        self.staging.mkdir(parents=True, exist_ok=True)

    def target(self, group: OutputGroup) -> tuple[str, str]:
        """(folder or prefix the group's task writes into, file name prefix)."""
        return str(self.staging / f"group-{group.index:05d}"), ""

    def publish(self, written: str, beside: str) -> str:
        """Move a staged file next to ``beside`` (an input file's path as the table spells it) and
        return its path, spelt the same way (``file://`` URIs stay URIs)."""
        beside_directory = os.path.dirname(local_path(beside))
        directory = self._placed(beside_directory)
        target = publish(Path(written), directory)
        self.published.append(target)
        spelt = ("file://" + target) if beside.startswith("file:") else target
        if directory != beside_directory:
            self.relocated.add(spelt)
        return spelt

    def discard(self) -> None:
        """Delete what this attempt wrote: published files and the staging folder (unless the
        commit landed or its outcome is unknown: ``keep``)."""
        if not self.keep:
            unpublish(self.published)
        self.published = []
        shutil.rmtree(self.staging, ignore_errors=True)

    def finish(self) -> None:
        """After a commit: the staging folder goes, the published files are the table's now."""
        self.published = []
        shutil.rmtree(self.staging, ignore_errors=True)


class ObjectStoreOutputs(_Placement):
    """Object stores: written in place under unique names, never renamed (module docstring)."""

    in_place = True

    def __init__(self, storage: StoreOptions | None, process_id: int, guard: PathGuard | None = None) -> None:
        self.storage = storage
        self.prefix = f"lakewarden-p{process_id}-{uuid.uuid4().hex}-"
        self.directories: set[str] = set()
        self.keep = False
        self.guard = guard
        self.relocated = set()

    def prepare(self) -> None:
        pass

    def target(self, group: OutputGroup) -> tuple[str, str]:
        directory = self._placed(posixpath.dirname(group.paths[0]))
        self.directories.add(directory)
        return directory, f"{self.prefix}g{group.index:05d}-"

    def publish(self, written: str, beside: str) -> str:
        if posixpath.dirname(written) != posixpath.dirname(beside):
            self.relocated.add(written)
        return written  # already where the commit names it

    def discard(self) -> None:
        """Delete every object of this attempt (complete or partial), unless ``keep``."""
        if self.keep:
            return
        for directory in sorted(self.directories):
            for path in self.objects(directory):
                self._delete(directory, path)
        self.directories = set()

    def finish(self) -> None:
        self.directories = set()

    def objects(self, directory: str) -> list[str]:
        """This attempt's objects under ``directory`` (file-system paths, from a listing)."""
        fs, root = filesystem(directory, self.storage)
        try:
            infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        except OSError:
            logger.warning("could not list %s to delete a failed rewrite's files", directory, exc_info=True)
            return []
        return [
            info.path
            for info in infos
            if info.type == pafs.FileType.File and info.base_name.startswith(self.prefix)
        ]

    def _delete(self, directory: str, fs_path: str) -> None:
        fs, _ = filesystem(directory, self.storage)
        try:
            fs.delete_file(fs_path)
        except FileNotFoundError:
            pass
        except OSError:
            logger.warning("could not delete unreferenced object %s", fs_path, exc_info=True)


RewriteOutputs = StagingOutputs | ObjectStoreOutputs


def rewrite_outputs(
    location: str,
    staging: Path,
    storage: StoreOptions | None,
    process_id: int,
    guard: PathGuard | None = None,
) -> RewriteOutputs:
    """The outputs of one rewrite attempt on a table at ``location``, placed where ``guard`` (the
    process's ``context.guard``) allows."""
    if is_local(location):
        return StagingOutputs(staging, guard)
    if not is_object_store(location):
        raise ValueError(f"cannot rewrite a table at {location}: unsupported location")
    return ObjectStoreOutputs(storage, process_id, guard)


_LEFTOVER = re.compile(r"^lakewarden-p(\d+)-[0-9a-f]{32}-")


def sweep_leftovers(
    prefix: str,
    storage: StoreOptions | None,
    *,
    current: int,
    finished: Callable[[Iterable[int]], set[int]],
    referenced: Callable[[], Iterable[str]],
    comparable: Callable[[str], str] = lambda location: location,
    guard: PathGuard | None = None,
) -> list[str]:
    """Delete the objects under ``prefix`` (the table's whole location; Lakewarden's own folders
    and nested tables skipped) that an earlier rewrite wrote in place and never committed (a
    worker killed before its cleanup): named ``lakewarden-p<id>-...`` for a process ``finished``
    says has ended (so no writer of this installation is about to commit them), and not among
    ``referenced()`` (every file the table's metadata names, any order, repeats allowed, in
    ``comparable`` spelling). Compared in bounded memory (``listing.scan``: both sides sorted on
    disk and merged, never a set of paths). Only what ``guard`` allows is deleted. Call it
    holding the table's lock. Returns the locations deleted (the leftovers, not the table)."""
    if not is_object_store(prefix):
        return []
    root = listing.normalise(prefix)
    ended = _ended_leftovers(root, storage, current, finished, guard)
    if ended is None:
        return []
    leftovers, folder = ended
    with folder:
        references = ((comparable(location), 0) for location in referenced())
        guard = guard or PathGuard.build(root, roots=[root])
        with listing.scan(leftovers, references, _unreferenced, guard=guard) as found:
            deleted = []
            for stored in found.removable:
                fs, fs_path = filesystem(stored.location, storage)
                try:
                    fs.delete_file(fs_path)
                except FileNotFoundError:
                    pass
                deleted.append(stored.location)
    if deleted:
        logger.warning(
            "removed %s object(s) of ended rewrites under %s: %s", len(deleted), prefix, deleted[:5]
        )
    return deleted


def _unreferenced(stored: listing.StoredFile, tag: object) -> str | None:
    return listing.REMOVE if tag is None else None


def _ended_leftovers(
    root: str,
    storage: StoreOptions | None,
    current: int,
    finished: Callable[[Iterable[int]], set[int]],
    guard: PathGuard | None,
) -> tuple[Iterator[listing.StoredFile], tempfile.TemporaryDirectory] | None:
    """(the leftovers of ended processes under ``root``, read back from disk; the temporary
    folder holding them), or None when there are none."""
    folder = tempfile.TemporaryDirectory(prefix="lakewarden-sweep-")
    found = Spilled(f"{folder.name}/leftovers")
    owners: set[int] = set()
    for stored in listing.stored_files(root, storage, listing.private_or_nested(root, guard)):
        match = _LEFTOVER.match(stored.location.rsplit("/", 1)[-1])
        if match and int(match.group(1)) != current:
            owners.add(int(match.group(1)))
            found.append((int(match.group(1)), stored))
    ended = finished(owners) if owners else set()
    if not ended:
        folder.cleanup()
        return None
    return (stored for owner, stored in found if owner in ended), folder
