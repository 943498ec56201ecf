"""Sorted runs on disk, merged: sets of paths too large for memory, compared as streams.

A maintenance process that compares what a store lists with what a table's metadata references
(orphan cleanup) must not hold either side in a Python set: a bucket of ten million objects is a
few gigabytes of ``str``. ``SortedRuns`` takes items one at a time (or a stream of them, taken
``run_items`` at a time without a Python call per item), sorts them ``run_items`` at a time in
memory and writes each sorted run to a file in a folder (pickled blocks of ``BLOCK_ITEMS``);
iterating it merges the runs, at most ``FAN_IN`` files open at once (more runs merged in passes
first), so the memory used is one run being sorted or one block per open run and one batch,
whatever the number of items.

The merge works on blocks, not items (``merged_batches``): of the current block of every run, the
items up to the smallest of their last items can all be emitted, so they are cut out (``bisect``),
concatenated and sorted as one batch (Timsort merges the sorted pieces in C). Python runs a few
operations per block, not per item: about 4x faster than ``heapq.merge`` at ten million items.
``missing`` walks two such sorted streams side by side, batch against batch, and yields the items
of the first whose key the second does not hold: the set difference in one pass; ``joined`` gives
every item of the first with the tag the second holds for its key (live, tombstoned...), for a
difference with more than one kind of reference. ``Spilled`` is an append-only list on disk (the
difference's result, read back once or more).

Items are compared as Python compares them (``str`` by code point: the order ``sorted`` gives), so
the merged stream's first items are what ``sorted(...)[:n]`` would give. Items are pickled, not
written as text lines: any ``str`` comes back as it was, a path with a newline or a space, or one
that is not valid UTF-8 (a local file name read with surrogate escapes), and is never split.
"""

from __future__ import annotations

import itertools
import os
import pickle
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from typing import Any, BinaryIO

#: Items sorted in memory before a run is written (about 15 MB of ``(path, size, mtime)`` tuples).
RUN_ITEMS = 50_000
#: Items per pickled block of a run file: what a merge holds in memory per open run.
BLOCK_ITEMS = 512
#: Runs merged at once; more are merged in passes first (each pass reads and writes every item).
FAN_IN = 64
#: Items per batch when a plain iterable is compared with sorted runs (``missing``, ``joined``).
BATCH_ITEMS = 4096


def _pickler(file: BinaryIO) -> pickle.Pickler:
    pickler = pickle.Pickler(file, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True  # no memo: items are flat tuples, and the memo would grow with the file
    return pickler


def _write_blocks(file: BinaryIO, items: Iterable[Any]) -> int:
    pickler, count = _pickler(file), 0
    for block in _blocks(items, BLOCK_ITEMS):
        pickler.dump(block)
        count += len(block)
    return count


def _blocks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while block := list(itertools.islice(iterator, size)):
        yield block


def read_blocks(path: str) -> Iterator[list[Any]]:
    """The blocks of a run file (lists of items), one in memory at a time."""
    with open(path, "rb") as file:
        unpickler = pickle.Unpickler(file)
        while True:
            try:
                yield unpickler.load()
            except EOFError:
                return


def read_items(path: str) -> Iterator[Any]:
    """The items of a run file, one block in memory at a time."""
    return itertools.chain.from_iterable(read_blocks(path))


def merged_batches(streams: Iterable[Iterator[list[Any]]]) -> Iterator[list[Any]]:
    """The items of sorted streams of blocks, merged into sorted batches: each round emits what
    every run's current block holds up to the smallest last item among them (nothing later can
    sort before it), so at least one block is used up per round."""
    heads: list[list[Any]] = []  # [block, position, stream] of each run not used up
    for stream in streams:
        block = next(stream, None)
        if block:
            heads.append([block, 0, stream])
    while len(heads) > 1:
        bound = min(block[-1] for block, _, _ in heads)
        batch: list[Any] = []
        for head in heads:
            block, position, stream = head
            cut = bisect_right(block, bound, position)
            batch += block[position:cut]
            head[1] = cut
            if cut == len(block):
                head[0], head[1] = next(stream, None), 0
        heads = [head for head in heads if head[0]]
        batch.sort()
        yield batch
    for block, position, stream in heads:
        yield block[position:]
        yield from stream


def unique_batches(batches: Iterable[list[Any]]) -> Iterator[list[Any]]:
    """Sorted batches without repeats, within a batch or across two."""
    last: Any = _NOTHING
    for batch in batches:
        kept = [item for item, _ in itertools.groupby(batch)]
        if kept and last is not _NOTHING and kept[0] == last:
            del kept[0]
        if kept:
            last = kept[-1]
            yield kept


_NOTHING = object()


class SortedRuns:
    """Items added in any order, read back sorted (and, with ``unique``, without repeats), in
    bounded memory: sorted runs of ``run_items`` (``RUN_ITEMS`` by default, read when the runs are
    made) written to ``folder`` and merged."""

    def __init__(self, folder: str, name: str, *, unique: bool = False, run_items: int | None = None) -> None:
        self.folder = folder
        self.name = name
        self.unique = unique
        self.run_items = RUN_ITEMS if run_items is None else run_items
        self.runs: list[str] = []
        self.buffer: list[Any] = []
        self.written = 0  # items in the runs written (repeats included)
        self._serial = itertools.count()

    @property
    def count(self) -> int:
        """Items added (repeats included)."""
        return self.written + len(self.buffer)

    def add(self, item: Any) -> None:
        self.buffer.append(item)
        if len(self.buffer) >= self.run_items:
            self._flush()

    def extend(self, items: Iterable[Any]) -> None:
        """Add every item of ``items``, taken a run's room at a time (no Python call per item)."""
        iterator = iter(items)
        while True:
            room = self.run_items - len(self.buffer)
            self.buffer += itertools.islice(iterator, room)
            if len(self.buffer) < self.run_items:
                return
            self._flush()

    def _new_path(self) -> str:
        return os.path.join(self.folder, f"{self.name}-{next(self._serial):06d}.run")

    def spill(self) -> None:
        """Write what is buffered as a run now (adding may go on): frees its memory while
        something else fills up."""
        self._flush()

    def _flush(self) -> None:
        if not self.buffer:
            return
        items, self.buffer = self.buffer, []
        self.written += len(items)
        if self.unique:
            items = list(set(items))
        items.sort()
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
            merged = self._merged(head)
            self.runs.append(self._write(itertools.chain.from_iterable(merged)))
            for path in head:
                os.remove(path)

    def _merged(self, paths: list[str]) -> Iterator[list[Any]]:
        batches = merged_batches(read_blocks(path) for path in paths)
        return unique_batches(batches) if self.unique and len(paths) > 1 else batches

    def batches(self) -> Iterator[list[Any]]:
        """Every item, sorted, in batches (lists): the buffer is written as the last run first.
        Each call reads the runs again (expiry reads its candidates twice with trash on)."""
        self._flush()
        self._merge_passes()
        return self._merged(self.runs)

    def __iter__(self) -> Iterator[Any]:
        return itertools.chain.from_iterable(self.batches())


def as_batches(items: Iterable[Any]) -> Iterator[list[Any]]:
    """Sorted items in batches: ``batches()`` when they have it (``SortedRuns``), else cut up."""
    batches = getattr(items, "batches", None)
    return batches() if callable(batches) else _blocks(items, BATCH_ITEMS)


def missing(items: Iterable[Any], keys: Iterable[Any], key: Callable[[Any], Any]) -> Iterator[Any]:
    """The items (sorted by ``key``) whose key the sorted ``keys`` does not hold: one pass over
    both, a batch of each in memory."""
    tagged = ([(other, 0) for other in batch] for batch in as_batches(keys))
    pairs = joined_batches(as_batches(items), tagged, key)
    return (item for batch in pairs for item, tag in batch if tag is None)


def joined(
    items: Iterable[Any], tagged: Iterable[tuple[Any, Any]], key: Callable[[Any], Any]
) -> Iterator[tuple[Any, Any]]:
    """Each item (sorted by ``key``) with the tag of the first ``(key, tag)`` pair of the sorted
    ``tagged`` stream that names its key (the smallest tag, pairs sorting by key then tag), or
    None when no pair does: a merge join in one pass over both, a batch of each in memory.
    Repeated keys among ``tagged`` are fine, and so are repeated items."""
    pairs = joined_batches(as_batches(items), as_batches(tagged), key)
    return itertools.chain.from_iterable(pairs)


def joined_batches(
    items: Iterator[list[Any]], tagged: Iterator[list[tuple[Any, Any]]], key: Callable[[Any], Any]
) -> Iterator[list[tuple[Any, Any]]]:
    """``joined`` on batches: each round takes the items and the pairs up to the smaller of the
    two batches' last keys, looks the items' keys up in a dict of those pairs (the first pair of a
    key wins) and yields them with their tags. A key at a round's bound can go on in the next
    batches: its tag is carried over."""
    first = itemgetter(0)
    items, tagged = (batch for batch in items if batch), (batch for batch in tagged if batch)
    block, others = next(items, None), next(tagged, None)
    position = done = 0
    carried: Any = _NOTHING  # (key, tag) of the last round's bound
    while block:
        if others is None:
            bound, cut = _NOTHING, len(block)
            tags: dict[Any, Any] = {}
        else:
            bound = min(key(block[-1]), others[-1][0])
            cut = bisect_right(block, bound, position, key=key)
            end = bisect_right(others, bound, done, key=first)
            tags = dict(reversed(others[done:end]))
            done = end
        if carried is not _NOTHING and carried[1] is not None:
            tags[carried[0]] = carried[1]
        get = tags.get
        yield [(item, get(key(item))) for item in block[position:cut]]
        if bound is not _NOTHING:
            carried = (bound, get(bound))
        position = cut
        if position == len(block):
            block, position = next(items, None), 0
        if others is not None and done == len(others):
            others, done = next(tagged, None), 0


class Spilled:
    """An append-only list on disk: ``append`` items, then ``close`` and iterate (as often as
    needed); ``len`` is the number of items. One block in memory at a time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: BinaryIO | None = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._pickler = _pickler(self._file)
        self._block: list[Any] = []
        self.count = 0

    def append(self, item: Any) -> None:
        self._block.append(item)
        self.count += 1
        if len(self._block) >= BLOCK_ITEMS:
            self._dump()

    def _dump(self) -> None:
        if self._block and self._file is not None:
            self._pickler.dump(self._block)
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
