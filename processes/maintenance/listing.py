"""The files under a table location that its metadata no longer needs, found in bounded memory.

What orphan cleanup, vacuum and the sweep of a killed rewrite's leftovers share: list the whole
location (``stored_files``: a directory walk locally, the store's listing a page at a time on S3), join
the listing with what the metadata references (a stream of ``(location, tag)`` pairs: the tag says
how it is referenced, live or tombstoned), and let the action ``decide`` what each listed file is:
to remove, too young, or left alone. Both sides are written as sorted runs to a temporary folder
(``TMPDIR``) and merged (``processes.maintenance.spill``), never held in Python sets; the files to
remove are spilled there too and read back to remove them, and what the path guard refuses is
counted with its first paths (``BoundedKept``). Peak memory stays flat with the number of objects
(docs/operating/workers.md gives the figures); progress reports the objects seen, their bytes and
the candidates while it runs.

Locations are compared in one spelling (``normalise``): a local path as pyiceberg and the Delta
log name it (no percent-decoding, ``..`` resolved), the canonical URI of an object (``s3a://`` as
``s3://``, no trailing slash).
"""

from __future__ import annotations

import itertools
import logging
import os
import posixpath
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

import pyarrow.fs as pafs

from processes.maintenance.retention import SUMMARY_LIST_LIMIT
from processes.maintenance.spill import SortedRuns, Spilled, joined
from processes.plugin import ProcessContext
from storage.io import PathNotAllowed, StoreOptions, filesystem, is_local, is_object_store, local_path
from storage.io import normalise as normalise_location
from storage.io import uri as location_uri
from storage.io.guard import KeptFiles, OutsideTable, PathGuard
from storage.io.objects import list_pages
from storage.trash import PRIVATE_FOLDERS

logger = logging.getLogger(__name__)

#: What ``decide`` answers for a listed file: remove it, or count it as too young to remove.
REMOVE, YOUNG = "remove", "young"


def normalise(path: str) -> str:
    """A comparable spelling of a location: a local path for a plain path or ``file:`` URI, taken
    literally as pyiceberg's file IO does (no percent-decoding); the canonical URI of an object
    (``s3a://b/k`` -> ``s3://b/k``)."""
    if path[:1] == "/" and "://" not in path and "\x00" not in path and path == path.strip():
        return posixpath.normpath(path)  # a plain absolute path: what the general case gives, 4x faster
    if is_local(path):
        return posixpath.normpath(str(local_path(path, percent_decoded=False)))
    if is_object_store(path):
        return normalise_location(path)
    raise ValueError(f"{path}: only local paths and object stores can be listed")


def comparable(path: str) -> str:
    """``normalise``, or the path as spelt when it cannot be named canonically (an odd key with
    ``//`` or ``%2F``): such a reference then matches nothing, and removes nothing either."""
    try:
        return normalise(path)
    except PathNotAllowed:
        return path


def private_or_nested(root: str, guard: PathGuard | None) -> Callable[[str], bool]:
    """What a listing of the table location at ``root`` skips (``stored_files``' ``skip``):
    Lakewarden's own folders (staging, trash) and the folders of tables nested in it."""
    private = tuple(f"{root}/{folder}" for folder in PRIVATE_FOLDERS)

    def skip(location: str) -> bool:
        if any(location == folder or location.startswith(f"{folder}/") for folder in private):
            return True
        return guard is not None and guard.skips_folder(location)

    return skip


class StoredFile(NamedTuple):
    """A file under the table location: its comparable location, size and modification time (a
    named tuple: a scan makes one per listed file, and a tuple is made in C)."""

    location: str
    size: int
    mtime: float


_as_tuple = attrgetter("location", "size", "mtime")  # what the runs hold: a plain tuple
_size = itemgetter(1)
_stored = tuple.__new__  # _stored(StoredFile, item): StoredFile(*item) without a Python call


def walk_files(
    root: str, skip: Callable[[str], bool] | None = None, *, follow_links: bool = False
) -> Iterator[tuple[str, os.stat_result]]:
    """(path, stat) of the files under the local folder ``root``, read as it goes (a folder of
    millions of files is never a list); folders ``skip`` names are not entered. Symlinks are not
    followed, unless ``follow_links`` (then each real folder is entered once: no loop)."""
    stack = [root]
    entered = {os.path.realpath(root)} if follow_links else set()
    while stack:
        folder = stack.pop()
        try:
            entries = os.scandir(folder)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        with entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=follow_links):
                    if skip is not None and skip(entry.path):
                        continue
                    if follow_links:
                        real = os.path.realpath(entry.path)
                        if real in entered:
                            continue
                        entered.add(real)
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=follow_links):
                    try:
                        yield entry.path, entry.stat(follow_symlinks=follow_links)
                    except FileNotFoundError:  # removed while listing
                        continue


def stored_files(
    root: str,
    storage: StoreOptions | None = None,
    skip: Callable[[str], bool] | None = None,
    *,
    follow_links: bool = False,
) -> Iterator[StoredFile]:
    """Files under ``root`` (a normalised location), none inside a folder ``skip`` names: a
    directory walk locally (``walk_files``), the store's listing (``LastModified`` as the time)
    on an object store, where ``skip`` is asked about each object's location. On S3 the listing
    comes a page of 1,000 keys at a time (``storage.io.objects.list_pages``): memory stays flat
    with the number of objects; pyarrow's listing, which hands over the whole location as one
    list, only where that one is not available (other stores, no obstore, a forked process)."""
    if is_local(root):
        for path, stat in walk_files(root, skip, follow_links=follow_links):
            yield StoredFile(posixpath.normpath(path), stat.st_size, stat.st_mtime)
        return
    pages = list_pages(root, storage)
    if pages is not None:
        for page in pages:
            for key_location, size, mtime in page:
                location = _listed(root, key_location)
                if location is not None and location != root and not (skip is not None and skip(location)):
                    yield StoredFile(location, size, mtime)  # the root itself: a folder marker
        return
    fs, base = filesystem(root, storage)
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File:
            continue
        location = _listed(root, location_uri(root, info.path))
        if location is None or skip is not None and skip(location):
            continue
        # No age known: never old enough.
        mtime = info.mtime.timestamp() if info.mtime is not None else float("inf")
        yield StoredFile(location, info.size or 0, mtime)


def _listed(root: str, location: str) -> str | None:
    """The comparable location of an object a listing of ``root`` gave, or None for a key that
    cannot be named canonically (never removed: left alone with a warning)."""
    try:
        return normalise(location)
    except PathNotAllowed:
        logger.warning("a listing of %s leaves %r alone: its key is not canonical", root, location)
        return None


@dataclass
class BoundedKept(KeptFiles):
    """``KeptFiles`` that keeps the count of each reason and only its first paths: fed in path
    order (as a scan does), its summary is the one the full lists would give."""

    counts: dict[str, int] = field(default_factory=dict)
    limit: int = SUMMARY_LIST_LIMIT

    def add(self, path: str, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        paths = self.reasons.setdefault(reason, [])
        if len(paths) < self.limit:
            paths.append(path)

    def __len__(self) -> int:
        return sum(self.counts.values())

    def summary(self, limit: int = 20) -> dict[str, dict]:
        return {
            reason: {"count": self.counts[reason], "files": sorted(paths)[:limit]}
            for reason, paths in sorted(self.reasons.items())
        }


class Removable:
    """The files a scan found to remove, spilled to disk in path order (``Spilled``): their
    number, bytes and first paths known without reading them back; iterating yields
    ``StoredFile``s."""

    def __init__(self, path: str) -> None:
        self.spilled = Spilled(path)
        self.bytes = 0
        self.first: list[str] = []

    def append(self, stored: StoredFile) -> None:
        self.spilled.append(_as_tuple(stored))
        self.bytes += stored.size
        if len(self.first) < SUMMARY_LIST_LIMIT:  # in path order: the first are the summary's
            self.first.append(stored.location)

    def __len__(self) -> int:
        return len(self.spilled)

    def __iter__(self) -> Iterator[StoredFile]:
        return map(StoredFile._make, self.spilled)


@dataclass
class LocationScan:
    """What a scan found: the files to remove (on disk, in ``folder``: use the scan in a
    ``with`` block, which removes it), the number of candidates still too young, and the
    candidates the guard keeps."""

    removable: Removable
    young: int
    kept: KeptFiles
    folder: tempfile.TemporaryDirectory | None = None

    @property
    def orphans(self) -> Removable:
        return self.removable

    def close(self) -> None:
        self.removable.spilled.close()
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None

    def __enter__(self) -> LocationScan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Decide = Callable[[StoredFile, Any], str | None]


def scan(
    listing: Iterable[StoredFile],
    references: Iterable[tuple[str, Any]],
    decide: Decide,
    *,
    guard: PathGuard,
    context: ProcessContext | None = None,
) -> LocationScan:
    """Join ``listing`` (files under the location) with ``references`` (comparable locations and
    their tag, any order, repeats allowed) in bounded memory, and ask ``decide(file, tag)`` (the
    smallest tag a location has, None when unreferenced) whether each file is to be removed
    (``REMOVE``), too young (``YOUNG``) or left alone (None). A file to remove that the guard
    refuses is kept and reported."""
    folder = tempfile.TemporaryDirectory(prefix="lakewarden-scan-")
    try:
        names = SortedRuns(folder.name, "referenced", unique=True)
        names.extend(references)
        names.spill()  # nothing of it in memory while listing
        listed = SortedRuns(folder.name, "listed")
        progress = ListingProgress(context)
        for chunk in progress.chunks(listing):
            listed.extend(map(_as_tuple, chunk))
        found = LocationScan(Removable(os.path.join(folder.name, "removable")), 0, BoundedKept(), folder)
        for item, tag in joined(listed, names, key=itemgetter(0)):
            stored = _stored(StoredFile, item)
            verdict = decide(stored, tag)
            if verdict is None:
                continue
            progress.candidate(stored.size)
            if verdict == YOUNG:
                found.young += 1
                continue
            reason = guard.refusal(stored.location)
            if reason:
                found.kept.add(stored.location, reason)
            else:
                found.removable.append(stored)
        progress.done(len(found.removable))
        found.removable.spilled.close()
        return found
    except BaseException:
        folder.cleanup()
        raise


class ListingProgress:
    """Progress of a scan through the context: objects seen and their bytes while listing
    (total unknown: 0), then candidates (files not referenced as live) and their bytes among the
    objects seen while comparing; cancellation checked as often."""

    EVERY = 10_000

    def __init__(self, context: ProcessContext | None) -> None:
        self.context = context
        self.seen = self.seen_bytes = self.candidates = self.candidate_bytes = 0

    def chunks(self, listing: Iterable[StoredFile]) -> Iterator[list[StoredFile]]:
        """``listing`` in lists of ``EVERY`` files, counted (objects seen and their bytes) and
        reported after each full one: a listing's progress without a Python call per file."""
        iterator = iter(listing)
        while chunk := list(itertools.islice(iterator, self.EVERY)):
            self.seen += len(chunk)
            self.seen_bytes += sum(map(_size, chunk))
            if self.context is not None and len(chunk) == self.EVERY:
                self.context.check_cancelled()
                message = f"listing: {self.seen:,} objects seen, {self.seen_bytes:,} bytes"
                self.context.report_progress(self.seen, 0, message)
            yield chunk

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

    def done(self, removable: int) -> None:
        if self.context is not None:
            message = f"{self._comparing()}, {removable:,} old enough to remove"
            self.context.report_progress(self.candidates, self.seen, message)


def delete_all(
    context: ProcessContext, files: Iterable[StoredFile], count: int, storage: StoreOptions | None, what: str
) -> tuple[int, int]:
    """Delete ``files`` (read back from a scan, in path order) through the context's guard, which
    checks each again; (deleted, failed)."""
    deleted = failed = 0
    for position, stored in enumerate(files):
        if position % 100 == 0:
            context.check_cancelled()
            context.report_progress(position, count, f"deleting {what}")
        try:
            deleted += context.guard.delete(stored.location, storage)
        except (OSError, OutsideTable):  # a file whose path changed since the scan is kept
            failed += 1
            logger.warning("could not delete %s", stored.location, exc_info=True)
    context.report_progress(count, count, "done")
    return deleted, failed
