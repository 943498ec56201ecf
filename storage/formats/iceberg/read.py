"""Reading the rows of Iceberg file slices: projection by field id, deletes, row filters.

pyiceberg 0.12 refuses tables with equality deletes and cannot read a byte range of a file, so
slices are read here with pyarrow directly:

* columns are matched to the table schema by Iceberg field id (``PARQUET:field_id``), so renamed
  columns keep their data and columns added after a file was written read as nulls; types are
  widened to the table's (int to long, float to double, decimal precision);
* position deletes drop rows by their position in the data file, equality deletes drop rows whose
  equality columns equal a row of the delete file (an anti-join, nulls equal to nulls, as the
  Iceberg spec says); the file index already chose the delete files by sequence number;
* a split part reads the row groups whose first byte lies in ``[start, start + length)``, so the
  parts of one file (which tile it) read every row group exactly once;
* the filter is applied exactly to the rows after deletes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.spec.errors import CorruptTable, FilterError, UnsupportedFeature
from storage.spec.models import DataFile, FileContent, FileSlice, Split, SplitPart
from storage.spec.splits import row_groups_in_range

FIELD_ID_KEY = b"PARQUET:field_id"
BATCH_SIZE = 64 * 1024
POS_DELETE_COLUMNS = ["file_path", "pos"]


def field_id(field: pa.Field) -> int | None:
    metadata = field.metadata
    if metadata and FIELD_ID_KEY in metadata:
        return int(metadata[FIELD_ID_KEY])
    return None


def iter_parts(
    source: Split | SplitPart | FileSlice | Iterable[Any],
) -> Iterator[tuple[FileSlice, int | None, int | None]]:
    """(slice, start, length) for every piece of a split, slice or iterable of either."""
    if isinstance(source, Split):
        for part in source.parts:
            yield part.file_slice, part.start, part.length
    elif isinstance(source, SplitPart):
        yield source.file_slice, source.start, source.length
    elif isinstance(source, FileSlice):
        yield source, None, None
    else:
        for item in source:
            yield from iter_parts(item)


def _conform(array: pa.Array, source: pa.Field, target: pa.Field) -> pa.Array:
    """``array`` (read as ``source``) in the shape and type of ``target``, matching by field id."""
    if array.type == target.type:
        return array
    if pa.types.is_struct(target.type) and pa.types.is_struct(array.type):
        by_id = {field_id(f): i for i, f in enumerate(source.type) if field_id(f) is not None}
        by_name = {f.name: i for i, f in enumerate(source.type)}
        children = []
        for child in target.type:
            wanted = field_id(child)
            index = by_id.get(wanted) if wanted is not None else by_name.get(child.name)
            if index is None:
                children.append(pa.nulls(len(array), child.type))
            else:
                children.append(_conform(array.field(index), source.type.field(index), child))
        return pa.StructArray.from_arrays(children, fields=list(target.type), mask=array.is_null())
    try:
        return array.cast(target.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        # e.g. nanosecond timestamps written by some engines into a microsecond column
        return pc.cast(array, target.type, safe=False)


class _DeleteCache:
    """Delete file contents reused across the slices of one read (one delete file usually
    covers a whole partition); bounded so a long read does not accumulate them."""

    def __init__(self, file_io: Any, size: int = 16) -> None:
        self._io = file_io
        self._size = size
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()

    def get(self, delete_file: DataFile, columns: list[str] | None, filters: Any = None) -> pa.Table:
        key = delete_file.path if filters is None else f"{delete_file.path}\0{filters!r}"
        table = self._tables.get(key)
        if table is None:
            table = self._read(delete_file, columns, filters)
            self._tables[key] = table
            while len(self._tables) > self._size:
                self._tables.popitem(last=False)
        return table

    def _read(self, delete_file: DataFile, columns: list[str] | None, filters: Any) -> pa.Table:
        if delete_file.file_format != "parquet":
            raise UnsupportedFeature(
                f"delete file {delete_file.path} is {delete_file.file_format}; only parquet is read"
            )
        try:
            with self._io.new_input(delete_file.path).open(seekable=True) as handle:
                return pq.read_table(handle, columns=columns, filters=filters)
        except FileNotFoundError:
            raise CorruptTable(f"delete file {delete_file.path} is missing") from None


class SliceReader:
    """Reads slices of one table schema with one projection and one row filter."""

    def __init__(self, file_io: Any, schema: pa.Schema, columns: list[str] | None, expr: Any) -> None:
        self._io = file_io
        self._schema = schema
        names = schema.names
        if columns is not None:
            unknown = [c for c in columns if c not in names]
            if unknown:
                raise FilterError(
                    f"unknown column {unknown[0]!r}; the table has {', '.join(names)}", token=unknown[0]
                )
        self._output = list(columns) if columns is not None else list(names)
        self._expr = expr
        self._arrow_filter = None
        filter_columns: set[str] = set()
        if expr is not None:
            from storage.spec.expressions import to_arrow

            self._arrow_filter = to_arrow(expr)
            filter_columns = {c.split(".", 1)[0] for c in expr.columns()}
        self._base_needed = set(self._output) | filter_columns
        self._deletes = _DeleteCache(file_io)

    def read(
        self, file_slice: FileSlice, start: int | None = None, length: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        base = file_slice.base_file
        if base is None:
            return
        if base.file_format != "parquet":
            raise UnsupportedFeature(
                f"data file {base.path} is {base.file_format}; only parquet data files are read"
            )
        equality = [f for f in file_slice.delete_files if f.content is FileContent.EQUALITY_DELETES]
        positional = [f for f in file_slice.delete_files if f.content is FileContent.POSITION_DELETES]
        needed = set(self._base_needed)
        for delete_file in equality:
            needed.update(c.split(".", 1)[0] for c in delete_file.equality_columns)
        # keep schema order so the batch columns line up with the table
        target_fields = [f for f in self._schema if f.name in needed]
        try:
            handle = self._io.new_input(base.path).open(seekable=True)
        except FileNotFoundError:
            raise CorruptTable(f"data file {base.path} is missing") from None
        with handle:
            parquet = pq.ParquetFile(handle)
            yield from self._read_file(parquet, base, target_fields, positional, equality, start, length)

    def _read_file(
        self,
        parquet: pq.ParquetFile,
        base: DataFile,
        target_fields: list[pa.Field],
        positional: list[DataFile],
        equality: list[DataFile],
        start: int | None,
        length: int | None,
    ) -> Iterator[pa.RecordBatch]:
        file_schema = parquet.schema_arrow
        by_id = {field_id(f): f for f in file_schema if field_id(f) is not None}
        by_name = {f.name: f for f in file_schema}
        sources: list[pa.Field | None] = []
        for target in target_fields:
            wanted = field_id(target)
            # files written without field ids (imported parquet) are matched by name
            sources.append(by_id.get(wanted) if by_id and wanted is not None else by_name.get(target.name))
        read_columns = [s.name for s in sources if s is not None]
        if not read_columns and file_schema.names:
            read_columns = [file_schema.names[0]]  # something to carry the row count

        deleted_positions = self._positions(base, positional)
        equality_sets = [self._equality_set(d, target_fields) for d in equality]
        metadata = parquet.metadata
        # the split planner's rule: a part reads the row groups that start inside it
        wanted = None
        if start is not None and length is not None:
            wanted = set(row_groups_in_range(metadata, start, length))
        first_row = 0
        for group in range(metadata.num_row_groups):
            rows = metadata.row_group(group).num_rows
            if wanted is not None and group not in wanted:
                first_row += rows
                continue
            offset = first_row
            for batch in parquet.iter_batches(
                batch_size=BATCH_SIZE, row_groups=[group], columns=read_columns
            ):
                count = batch.num_rows
                arrays = []
                for target, source in zip(target_fields, sources, strict=True):
                    if source is None:
                        arrays.append(pa.nulls(count, target.type))
                    else:
                        arrays.append(_conform(batch.column(source.name), source, target))
                table_batch = (
                    pa.RecordBatch.from_arrays(arrays, schema=pa.schema(target_fields))
                    if target_fields
                    else batch.select([])
                )
                keep = _position_mask(deleted_positions, offset, count)
                for columns, values in equality_sets:
                    survives = pc.invert(_equality_hits(table_batch, columns, values))
                    keep = survives if keep is None else pc.and_(keep, survives)
                offset += count
                if keep is not None:
                    table_batch = table_batch.filter(keep)
                if self._arrow_filter is not None and table_batch.num_rows:
                    table_batch = table_batch.filter(self._arrow_filter)
                if table_batch.num_rows:
                    yield table_batch.select(self._output) if target_fields else table_batch
            first_row += rows

    def _positions(self, base: DataFile, positional: list[DataFile]) -> list[int] | None:
        """Sorted deleted row positions of ``base`` from its position delete files."""
        if not positional:
            return None
        positions: set[int] = set()
        for delete_file in positional:
            table = self._deletes.get(delete_file, POS_DELETE_COLUMNS)
            mask = pc.equal(table.column("file_path"), base.path)
            positions.update(table.column("pos").filter(mask).to_pylist())
        return sorted(positions) if positions else None

    def _equality_set(self, delete_file: DataFile, target_fields: list[pa.Field]) -> tuple[list[str], Any]:
        """(table column names, deleted values) of one equality delete file."""
        ids = delete_file.extra.get("equality_ids", ())
        table = self._deletes.get(delete_file, None)
        by_id = {field_id(f): f for f in table.schema if field_id(f) is not None}
        targets = {field_id(f): f for f in target_fields}
        columns, arrays = [], []
        for wanted in ids:
            source, target = by_id.get(wanted), targets.get(wanted)
            if source is None or target is None:
                raise CorruptTable(
                    f"equality delete file {delete_file.path} lacks the column with field id {wanted}"
                )
            columns.append(target.name)
            arrays.append(_conform(table.column(source.name).combine_chunks(), source, target))
        if len(arrays) == 1:
            return columns, arrays[0]
        return columns, set(zip(*(a.to_pylist() for a in arrays), strict=True))


def _position_mask(deleted: list[int] | None, offset: int, count: int) -> pa.Array | None:
    """Keep-mask of the rows ``offset .. offset + count`` of a file, or None when none is deleted."""
    if deleted is None:
        return None
    low = bisect_left(deleted, offset)
    high = bisect_left(deleted, offset + count)
    if low == high:
        return None
    keep = [True] * count
    for position in deleted[low:high]:
        keep[position - offset] = False
    return pa.array(keep, pa.bool_())


def _equality_hits(batch: pa.RecordBatch, columns: list[str], values: Any) -> pa.Array:
    if isinstance(values, pa.Array):
        # skip_nulls=False: a null in the delete file deletes null rows (Iceberg equality)
        return pc.is_in(batch.column(columns[0]), value_set=values, skip_nulls=False)
    keys = zip(*(batch.column(c).to_pylist() for c in columns), strict=True)
    return pa.array([key in values for key in keys], pa.bool_())
