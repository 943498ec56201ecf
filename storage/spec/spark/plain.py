"""The plain-parquet fast path: Spark's own parquet reader over a table's files when nothing needs
merging, and ``read_table``, which takes it when it can and the ``lakewarden`` data source
otherwise.

On an object store the fast path would read through the Spark cluster's own file systems, which
need ``s3a`` support (hadoop-aws and its AWS SDK on the classpath, ``fs.s3a.*`` credentials): a
cluster Lakewarden does not assume. ``read_table`` says so once per process and reads object-store
tables through the ``lakewarden`` data source, whose tasks reach the store through pyarrow with
the credentials given as ``storage`` (``StoreOptions``, shipped to the tasks as the ``storage``
option; the plans Spark shows name the source, not its options).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import types as T

from storage.io.paths import local_path
from storage.io.stores import StoreOptions, is_object_store
from storage.spec.errors import NotSupported, SpecError
from storage.spec.models import FileSlice
from storage.spec.spark.rowindex import (
    MAX_GROUPS,
    ParquetPlan,
    column,
    file_name,
    parquet_frame,
    reserved_columns,
)
from storage.spec.spark.source import SOURCE_NAME, projected_schema, register
from storage.spec.spark.types import arrow_type_to_spark, has_arrow_type, has_spark_type

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from storage.spec.table import SpecTable

# Spark's parquet reader refuses TIME columns, intervals, nulls and fixed-length (UUID) binaries.
_UNREADABLE_SPARK_TYPES = (T.TimeType, T.DayTimeIntervalType, T.NullType)

logger = logging.getLogger(__name__)

S3A_FALLBACK = (
    "the plain-parquet fast path reads object-store tables (%s) through Spark's own file systems, "
    "which need s3a support on the Spark cluster (hadoop-aws with its AWS SDK on the classpath and "
    "fs.s3a.* settings); reading object-store tables through the lakewarden data source instead "
    "(its tasks reach the store through pyarrow). Said once per process."
)
_fallback_said = threading.Event()
#: File names Spark spells as we do in ``_metadata.file_name`` (nothing to percent-encode).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._=-]+")


def _say_fast_path_needs_s3a(location: str) -> None:
    if not _fallback_said.is_set():
        _fallback_said.set()
        logger.warning(S3A_FALLBACK, location)


def parquet_paths_if_plain(
    spec_table: SpecTable, instant: Any = None, filters: Any = None
) -> list[str] | None:
    """The parquet files holding the table's rows at ``instant`` (pruned by ``filters``) when
    Spark's parquet reader, given the table schema, reads exactly those rows; else None.

    None when any file slice has delete files, deletion vectors or log files, when a file is not
    parquet or lacks a partition column it would read (Delta partition columns, an Iceberg
    identity column a file lacks), when a column has a type Spark's parquet reader refuses, or when
    the adapter says the files do not store the table's columns under the table's names
    (``SpecTable.plain_parquet_layout``: Delta column mapping, Hudi tables that drop partition
    columns from files, Iceberg tables whose schema history renamed a column...).
    Rows are not filtered: the caller applies ``filters`` to the rows (``read_table`` does).
    """
    found = parquet_plan(spec_table, instant, filters)
    if isinstance(found, str) or found.joins:
        return None
    return found.paths


@dataclasses.dataclass(frozen=True)
class ReadPath:
    """How ``read_table`` reads a table: ``"parquet"`` (Spark's own parquet reader, ``plan``
    says over which files, with which deletes and partition values) or ``"source"`` (the
    ``lakewarden`` data source), and ``reason``, why not Spark's parquet reader."""

    way: str
    reason: str = ""
    plan: ParquetPlan | None = None


def parquet_plan(spec_table: SpecTable, instant: Any = None, filters: Any = None) -> ParquetPlan | str:
    """What Spark's parquet reader must read for the table's rows at ``instant`` (files pruned by
    ``filters``; rows are not filtered), or why it cannot read them exactly (a sentence).

    Deletes by row position (Iceberg position delete files and deletion vectors, Delta deletion
    vectors) and the partition values of files that do not store their partition columns (Delta's;
    Iceberg identity partitions, per file: ``SpecTable.parquet_partition_values``) are joined in
    (``rowindex``); equality deletes, log files, files other than parquet, columns stored under
    other names or types and types Spark's parquet reader refuses are not.
    """
    partition_columns = _stored_layout(spec_table)
    if isinstance(partition_columns, str):
        return partition_columns
    schema = spec_table.schema_at(instant) if instant is not None else spec_table.schema
    partition_columns = tuple(name for name in partition_columns if name in schema.names)
    paths: list[str] = []
    with_deletes: list[FileSlice] = []
    values: dict[str, Any] = {}
    for file_slice in spec_table.file_index().list_files_at(instant, filters):
        base = file_slice.base_file
        if base is None:
            return "a file group has only log files (merge-on-read rows Spark's reader cannot merge)"
        if base.file_format.lower() != "parquet":
            return f"data file {base.path} is {base.file_format}, not parquet"
        paths.append(base.path)
        if file_slice.delete_files:
            with_deletes.append(file_slice)
        try:
            filled = spec_table.parquet_partition_values(file_slice, partition_columns)
        except SpecError as exc:
            return str(exc)
        if filled:
            values[base.path] = filled
    deleted: dict[str, Any] = {}
    if with_deletes:
        try:
            deleted = spec_table.positional_deletes(with_deletes)
        except NotSupported:
            return "delete files remove rows by value (equality deletes or log files), not by position"
    filled_columns = tuple(name for name in partition_columns if any(name in v for v in values.values()))
    plan = ParquetPlan(paths, {}, deleted, filled_columns, values if filled_columns else {})
    if not plan.joins:
        return plan
    return _with_sizes(plan)


def _with_sizes(plan: ParquetPlan) -> ParquetPlan | str:
    sizes: dict[str, int] = {}
    for path in plan.paths:
        try:
            sizes[path] = os.stat(local_path(path, percent_decoded=False)).st_size
        except (OSError, SpecError) as exc:
            return f"data file {path} cannot be found on the local file system ({exc})"
    found = dataclasses.replace(plan, sizes=sizes)
    if len(set(sizes.values())) < len(sizes):
        names = [file_name(path) for path in plan.paths]
        if len(set(names)) == len(names) and all(_PLAIN_NAME.fullmatch(name) for name in names):
            return dataclasses.replace(found, key="name")
    if len(found.groups()) > MAX_GROUPS:
        return (
            f"more than {MAX_GROUPS} data files share one size and their names repeat, so Spark's"
            " reader cannot tell their rows apart cheaply"
        )
    return found


def _stored_layout(table: SpecTable) -> tuple[str, ...] | str:
    """The partition columns to fill in when the files store every other column as plain
    parquet, or why they do not."""
    try:
        spark_types = [arrow_type_to_spark(f.type) for f in table.schema]
    except SpecError as exc:
        return f"a column has no Spark type ({exc})"
    if any(has_spark_type(t, _UNREADABLE_SPARK_TYPES) for t in spark_types):
        return "a column has a type Spark's parquet reader refuses (time, interval or null)"
    if any(has_arrow_type(f.type, pa.types.is_fixed_size_binary) for f in table.schema):
        return "a column is a fixed-length binary (UUID), which Spark's parquet reader refuses"
    if reserved_columns(table.schema.names):
        return f"a column is named {reserved_columns(table.schema.names)[0]}, a name the reader uses"
    columns = table.parquet_partition_columns()
    if columns is None:
        return (
            "the files do not store the table's columns under its names and types (column mapping,"
            " renamed fields, type widening, defaults, variants or dropped partition columns)"
        )
    return columns


def read_table(
    spark: SparkSession,
    location: str,
    format: str | None = None,
    instant: Any = None,
    filters: Any = None,
    columns: Sequence[str] | None = None,
    *,
    target_size: int | None = None,
    storage: StoreOptions | None = None,
    via: str | None = None,
) -> DataFrame:
    """The table as a DataFrame: Spark's own parquet reader over the table's files wherever it
    reads exactly the table's rows (``read_path``), else the ``lakewarden`` data source.

    ``via="source"`` (or the Spark setting ``spark.lakewarden.read.via=source``) forces the
    data source; ``"auto"`` (the default) takes Spark's reader where exact. ``storage`` holds
    the credentials of an object-store table (when None, the driver's environment's, shipped to
    the tasks as well); such a table is always read through the data source (see the module's
    docstring). Bad filters, instants and columns raise here, on the driver, with the parser's
    message; so does an unknown ``via``.
    """
    from storage.spec.expressions import bind_filter, to_spark
    from storage.spec.registry import load_table

    way = _via(spark, via)
    if storage is None and is_object_store(location):
        # the driver's environment, resolved here: executors on other machines do not share it
        storage = StoreOptions.from_env()
    table = load_table(location, format=format, storage=storage)
    if instant is not None:
        instant = table.timeline().get(instant)
    schema = table.schema_at(instant) if instant is not None else table.schema
    expr = bind_filter(filters, schema)
    projected = projected_schema(table, columns, instant)
    path = read_path(table, location, instant, expr, projected.names, via=way)
    if path.plan is not None:
        frame = parquet_frame(spark, schema, path.plan)
        if expr is not None:
            frame = frame.filter(to_spark(expr))
        return frame.select(*[column(name) for name in projected.names])
    logger.info("reading %s through the lakewarden data source: %s", location, path.reason)
    return _source_frame(spark, table, location, instant, expr, projected, columns, target_size, storage)


VIA_CONF = "spark.lakewarden.read.via"
_WAYS = ("auto", "source")


def _via(spark: SparkSession, via: str | None) -> str:
    if via is None:
        try:
            via = spark.conf.get(VIA_CONF, "auto")
        except Exception:  # a session that refuses unknown settings: the default
            via = "auto"
    way = str(via or "auto").strip().lower()
    if way not in _WAYS:
        raise ValueError(f"via must be one of {', '.join(_WAYS)}, not {via!r}")
    return way


def read_path(
    table: SpecTable,
    location: str,
    instant: Any = None,
    filters: Any = None,
    columns: Sequence[str] | None = None,
    *,
    via: str = "auto",
) -> ReadPath:
    """How ``read_table`` reads ``table`` (opened from ``location``) at ``instant`` with
    ``filters`` (bound) and output ``columns``: Spark's parquet reader, with its plan, or the
    data source, with the reason."""
    if via == "source":
        return ReadPath("source", "forced: via='source'")
    if is_object_store(location) or is_object_store(table.location):
        _say_fast_path_needs_s3a(location)
        return ReadPath("source", "the table is on an object store and Spark here has no s3a file system")
    schema = table.schema_at(instant) if instant is not None else table.schema
    computed = [name for name in columns or () if name not in schema.names]
    if computed:
        return ReadPath("source", f"metadata columns are computed by the spec reader ({', '.join(computed)})")
    plan = parquet_plan(table, instant, filters)
    if isinstance(plan, str):
        return ReadPath("source", plan)
    return ReadPath("parquet", plan=plan)


def _source_frame(
    spark: SparkSession,
    table: SpecTable,
    location: str,
    instant: Any,
    expr: Any,
    projected: pa.Schema,
    columns: Sequence[str] | None,
    target_size: int | None,
    storage: StoreOptions | None,
) -> DataFrame:
    from storage.spec.expressions import to_sql
    from storage.spec.models import Instant

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
    if storage is not None:
        reader = reader.option("storage", storage.to_json())
    cores = _parallelism(spark)
    if cores:
        reader = reader.option("parallelism", str(cores))
    return reader.load()


def _parallelism(spark: SparkSession) -> int:
    """Spark's default parallelism (the cores of a local session, of the cluster's executors);
    0 on Spark Connect, whose client has no SparkContext to ask."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:
        return 0


__all__ = [
    "S3A_FALLBACK",
    "VIA_CONF",
    "ParquetPlan",
    "ReadPath",
    "parquet_paths_if_plain",
    "parquet_plan",
    "read_path",
    "read_table",
]
