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

``read_table`` lets Spark's own vectorized parquet reader do the work wherever it reads exactly the
table's rows (``read_path`` says which way and why): plain files, position deletes and deletion
vectors (a bitmap per file on ``_metadata.row_index``), Delta partition values, Iceberg identity
partitions (read from the files that store the column, joined in per file for those that lack it);
``via="source"`` forces the data source.

Modules: ``types`` (Arrow to Spark types), ``filters`` (pushed Spark filters to expressions),
``source`` (the data source, its options and readers), ``plain`` (the choice of path and
``read_table``), ``rowindex`` (the Spark parquet reader's frame with deletes and partition values).
"""

from __future__ import annotations

from storage.spec.spark.filters import spark_filter_to_expression
from storage.spec.spark.plain import parquet_paths_if_plain, read_path, read_table
from storage.spec.spark.source import (
    LakewardenDataSource,
    LakewardenPlainReader,
    LakewardenReader,
    SourceOptions,
    SplitPartition,
    compact_split,
    register,
)
from storage.spec.spark.types import arrow_schema_to_spark, arrow_type_to_spark, conform_batch

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
    "read_path",
    "read_table",
    "register",
    "spark_filter_to_expression",
]
