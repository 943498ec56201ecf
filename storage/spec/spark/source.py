"""The ``lakewarden`` Spark data source: its options, splits as input partitions, the readers.

The driver plans splits with ``SpecTable.plan_splits``; every Spark partition carries one split
(picklable, statistics stripped) and the executor reads it with ``SpecTable.read``, which applies
deletes, deletion vectors and logs and filters rows exactly. Filters Spark pushes become our
expressions (``filters``) and prune splits too; those we cannot say exactly are handed back for
Spark to evaluate.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from storage.spec.models import DataFile, Split
from storage.spec.registry import format_adapters
from storage.spec.spark.filters import spark_filter_to_expression
from storage.spec.spark.types import arrow_schema_to_spark, conform_batch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from storage.spec.expressions import Expression
    from storage.spec.table import SpecTable

SOURCE_NAME = "lakewarden"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
DEFAULT_TARGET_SIZE = 128 * 1024 * 1024
DEFAULT_OPEN_FILE_COST = 4 * 1024 * 1024


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
    #: Spark's default parallelism where the query runs (0: unknown); a table smaller than
    #: ``target_size`` per core is planned in smaller splits, as Spark's own file sources are,
    #: so that every core gets a split.
    parallelism: int = 0
    #: The object store's credentials as ``StoreOptions.to_json()`` (empty: the environment's);
    #: kept out of ``repr`` so an options object in a log or traceback shows no secret.
    storage: str = dataclasses.field(default="", repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        location = options.get("location") or options.get("path")
        if not location:
            raise ValueError(
                "the lakewarden data source needs a table: .option('location', path) or .load(path)"
            )
        fmt = (options.get("format") or "").strip().lower() or None
        if fmt is not None and fmt not in format_adapters():  # plugin formats (Lance...) too
            known = ", ".join(sorted(format_adapters()))
            raise ValueError(f"unknown table format {fmt!r} for the lakewarden data source (known: {known})")
        return cls(
            storage=options.get("storage") or "",
            location=str(location),
            format=fmt,
            instant=(options.get("instant") or "").strip() or None,
            filter=(options.get("filter") or "").strip() or None,
            columns=_parse_columns(options.get("columns")),
            target_size=_positive_int(options, "target_size", DEFAULT_TARGET_SIZE),
            open_file_cost=_positive_int(options, "open_file_cost", DEFAULT_OPEN_FILE_COST, allow_zero=True),
            pushdown=str(options.get("pushdown", "true")).strip().lower() not in {"false", "0", "no"},
            parallelism=_positive_int(options, "parallelism", 0, allow_zero=True, unit="cores"),
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


def _positive_int(
    options: Mapping[str, str], key: str, default: int, allow_zero: bool = False, unit: str = "bytes"
) -> int:
    raw = options.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"the {key} option must be a whole number of {unit}, not {raw!r}") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(
            f"the {key} option must be {'non-negative' if allow_zero else 'positive'}, not {value}"
        )
    return value


def _open(options: SourceOptions) -> SpecTable:
    from storage.io.stores import StoreOptions
    from storage.spec.registry import load_table

    storage = StoreOptions.from_json(options.storage) if options.storage else None
    return load_table(options.location, format=options.format, storage=storage)


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


def projected_schema(table: SpecTable, columns: Sequence[str] | None, instant: Any = None) -> pa.Schema:
    """The columns read, in the table's schema at ``instant`` (today's by default); ``columns``
    may name the table's metadata columns too (``SpecTable.metadata_columns``), which a read
    without ``columns`` never returns."""
    schema = table.schema_at(instant) if instant is not None else table.schema
    if columns is None:
        return schema
    extra = table.metadata_columns(instant)
    if len(extra):
        schema = pa.schema([*schema, *extra])
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


def _without_stats(data_file: DataFile) -> DataFile:
    return dataclasses.replace(data_file, lower_bounds=None, upper_bounds=None, null_counts=None)


def compact_split(split: Split) -> Split:
    """``split`` without column statistics (the executor needs paths, ranges and deletes only),
    so each partition pickles to a few hundred bytes per file."""
    parts = []
    for part in split.parts:
        file_slice = part.file_slice
        compact_slice = dataclasses.replace(
            file_slice,
            base_file=None if file_slice.base_file is None else _without_stats(file_slice.base_file),
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
        instant = None if options.instant is None else table.timeline().get(options.instant)
        return arrow_schema_to_spark(projected_schema(table, options.columns, instant))

    def reader(self, schema: T.StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options)
        if options.pushdown:
            return LakewardenReader(options, schema)
        return LakewardenPlainReader(options, schema)


def _check_plan_inputs(table: SpecTable, options: SourceOptions) -> Expression | None:
    from storage.spec.expressions import bind_filter

    instant = None if options.instant is None else table.timeline().get(options.instant)
    return bind_filter(options.filter, table.schema_at(instant) if instant is not None else table.schema)


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

        instant = None if self.options.instant is None else table.timeline().get(self.options.instant)
        schema = table.schema_at(instant) if instant is not None else table.schema
        parts = [e for e in (bind_filter(self.options.filter, schema), *self.pushed) if e is not None]
        return and_(*parts) if parts else None

    def partitions(self) -> list[InputPartition]:
        table = _open_cached(self.scan_id, self.options)
        instant = None if self.options.instant is None else table.timeline().get(self.options.instant)
        expr = self._filter(table)
        target, cost = self.options.target_size, self.options.open_file_cost
        splits = list(table.plan_splits(instant, expr, target_size=target, open_file_cost=cost))
        cores = self.options.parallelism
        if cores > 0 and splits:
            # Whole, even waves: the bytes spread over a multiple of the cores (at least one split
            # per core, Spark's rule for its file sources), so that no core idles while another
            # reads a last or larger split; never under the cost of opening a file.
            total = sum(split.weight for split in splits)  # bytes and open-file costs
            waves = math.ceil(math.ceil(total / target) / cores)
            # (5% over the even share: the packer fills splits file by file, so an exact share
            # would leave a last file over, a split of its own)
            even = max(cost, math.ceil(total * 1.05 / (waves * cores)), 1)
            if even < target:
                splits = list(table.plan_splits(instant, expr, target_size=even, open_file_cost=cost))
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
    if (
        local
        and context is not None
        and context.pythonExec == "python3"
        and "PYSPARK_PYTHON" not in os.environ
    ):
        context.pythonExec = sys.executable
    if _registered(spark):
        return
    spark.dataSource.register(LakewardenDataSource)


def _registered(spark: SparkSession) -> bool:
    try:
        return bool(spark._jsparkSession.dataSource().dataSourceExists(SOURCE_NAME))
    except Exception:  # Spark Connect, or a Spark without the method: registering again is harmless
        return False


__all__ = [
    "DEFAULT_OPEN_FILE_COST",
    "DEFAULT_TARGET_SIZE",
    "PUSHDOWN_CONF",
    "SOURCE_NAME",
    "LakewardenDataSource",
    "LakewardenPlainReader",
    "LakewardenReader",
    "SourceOptions",
    "SplitPartition",
    "compact_split",
    "projected_schema",
    "register",
]
