"""Reading the rows of Iceberg file slices: projection by field id, deletes, row filters.

pyiceberg 0.12 refuses tables with equality deletes and cannot read a byte range of a file, so
slices are read here with pyarrow directly:

* columns are matched to the table schema by Iceberg field id (``PARQUET:field_id``), so renamed
  columns keep their data and columns added after a file was written read as nulls; types are
  widened to the table's (int to long, float to double, decimal precision);
* a column the file lacks that an identity field of the file's own partition spec partitions by
  reads as the file's partition value (the Iceberg spec's rule for files added from Hive layouts
  or written without partition columns), converted exactly to the column's Arrow type; a file
  that holds the column keeps its own values, and no other transform gives a column value;
* position deletes and v3 deletion vectors (``_puffin``) drop rows by their position in the data
  file (the index gives a data file its own vector only), equality deletes drop rows whose
  equality columns equal a row of the delete file (an anti-join, nulls equal to nulls, as the
  Iceberg spec says); the file index already chose the delete files by sequence number;
* a split part reads the row groups whose first byte lies in ``[start, start + length)``, so the
  parts of one file (which tile it) read every row group exactly once, less the groups whose
  column statistics prove that no row matches the filter (``storage.spec.rowgroups``: columns
  matched by field id as the rows are, a missing column as the constant it reads as);
* deleted positions are a sorted numpy array per data file (a position delete file is grouped by
  data file once), masks are built with numpy; equality deletes on several columns are matched
  by numbering each column's deleted values (``TupleSet``);
* ORC data and delete files (``_orc``: field ids from the ``iceberg.id`` attributes) are read
  the same way, stripe by stripe, each file whole by the split part holding its first byte;
* the filter is applied exactly to the rows after deletes;
* v3 row lineage columns (``_row_id``, ``_last_updated_sequence_number``), when the read schema
  carries them, are the file's values or inherited from its ``first_row_id`` plus the row's
  physical position (before deletes) and its data sequence number (``_lineage``).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.formats.iceberg._defaults import missing_column
from storage.formats.iceberg._lineage import fill as fill_lineage
from storage.formats.iceberg._lineage import is_lineage, lineage_positions
from storage.formats.iceberg._orc import OrcFile, reads_whole_file
from storage.formats.iceberg._puffin import read_deletion_vector
from storage.spec.errors import CorruptTable, NotSupported, UnsupportedFeature
from storage.spec.models import DataFile, FileContent, FileSlice, Split, SplitPart
from storage.spec.parquet import INT96_UNIT, cast_column, open_parquet
from storage.spec.rowgroups import (
    RowGroupFilter,
    Source,
    constant_source,
    keep_mask,
    leaf_index,
    leaf_source,
    positions_by_path,
    sorted_positions,
    usable,
)
from storage.spec.splits import row_groups_in_range
from storage.spec.table import output_columns

FIELD_ID_KEY = b"PARQUET:field_id"
BATCH_SIZE = 64 * 1024
POS_DELETE_COLUMNS = ["file_path", "pos"]
DATA_FORMATS = ("parquet", "orc")


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


def partition_scalar(value: Any, arrow_type: pa.DataType) -> pa.Scalar:
    """A partition value in the convention of ``DataFile.partition`` (``date``, naive ``datetime``
    for timestamp, UTC ``datetime`` for timestamptz, ``time``, ``Decimal``, ``UUID``, bytes; an
    int of nanoseconds for the ``timestamp_ns`` types) as a scalar of ``arrow_type``, exactly:
    pyarrow refuses rather than rounds a value the type cannot hold."""
    if isinstance(arrow_type, pa.ExtensionType):  # arrow.uuid over fixed_size_binary(16)
        if isinstance(value, uuid.UUID):
            value = value.bytes
        storage = partition_scalar(value, arrow_type.storage_type)
        return pa.ExtensionScalar.from_storage(arrow_type, storage)
    if isinstance(value, uuid.UUID):
        value = value.bytes
    return pa.scalar(value, type=arrow_type)


class IdentityValues:
    """The identity partition values of one data file, by the field id of the column they fill,
    as scalars of the column's Arrow type (converted on first use: a file that holds every
    column never converts one)."""

    def __init__(self, data_file: DataFile, fields_by_id: Mapping[int, pa.Field]) -> None:
        self._path = data_file.path
        columns: Mapping[int, str] = data_file.extra.get("identity_columns") or {}
        nanos: Mapping[str, int] = data_file.extra.get("identity_nanos") or {}
        self._values: dict[int, Any] = {}
        for column_id, name in columns.items():
            if column_id in fields_by_id:
                self._values[column_id] = nanos[name] if name in nanos else data_file.partition.get(name)
        self._scalars: dict[int, pa.Scalar] = {}

    def __bool__(self) -> bool:
        return bool(self._values)

    def column(self, target: pa.Field, count: int) -> pa.Array | None:
        """``count`` rows of ``target``'s partition value, or None when no identity field fills it."""
        wanted = field_id(target)
        if wanted is None or wanted not in self._values:
            return None
        scalar = self._scalars.get(wanted)
        if scalar is None:
            value = self._values[wanted]
            try:
                scalar = partition_scalar(value, target.type)
            except (TypeError, ValueError, OverflowError, pa.ArrowNotImplementedError) as exc:
                raise CorruptTable(
                    f"data file {self._path} lacks column {target.name} and its partition value"
                    f" {value!r} is not a {target.type}: {exc}"
                ) from None
            self._scalars[wanted] = scalar
        return pa.repeat(scalar, count)


def _missing(target: pa.Field, count: int, identity: IdentityValues | None) -> pa.Array:
    """A column the file lacks: its identity partition value, else its initial-default, else nulls."""
    filled = identity.column(target, count) if identity else None
    return filled if filled is not None else missing_column(target, count)


def _fields_by_id(fields: Iterable[pa.Field]) -> dict[int, pa.Field]:
    """Every field of a schema with a field id, struct children included."""
    found: dict[int, pa.Field] = {}
    for field in fields:
        wanted = field_id(field)
        if wanted is not None:
            found[wanted] = field
        if pa.types.is_struct(field.type):
            found.update(_fields_by_id(field.type))
    return found


def _conform(
    array: pa.Array,
    source: pa.Field,
    target: pa.Field,
    identity: IdentityValues | None = None,
    where: str = "a data file",
) -> pa.Array:
    """``array`` (read as ``source``) in the shape and type of ``target``, matching by field id;
    struct children the file lacks are filled from ``identity`` or with nulls."""
    if array.type == target.type:
        return array
    if pa.types.is_struct(target.type) and pa.types.is_struct(array.type):
        by_id = {field_id(f): i for i, f in enumerate(source.type) if field_id(f) is not None}
        by_name = {f.name: i for i, f in enumerate(source.type)}
        children = []
        for child in target.type:
            wanted = field_id(child)
            # by id, or by name in files written without ids (imported parquet), as ``_sources``
            index = by_id.get(wanted) if by_id and wanted is not None else by_name.get(child.name)
            if index is None:
                children.append(_missing(child, len(array), identity))
            else:
                children.append(
                    _conform(array.field(index), source.type.field(index), child, identity, where)
                )
        return pa.StructArray.from_arrays(children, fields=list(target.type), mask=array.is_null())
    # exact, or nanosecond timestamps some engines write into a microsecond column cut to it;
    # a value out of the column's range is CorruptTable, never a wrapped value
    return cast_column(array, target.type, what=f"column {target.name!r} of {where}")


class _DeleteCache:
    """Delete file contents reused across the slices of one read (one delete file usually
    covers a whole partition); bounded so a long read does not accumulate them."""

    def __init__(self, file_io: Any, size: int = 16) -> None:
        self._io = file_io
        self._size = size
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._positions: OrderedDict[str, dict[str, np.ndarray]] = OrderedDict()

    def positions(self, delete_file: DataFile) -> dict[str, np.ndarray]:
        """The sorted deleted positions of a position delete file, by data file path (grouped
        once per delete file, not filtered again for every data file it covers)."""
        found = self._positions.get(delete_file.path)
        if found is None:
            found = positions_by_path(self.get(delete_file, POS_DELETE_COLUMNS), "file_path", "pos")
            self._positions[delete_file.path] = found
            while len(self._positions) > self._size:
                self._positions.popitem(last=False)
        return found

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
        file_format = delete_file.file_format.lower()
        if file_format not in DATA_FORMATS:
            raise UnsupportedFeature(
                f"delete file {delete_file.path} is {delete_file.file_format}; only parquet and ORC are read"
            )
        try:
            with self._io.new_input(delete_file.path).open(seekable=True) as handle:
                if file_format == "orc":
                    table = OrcFile(handle, delete_file.path).read(columns)
                    return table if filters is None else table.filter(filters)
                # a position delete file repeats its data files' paths: read them as a dictionary
                dictionary = ["file_path"] if columns == POS_DELETE_COLUMNS else None
                return pq.read_table(
                    handle,
                    columns=columns,
                    filters=filters,
                    read_dictionary=dictionary,
                    coerce_int96_timestamp_unit=INT96_UNIT,
                )
        except FileNotFoundError:
            raise CorruptTable(f"delete file {delete_file.path} is missing") from None


class SliceReader:
    """Reads slices of one table schema with one projection and one row filter."""

    def __init__(self, file_io: Any, schema: pa.Schema, columns: list[str] | None, expr: Any) -> None:
        self._io = file_io
        self._schema = schema
        self._output = output_columns(columns, schema)
        self._expr = expr
        self._arrow_filter = None
        filter_columns: set[str] = set()
        if expr is not None:
            from storage.spec.expressions import to_arrow

            self._arrow_filter = to_arrow(expr)
            filter_columns = {c.split(".", 1)[0] for c in expr.columns()}
        self._base_needed = set(self._output) | filter_columns
        self._deletes = _DeleteCache(file_io)
        self._fields_by_id = _fields_by_id(schema)
        self.row_groups_skipped = 0  # by statistics, over every read of this reader

    def read(
        self, file_slice: FileSlice, start: int | None = None, length: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        base = file_slice.base_file
        if base is None:
            return
        file_format = base.file_format.lower()
        if file_format not in DATA_FORMATS:
            raise UnsupportedFeature(
                f"data file {base.path} is {base.file_format}; only parquet and ORC data files are read"
            )
        equality = [f for f in file_slice.delete_files if f.content is FileContent.EQUALITY_DELETES]
        positional = [
            f
            for f in file_slice.delete_files
            if f.content in (FileContent.POSITION_DELETES, FileContent.DELETION_VECTOR)
        ]
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
            if file_format == "orc":
                # read whole, by the split part that holds its byte 0 (``_orc``)
                if reads_whole_file(start, length):
                    orc = OrcFile(handle, base.path)
                    sources, read_columns = _sources(orc.schema, target_fields)
                    runs = [(0, orc.batches(read_columns, BATCH_SIZE))]
                    yield from self._table_rows(base, target_fields, sources, positional, equality, runs)
                return
            parquet = open_parquet(handle)
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
        sources, read_columns = _sources(parquet.schema_arrow, target_fields)
        metadata = parquet.metadata
        groups = self.plan_row_groups(parquet, base, start, length)
        if not groups:
            return
        first_rows = np.cumsum([0] + [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)])
        runs = (
            (
                int(first_rows[g]),
                parquet.iter_batches(batch_size=BATCH_SIZE, row_groups=[g], columns=read_columns),
            )
            for g in groups
        )
        yield from self._table_rows(base, target_fields, sources, positional, equality, runs)

    def _table_rows(
        self,
        base: DataFile,
        target_fields: list[pa.Field],
        sources: list[pa.Field | None],
        positional: list[DataFile],
        equality: list[DataFile],
        runs: Iterable[tuple[int, Iterable[pa.RecordBatch]]],
    ) -> Iterator[pa.RecordBatch]:
        """The table rows of a data file's batches: ``runs`` are (file row index of the first
        row, consecutive batches from there); deletes, lineage and the filter applied."""
        identity = IdentityValues(base, self._fields_by_id)
        deleted_positions = self._positions(base, positional)
        equality_sets = [self._equality_set(d, target_fields) for d in equality]
        lineage = lineage_positions(target_fields)
        for offset, batches in runs:
            for batch in batches:
                count = batch.num_rows
                table_batch = _table_batch(batch, target_fields, sources, identity, f"data file {base.path}")
                table_batch = fill_lineage(table_batch, lineage, base, offset)
                keep = keep_mask(deleted_positions, offset, count)
                for columns, values in equality_sets:
                    survives = pc.invert(equality_hits(table_batch, columns, values))
                    keep = survives if keep is None else pc.and_(keep, survives)
                offset += count
                if keep is not None:
                    table_batch = table_batch.filter(keep)
                if self._arrow_filter is not None and table_batch.num_rows:
                    table_batch = table_batch.filter(self._arrow_filter)
                if table_batch.num_rows:
                    yield table_batch.select(self._output) if target_fields else table_batch

    def plan_row_groups(
        self, parquet: pq.ParquetFile, base: DataFile, start: int | None, length: int | None
    ) -> list[int]:
        """The row groups of ``parquet`` (the data file ``base``) this reader reads for the split
        part ``[start, start + length)`` (the whole file when None): the planner's rule (a part
        reads the row groups that start inside it), less the groups whose statistics prove that
        no row matches the filter."""
        metadata = parquet.metadata
        if start is not None and length is not None:
            candidates = row_groups_in_range(metadata, start, length)
        else:
            candidates = list(range(metadata.num_row_groups))
        if self._expr is None or not candidates:
            return list(candidates)
        identity = IdentityValues(base, self._fields_by_id)
        stats = RowGroupFilter(self._expr, metadata, self._stats_sources(parquet, identity))
        groups = stats.select(candidates)
        self.row_groups_skipped += stats.skipped
        return groups

    def _stats_sources(self, parquet: pq.ParquetFile, identity: IdentityValues) -> dict[str, Source]:
        """Where each filter column comes from in this file, for row-group skipping: a leaf
        matched by field id (by name in files without ids, as ``_sources`` and ``_conform``),
        or the constant a missing top-level column reads as; lineage columns are unknown (the
        file's nulls become inherited values)."""
        file_schema = parquet.schema_arrow
        found: dict[str, Source] = {}
        for name in self._expr.columns() if self._expr is not None else ():
            path = resolve_column(list(self._schema), name)
            if path is None or is_lineage(path[0]):
                continue
            file_path = file_field_path(file_schema, path)
            target = path[-1]
            if file_path is None:
                if len(path) == 1:
                    constant = self._constant(target, identity)
                    if constant is not None:
                        found[name] = constant
                continue
            file_field, indexes = file_path
            leaf = leaf_index(file_schema, indexes, parquet.metadata.num_columns)
            if leaf is not None and usable(file_field.type, target.type):
                found[name] = leaf_source(leaf, target.type)
        return found

    @staticmethod
    def _constant(target: pa.Field, identity: IdentityValues) -> Source | None:
        try:
            return constant_source(_missing(target, 1, identity), target.type)
        except CorruptTable:
            return None  # the read itself reports it

    def _positions(self, base: DataFile, positional: list[DataFile]) -> np.ndarray | None:
        return _deleted_positions(self._io, self._deletes, base, positional)

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
            column = table.column(source.name).combine_chunks()
            arrays.append(_conform(column, source, target, where=f"equality delete file {delete_file.path}"))
        if len(arrays) == 1:
            return columns, arrays[0]
        return columns, TupleSet(arrays)


def _sources(
    file_schema: pa.Schema, target_fields: list[pa.Field]
) -> tuple[list[pa.Field | None], list[str]]:
    """The file field of each table field (None when the file lacks it), and the file columns
    to read: matched by field id, or by name in files written without ids (imported parquet)."""
    by_id = {field_id(f): f for f in file_schema if field_id(f) is not None}
    by_name = {f.name: f for f in file_schema}
    sources: list[pa.Field | None] = []
    for target in target_fields:
        wanted = field_id(target)
        sources.append(by_id.get(wanted) if by_id and wanted is not None else by_name.get(target.name))
    read_columns = [s.name for s in sources if s is not None]
    if not read_columns and file_schema.names:
        read_columns = [file_schema.names[0]]  # something to carry the row count
    return sources, read_columns


def resolve_column(fields: list[pa.Field], name: str) -> list[pa.Field] | None:
    """The fields from the top level down to the column ``name`` (dotted through structs)."""
    for field in fields:
        if field.name == name:
            return [field]
    for field in fields:
        if pa.types.is_struct(field.type) and name.startswith(f"{field.name}."):
            rest = resolve_column(list(field.type), name[len(field.name) + 1 :])
            if rest is not None:
                return [field, *rest]
    return None


def file_field_path(file_schema: pa.Schema, path: list[pa.Field]) -> tuple[pa.Field, list[int]] | None:
    """The file field of a table field path and its field indexes, matched level by level by
    field id (by name in files without ids) as ``_sources`` and ``_conform`` match; None when
    the file lacks it."""
    fields: list[pa.Field] = list(file_schema)
    indexes: list[int] = []
    found = None
    for depth, target in enumerate(path):
        if depth:
            if found is None or not pa.types.is_struct(found.type):
                return None
            fields = list(found.type)
        by_id = {field_id(f): i for i, f in enumerate(fields) if field_id(f) is not None}
        wanted = field_id(target)
        if by_id and wanted is not None:
            index = by_id.get(wanted)
        else:
            index = next((i for i, f in enumerate(fields) if f.name == target.name), None)
        if index is None:
            return None
        indexes.append(index)
        found = fields[index]
    return (found, indexes) if found is not None else None


def _table_batch(
    batch: pa.RecordBatch,
    target_fields: list[pa.Field],
    sources: list[pa.Field | None],
    identity: IdentityValues | None = None,
    where: str = "a data file",
) -> pa.RecordBatch:
    """A file batch as the table's fields: conformed types; a column the file lacks is its
    identity partition value (``identity``) or nulls."""
    if not target_fields:
        return batch.select([])
    arrays = []
    for target, source in zip(target_fields, sources, strict=True):
        if source is None:
            arrays.append(_missing(target, batch.num_rows, identity))
        else:
            arrays.append(_conform(batch.column(source.name), source, target, identity, where))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(target_fields))


def _deleted_positions(
    file_io: Any, deletes: _DeleteCache, base: DataFile, positional: list[DataFile]
) -> np.ndarray | None:
    """Sorted unique deleted row positions (int64) of ``base``: its position deletes and DV."""
    if not positional:
        return None
    chunks: list[Any] = []
    for delete_file in positional:
        if delete_file.content is FileContent.DELETION_VECTOR:
            chunks.append(read_deletion_vector(file_io, delete_file, base.path))
        else:
            found = deletes.positions(delete_file).get(base.path)
            if found is not None:
                chunks.append(found)
    return sorted_positions(chunks)


def positional_deletes(file_io: Any, file_slices: Iterable[FileSlice]) -> dict[str, np.ndarray]:
    """``SpecTable.positional_deletes``: one delete cache, so each delete file is read once."""
    deletes = _DeleteCache(file_io)
    found: dict[str, np.ndarray] = {}
    for file_slice in file_slices:
        if not file_slice.delete_files:
            continue
        base = file_slice.base_file
        if base is None or any(f.content is FileContent.EQUALITY_DELETES for f in file_slice.delete_files):
            raise NotSupported("iceberg", "deleted row positions of a slice with equality deletes")
        positions = _deleted_positions(file_io, deletes, base, list(file_slice.delete_files))
        if positions is not None and len(positions):
            found[base.path] = positions
    return found


class TupleSet:
    """The rows of several equality delete columns, for membership tests of whole batches.

    Each column's values are numbered by their index among the column's distinct deleted
    values (``index_in`` with nulls equal to nulls, as ``is_in`` decides single columns), and a
    row's numbers are folded column by column into one integer, renumbered densely after each
    column so it never overflows. A batch row is deleted when every column's value is among the
    deleted ones and its folded number is one of the deleted rows'. Types ``index_in`` lacks
    fall back to Python tuples."""

    def __init__(self, arrays: list[pa.Array]) -> None:
        self._uniques: list[pa.Array] = []
        self._levels: list[np.ndarray] = []
        self._tuples: set[tuple[Any, ...]] | None = None
        try:
            self._uniques = [pc.unique(a) for a in arrays]
            keys = self._codes(arrays[0], 0).to_numpy(zero_copy_only=False).astype(np.int64)
            for index in range(1, len(arrays)):
                codes = self._codes(arrays[index], index).to_numpy(zero_copy_only=False).astype(np.int64)
                level, keys = np.unique(keys * len(self._uniques[index]) + codes, return_inverse=True)
                self._levels.append(level)
        except pa.ArrowNotImplementedError:
            self._tuples = set(zip(*(a.to_pylist() for a in arrays), strict=True))

    def _codes(self, array: pa.Array | pa.ChunkedArray, index: int) -> pa.Array:
        return pc.index_in(array, value_set=self._uniques[index], skip_nulls=False)

    def hits(self, columns: list[pa.Array | pa.ChunkedArray]) -> pa.Array:
        """Whether each row of ``columns`` (a batch's equality columns) is a deleted row."""
        if self._tuples is not None:
            keys = zip(*(c.to_pylist() for c in columns), strict=True)
            return pa.array([key in self._tuples for key in keys], pa.bool_())
        if not self._uniques[0]:  # an empty delete file
            return pa.array(np.zeros(len(columns[0]), dtype=np.bool_), pa.bool_())
        first = self._codes(columns[0], 0)
        found = np.array(first.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
        keys = first.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        for index, level in enumerate(self._levels, start=1):
            codes = self._codes(columns[index], index)
            found &= codes.is_valid().to_numpy(zero_copy_only=False)
            combined = keys * len(self._uniques[index]) + codes.fill_null(0).to_numpy(zero_copy_only=False)
            keys = np.minimum(np.searchsorted(level, combined), len(level) - 1)
            found &= level[keys] == combined
        return pa.array(found, pa.bool_())


def equality_hits(batch: pa.RecordBatch, columns: list[str], values: Any) -> pa.Array:
    if isinstance(values, pa.Array):
        # skip_nulls=False: a null in the delete file deletes null rows (Iceberg equality)
        return pc.is_in(batch.column(columns[0]), value_set=values, skip_nulls=False)
    return values.hits([batch.column(c) for c in columns])
