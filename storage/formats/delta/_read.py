"""Reading Delta data files: parquet row groups, deletion vectors, column mapping, partition values.

A file is read row group by row group so a split part touches only its own byte range, and the
deletion vector is applied by absolute row index (rows before the row group are counted from the
footer). Columns are found by physical name (or field id), cast to the table's type (schema
evolution and old INT96 timestamps), renamed to logical names, and columns a file lacks are
nulls. Partition columns are filled from the log's partition values, never from the file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyroaring import BitMap64

from storage.formats.delta import _dv
from storage.formats.delta._log import Store
from storage.formats.delta._types import FIELD_ID_KEY, DeltaSchema
from storage.spec.errors import CorruptTable
from storage.spec.models import FileSlice
from storage.spec.splits import row_groups_in_range

BATCH_ROWS = 32 * 1024


def load_deletion_vector(store: Store, descriptor: Mapping[str, Any]) -> BitMap64:
    relative = _dv.relative_path(descriptor)
    path = None
    if relative is not None:
        path = store.fs_path(relative) if descriptor["storageType"] == "p" else store.table_path(relative)
    return _dv.load(descriptor, store.read_range, path)


def read_slice(
    store: Store,
    schema: DeltaSchema,
    file_slice: FileSlice,
    columns: Sequence[str],
    *,
    row_filter: pc.Expression | None = None,
    output: Sequence[str] | None = None,
    byte_range: tuple[int, int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Batches of one slice: ``columns`` (logical, top level) are materialised, ``row_filter``
    applied, then ``output`` (default ``columns``) kept."""
    base = file_slice.base_file
    if base is None:
        return
    output = list(columns if output is None else output)
    descriptor = base.extra.get("deletion_vector")
    deleted = load_deletion_vector(store, descriptor) if descriptor else None
    path = store.fs_path(base.path)
    try:
        handle = store.fs.open_input_file(path)
    except (FileNotFoundError, OSError) as exc:
        raise CorruptTable(f"data file {base.path} of the Delta table cannot be opened: {exc}") from exc
    with handle:
        try:
            parquet = pq.ParquetFile(handle)
        except (OSError, ValueError) as exc:
            raise CorruptTable(f"data file {base.path} is not a readable parquet file: {exc}") from exc
        metadata = parquet.metadata
        groups = (
            list(range(metadata.num_row_groups))
            if byte_range is None
            else row_groups_in_range(metadata, byte_range[0], byte_range[1])
        )
        first_rows = [0]
        for index in range(metadata.num_row_groups):
            first_rows.append(first_rows[-1] + metadata.row_group(index).num_rows)
        plan = _ColumnPlan(schema, parquet.schema_arrow, columns, file_slice.partition.values)
        for group in groups:
            position = first_rows[group]
            try:
                batches = parquet.iter_batches(
                    batch_size=BATCH_ROWS, row_groups=[group], columns=plan.file_columns
                )
                for raw in batches:
                    count = raw.num_rows
                    batch = plan.conform(raw)
                    if deleted is not None:
                        keep = _keep_mask(deleted, position, count)
                        if keep is not None:
                            batch = batch.filter(keep)
                    position += count
                    if row_filter is not None and batch.num_rows:
                        batch = batch.filter(row_filter)
                    if batch.num_rows:
                        yield batch.select(output)
            except (OSError, pa.ArrowInvalid) as exc:
                raise CorruptTable(f"data file {base.path} cannot be read: {exc}") from exc


class _ColumnPlan:
    """How each wanted logical column is produced from one file."""

    def __init__(
        self,
        schema: DeltaSchema,
        file_schema: pa.Schema,
        columns: Sequence[str],
        partition: Mapping[str, Any],
    ) -> None:
        self.fields = [schema.arrow.field(name) for name in columns]
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
            if physical not in file_schema.names and schema.mapping_mode == "id":
                physical = by_id.get(schema.field_id(name), physical)
            if physical in file_schema.names:
                self.sources.append(("file", physical))
                self.file_columns.append(physical)
                self.targets.append(schema.physical_field(name) if schema.mapped else field)
            else:
                # Added by schema evolution after this file was written.
                self.sources.append(("missing", None))
                self.targets.append(None)

    def conform(self, raw: pa.RecordBatch) -> pa.RecordBatch:
        count = raw.num_rows
        arrays = []
        for field, (kind, value), target in zip(self.fields, self.sources, self.targets, strict=True):
            if kind == "file":
                arrays.append(_conform(raw.column(value), target, field))
            elif kind == "partition" and value is not None:
                arrays.append(pa.repeat(pa.scalar(value, field.type), count))
            else:
                arrays.append(pa.nulls(count, field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.output_schema)


def _conform(array: pa.Array, physical: pa.Field, logical: pa.Field) -> pa.Array:
    """Cast to the table's type (physical names), then view under the logical names: the same
    layout, so the rename copies nothing."""
    if not array.type.equals(physical.type):
        try:
            array = array.cast(physical.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            # INT96 nanosecond timestamps to microseconds: the only lossy cast a Delta reader
            # accepts (the writer's precision is microseconds anyway).
            array = array.cast(physical.type, safe=False)
    if not physical.type.equals(logical.type):
        array = array.view(logical.type)
    return array


def _keep_mask(deleted: BitMap64, start: int, count: int) -> pa.Array | None:
    local = []
    end = start + count
    for row in deleted.iter_equal_or_larger(start):
        if row >= end:
            break
        local.append(row - start)
    if not local:
        return None
    keep = [True] * count
    for index in local:
        keep[index] = False
    return pa.array(keep, pa.bool_())
