"""Reading a Delta table: parquet row groups, deletion vectors, column mapping, partition values,
and the change data feed.

A file is read row group by row group so a split part touches only its own byte range, row
groups whose statistics prove that no row matches the filter are skipped (``storage.spec.rowgroups``),
and the deletion vector (a sorted numpy array) is applied by absolute row index (rows before the
row group, read or skipped, are counted from the footer). Columns are found by physical name (or field id), cast to the table's type (schema
evolution, type widening done exactly, and INT96 timestamps, read at microseconds so 9999-12-31 stays exact), renamed to logical names, and
columns a file lacks are nulls. A variant column reads as ``struct<value: binary, metadata:
binary>`` (its stored bytes); a shredded one is refused when read, naming it (``_evolve``). Partition columns are filled from the log's partition values, never from the file. The
change data feed is read through deltalake's ``load_cdf``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyroaring import BitMap64

from storage.formats.delta._dv import load as load_vector
from storage.formats.delta._dv import relative_path
from storage.formats.delta._evolve import TYPE_WIDENING_FEATURES, check_variant_file_type, has_variant, widen
from storage.formats.delta._log import Store
from storage.formats.delta._types import FIELD_ID_KEY, VOID, DeltaSchema
from storage.spec.errors import CorruptTable, NotSupported, SpecError, UnsupportedFeature
from storage.spec.expressions import Expression, to_arrow
from storage.spec.models import FileSlice
from storage.spec.parquet import open_parquet
from storage.spec.rowgroups import (
    RowGroupFilter,
    Source,
    constant_source,
    keep_mask,
    leaf_index,
    leaf_source,
    sorted_positions,
    usable,
)
from storage.spec.splits import row_groups_in_range
from storage.spec.table import InstantRef, output_columns

if TYPE_CHECKING:
    from storage.formats.delta.table import DeltaSpecTable

BATCH_ROWS = 32 * 1024
CDF_FIELDS = (
    pa.field("_change_type", pa.string()),
    pa.field("_commit_version", pa.int64()),
    pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC")),
)
CDF_COLUMNS = tuple(f.name for f in CDF_FIELDS)


def read_slices(
    store: Store,
    slices: Iterable[tuple[FileSlice, tuple[int, int] | None]],
    schema: DeltaSchema,
    columns: list[str] | None,
    expr: Expression | None,
) -> Iterator[pa.RecordBatch]:
    """Batches of (slice, byte range or None) pairs; columns are checked now, files read lazily."""
    output = output_columns(columns, schema.arrow)
    row_filter = None
    wanted = list(output)
    if expr is not None:
        row_filter = to_arrow(expr)
        for name in sorted(expr.columns()):
            top = name if name in schema.arrow.names else name.split(".", 1)[0]
            if top not in wanted:
                wanted.append(top)
    return _iter_slices(store, slices, schema, wanted, output, row_filter, expr)


def _iter_slices(
    store: Store,
    slices: Iterable[tuple[FileSlice, tuple[int, int] | None]],
    schema: DeltaSchema,
    wanted: list[str],
    output: list[str],
    row_filter: pc.Expression | None,
    expr: Expression | None = None,
) -> Iterator[pa.RecordBatch]:
    for file_slice, byte_range in slices:
        yield from read_slice(
            store,
            schema,
            file_slice,
            wanted,
            row_filter=row_filter,
            output=output,
            byte_range=byte_range,
            expr=expr,
        )


def read_cdf(
    table: DeltaSpecTable, start: InstantRef, end: InstantRef, columns: list[str] | None, filters: Any
) -> Iterator[pa.RecordBatch]:
    """The change data feed of the versions in (start, end], as deltalake's ``load_cdf`` gives it."""
    start_version, end_version = table.version_range(start, end)
    state = table.state(end_version)
    if (state.snapshot.metadata.get("configuration") or {}).get(
        "delta.enableChangeDataFeed", ""
    ).lower() != "true":
        raise NotSupported(
            "delta", f"the cdc reading mode on {table.location_uri}: its change data feed is off"
        )
    widening = sorted(set(state.snapshot.protocol.get("readerFeatures") or ()) & TYPE_WIDENING_FEATURES)
    if widening or state.schema.type_widened:
        # deltalake, which reads the feed, refuses type-widened tables (and would not widen).
        raise UnsupportedFeature(
            f"the change data feed of Delta table {table.location_uri} cannot be read: the table uses "
            f"type widening ({', '.join(widening) or 'delta.typeChanges'}), which deltalake's feed reader lacks"
        )
    expr = table.bind(filters, state.schema)
    output = output_columns(columns, state.schema.arrow) + list(CDF_COLUMNS)
    if start_version + 1 > end_version:
        return iter(())
    return _cdf_batches(table, start_version + 1, end_version, state.schema, output, expr)


def _cdf_batches(
    table: DeltaSpecTable,
    first: int,
    last: int,
    schema: DeltaSchema,
    output: list[str],
    expr: Expression | None,
) -> Iterator[pa.RecordBatch]:
    from deltalake import DeltaTable

    # deltalake answers with string views and a naive millisecond commit time: cast to the
    # table's types and the spec's aware UTC timestamps, as snapshot reads give them.
    target = pa.schema([*schema.arrow, *CDF_FIELDS])
    row_filter = to_arrow(expr) if expr is not None else None
    try:
        delta_table = DeltaTable(table.location_uri, version=table.version)
        reader = pa.RecordBatchReader.from_stream(
            delta_table.load_cdf(starting_version=first, ending_version=last)
        )
        for raw in reader:
            batch = pa.RecordBatch.from_arrays(
                [
                    raw.column(f.name).cast(f.type)
                    if f.name in raw.schema.names
                    else pa.nulls(raw.num_rows, f.type)
                    for f in target
                ],
                schema=target,
            )
            if row_filter is not None:
                batch = batch.filter(row_filter)
            if batch.num_rows:
                yield batch.select(output)
    except SpecError:
        raise
    except Exception as exc:  # deltalake raises its own error types for log and feed problems
        raise CorruptTable(f"change data feed of {table.location_uri} cannot be read: {exc}") from exc


def load_deletion_vector(store: Store, descriptor: Mapping[str, Any]) -> BitMap64:
    relative = relative_path(descriptor)
    path = None
    if relative is not None:
        path = store.fs_path(relative) if descriptor["storageType"] == "p" else store.table_path(relative)
    return load_vector(descriptor, store.read_range, path)


def read_slice(
    store: Store,
    schema: DeltaSchema,
    file_slice: FileSlice,
    columns: Sequence[str],
    *,
    row_filter: pc.Expression | None = None,
    output: Sequence[str] | None = None,
    byte_range: tuple[int, int] | None = None,
    expr: Expression | None = None,
) -> Iterator[pa.RecordBatch]:
    """Batches of one slice: ``columns`` (logical, top level) are materialised, ``row_filter``
    applied, then ``output`` (default ``columns``) kept. ``expr`` (the bound filter
    ``row_filter`` translates; its columns among ``columns``) skips the row groups whose
    statistics prove that no row matches."""
    base = file_slice.base_file
    if base is None:
        return
    output = list(columns if output is None else output)
    path = store.fs_path(base.path)
    try:
        handle = store.fs.open_input_file(path)
    except (FileNotFoundError, OSError) as exc:
        raise CorruptTable(f"data file {base.path} of the Delta table cannot be opened: {exc}") from exc
    with handle:
        try:
            parquet = open_parquet(handle)
        except (OSError, ValueError) as exc:
            raise CorruptTable(f"data file {base.path} is not a readable parquet file: {exc}") from exc
        metadata = parquet.metadata
        plan = _ColumnPlan(
            schema, parquet.schema_arrow, columns, file_slice.partition.values, f"data file {base.path}"
        )
        groups = plan_row_groups(metadata, plan, expr, byte_range)
        if not groups:
            return
        descriptor = base.extra.get("deletion_vector")
        deleted = sorted_positions([load_deletion_vector(store, descriptor)]) if descriptor else None
        first_rows = np.cumsum([0] + [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)])
        for group in groups:
            try:
                yield from _read_group(
                    parquet, plan, group, int(first_rows[group]), deleted, row_filter, output
                )
            except (OSError, pa.ArrowInvalid) as exc:
                raise CorruptTable(f"data file {base.path} cannot be read: {exc}") from exc


def positional_deletes(store: Store, file_slices: Iterable[FileSlice]) -> dict[str, np.ndarray]:
    """``SpecTable.positional_deletes`` of a Delta table: its deletion vectors as row positions
    by data file path."""
    found: dict[str, np.ndarray] = {}
    for file_slice in file_slices:
        base = file_slice.base_file
        descriptor = base.extra.get("deletion_vector") if base is not None else None
        if base is None or not descriptor:
            continue
        positions = sorted_positions([load_deletion_vector(store, descriptor)])
        if positions is not None and len(positions):
            found[base.path] = positions
    return found


def plan_row_groups(
    metadata: pq.FileMetaData,
    plan: _ColumnPlan,
    expr: Expression | None,
    byte_range: tuple[int, int] | None,
) -> list[int]:
    """The row groups a slice reads: those starting in ``byte_range`` (all without one), less
    those whose statistics prove no row matches ``expr``."""
    if byte_range is None:
        candidates = list(range(metadata.num_row_groups))
    else:
        candidates = row_groups_in_range(metadata, byte_range[0], byte_range[1])
    if expr is None or not candidates:
        return list(candidates)
    return RowGroupFilter(expr, metadata, plan.stats_sources(expr, metadata.num_columns)).select(candidates)


def _read_group(
    parquet: pq.ParquetFile,
    plan: _ColumnPlan,
    group: int,
    position: int,
    deleted: np.ndarray | None,
    row_filter: pc.Expression | None,
    output: list[str],
) -> Iterator[pa.RecordBatch]:
    """One row group's batches; ``position`` is the file row index of its first row."""
    for raw in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=[group], columns=plan.file_columns):
        count = raw.num_rows
        batch = plan.conform(raw)
        keep = keep_mask(deleted, position, count)
        if keep is not None:
            batch = batch.filter(keep)
        position += count
        if row_filter is not None and batch.num_rows:
            batch = batch.filter(row_filter)
        if batch.num_rows:
            yield batch.select(output)


class _ColumnPlan:
    """How each wanted logical column is produced from one file."""

    def __init__(
        self,
        schema: DeltaSchema,
        file_schema: pa.Schema,
        columns: Sequence[str],
        partition: Mapping[str, Any],
        where: str,
    ) -> None:
        self.where = where
        self.file_schema = file_schema
        self.fields = [schema.arrow.field(name) for name in columns]
        self.names = {field.name: index for index, field in enumerate(self.fields)}
        self.output_schema = pa.schema(self.fields)
        self.sources: list[tuple[str, Any]] = []  # ("partition", value) | ("file", name) | ("missing", None)
        self.file_columns: list[str] = []
        self.targets: list[pa.Field | None] = []
        by_id = {
            int(f.metadata[FIELD_ID_KEY]): f.name
            for f in file_schema
            if f.metadata and FIELD_ID_KEY in f.metadata
        }
        partition_columns = set(schema.partition_columns)
        for field in self.fields:
            name = field.name
            if name in partition_columns:
                self.sources.append(("partition", partition.get(name)))
                self.targets.append(None)
                continue
            physical = schema.physical_name(name)
            field_id = schema.field_id(name)
            if physical not in file_schema.names and schema.mapping_mode == "id" and field_id is not None:
                physical = by_id.get(field_id, physical)
            if physical in file_schema.names and schema.delta_type(name) != VOID:
                delta_type = schema.delta_type(name)
                if has_variant(delta_type):
                    check_variant_file_type(file_schema.field(physical).type, delta_type, name, where)
                self.sources.append(("file", physical))
                self.file_columns.append(physical)
                self.targets.append(schema.physical_field(name) if schema.mapped else field)
            else:
                # Added by schema evolution after this file was written, or void (all nulls
                # whatever a file holds under its name, as Delta Kernel reads it).
                self.sources.append(("missing", None))
                self.targets.append(None)

    def stats_sources(self, expr: Expression, num_columns: int) -> dict[str, Source]:
        """Where each top-level filter column comes from, for row-group skipping: a file
        column's statistics when its type converts exactly (``usable``), the partition value or
        null (a column added later) as a constant; nested columns are unknown."""
        found: dict[str, Source] = {}
        for name in expr.columns():
            if name not in self.names:
                continue
            index = self.names[name]
            field, (kind, value) = self.fields[index], self.sources[index]
            if kind == "file":
                position = self.file_schema.get_field_index(value)  # -1 when the name repeats
                if position < 0:
                    continue
                leaf = leaf_index(self.file_schema, [position], num_columns)
                if leaf is not None and usable(self.file_schema.field(position).type, field.type):
                    found[name] = leaf_source(leaf, field.type)
                continue
            try:
                filled = pa.repeat(pa.scalar(value if kind == "partition" else None, field.type), 1)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                continue  # the read itself reports it
            constant = constant_source(filled, field.type)
            if constant is not None:
                found[name] = constant
        return found

    def conform(self, raw: pa.RecordBatch) -> pa.RecordBatch:
        count = raw.num_rows
        arrays = []
        for field, (kind, value), target in zip(self.fields, self.sources, self.targets, strict=True):
            if kind == "file":
                arrays.append(_conform(raw.column(value), target, field, self.where))
            elif kind == "partition" and value is not None:
                arrays.append(pa.repeat(pa.scalar(value, field.type), count))
            else:
                arrays.append(pa.nulls(count, field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.output_schema)


def _conform(array: pa.Array, physical: pa.Field, logical: pa.Field, where: str) -> pa.Array:
    """Cast to the table's type (physical names): schema evolution, type widening (exact, see
    ``_evolve.widen``) and INT96 timestamps; then view under the logical names: the same
    layout, so the rename copies nothing."""
    array = widen(array, physical.type, logical.name, where)
    if not physical.type.equals(logical.type):
        array = array.view(logical.type)
    return array
