"""Spark's own vectorized parquet reader over a table's files, with what the files alone do not
say joined in: the rows that position deletes and deletion vectors remove, and the partition
values of the files that do not store their partition columns (every Delta file; an Iceberg file
that lacks an identity partition's source column).

Every file gets one row in a small broadcast table keyed by its size in bytes (Spark's
``_metadata.file_size``, a per-file constant that costs nothing per row, unlike the file's path):
its partition values, and its deleted positions as a bitmap (``words`` of 64 rows each, from
word ``first_word``). Each scanned row joins its file's row (a broadcast hash join on one bigint
over a table of a few entries, which stays in the CPU's cache) and is kept unless its bit in
``words`` at ``_metadata.row_index`` is set: one array read per row, walking each file's bitmap
in order. Files of equal size cannot share a key: when sizes repeat the key is the file's name where
names are unique and plain (a short string per row), else the files are read in separate groups
(one scan each, unioned), each group holding at most one file of any size. Files that fill in
different partition columns (an Iceberg file that stores its identity column, another that lacks
it) are read in separate scans too; a scan of files that fill in nothing and delete nothing is a
plain parquet scan, without the join.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from storage.spec.spark.types import arrow_schema_to_spark, arrow_type_to_spark

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_KEY, _ROW, _FIRST, _WORDS = (
    "__lakewarden_size",
    "__lakewarden_row",
    "__lakewarden_first_word",
    "__lakewarden_words",
)
#: Reserved names: a table column spelt so is read through the data source instead.
RESERVED = (_KEY, _ROW, _FIRST, _WORDS)
#: Most scans unioned for files of equal sizes before the read goes through the data source.
MAX_GROUPS = 8


@dataclasses.dataclass(frozen=True)
class ParquetPlan:
    """What Spark's parquet reader reads for a table: its parquet ``paths``; their sizes in bytes
    (as the file system says, Spark's ``_metadata.file_size``); the sorted deleted row positions
    (numpy ``int64``) of the files that have some; the columns filled from partition values and
    those values by file: a file fills in the columns of its entry in ``partition_values``, and
    reads a partition column its entry lacks from the file itself."""

    paths: list[str]
    sizes: dict[str, int] = dataclasses.field(default_factory=dict)
    deleted: dict[str, Any] = dataclasses.field(default_factory=dict)
    partition_columns: tuple[str, ...] = ()
    partition_values: dict[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    #: What joins a row to its file: ``"size"`` (``_metadata.file_size``, one bigint) or, when
    #: sizes repeat and the file names are unique and plain, ``"name"`` (``_metadata.file_name``).
    key: str = "size"

    @property
    def joins(self) -> bool:
        """Whether the files need the broadcast table (deletes or partition values)."""
        return bool(self.deleted) or bool(self.partition_columns)

    def filled(self, path: str) -> tuple[str, ...]:
        """The partition columns the file at ``path`` fills in (the others it stores)."""
        values = self.partition_values.get(path, {})
        return tuple(name for name in self.partition_columns if name in values)

    def groups(self) -> list[list[str]]:
        """The paths in groups one scan each reads: the files that fill in the same partition
        columns, and, where such files are joined by size (they fill in columns or some have
        deletes), no two files of the same size in a group (the first file of each size in the
        first group, the second in the second...)."""
        classes: dict[tuple[str, ...], list[str]] = {}
        for path in self.paths:
            classes.setdefault(self.filled(path), []).append(path)
        groups: list[list[str]] = []
        for filled, paths in classes.items():
            if self.key == "name" or not (filled or any(path in self.deleted for path in paths)):
                groups.append(paths)
            else:
                groups.extend(_distinct_sizes(paths, self.sizes))
        return groups


def _distinct_sizes(paths: list[str], sizes: Mapping[str, int]) -> list[list[str]]:
    groups: list[list[str]] = []
    seen: dict[int, int] = {}
    for path in paths:
        index = seen.get(sizes[path], 0)
        seen[sizes[path]] = index + 1
        if index == len(groups):
            groups.append([])
        groups[index].append(path)
    return groups


def deleted_bitmap(positions: np.ndarray) -> tuple[int, list[int]]:
    """(first word, 64-bit words) whose bit ``p % 64`` of word ``p // 64 - first`` is set for
    each deleted position ``p`` (signed words, as Spark's bigint holds them)."""
    positions = np.asarray(positions, dtype=np.int64)
    if not len(positions):
        return 0, []
    first = int(positions[0] >> 6)
    words = np.zeros(int(positions[-1] >> 6) - first + 1, dtype=np.uint64)
    np.bitwise_or.at(
        words, (positions >> 6) - first, np.left_shift(np.uint64(1), (positions & 63).astype(np.uint64))
    )
    return first, words.view(np.int64).tolist()


def parquet_frame(spark: SparkSession, schema: pa.Schema, plan: ParquetPlan) -> DataFrame:
    """The rows of the plan's files in ``schema``'s columns: Spark's parquet reader, with the
    broadcast table of deletes and partition values joined in when the plan has any."""
    if not plan.paths:
        return spark.createDataFrame([], arrow_schema_to_spark(schema))
    if not plan.joins:
        return spark.read.schema(arrow_schema_to_spark(schema)).parquet(*plan.paths)
    frames = [_group_frame(spark, schema, plan, group) for group in plan.groups()]
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def _group_frame(spark: SparkSession, schema: pa.Schema, plan: ParquetPlan, paths: list[str]) -> DataFrame:
    from pyspark.sql import functions as F

    filled = plan.filled(paths[0])  # the same for every file of the group
    if not filled and not any(path in plan.deleted for path in paths):
        return spark.read.schema(arrow_schema_to_spark(schema)).parquet(*paths)
    stored = pa.schema([f for f in schema if f.name not in filled])
    scan = spark.read.schema(arrow_schema_to_spark(stored)).parquet(*paths)
    marks = [F.col("_metadata.file_size" if plan.key == "size" else "_metadata.file_name").alias(_KEY)]
    if plan.deleted:
        marks.append(F.col("_metadata.row_index").alias(_ROW))
    scan = scan.select(*[column(name) for name in stored.names], *marks)
    files = _files_frame(spark, schema, plan, paths, filled)
    joined = scan.join(F.broadcast(files), on=_KEY, how="inner")
    if plan.deleted:
        joined = joined.filter(_kept())
    return joined.select(*[_typed(name, schema) for name in schema.names])


def _files_frame(
    spark: SparkSession, schema: pa.Schema, plan: ParquetPlan, paths: list[str], filled: tuple[str, ...]
) -> DataFrame:
    """One row per file: its key (size or name), the bitmap of its deleted rows, the values of
    the partition columns it fills in (``filled``)."""
    if plan.key == "size":
        keys = pa.array([plan.sizes[p] for p in paths], pa.int64())
    else:
        keys = pa.array([file_name(p) for p in paths], pa.string())
    columns: dict[str, pa.Array] = {_KEY: keys}
    if plan.deleted:
        bitmaps = [deleted_bitmap(plan.deleted[p]) if p in plan.deleted else (0, None) for p in paths]
        columns[_FIRST] = pa.array([first for first, _ in bitmaps], pa.int64())
        columns[_WORDS] = pa.array([words for _, words in bitmaps], pa.list_(pa.int64()))
    for name in filled:
        values = [plan.partition_values[p][name] for p in paths]
        columns[name] = pa.array(values, schema.field(name).type)
    return spark.createDataFrame(pa.table(columns))


def file_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _kept() -> Column:
    """True unless the row's bit is set in its file's bitmap (no bitmap, or a word outside it:
    no deleted row there)."""
    from pyspark.sql import functions as F

    word = f"get({_WORDS}, CAST(shiftright({_ROW}, 6) - {_FIRST} AS INT))"
    return F.expr(f"coalesce(shiftright({word}, CAST({_ROW} & 63 AS INT)) & 1, 0) = 0")


def _typed(name: str, schema: pa.Schema) -> Column:
    return column(name).cast(arrow_type_to_spark(schema.field(name).type)).alias(name)


def column(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def reserved_columns(names: Sequence[str]) -> list[str]:
    return [name for name in names if name in RESERVED]


__all__ = ["MAX_GROUPS", "RESERVED", "ParquetPlan", "column", "deleted_bitmap", "file_name", "parquet_frame"]
