"""Reading a Lance dataset as Arrow batches through Lance's own scanner, deletion files applied.

An instant reads the whole dataset at that version; a file slice reads its fragment at the version
it was listed at (``FileSlice.base_instant``), so the slice's own deletion file is the one applied.
Filters are bound against the version's schema and applied exactly to each batch in Arrow (the
spec's filter language is translated once, never into Lance SQL text).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from storage.spec.errors import CorruptTable
from storage.spec.expressions import bind_filter, to_arrow
from storage.spec.models import FileSlice, Instant, ReadingMode, Split
from storage.spec.table import InstantRef, output_columns

if TYPE_CHECKING:
    from lakewarden_lance.table import LanceSpecTable

BATCH_ROWS = 32 * 1024


def read(
    table: LanceSpecTable,
    source: Any,
    columns: list[str] | None,
    filters: Any,
    mode: ReadingMode,
    end_instant: InstantRef,
) -> Iterator[pa.RecordBatch]:
    """Batches for ``LanceSpecTable.read``; instants and columns are checked before returning."""
    if mode is ReadingMode.INCREMENTAL:
        start, end = table.version_range(source, end_instant)
        before = set() if start is None else set(table.dataset(start).fragment_ids())
        fragments = [f for f in table.dataset(end).get_fragments() if f.fragment_id not in before]
        return _scan(fragments, *_plan(table.schema_at(end), columns, filters))
    if source is None or isinstance(source, Instant | int | str):
        version = table.resolve(source)
        return _scan([table.dataset(version)], *_plan(table.schema_at(version), columns, filters))
    if isinstance(source, Split):
        slices: list[FileSlice] = [part.file_slice for part in source.parts]
    elif isinstance(source, FileSlice):
        slices = [source]
    else:
        slices = list(source)
    return _read_slices(table, slices, columns, filters)


def _read_slices(
    table: LanceSpecTable, slices: list[FileSlice], columns: list[str] | None, filters: Any
) -> Iterator[pa.RecordBatch]:
    version = _slices_version(table, slices)
    plan = _plan(table.schema_at(version), columns, filters)
    dataset = table.dataset(version)
    fragments = []
    for file_slice in slices:
        if file_slice.base_file is None:
            continue
        fragment_id = int(file_slice.base_file.extra["fragment_id"])
        fragment = dataset.get_fragment(fragment_id)
        if fragment is None:
            raise CorruptTable(f"fragment {fragment_id} is not in version {version} of {table.location}")
        fragments.append(fragment)
    return _scan(fragments, *plan)


def _slices_version(table: LanceSpecTable, slices: list[FileSlice]) -> int:
    """The version the slices were listed at (the newest when they were listed at several: a
    fragment's data never changes, only its deletion file, which the slice names)."""
    versions = {int(s.base_instant) for s in slices if s.base_instant is not None}
    return max(versions) if versions else table.version


def _plan(
    schema: pa.Schema, columns: list[str] | None, filters: Any
) -> tuple[list[str], list[str], pc.Expression | None]:
    output = output_columns(columns, schema)
    expr = bind_filter(filters, schema)
    wanted = list(output)
    row_filter = None
    if expr is not None:
        row_filter = to_arrow(expr)
        for name in sorted(expr.columns()):
            top = name if name in schema.names else name.split(".", 1)[0]
            if top not in wanted:
                wanted.append(top)
    return wanted, output, row_filter


def _scan(
    sources: Iterable[Any], wanted: list[str], output: list[str], row_filter: pc.Expression | None
) -> Iterator[pa.RecordBatch]:
    for source in sources:
        try:
            batches = source.to_batches(columns=wanted, batch_size=BATCH_ROWS)
            for batch in batches:
                if row_filter is not None and batch.num_rows:
                    batch = batch.filter(row_filter)
                if batch.num_rows:
                    yield batch.select(output)
        except OSError as exc:
            raise CorruptTable(f"the Lance dataset cannot be read: {exc}") from exc
