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

import json
import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import types as T

from storage.io.stores import StoreOptions, is_object_store
from storage.spec.errors import SpecError
from storage.spec.models import FileSlice
from storage.spec.spark.source import SOURCE_NAME, projected_schema, register
from storage.spec.spark.types import (
    arrow_schema_to_spark,
    arrow_type_to_spark,
    has_arrow_type,
    has_spark_type,
)

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
    parquet, when a column has a type Spark's parquet reader refuses, or when the adapter says
    the files do not store the table's columns under the table's names
    (``SpecTable.plain_parquet_layout``: Delta column mapping, Hudi tables that drop partition
    columns from files, Iceberg tables whose schema history renamed a column...).
    Rows are not filtered: the caller applies ``filters`` to the rows (``read_table`` does).
    """
    if not _layout_is_plain(spec_table):
        return None
    paths: list[str] = []
    for file_slice in spec_table.file_index().list_files_at(instant, filters):
        if file_slice.base_file is None or not _slice_is_plain(file_slice):
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
    if any(has_spark_type(t, _UNREADABLE_SPARK_TYPES) for t in spark_types):
        return False
    if any(has_arrow_type(f.type, pa.types.is_fixed_size_binary) for f in table.schema):
        return False
    return table.plain_parquet_layout()


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
) -> DataFrame:
    """The table as a DataFrame: Spark's parquet reader over the plain files when nothing needs
    merging (``parquet_paths_if_plain``), else the ``lakewarden`` data source.

    ``storage`` holds the credentials of an object-store table (when None, the driver's
    environment's, shipped to the tasks as well); such a table is always read through the data
    source (see the module's docstring).
    Bad filters, instants and columns raise here, on the driver, with the parser's message.
    """
    from storage.spec.expressions import bind_filter, to_spark, to_sql
    from storage.spec.models import Instant
    from storage.spec.registry import load_table

    if storage is None and is_object_store(location):
        # the driver's environment, resolved here: executors on other machines do not share it
        storage = StoreOptions.from_env()
    table = load_table(location, format=format, storage=storage)
    if instant is not None:
        instant = table.timeline().get(instant)
    schema = table.schema_at(instant) if instant is not None else table.schema
    expr = bind_filter(filters, schema)
    projected = projected_schema(table, columns, instant)
    on_object_store = is_object_store(location) or is_object_store(table.location)
    if on_object_store:
        _say_fast_path_needs_s3a(location)
    # metadata columns (not stored as plain columns) are computed by the spec reader
    plain = not on_object_store and all(name in schema.names for name in projected.names)
    paths = parquet_paths_if_plain(table, instant, expr) if plain else None
    if paths is not None:
        frame = _parquet_frame(spark, schema, paths)
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


def _parquet_frame(spark: SparkSession, arrow_schema: pa.Schema, paths: list[str]) -> DataFrame:
    schema = arrow_schema_to_spark(arrow_schema)
    if not paths:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*paths)


def _spark_column(name: str) -> Any:
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


__all__ = ["S3A_FALLBACK", "parquet_paths_if_plain", "read_table"]
