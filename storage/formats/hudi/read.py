"""Reading a Hudi table into Arrow record batches.

SNAPSHOT merges each slice's log files into its base file with hudi-rs's file group reader;
READ_OPTIMIZED reads base files only; INCREMENTAL reads, with hudi-rs, the records committed in
``(start, end]``. A split part that is a byte range of a base file without logs reads the row
groups that *start* inside the range (so parts cut anywhere cover each row group exactly once),
less those whose statistics prove that no row matches the filter (``storage.spec.rowgroups``);
whole slices are read by hudi-rs, which gets no such help (its log merging is not ours to cut).
A slice with log files can only be merged whole: the part starting at offset 0 reads all of it
and the slice's other parts read nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from storage.spec.errors import InvalidRange
from storage.spec.models import FileSlice, Instant, ReadingMode, Split
from storage.spec.parquet import cast_column, open_parquet
from storage.spec.rowgroups import (
    RowGroupFilter,
    Source,
    constant_source,
    leaf_index,
    leaf_source,
    usable,
)
from storage.spec.splits import row_groups_in_range
from storage.spec.table import InstantRef, output_columns

if TYPE_CHECKING:
    from storage.formats.hudi.table import HudiSpecTable

Part = tuple[FileSlice, int, int | None]  # slice, byte offset in its base file, length (None: whole)


def read_table(
    table: HudiSpecTable,
    source: Any,
    columns: list[str] | None,
    filters: Any,
    mode: ReadingMode,
    end_instant: InstantRef,
) -> Iterator[pa.RecordBatch]:
    """Validates everything up front (mode, filter, columns, instants), then reads lazily."""
    table.check_mode(mode)
    expr = table.bind(filters)
    schema = table.read_schema
    output = output_columns(columns, schema)
    wanted = set(output) | {name.split(".", 1)[0] for name in (expr.columns() if expr is not None else ())}
    read_schema = pa.schema([field for field in schema if field.name in wanted])
    if mode is ReadingMode.INCREMENTAL:
        return _incremental(table, source, end_instant, expr, read_schema, output)
    parts = _parts(table, source, expr, mode)
    return _read_parts(table, parts, mode, expr, read_schema, output)


def _parts(table: HudiSpecTable, source: Any, expr: Any, mode: ReadingMode) -> Iterable[Part]:
    if isinstance(source, Split):
        return [(part.file_slice, part.start, part.length) for part in source.parts]
    if isinstance(source, FileSlice):
        return [(source, 0, None)]
    if source is None or isinstance(source, Instant | int | str):
        timeline = table.timeline()
        target = timeline.resolve(source) or timeline.latest()
        if target is None:
            return []
        slices = table.file_index().slices_at(target, expr, base_only=mode is ReadingMode.READ_OPTIMIZED)
        return ((file_slice, 0, None) for file_slice in slices)
    return ((file_slice, 0, None) for file_slice in source)


def _read_parts(
    table: HudiSpecTable,
    parts: Iterable[Part],
    mode: ReadingMode,
    expr: Any,
    read_schema: pa.Schema,
    output: list[str],
) -> Iterator[pa.RecordBatch]:
    for file_slice, start, length in parts:
        batches = _read_part(table, file_slice, start, length, mode, read_schema, expr)
        yield from _finish(batches, file_slice.partition.values, expr, read_schema, output)


def _read_part(
    table: HudiSpecTable,
    file_slice: FileSlice,
    start: int,
    length: int | None,
    mode: ReadingMode,
    read_schema: pa.Schema,
    expr: Any = None,
) -> Iterator[pa.RecordBatch]:
    read_optimized = mode is ReadingMode.READ_OPTIMIZED
    logs = () if read_optimized else file_slice.delete_files
    base = file_slice.base_file
    as_of = _as_of(file_slice)
    if logs:
        if start > 0:
            return  # merged whole by the part at offset 0
        reader = table.file_group_reader(as_of)
        base_path = table.relative(base) if base is not None else ""
        log_paths = [table.relative(log) for log in logs]
        with table.errors(f"reading file group {file_slice.file_group_id}"):
            yield from reader.read_file_slice_from_paths_stream(
                base_path, log_paths, _options(read_schema, table)
            )
        return
    if base is None:
        return
    if length is None or (start <= 0 and start + length >= base.size_bytes):
        reader = table.file_group_reader(as_of, read_optimized)
        with table.errors(f"reading {base.path}"):
            yield from reader.read_file_slice_from_paths_stream(
                table.relative(base), [], _options(read_schema, table)
            )
        return
    yield from _read_row_groups(table, file_slice, table.relative(base), (start, length), read_schema, expr)


def _as_of(file_slice: FileSlice) -> str | None:
    for data_file in (file_slice.base_file, *file_slice.delete_files):
        if data_file is not None and data_file.extra.get("as_of_instant") is not None:
            return str(data_file.extra["as_of_instant"])
    return None


def _options(read_schema: pa.Schema, table: HudiSpecTable) -> Any:
    from hudi import HudiReadOptions

    options = HudiReadOptions()
    if len(read_schema) < len(table.read_schema):
        options = options.with_projection(list(read_schema.names))
    return options


def _read_row_groups(
    table: HudiSpecTable,
    file_slice: FileSlice,
    relative: str,
    byte_range: tuple[int, int],
    read_schema: pa.Schema,
    expr: Any,
) -> Iterator[pa.RecordBatch]:
    """The row groups of a base file (no log files) that start in ``byte_range``, less those
    whose statistics prove that no row matches ``expr``."""
    assert file_slice.base_file is not None
    with table.errors(f"reading {file_slice.base_file.path}"):
        with table.filesystem.open_input_file(f"{table.root}/{relative}") as handle:
            parquet = open_parquet(handle)
            groups = row_groups_in_range(parquet.metadata, byte_range[0], byte_range[1])
            if groups and expr is not None:
                sources = _stats_sources(parquet, read_schema, file_slice.partition.values, expr)
                groups = RowGroupFilter(expr, parquet.metadata, sources).select(groups)
            if not groups:
                return
            file_schema = parquet.schema_arrow  # rebuilt by pyarrow on every access: read once
            present = [name for name in read_schema.names if file_schema.get_field_index(name) >= 0]
            yield from parquet.iter_batches(row_groups=groups, columns=present)


def _stats_sources(
    parquet: pq.ParquetFile, read_schema: pa.Schema, partition_values: Mapping[str, Any], expr: Any
) -> dict[str, Source]:
    """Where each top-level filter column comes from in a base file (as ``_conform`` reads
    it): the file column by name, else the partition value, else null; nested ones unknown."""
    file_schema = parquet.schema_arrow
    found: dict[str, Source] = {}
    for name in expr.columns():
        if read_schema.get_field_index(name) < 0:
            continue
        target = read_schema.field(name)
        position = file_schema.get_field_index(name)
        if position >= 0:
            leaf = leaf_index(file_schema, [position], parquet.metadata.num_columns)
            if leaf is not None and usable(file_schema.field(position).type, target.type):
                found[name] = leaf_source(leaf, target.type)
            continue
        if name in file_schema.names:
            continue  # a repeated name: unknown
        try:
            filled = pa.array([partition_values.get(name)], type=target.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            continue  # the read itself reports it
        constant = constant_source(filled, target.type)
        if constant is not None:
            found[name] = constant
    return found


def _finish(
    batches: Iterable[pa.RecordBatch],
    partition_values: Mapping[str, Any],
    expr: Any,
    read_schema: pa.Schema,
    output: list[str],
) -> Iterator[pa.RecordBatch]:
    arrow_filter = None
    if expr is not None:
        from storage.spec.expressions import to_arrow

        arrow_filter = to_arrow(expr, read_schema)
    for batch in batches:
        batch = _conform(batch, read_schema, partition_values)
        if arrow_filter is not None and batch.num_rows:
            batch = batch.filter(arrow_filter)
        if batch.num_rows:
            yield batch.select(output)


def _conform(batch: pa.RecordBatch, schema: pa.Schema, partition_values: Mapping[str, Any]) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``'s columns and types: older files may lack newer columns
    (nulls) or the partition columns (dropped by the writer: refilled from the folder name)."""
    if batch.schema.equals(schema):
        return batch
    arrays = []
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        if index >= 0:
            column = batch.column(index)
            arrays.append(cast_column(column, field.type, what=f"column {field.name!r} of a base file"))
        elif field.name in partition_values:
            arrays.append(pa.array([partition_values[field.name]] * batch.num_rows, type=field.type))
        else:
            arrays.append(pa.nulls(batch.num_rows, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _incremental(
    table: HudiSpecTable,
    source: Any,
    end_instant: InstantRef,
    expr: Any,
    read_schema: pa.Schema,
    output: list[str],
) -> Iterator[pa.RecordBatch]:
    if isinstance(source, Split | FileSlice):
        raise InvalidRange("an incremental read starts at an instant, not at a split or file slice")
    timeline = table.timeline()
    start = timeline.resolve(source)
    end = timeline.resolve(end_instant) or timeline.latest()
    if end is None or (start is not None and start.sequence == end.sequence):
        return iter(())
    if start is not None and start.sequence > end.sequence:
        raise InvalidRange(f"instant {start.id} is after instant {end.id}: nothing can be read incrementally")
    return _incremental_batches(table, start, end, expr, read_schema, output)


def _incremental_batches(
    table: HudiSpecTable,
    start: Instant | None,
    end: Instant,
    expr: Any,
    read_schema: pa.Schema,
    output: list[str],
) -> Iterator[pa.RecordBatch]:
    from hudi import HudiQueryType, HudiReadOptions

    options = (
        HudiReadOptions().with_query_type(HudiQueryType.Incremental).with_end_timestamp(_range_time(end))
    )
    if start is not None:
        options = options.with_start_timestamp(_range_time(start))
    with table.errors(f"listing the slices changed up to {end.id}"):
        hudi_slices = table.hudi.get_file_slices(options)
        reader = table.hudi.create_file_group_reader_with_options(options)
    index = table.file_index()
    for hudi_slice in sorted(hudi_slices, key=lambda s: (s.partition_path, s.file_id)):
        matched = index.partition_might_match(expr, hudi_slice.partition_path)
        if matched is None:
            continue
        descriptor, _ = matched
        read_options = options
        if len(read_schema) < len(table.read_schema):
            read_options = options.with_projection(list(read_schema.names))
        with table.errors(f"reading file group {hudi_slice.file_id} incrementally"):
            batches = list(reader.read_file_slice_stream(hudi_slice, read_options))
        yield from _finish(batches, descriptor.values, expr, read_schema, output)


def _range_time(instant: Instant) -> str:
    """The time hudi-rs bounds an incremental range by: completion time on version 8 tables."""
    return str(instant.summary.get("completionTime") or instant.id)
