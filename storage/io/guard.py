"""The one rule for what a maintenance process may delete, move or write: ``PathGuard``.

A table's metadata can name files anywhere (Iceberg ``add_files``, a hand-edited or hostile log, a
metadata location changed after registration), table folders can nest and a table folder can hold
a symlink. A process of one table may touch a path only when, after normalising it (``..``,
percent-encoding, ``file:`` URIs, trailing slashes, ``s3a://``):

1. it lies inside one of the allowed roots (checked on the resolved path for local files);
2. it lies inside the table's own location, at a segment boundary (``/wh/t2`` is not in ``/wh/t``);
3. no other registered table's location holds it (a table nested in this one owns its folder; two
   tables sharing one location own nothing either may delete);
4. on a local disk, nothing between the table location and the path is a symlink (the path itself
   included): a link inside the table could lead anywhere.

Anything else is *kept*: left in place and reported ("kept: outside the table's location"), the way
Iceberg's ``gc.enabled=false`` protects shared storage. Plain Python (no Django):
``storage.paths.table_guard`` builds the guard of a registered table.

    guard = PathGuard.build("/wh/t", roots=["/wh"], others=["/wh/t/sub"])
    guard.refusal("/wh/t/data/a.parquet")          # None: allowed
    guard.refusal("/wh/t/sub/_delta_log/0.json")   # 'inside another registered table (/wh/t/sub)'
    guard.refusal("/wh/t/../u/x.parquet")          # "outside the table's location (/wh/t)"
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import unquote, urlparse

from storage.io.paths import PathNotAllowed, is_local, local_path
from storage.io.stores import S3_SCHEMES, StoreOptions, filesystem, normalise

T = TypeVar("T")

__all__ = ["KeptFiles", "OutsideTable", "PathGuard", "canonical", "kept_summary"]

OUTSIDE_TABLE = "outside the table's location"
OUTSIDE_ROOTS = "outside the allowed roots"
OTHER_TABLE = "inside another registered table"
SYMLINK = "through a symlink"
NOT_CANONICAL = "not a path that can be named safely"


class OutsideTable(PathNotAllowed):
    """A path a process of this table may not delete, move or write."""


def canonical(location: str, *, literal: bool = True) -> str:
    """One comparable spelling of a location, never touching the disk: an absolute normalised
    local path (a ``file:`` URI's path taken literally, as pyiceberg and Spark take it, unless
    ``literal`` is False), or the canonical object-store URI (``s3a://b/k/`` -> ``s3://b/k``).
    ``PathNotAllowed`` for what cannot be named safely (NUL, unknown schemes, ``..`` in a key)."""
    text = location.strip()
    if not text:
        raise PathNotAllowed("no path given")
    if is_local(text):
        path = str(local_path(text, percent_decoded=not literal))
        return posixpath.normpath(os.path.abspath(path))
    return normalise(text)


def _spellings(location: str) -> list[str]:
    """Every way a library may read ``location``: as spelt and percent-decoded (a ``file:`` URI is
    taken literally by pyiceberg, decoded by others; an object key with ``%`` is refused by
    ``normalise``). A path passes only when each spelling does."""
    found = [canonical(location)]
    text = location.strip()
    if "%" in text and is_local(text):
        parsed = urlparse(text) if "://" in text or text[:5].lower() == "file:" else None
        decoded = canonical(location, literal=False) if parsed else canonical(unquote(text))
        if decoded not in found:
            found.append(decoded)
    return found


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _realpath(path: str) -> str:
    return os.path.realpath(path)


@dataclass
class KeptFiles:
    """Files a process left in place because the guard refused them, per reason."""

    reasons: dict[str, list[str]] = field(default_factory=dict)

    def add(self, path: str, reason: str) -> None:
        self.reasons.setdefault(reason, []).append(path)

    def __len__(self) -> int:
        return sum(len(paths) for paths in self.reasons.values())

    def summary(self, limit: int = 20) -> dict[str, dict]:
        """``{"outside the table's location": {"count": 2, "files": [...]}}`` for a summary."""
        return {
            reason: {"count": len(paths), "files": sorted(paths)[:limit]}
            for reason, paths in sorted(self.reasons.items())
        }


def kept_summary(kept: KeptFiles) -> dict[str, dict]:
    """``{"kept": {reason: {"count", "files"}}}`` for a process summary; empty when nothing was
    kept (summaries of ordinary tables stay as they were)."""
    return {"kept": kept.summary()} if len(kept) else {}


@dataclass(frozen=True)
class PathGuard:
    """What a process of the table at ``location`` may delete, move or write (module docstring).

    ``location``, ``roots`` and ``others`` are canonical (``build`` makes them so); local roots
    are resolved (symlinks followed), as ``storage.paths.allowed_roots`` gives them."""

    location: str
    roots: tuple[str, ...]
    others: tuple[str, ...] = ()

    @classmethod
    def build(cls, location: str, *, roots: Iterable[str], others: Iterable[str] = ()) -> PathGuard:
        """The guard of the table at ``location``: ``others`` are the other registered tables'
        locations (only those inside or equal to this one matter); locations that cannot be
        named are ignored among ``others`` and refused as ``location``."""
        own = canonical(location)
        roots = tuple(_root(r) for r in roots)
        real_own = _realpath(own) if is_local(own) else own
        nested = []
        for other in others:
            try:
                spelt = canonical(other)
            except PathNotAllowed:
                continue
            if _within(spelt, own):
                nested.append(spelt)
            if is_local(spelt) and _within(_realpath(spelt), real_own):  # nested under another name
                nested.append(_realpath(spelt))
        return cls(own, roots, tuple(sorted(set(nested))))

    # --- the rule ---------------------------------------------------------------------------

    def refusal(self, path: str) -> str | None:
        """Why ``path`` may not be touched (a short reason), or None when it may."""
        try:
            spellings = _spellings(path)
        except PathNotAllowed:
            return NOT_CANONICAL
        for spelt in spellings:
            reason = self._refusal(spelt)
            if reason:
                return reason
        return None

    def _refusal(self, spelt: str) -> str | None:
        if not _within(spelt, self.location):
            return OUTSIDE_TABLE
        for other in self.others:
            if _within(spelt, other):
                return f"{OTHER_TABLE} ({other})"
        if is_local(spelt):
            real = _realpath(spelt)
            relative = posixpath.relpath(spelt, self.location)
            expected = posixpath.normpath(posixpath.join(_realpath(self.location), relative))
            if real != expected:
                return SYMLINK
            if not any(_within(real, root) for root in self.roots if is_local(root)):
                return OUTSIDE_ROOTS
            for other in self.others:  # a nested table reached under another spelling
                if _within(real, other):
                    return f"{OTHER_TABLE} ({other})"
        elif not any(_within(spelt, root) for root in self.roots if not is_local(root)):
            return OUTSIDE_ROOTS
        return None

    def allows(self, path: str) -> bool:
        return self.refusal(path) is None

    def check(self, path: str, doing: str = "touch") -> str:
        """The canonical spelling of ``path`` when it may be touched; ``OutsideTable`` naming the
        path and the reason otherwise."""
        reason = self.refusal(path)
        if reason:
            raise OutsideTable(f"will not {doing} {path}: {reason}")
        return canonical(path)

    def split(
        self,
        items: Iterable[T],
        kept: KeptFiles | None = None,
        *,
        path: Callable[[T], str] = str,
    ) -> tuple[list[T], KeptFiles]:
        """(the items whose ``path`` may be touched, in order, as given; the others' paths per
        reason). ``path`` names an item's location (the item itself by default)."""
        kept = kept if kept is not None else KeptFiles()
        allowed = []
        for item in items:
            location = path(item)
            reason = self.refusal(location)
            if reason:
                kept.add(location, reason)
            else:
                allowed.append(item)
        return allowed, kept

    def delete(self, path: str, storage: StoreOptions | None = None) -> bool:
        """Delete one file once the rule allows it: False when it was gone already,
        ``OutsideTable`` (nothing deleted) when refused. The file deleted is the checked spelling."""
        spelt = self.check(path, "delete")
        fs, fs_path = filesystem(spelt, storage)
        if not is_local(spelt) and urlparse(spelt).scheme in S3_SCHEMES:
            # the key as spelt (``bucket/key``): ``filesystem`` would percent-decode it
            fs_path = spelt.split("://", 1)[1].rstrip("/")
        try:
            fs.delete_file(fs_path)
        except FileNotFoundError:
            return False
        return True

    def check_location(self) -> None:
        """``OutsideTable`` when the table's own location is outside the allowed roots, shared
        with another registered table, or (locally) a symlink: a process then touches nothing."""
        if self.location in self.others:
            raise OutsideTable(f"the table's location {self.location} is another registered table's too")
        if is_local(self.location):
            real = _realpath(self.location)
            if not any(_within(real, root) for root in self.roots if is_local(root)):
                raise OutsideTable(f"the table's location {self.location} is {OUTSIDE_ROOTS}")
        elif not any(_within(self.location, root) for root in self.roots if not is_local(root)):
            raise OutsideTable(f"the table's location {self.location} is {OUTSIDE_ROOTS}")

    def skips_folder(self, folder: str) -> bool:
        """True for a folder a listing under the table must not enter: another registered table's
        (a nested one)."""
        try:
            spelt = canonical(folder)
        except PathNotAllowed:
            return True
        return any(_within(spelt, other) for other in self.others)


def _root(root: str) -> str:
    text = str(root)
    return _realpath(canonical(text)) if is_local(text) else normalise(text)
