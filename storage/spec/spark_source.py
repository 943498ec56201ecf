"""Spark reads of any Lakewarden table: a Python data source whose partitions are planned splits.

    from storage.spec.spark_source import register, read_table

    register(spark)
    frame = (
        spark.read.format("lakewarden")
        .option("location", "/warehouse/orders")
        .option("filter", "region = 'eu'")   # optional, the console's filter syntax
        .option("instant", "3")              # optional: snapshot id, Delta version, Hudi instant
        .option("target_size", str(64 << 20))
        .load()
    )
    frame = read_table(spark, "/warehouse/orders", filters="region = 'eu'")  # fast path when plain

Options of the data source: ``location`` (or the ``load(path)`` argument), ``format`` (iceberg,
delta, hudi; detected when absent), ``instant``, ``filter``, ``columns`` (a JSON list or
comma-separated names: Python data sources get no column pruning from Spark, so this is how a caller
narrows the read), ``target_size`` and ``open_file_cost`` in bytes, ``pushdown`` (``false`` to take
no filters from Spark, for sessions where ``spark.sql.python.filterPushdown.enabled`` is off).

The driver plans splits with ``SpecTable.plan_splits``; every Spark partition carries one split
(picklable, statistics stripped) and the executor reads it with ``SpecTable.read``, which applies
deletes, deletion vectors and logs and filters rows exactly. Filters Spark pushes (``a = 1``,
``a > 1``, ``a in (...)``, ``a is null``, ``a like 'x%'``...) become our expressions and prune splits
too; those we cannot say exactly are handed back for Spark to evaluate.

``parquet_paths_if_plain`` answers the plain parquet files of a table when nothing needs merging, so
``read_table`` can let Spark's own parquet reader do the work.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyspark.sql.datasource as ds
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from storage.spec.errors import SpecError, UnsupportedFeature
from storage.spec.models import DataFile, FileSlice, Split, TableFormat

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from storage.spec.expressions import Expression
    from storage.spec.table import SpecTable

SOURCE_NAME = "lakewarden"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
DEFAULT_TARGET_SIZE = 128 * 1024 * 1024
DEFAULT_OPEN_FILE_COST = 4 * 1024 * 1024


# -- Arrow to Spark types --------------------------------------------------------------------------


def arrow_type_to_spark(type_: pa.DataType) -> T.DataType:  # noqa: C901 - one branch per type family
    """The Spark type that holds values of an Arrow type (large and view variants map to the plain
    Spark type; unsigned integers widen; a timezone-aware timestamp is TIMESTAMP, a naive one
    TIMESTAMP_NTZ)."""
    types = pa.types
    if types.is_dictionary(type_):
        return arrow_type_to_spark(type_.value_type)
    if types.is_boolean(type_):
        return T.BooleanType()
    if types.is_int8(type_):
        return T.ByteType()
    if types.is_int16(type_) or types.is_uint8(type_):
        return T.ShortType()
    if types.is_int32(type_) or types.is_uint16(type_):
        return T.IntegerType()
    if types.is_int64(type_) or types.is_uint32(type_):
        return T.LongType()
    if types.is_uint64(type_):
        return T.DecimalType(20, 0)
    if types.is_float16(type_) or types.is_float32(type_):
        return T.FloatType()
    if types.is_float64(type_):
        return T.DoubleType()
    if types.is_decimal(type_):
        if type_.precision > 38:
            raise UnsupportedFeature(
                f"decimal({type_.precision}, {type_.scale}) exceeds Spark's precision 38"
            )
        return T.DecimalType(type_.precision, type_.scale)
    if types.is_string(type_) or types.is_large_string(type_) or _is(type_, "is_string_view"):
        return T.StringType()
    if (
        types.is_binary(type_)
        or types.is_large_binary(type_)
        or types.is_fixed_size_binary(type_)
        or _is(type_, "is_binary_view")
    ):
        return T.BinaryType()
    if types.is_date(type_):
        return T.DateType()
    if types.is_timestamp(type_):
        return T.TimestampType() if type_.tz is not None else T.TimestampNTZType()
    if types.is_time(type_):
        return T.TimeType(6)
    if types.is_duration(type_):
        return T.DayTimeIntervalType()
    if types.is_null(type_):
        return T.NullType()
    if types.is_list(type_) or types.is_large_list(type_) or types.is_fixed_size_list(type_):
        return T.ArrayType(arrow_type_to_spark(type_.value_type), containsNull=True)
    if _is(type_, "is_list_view") or _is(type_, "is_large_list_view"):
        return T.ArrayType(arrow_type_to_spark(type_.value_type), containsNull=True)
    if types.is_map(type_):
        return T.MapType(
            arrow_type_to_spark(type_.key_type), arrow_type_to_spark(type_.item_type), valueContainsNull=True
        )
    if types.is_struct(type_):
        return T.StructType(
            [T.StructField(f.name, arrow_type_to_spark(f.type), nullable=True) for f in type_]
        )
    raise UnsupportedFeature(f"the Arrow type {type_} has no Spark equivalent")


def arrow_schema_to_spark(schema: pa.Schema) -> T.StructType:
    """A Spark schema for a table schema. Every field is nullable: a column added by schema
    evolution reads as null from older files whatever the table says, and Spark only trusts
    nullability for optimisations, never checks it."""
    return T.StructType([T.StructField(f.name, arrow_type_to_spark(f.type), nullable=True) for f in schema])


def _is(type_: pa.DataType, predicate: str) -> bool:
    check = getattr(pa.types, predicate, None)
    return bool(check and check(type_))


def _conform_array(array: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    if array.type == target:
        return array
    try:
        return pc.cast(array, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        # nanosecond timestamps or times that Spark holds to the microsecond: truncate as Spark would
        return pc.cast(array, target, safe=False)


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``'s columns and types (Spark checks the first batch's
    schema for equality with its own Arrow form of the output schema)."""
    arrays = [_conform_array(batch.column(field.name), field.type) for field in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# -- Spark filters to expressions ------------------------------------------------------------------


def spark_filter_to_expression(spark_filter: Any, schema: pa.Schema) -> Expression | None:
    """The expression saying exactly what a pushed Spark filter says, bound to ``schema``; None
    when it cannot be said exactly (ends-with, contains, float columns whose NaN ordering differs
    between Spark and Arrow, nulls inside an IN list, unknown or nested-container columns)."""
    from storage.spec.expressions import (
        Comparison,
        In,
        IsNull,
        Not,
        NotNull,
        Or,
        StartsWith,
        bind_expression,
    )
    from storage.spec.expressions import binding as _binding

    columns = _binding.Columns(schema)

    def column_of(attribute: tuple[str, ...]) -> _binding.Column | None:
        name = ".".join(attribute)
        try:
            return columns.resolve(name)
        except SpecError:
            return None

    def translate(f: Any) -> Expression | None:  # noqa: C901 - one branch per filter class
        if isinstance(f, ds.Not):
            if isinstance(f.child, ds.EqualNullSafe):
                inner = translate(f.child)
                if inner is None:
                    return None
                # ``not (a <=> v)`` is true for a null ``a``, unlike ``not (a = v)``.
                if isinstance(inner, IsNull):
                    return NotNull(inner.column)
                return Or(Not(inner), IsNull(inner.column))
            inner = translate(f.child)
            return None if inner is None else Not(inner)
        attribute = getattr(f, "attribute", None)
        if attribute is None:
            return None
        column = column_of(tuple(attribute))
        if column is None:
            return None
        name = column.name
        if isinstance(f, ds.IsNull):
            return IsNull(name)
        if isinstance(f, ds.IsNotNull):
            return NotNull(name)
        if pa.types.is_floating(column.type):
            return None  # Spark orders NaN above every number and NaN = NaN; Arrow does neither
        ops = {
            ds.EqualTo: "=",
            ds.EqualNullSafe: "=",
            ds.GreaterThan: ">",
            ds.GreaterThanOrEqual: ">=",
            ds.LessThan: "<",
            ds.LessThanOrEqual: "<=",
        }
        op = ops.get(type(f))
        if op is not None:
            if f.value is None:
                return IsNull(name) if isinstance(f, ds.EqualNullSafe) else None
            return Comparison(op, name, f.value)
        if isinstance(f, ds.In):
            values = tuple(f.value)
            if any(v is None for v in values):
                return None  # ``a in (1, null)`` is null, not false, for other values
            return In(name, values)
        if isinstance(f, ds.StringStartsWith):
            return StartsWith(name, f.value)
        return None

    expr = translate(spark_filter)
    if expr is None:
        return None
    try:
        return bind_expression(expr, schema)
    except (SpecError, TypeError, ValueError):
        return None  # a literal our binder refuses: Spark evaluates it instead


# -- options ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    """The data source options, parsed and checked once (driver) and carried to executors."""

    location: str
    format: str | None = None
    instant: str | None = None
    filter: str | None = None
    columns: tuple[str, ...] | None = None
    target_size: int = DEFAULT_TARGET_SIZE
    open_file_cost: int = DEFAULT_OPEN_FILE_COST
    pushdown: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        location = options.get("location") or options.get("path")
        if not location:
            raise ValueError(
                "the lakewarden data source needs a table: .option('location', path) or .load(path)"
            )
        fmt = (options.get("format") or "").strip().lower() or None
        if fmt is not None and fmt not in {f.value for f in TableFormat}:
            known = ", ".join(f.value for f in TableFormat)
            raise ValueError(f"unknown table format {fmt!r} for the lakewarden data source (known: {known})")
        return cls(
            location=str(location),
            format=fmt,
            instant=(options.get("instant") or "").strip() or None,
            filter=(options.get("filter") or "").strip() or None,
            columns=_parse_columns(options.get("columns")),
            target_size=_positive_int(options, "target_size", DEFAULT_TARGET_SIZE),
            open_file_cost=_positive_int(options, "open_file_cost", DEFAULT_OPEN_FILE_COST, allow_zero=True),
            pushdown=str(options.get("pushdown", "true")).strip().lower() not in {"false", "0", "no"},
        )


def _parse_columns(text: str | None) -> tuple[str, ...] | None:
    if text is None or not str(text).strip():
        return None
    text = str(text).strip()
    if text.startswith("["):
        names = json.loads(text)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"the columns option must be a JSON list of names, not {text!r}")
        return tuple(names)
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _positive_int(options: Mapping[str, str], key: str, default: int, allow_zero: bool = False) -> int:
    raw = options.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"the {key} option must be a whole number of bytes, not {raw!r}") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(
            f"the {key} option must be {'non-negative' if allow_zero else 'positive'}, not {value}"
        )
    return value


def _open(options: SourceOptions) -> SpecTable:
    from storage.spec.registry import load_table

    return load_table(options.location, format=options.format)


# Executors reuse one opened table for the splits of one scan (a Python worker runs many tasks);
# keyed by the scan's id so a new query never sees a table opened before a later commit.
_tables_lock = threading.Lock()
_open_tables: dict[tuple[str, SourceOptions], SpecTable] = {}
_MAX_OPEN_TABLES = 8


def _open_cached(scan_id: str, options: SourceOptions) -> SpecTable:
    key = (scan_id, options)
    with _tables_lock:
        table = _open_tables.get(key)
    if table is None:
        table = _open(options)
        with _tables_lock:
            while len(_open_tables) >= _MAX_OPEN_TABLES:
                _open_tables.pop(next(iter(_open_tables)))
            _open_tables[key] = table
    return table


def _projected_schema(table: SpecTable, columns: Sequence[str] | None) -> pa.Schema:
    schema = table.schema
    if columns is None:
        return schema
    fields = []
    for name in columns:
        index = schema.get_field_index(name)
        if index < 0:
            lowered = [i for i, f in enumerate(schema) if f.name.lower() == name.lower()]
            if len(lowered) != 1:
                raise ValueError(f"unknown column {name!r}; columns are: {', '.join(schema.names)}")
            index = lowered[0]
        fields.append(schema.field(index))
    return pa.schema(fields)


# -- splits as partitions --------------------------------------------------------------------------


def _without_stats(data_file: DataFile | None) -> DataFile | None:
    if data_file is None:
        return None
    return dataclasses.replace(data_file, lower_bounds=None, upper_bounds=None, null_counts=None)


def compact_split(split: Split) -> Split:
    """``split`` without column statistics (the executor needs paths, ranges and deletes only),
    so each partition pickles to a few hundred bytes per file."""
    parts = []
    for part in split.parts:
        file_slice = part.file_slice
        compact_slice = dataclasses.replace(
            file_slice,
            base_file=_without_stats(file_slice.base_file),
            delete_files=tuple(_without_stats(f) for f in file_slice.delete_files),
        )
        parts.append(dataclasses.replace(part, file_slice=compact_slice))
    return Split(parts=tuple(parts), weight=split.weight)


class SplitPartition(InputPartition):
    """One planned split: ``split`` (a ``storage.spec.models.Split``) and its position."""

    def __init__(self, index: int, split: Split) -> None:
        self.index = index
        self.split = split

    def __repr__(self) -> str:
        files = len({p.file_slice.path for p in self.split.parts})
        return f"SplitPartition(index={self.index}, files={files}, bytes={self.split.size_bytes})"


# -- the data source -------------------------------------------------------------------------------


class LakewardenDataSource(DataSource):
    """``spark.read.format("lakewarden")``: any Iceberg, Delta or Hudi table through the spec API."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> T.StructType:
        # Called at load(): the place to refuse a bad filter, instant or column list early.
        options = SourceOptions.parse(self.options)
        table = _open(options)
        _check_plan_inputs(table, options)
        return arrow_schema_to_spark(_projected_schema(table, options.columns))

    def reader(self, schema: T.StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options)
        if options.pushdown:
            return LakewardenReader(options, schema)
        return LakewardenPlainReader(options, schema)


def _check_plan_inputs(table: SpecTable, options: SourceOptions) -> Expression | None:
    from storage.spec.expressions import bind_filter

    if options.instant is not None:
        table.timeline().get(options.instant)
    return bind_filter(options.filter, table.schema)


class LakewardenPlainReader(DataSourceReader):
    """Plans splits on the driver, reads one split per task; takes no filters from Spark."""

    def __init__(self, options: SourceOptions, schema: T.StructType) -> None:
        self.options = options
        self.schema_json = schema.json()
        self.columns = list(schema.fieldNames())
        self.pushed: list[Expression] = []
        self.scan_id = uuid.uuid4().hex

    def _filter(self, table: SpecTable) -> Expression | None:
        from storage.spec.expressions import and_, bind_filter

        parts = [e for e in (bind_filter(self.options.filter, table.schema), *self.pushed) if e is not None]
        return and_(*parts) if parts else None

    def partitions(self) -> list[InputPartition]:
        table = _open_cached(self.scan_id, self.options)
        instant = self.options.instant
        if instant is not None:
            instant = table.timeline().get(instant)
        splits = table.plan_splits(
            instant,
            self._filter(table),
            target_size=self.options.target_size,
            open_file_cost=self.options.open_file_cost,
        )
        return [SplitPartition(i, compact_split(split)) for i, split in enumerate(splits)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SplitPartition):
            return iter(())  # Spark's stand-in partition for a plan with no splits
        return self._read(partition)

    def _read(self, partition: SplitPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema

        table = _open_cached(self.scan_id, self.options)
        expr = self._filter(table)
        output = to_arrow_schema(T.StructType.fromJson(json.loads(self.schema_json)), timezone="UTC")
        wanted = list(self.columns)
        # Read the filter's columns too, so the adapter can filter rows on them, then drop them.
        read_columns = wanted + [c for c in _top_level_columns(expr, table.schema) if c not in wanted]
        for batch in table.read(partition.split, columns=read_columns, filters=expr):
            if batch.num_rows:
                yield conform_batch(batch, output)


class LakewardenReader(LakewardenPlainReader):
    """The reader with Spark filter push-down (``spark.sql.python.filterPushdown.enabled``)."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        table = _open_cached(self.scan_id, self.options)
        for spark_filter in filters:
            expr = spark_filter_to_expression(spark_filter, table.schema)
            if expr is None:
                yield spark_filter
            else:
                self.pushed.append(expr)


def _top_level_columns(expr: Expression | None, schema: pa.Schema) -> list[str]:
    if expr is None:
        return []
    names = set(schema.names)
    found = []
    for column in sorted(expr.columns()):
        top = column if column in names else column.split(".", 1)[0]
        if top not in found:
            found.append(top)
    return found


# -- registration ----------------------------------------------------------------------------------


def register(spark: SparkSession) -> None:
    """Register ``spark.read.format("lakewarden")`` on ``spark`` and enable Python filter push-down
    (``spark.sql.python.filterPushdown.enabled``, off by default in Spark; without it a reader that
    takes filters is refused, so a session that cannot enable it should pass ``pushdown=false``).

    A local Spark started from a virtualenv launches its Python workers with plain ``python3``
    unless ``PYSPARK_PYTHON`` says otherwise; the data source must run in this interpreter (it
    needs pyarrow and the format libraries), so a local session is pointed at it.
    """
    spark.conf.set(PUSHDOWN_CONF, "true")
    try:
        context = spark.sparkContext
        local = str(context.master).startswith("local")
    except Exception:  # Spark Connect: no SparkContext, the server's Python is configured there
        context, local = None, False
    if local and context.pythonExec == "python3" and "PYSPARK_PYTHON" not in os.environ:
        context.pythonExec = sys.executable
    if _registered(spark):
        return
    spark.dataSource.register(LakewardenDataSource)


def _registered(spark: SparkSession) -> bool:
    try:
        return bool(spark._jsparkSession.dataSource().dataSourceExists(SOURCE_NAME))
    except Exception:  # Spark Connect, or a Spark without the method: registering again is harmless
        return False


# -- fast path -------------------------------------------------------------------------------------


def parquet_paths_if_plain(
    spec_table: SpecTable, instant: Any = None, filters: Any = None
) -> list[str] | None:
    """The parquet files holding the table's rows at ``instant`` (pruned by ``filters``) when
    Spark's parquet reader, given the table schema, reads exactly those rows; else None.

    None when any file slice has delete files, deletion vectors or log files, when a file is not
    parquet, or when the files do not store the table's columns under the table's names: Delta
    column mapping or type widening, Delta partition columns (kept in paths, not files), Hudi
    tables that drop partition columns from files, Iceberg tables whose schema history renamed a
    column, reused a name or changed a type (Iceberg matches columns by id, Spark by name).
    Rows are not filtered: the caller applies ``filters`` to the rows (``read_table`` does).
    """
    if not _layout_is_plain(spec_table):
        return None
    paths: list[str] = []
    for file_slice in spec_table.file_index().list_files_at(instant, filters):
        if not _slice_is_plain(file_slice):
            return None
        paths.append(file_slice.base_file.path)
    return paths


def _slice_is_plain(file_slice: FileSlice) -> bool:
    base = file_slice.base_file
    return not file_slice.delete_files and base is not None and base.file_format.lower() == "parquet"


def _layout_is_plain(table: SpecTable) -> bool:
    try:
        spark_types = [arrow_type_to_spark(f.type) for f in table.schema]
    except SpecError:
        return False
    # Spark's parquet reader refuses TIME columns and fixed-length (UUID) binaries.
    if any(_has_type(t, (T.TimeType, T.DayTimeIntervalType, T.NullType)) for t in spark_types):
        return False
    if any(_has_arrow_type(f.type, pa.types.is_fixed_size_binary) for f in table.schema):
        return False
    properties = table.definition.properties
    if table.format is TableFormat.DELTA:
        if str(properties.get("delta.columnMapping.mode", "none")).lower() not in {"", "none"}:
            return False
        if str(properties.get("delta.enableTypeWidening", "false")).lower() == "true":
            return False
        return not table.partition_spec.is_partitioned
    if table.format is TableFormat.HUDI:
        drops = str(properties.get("hoodie.datasource.write.drop.partition.columns", "false")).lower()
        return not (drops == "true" and table.partition_spec.is_partitioned)
    if table.format is TableFormat.ICEBERG:
        return _iceberg_names_are_stable(table)
    return False


def _iceberg_names_are_stable(table: SpecTable) -> bool:
    """Every schema in the table's history spells each field id the same way with the same type,
    and never gives a name to two ids: then reading by name equals reading by id."""
    pyiceberg_table = getattr(table, "pyiceberg_table", None)
    if pyiceberg_table is None:
        return False
    from pyiceberg.schema import index_by_name

    metadata = pyiceberg_table.metadata
    current = metadata.schema()
    current_ids = index_by_name(current)
    for schema in metadata.schemas:
        for name, field_id in index_by_name(schema).items():
            if name in current_ids and current_ids[name] != field_id:
                return False  # the name was dropped and re-added: old files hold other data under it
            try:
                now = current.find_field(field_id)
            except ValueError:
                continue  # dropped column: Spark ignores it, as Iceberg does
            if current.find_column_name(field_id) != name:
                return False
            if not _spark_reads_as(schema.find_field(field_id).field_type, now.field_type):
                return False
    return True


def _spark_reads_as(old: Any, new: Any) -> bool:
    """Whether Spark's parquet reader reads a file column of Iceberg type ``old`` as ``new``: the
    same type, or one of Iceberg's promotions that Spark 4 widens while reading (int to long, float
    to double, a decimal's precision)."""
    from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType

    if old == new:
        return True
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return old.scale == new.scale and old.precision <= new.precision
    return False


def _has_type(type_: T.DataType, kinds: tuple[type, ...]) -> bool:
    if isinstance(type_, kinds):
        return True
    if isinstance(type_, T.ArrayType):
        return _has_type(type_.elementType, kinds)
    if isinstance(type_, T.MapType):
        return _has_type(type_.keyType, kinds) or _has_type(type_.valueType, kinds)
    if isinstance(type_, T.StructType):
        return any(_has_type(f.dataType, kinds) for f in type_.fields)
    return False


def _has_arrow_type(type_: pa.DataType, check: Any) -> bool:
    if check(type_):
        return True
    if pa.types.is_struct(type_):
        return any(_has_arrow_type(f.type, check) for f in type_)
    if pa.types.is_map(type_):
        return _has_arrow_type(type_.key_type, check) or _has_arrow_type(type_.item_type, check)
    if hasattr(type_, "value_type") and not pa.types.is_dictionary(type_):
        return _has_arrow_type(type_.value_type, check)
    return False


def read_table(
    spark: SparkSession,
    location: str,
    format: str | None = None,
    instant: Any = None,
    filters: Any = None,
    columns: Sequence[str] | None = None,
    *,
    target_size: int | None = None,
) -> DataFrame:
    """The table as a DataFrame: Spark's parquet reader over the plain files when nothing needs
    merging (``parquet_paths_if_plain``), else the ``lakewarden`` data source.

    Bad filters, instants and columns raise here, on the driver, with the parser's message.
    """
    from storage.spec.expressions import bind_filter, to_spark, to_sql
    from storage.spec.models import Instant
    from storage.spec.registry import load_table

    table = load_table(location, format=format)
    expr = bind_filter(filters, table.schema)
    if instant is not None:
        instant = table.timeline().get(instant)
    projected = _projected_schema(table, columns)
    paths = parquet_paths_if_plain(table, instant, expr)
    if paths is not None:
        frame = _parquet_frame(spark, table, paths)
        if expr is not None:
            frame = frame.filter(to_spark(expr))
        return frame.select(*[_spark_column(name) for name in projected.names])
    register(spark)
    reader = spark.read.format(SOURCE_NAME).option("location", location).option("format", table.format.value)
    if isinstance(instant, Instant):
        reader = reader.option("instant", str(instant.id))
    if expr is not None:
        reader = reader.option("filter", to_sql(expr))
    if columns is not None:
        reader = reader.option("columns", json.dumps(projected.names))
    if target_size is not None:
        reader = reader.option("target_size", str(target_size))
    return reader.load()


def _parquet_frame(spark: SparkSession, table: SpecTable, paths: list[str]) -> DataFrame:
    schema = arrow_schema_to_spark(table.schema)
    if not paths:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*paths)


def _spark_column(name: str) -> Any:
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


__all__ = [
    "LakewardenDataSource",
    "LakewardenPlainReader",
    "LakewardenReader",
    "SourceOptions",
    "SplitPartition",
    "arrow_schema_to_spark",
    "arrow_type_to_spark",
    "compact_split",
    "conform_batch",
    "parquet_paths_if_plain",
    "read_table",
    "register",
    "spark_filter_to_expression",
]
