"""Which columns to sketch, and sketching them over a snapshot's splits (in Spark tasks or in the
worker): bounded memory, one batch and one sketch per column at a time per task."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from processes.maintenance.errors import InputError
from processes.maintenance.iceberg.plan import portable_io
from processes.maintenance.iceberg.statistics.sketches import KINDS, ThetaSketch, value_hashes
from processes.plugin import ProcessContext
from storage.formats.iceberg.read import SliceReader, iter_parts

# --- columns and the sketching task ---------------------------------------------------------------


@dataclass(frozen=True)
class ColumnPlan:
    """A column to sketch: its name (dotted for a struct field), field id and value kind."""

    name: str
    field_id: int
    kind: str

    @property
    def path(self) -> list[str]:
        return self.name.split(".")


def plan_columns(schema: Any, wanted: list[str] | None) -> list[ColumnPlan]:
    """The columns of ``schema`` (a pyiceberg schema) to sketch; ``InputError`` naming the first
    bad one. None means every top-level primitive column (those without a serialization left out)."""
    from pyiceberg.types import StructType

    if wanted is None:
        fields = [f for f in schema.fields if f.field_type.is_primitive]
        return [
            ColumnPlan(f.name, f.field_id, KINDS[type(f.field_type).__name__]) for f in fields if _kind(f)
        ]
    if not wanted:
        raise InputError("columns is empty: name at least one column, or leave it out for all of them")
    plans: list[ColumnPlan] = []
    names = ", ".join(f.name for f in schema.fields)
    for name in dict.fromkeys(wanted):
        field = schema.find_field(name) if _has(schema, name) else None
        if field is None:
            raise InputError(f"unknown column {name!r}; the snapshot's schema has {names}")
        parents = name.split(".")[:-1]
        for depth in range(len(parents)):
            parent = schema.find_field(".".join(parents[: depth + 1]))
            if not isinstance(parent.field_type, StructType):
                raise InputError(
                    f"column {name!r} lies inside a list or map: only struct fields are sketched"
                )
        if not field.field_type.is_primitive:
            raise InputError(f"column {name!r} is {field.field_type}, not a primitive type: no statistics")
        if not _kind(field):
            raise InputError(
                f"column {name!r} is {field.field_type}, which has no single-value serialization"
            )
        plans.append(ColumnPlan(name, field.field_id, KINDS[type(field.field_type).__name__]))
    return plans


def _has(schema: Any, name: str) -> bool:
    try:
        schema.find_field(name)
    except ValueError:
        return False
    return True


def _kind(field: Any) -> str | None:
    return KINDS.get(type(field.field_type).__name__)


def _column(batch: pa.RecordBatch, plan: ColumnPlan) -> pa.Array:
    path = plan.path
    array = batch.column(path[0])
    for child in path[1:]:
        array = pc.struct_field(array, child)  # a null struct gives a null child
    return array


class SketchTask:
    """Sketches the columns over some splits (deletes applied, the snapshot's schema); picklable,
    run in Spark tasks (or in the worker itself). ``chunks[i]`` is task ``i``'s list of splits."""

    RESULT_SCHEMA = "field_id long, theta long, hashes binary, rows long"

    def __init__(
        self, io: Any, schema: pa.Schema, columns: list[ColumnPlan], chunks: list[list[Any]]
    ) -> None:
        self.io, self.schema, self.columns, self.chunks = portable_io(io), schema, columns, chunks

    def sketch(self, splits: Iterable[Any]) -> tuple[dict[int, ThetaSketch], int]:
        tops = list(dict.fromkeys(c.path[0] for c in self.columns))
        reader = SliceReader(self.io, self.schema, tops, None)
        sketches = {c.field_id: ThetaSketch() for c in self.columns}
        rows = 0
        for file_slice, start, length in iter_parts(list(splits)):
            for batch in reader.read(file_slice, start, length):
                rows += batch.num_rows
                for column in self.columns:
                    sketches[column.field_id].update(value_hashes(_column(batch, column), column.kind))
        return sketches, rows

    def results(self, indexes: Iterable[int]) -> Iterator[tuple[int, int, bytes, int]]:
        for index in indexes:
            sketches, rows = self.sketch(self.chunks[index])
            for field_id, sketch in sketches.items():
                yield field_id, sketch.theta, sketch.hashes.astype("<u8").tobytes(), rows

    def __call__(self, items: Iterator[int]) -> Iterator[tuple[int, int, bytes, int]]:
        yield from self.results(items)

    def arrow(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The same for ``mapInArrow`` (Spark Connect, where there are no RDDs)."""
        indexes = [i for batch in batches for i in batch.column(0).to_pylist()]
        rows = list(self.results(indexes))
        yield pa.RecordBatch.from_pylist(
            [{"field_id": f, "theta": t, "hashes": h, "rows": n} for f, t, h, n in rows],
            schema=pa.schema(
                [
                    ("field_id", pa.int64()),
                    ("theta", pa.int64()),
                    ("hashes", pa.binary()),
                    ("rows", pa.int64()),
                ]
            ),
        )


def chunk_splits(splits: list[Any], count: int) -> list[list[Any]]:
    """``splits`` dealt into ``count`` lists of about equal bytes (largest first)."""
    chunks: list[list[Any]] = [[] for _ in range(max(1, min(count, len(splits))))]
    sizes = [0] * len(chunks)
    for split in sorted(splits, key=lambda s: -s.weight):
        smallest = sizes.index(min(sizes))
        chunks[smallest].append(split)
        sizes[smallest] += split.weight
    return chunks


def run_sketches(
    context: ProcessContext, task: SketchTask, *, engine: str
) -> tuple[dict[int, ThetaSketch], int]:
    """The merged sketch of every column and the rows read: one Spark task per chunk of splits
    (``engine`` "spark"), or all in this process ("local")."""
    indexes = list(range(len(task.chunks)))
    if engine == "local":
        results = list(task.results(indexes))
    else:
        spark = context.spark
        try:
            spark_context = spark.sparkContext
        except Exception:  # Spark Connect
            spark_context = None
        if spark_context is not None:
            results = spark_context.parallelize(indexes, len(indexes)).mapPartitions(task).collect()
        else:
            frame = spark.range(len(indexes), numPartitions=len(indexes)).mapInArrow(
                task.arrow, task.RESULT_SCHEMA
            )
            results = [(r["field_id"], r["theta"], r["hashes"], r["rows"]) for r in frame.collect()]
    merged = {c.field_id: ThetaSketch() for c in task.columns}
    rows_by_chunk: list[int] = []
    for field_id, theta, hashes, rows in results:
        merged[int(field_id)].merge(
            ThetaSketch(int(theta), np.frombuffer(hashes, dtype="<u8").astype(np.uint64))
        )
        if field_id == task.columns[0].field_id:
            rows_by_chunk.append(int(rows))
    return merged, sum(rows_by_chunk)


def spark_cores(context: ProcessContext, engine: str) -> int:
    if engine == "local":
        return 1
    try:
        return max(1, int(context.spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect has no SparkContext on the client
        return os.cpu_count() or 2
