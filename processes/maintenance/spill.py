"""Sorted runs on disk, merged: sets of paths too large for memory, compared as streams.

A maintenance process that compares what a store lists with what a table's metadata references
(orphan cleanup) must not hold either side in a Python set: a bucket of ten million objects is a
few gigabytes of ``str``. ``SortedRuns`` takes items one at a time, sorts them ``run_items`` at a
time in memory and writes each sorted run to a file in a folder (pickled blocks of
``BLOCK_ITEMS``); iterating it merges the runs (``heapq.merge``, at most ``FAN_IN`` files open at
once, more runs merged in passes first), so the memory used is one run being sorted or one block
per open run, whatever the number of items. ``missing`` walks two such sorted streams side by side
and yields the items of the first whose key the second does not hold: the set difference in one
pass; ``joined`` gives every item of the first with the tag the second holds for its key (live,
tombstoned...), for a difference with more than one kind of reference. ``Spilled`` is an append-only list on disk (the difference's result, read back once or more).

Items are compared as Python compares them (``str`` by code point: the order ``sorted`` gives), so
the merged stream's first items are what ``sorted(...)[:n]`` would give. Paths that are not valid
UTF-8 (a local file name read with surrogate escapes) are kept as they are: pickle stores any
``str``.
"""

from __future__ import annotations

import heapq
import itertools
import os
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

#: Items sorted in memory before a run is written (about 15 MB of ``(path, size, mtime)`` tuples).
RUN_ITEMS = 50_000
#: Items per pickled block of a run file: what a merge holds in memory per open run.
BLOCK_ITEMS = 512
#: Runs merged at once; more are merged in passes first (each pass reads and writes every item).
FAN_IN = 64


def _write_blocks(file: BinaryIO, items: Iterable[Any]) -> int:
    count = 0
    for block in _blocks(items, BLOCK_ITEMS):
        pickle.dump(block, file, protocol=pickle.HIGHEST_PROTOCOL)
        count += len(block)
    return count


def _blocks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while block := list(itertools.islice(iterator, size)):
        yield block


def read_items(path: str) -> Iterator[Any]:
    """The items of a run file, one block in memory at a time."""
    with open(path, "rb") as file:
        while True:
            try:
                block = pickle.load(file)
            except EOFError:
                return
            yield from block


class SortedRuns:
    """Items added in any order, read back sorted (and, with ``unique``, without repeats), in
    bounded memory: sorted runs of ``run_items`` written to ``folder`` and merged."""

    def __init__(self, folder: str, name: str, *, unique: bool = False, run_items: int = RUN_ITEMS) -> None:
        self.folder = folder
        self.name = name
        self.unique = unique
        self.run_items = run_items
        self.runs: list[str] = []
        self.buffer: list[Any] = []
        self.count = 0  # items added (repeats included)
        self._serial = itertools.count()

    def add(self, item: Any) -> None:
        self.buffer.append(item)
        self.count += 1
        if len(self.buffer) >= self.run_items:
            self._flush()

    def extend(self, items: Iterable[Any]) -> None:
        for item in items:
            self.add(item)

    def _new_path(self) -> str:
        return os.path.join(self.folder, f"{self.name}-{next(self._serial):06d}.run")

    def spill(self) -> None:
        """Write what is buffered as a run now (adding may go on): frees its memory while
        something else fills up."""
        self._flush()

    def _flush(self) -> None:
        if not self.buffer:
            return
        items = sorted(set(self.buffer)) if self.unique else sorted(self.buffer)
        self.buffer = []
        self.runs.append(self._write(items))

    def _write(self, items: Iterable[Any]) -> str:
        path = self._new_path()
        with open(path, "wb") as file:
            _write_blocks(file, items)
        return path

    def _merge_passes(self) -> None:
        """Merge runs ``FAN_IN`` at a time until ``FAN_IN`` or fewer are left."""
        while len(self.runs) > FAN_IN:
            head, self.runs = self.runs[:FAN_IN], self.runs[FAN_IN:]
            merged = self._write(self._unique(heapq.merge(*(read_items(p) for p in head))))
            for path in head:
                os.remove(path)
            self.runs.append(merged)

    def _unique(self, items: Iterator[Any]) -> Iterator[Any]:
        if not self.unique:
            return items
        return (item for item, _ in itertools.groupby(items))

    def __iter__(self) -> Iterator[Any]:
        """Every item, sorted: the buffer is written as the last run first. Each iteration reads
        the runs again (expiry reads its candidates twice with trash on)."""
        self._flush()
        self._merge_passes()
        return self._unique(heapq.merge(*(read_items(path) for path in self.runs)))


def missing(items: Iterable[Any], keys: Iterable[Any], key: Callable[[Any], Any]) -> Iterator[Any]:
    """The items (sorted by ``key``) whose key the sorted ``keys`` does not hold: one pass over
    both, nothing kept but the current key of each."""
    tagged = ((other, 0) for other in keys)
    return (item for item, tag in joined(items, tagged, key=key) if tag is None)


def joined(
    items: Iterable[Any], tagged: Iterable[tuple[Any, Any]], key: Callable[[Any], Any]
) -> Iterator[tuple[Any, Any]]:
    """Each item (sorted by ``key``) with the tag of the first ``(key, tag)`` pair of the sorted
    ``tagged`` stream that names its key (the smallest tag, pairs sorting by key then tag), or
    None when no pair does: a merge join in one pass over both, nothing kept but the current pair.
    Repeated keys among ``tagged`` are fine, and so are repeated items."""
    others = iter(tagged)
    sentinel: Any = (object(), None)
    other: Any = next(others, sentinel)
    for item in items:
        wanted = key(item)
        while other is not sentinel and other[0] < wanted:
            other = next(others, sentinel)
        yield item, (other[1] if other is not sentinel and other[0] == wanted else None)


class Spilled:
    """An append-only list on disk: ``append`` items, then ``close`` and iterate (as often as
    needed); ``len`` is the number of items. One block in memory at a time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: BinaryIO | None = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._block: list[Any] = []
        self.count = 0

    def append(self, item: Any) -> None:
        self._block.append(item)
        self.count += 1
        if len(self._block) >= BLOCK_ITEMS:
            self._dump()

    def _dump(self) -> None:
        if self._block and self._file is not None:
            pickle.dump(self._block, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._block = []

    def close(self) -> None:
        if self._file is not None:
            self._dump()
            self._file.close()
            self._file = None

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Any]:
        self.close()
        return read_items(self.path)
