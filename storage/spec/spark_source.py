"""Spark reads of any Lakewarden table: the documented import path (``from storage.spec.spark_source
import register, read_table``) of the ``storage.spec.spark`` package, which holds the code."""

from __future__ import annotations

from storage.spec.spark import (
    LakewardenDataSource,
    LakewardenPlainReader,
    LakewardenReader,
    SourceOptions,
    SplitPartition,
    arrow_schema_to_spark,
    arrow_type_to_spark,
    compact_split,
    conform_batch,
    parquet_paths_if_plain,
    read_path,
    read_table,
    register,
    spark_filter_to_expression,
)

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
