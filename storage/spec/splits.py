"""Size-based split planning: cut file slices at row-group boundaries and bin-pack them.

The planner follows Iceberg's (``TableScanUtil.planTasks`` with ``BinPacking.PackingIterable``,
lookback and largest-bin-first eviction) so every format gets the same balanced splits, Hudi and
Delta included:

1. **Cut.** A base file larger than ``target_size`` with known row-group offsets
   (``DataFile.split_offsets``) is cut into parts at those offsets, consecutive row groups merged
   while the part stays within ``target_size`` (a single row group larger than the target makes a
   part of its own). The first part starts at byte 0 and the last runs to the end of the file, so
   the parts of a file tile ``[0, size)`` exactly. A file without offsets is never cut at
   arbitrary bytes, and a slice with delete or log files is never cut: its deletes must be merged
   against the whole file.
2. **Weigh.** A part weighs ``max(length + delete/log bytes, (1 + delete/log files) * open_file_cost)``,
   as in Iceberg: reading a tiny file still costs an open per file.
3. **Pack.** Parts go, in input order, into the first open bin they fit in (bin weight plus part
   weight at most ``target_size``), else into a new bin; when more than ``lookback`` bins are open
   the heaviest is emitted as a split. Splits stream out as bins close, so memory holds at most
   ``lookback + 1`` bins whatever the number of files, and the same input order gives the same
   splits.

Readers select the row groups of a part with ``row_groups_in_range``: a row group belongs to the
part whose byte range holds its start offset, so the parts of a file read every row group once.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from storage.spec.models import FileContent, FileSlice, Split, SplitPart

if TYPE_CHECKING:
    import pyarrow.parquet as pq

MIB = 1024 * 1024
DEFAULT_TARGET_SIZE = 128 * MIB
DEFAULT_OPEN_FILE_COST = 4 * MIB
DEFAULT_LOOKBACK = 10

__all__ = [
    "DEFAULT_LOOKBACK",
    "DEFAULT_OPEN_FILE_COST",
    "DEFAULT_TARGET_SIZE",
    "part_weight",
    "plan_splits",
    "row_group_offsets",
    "row_group_start",
    "row_groups_in_range",
    "slice_parts",
    "summarise_splits",
]


def plan_splits(
    slices: Iterable[FileSlice],
    *,
    target_size: int = DEFAULT_TARGET_SIZE,
    open_file_cost: int = DEFAULT_OPEN_FILE_COST,
    lookback: int = DEFAULT_LOOKBACK,
) -> Iterator[Split]:
    """Balanced splits of ``slices``, streamed as they close.

    Parameters are checked here, before anything is read, so a bad value raises ``ValueError``
    at the call rather than at the first ``next()``. ``slices`` is consumed lazily.
    """
    target_size = _check_int("target_size", target_size, minimum=1)
    open_file_cost = _check_int("open_file_cost", open_file_cost, minimum=0)
    lookback = _check_int("lookback", lookback, minimum=1)
    return _pack(slices, target_size, open_file_cost, lookback)


def _check_int(name: str, value: Any, *, minimum: int) -> int:
    # bool is an int subclass; "target_size=True" is a caller's mistake, not 1 byte.
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if number < minimum:
        bound = "positive" if minimum == 1 else "zero or more"
        raise ValueError(f"{name} must be {bound}, got {number}")
    return number


class _Bin:
    __slots__ = ("parts", "weight")

    def __init__(self) -> None:
        self.parts: list[SplitPart] = []
        self.weight = 0

    def add(self, part: SplitPart, weight: int) -> None:
        self.parts.append(part)
        self.weight += weight

    def to_split(self) -> Split:
        return Split(parts=tuple(self.parts), weight=self.weight)


def _pack(
    slices: Iterable[FileSlice], target_size: int, open_file_cost: int, lookback: int
) -> Iterator[Split]:
    bins: list[_Bin] = []
    for file_slice in slices:
        for part in slice_parts(file_slice, target_size=target_size):
            weight = part_weight(part, open_file_cost=open_file_cost)
            for open_bin in bins:
                if open_bin.weight + weight <= target_size:
                    open_bin.add(part, weight)
                    break
            else:
                new_bin = _Bin()
                new_bin.add(part, weight)
                bins.append(new_bin)
                if len(bins) > lookback:
                    # Iceberg's largest-bin-first: the heaviest bin is the least likely to take
                    # more parts, and max() keeps the oldest of equal weights (as Java's does).
                    heaviest = max(range(len(bins)), key=lambda i: bins[i].weight)
                    yield bins.pop(heaviest).to_split()
    for open_bin in bins:
        yield open_bin.to_split()


def slice_parts(file_slice: FileSlice, *, target_size: int) -> list[SplitPart]:
    """The parts of one slice: cut at row-group offsets when it is a large base file alone.

    Parts are in file order, contiguous, and cover ``[0, size)`` of the base file; their
    estimated rows add up to the base file's record count.
    """
    base = file_slice.base_file
    if base is None:
        # A Hudi merge-on-read file group with log files only: nothing to cut; its rows are the
        # logs' records (an upper bound: updates count too).
        rows = sum(f.record_count for f in file_slice.delete_files if f.content is FileContent.LOG)
        return [SplitPart(file_slice=file_slice, start=0, length=0, estimated_rows=rows)]
    size = base.size_bytes
    bounds = _cut_points(size, base.split_offsets, target_size) if not file_slice.delete_files else None
    if not bounds:
        return [SplitPart(file_slice=file_slice, start=0, length=size, estimated_rows=base.record_count)]
    edges = [0, *bounds, size]
    records = base.record_count
    return [
        SplitPart(
            file_slice=file_slice,
            start=start,
            length=end - start,
            # Cumulative rounding: each part gets round(rows up to its end) minus round(rows up
            # to its start), so the parts add up to the record count exactly.
            estimated_rows=_rows_before(end, records, size) - _rows_before(start, records, size),
        )
        for start, end in itertools.pairwise(edges)
    ]


def _rows_before(offset: int, records: int, size: int) -> int:
    return (records * offset * 2 + size) // (size * 2)


def _cut_points(size: int, offsets: tuple[int, ...] | None, target_size: int) -> list[int]:
    """Inner part boundaries (excluding 0 and ``size``); empty when the file stays whole.

    Merges consecutive row groups while the part stays within the target, as Iceberg's
    ``OffsetsAwareSplitScanTaskIterator`` does, except that the first part starts at 0 so the
    file's header bytes belong to a part too.
    """
    if size <= target_size or not offsets:
        return []
    # Offsets that are unsorted or outside the file say the metadata is wrong; Iceberg then
    # ignores them too rather than guess row-group boundaries.
    if any(b <= a for a, b in itertools.pairwise(offsets)) or offsets[0] < 0 or offsets[-1] >= size:
        return []
    # The first row group is stretched back to byte 0: a part holding only the 4-byte header
    # would be a task with no row group to read.
    starts = [0, *offsets[1:]]
    ends = [*starts[1:], size]
    cuts: list[int] = []
    part_start = 0
    for group_start, group_end in zip(starts, ends, strict=True):
        # A part is closed before a row group that would take it over the target; a lone row
        # group bigger than the target is a part of its own.
        if group_start > part_start and group_end - part_start > target_size:
            cuts.append(group_start)
            part_start = group_start
    return cuts


def part_weight(part: SplitPart, *, open_file_cost: int) -> int:
    """Iceberg's task weight: bytes to read (base range plus whole delete/log files), at least
    one open-file cost per file opened."""
    deletes = part.file_slice.delete_files
    opened = len(deletes) + (1 if part.file_slice.base_file is not None else 0)
    read_bytes = part.length + sum(f.size_bytes for f in deletes)
    return max(read_bytes, max(opened, 1) * open_file_cost)


def summarise_splits(splits: Iterable[Split]) -> dict[str, Any]:
    """Counts and weights of a plan for the console and the API; consumes ``splits`` once."""
    count = parts = total_weight = total_bytes = rows = 0
    min_weight: int | None = None
    max_weight: int | None = None
    for split in splits:
        count += 1
        parts += len(split.parts)
        total_weight += split.weight
        total_bytes += split.size_bytes
        rows += split.estimated_rows
        min_weight = split.weight if min_weight is None else min(min_weight, split.weight)
        max_weight = split.weight if max_weight is None else max(max_weight, split.weight)
    return {
        "count": count,
        "parts": parts,
        "total_weight": total_weight,
        "min_weight": min_weight or 0,
        "max_weight": max_weight or 0,
        "mean_weight": total_weight / count if count else 0.0,
        "total_bytes": total_bytes,
        "estimated_rows": rows,
    }


def row_group_start(row_group: pq.RowGroupMetaData) -> int:
    """Byte offset where a parquet row group starts.

    The start of its first column chunk: the dictionary page offset when the chunk has a
    dictionary page before its first data page, else the first data page offset. This is
    parquet-mr's ``ColumnChunkMetaData.getStartingPos`` and what Iceberg and pyiceberg write as
    a data file's ``split_offsets``, so offsets from table metadata and from a footer agree.
    """
    column = row_group.column(0)
    data_offset = column.data_page_offset
    dictionary_offset = column.dictionary_page_offset
    # Some writers leave dictionary_page_offset at 0 when absent; 0 is the magic number, never a page.
    if column.has_dictionary_page and dictionary_offset and dictionary_offset < data_offset:
        return dictionary_offset
    return data_offset


def row_group_offsets(parquet_metadata: pq.FileMetaData) -> tuple[int, ...]:
    """Start offsets of every row group (see ``row_group_start``), in file order: usable as
    ``DataFile.split_offsets`` for formats whose metadata does not record them."""
    return tuple(
        row_group_start(parquet_metadata.row_group(i)) for i in range(parquet_metadata.num_row_groups)
    )


def row_groups_in_range(parquet_metadata: pq.FileMetaData, start: int, length: int) -> list[int]:
    """Indices of the row groups a split part ``[start, start + length)`` reads.

    Rule: a row group belongs to the part whose byte range holds its start offset (see
    ``row_group_start``: the first column chunk's dictionary page offset if it has one, else its
    data page offset). Parts of a file are contiguous and tile the file, so every row group is
    read by exactly one part, even when the parts were cut at offsets that are not exactly the
    footer's row-group starts (rows are then unevenly spread, never lost or doubled).
    """
    end = start + length
    return [
        i
        for i in range(parquet_metadata.num_row_groups)
        if start <= row_group_start(parquet_metadata.row_group(i)) < end
    ]
