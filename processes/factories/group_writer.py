"""Writing the groups of a compaction plan into a process's staging folder.

Each group becomes one file (several if it exceeds the target) in the process's staging
folder. Groups run concurrently, one Spark job of one task each, as many at once as Spark has cores,
so every output file approaches the target size while the cores stay busy with different groups
(coalescing a whole partition in one job instead serialises the reads). By default (engine
``arrow``) the task reads the group through the spec API's slice reader (deletes applied, Iceberg
columns matched by field id) and writes it with pyarrow: every type round-trips, field ids and
TIMESTAMP_MICROS included, and it is the fastest path measured (bench/compaction.py). Engine
``spark-sql`` has Spark's own parquet reader and writer do the groups without deletes.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from processes.factories.compaction import MIB, CompactionSettings, RewriteGroup, local_path
from processes.plugin import ProcessContext
from storage.spec.models import FileSlice

logger = logging.getLogger(__name__)

GLOB_CHARACTERS = set("{}[]*?\\")
# Row groups of the rewritten files (pyarrow's own default is 1Mi rows).
ROW_GROUP_ROWS = 1024 * 1024
ROW_GROUP_BYTES = 128 * MIB


@dataclass
class WrittenGroup:
    group: RewriteGroup
    files: list[Path]
    engine: str
    sizes: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.sizes:
            self.sizes = [f.stat().st_size for f in self.files]

    @property
    def size_bytes(self) -> int:
        return sum(self.sizes)


def write_arrow_group(
    reader: Callable[[list[FileSlice]], Iterable[pa.RecordBatch]],
    slices: list[FileSlice],
    schema: pa.Schema,
    out: str,
    *,
    compression: str,
    sort_columns: list[str],
    rows_per_file: int,
) -> list[tuple[str, int, int]]:
    """Read ``slices`` (deletes applied) and write them as parquet files of at most
    ``rows_per_file`` rows under ``out``: [(path, bytes, rows)]. Field ids travel in the schema's
    field metadata; timestamps are written as TIMESTAMP_MICROS."""
    os.makedirs(out, exist_ok=True)
    batches: Iterable[pa.RecordBatch] = (b for b in reader(slices) if b.num_rows)
    if sort_columns:
        gathered = list(batches)
        if gathered:
            table = pa.Table.from_batches(gathered).sort_by([(c, "ascending") for c in sort_columns])
            batches = table.to_batches()
    written: list[list[Any]] = []  # [path, rows]
    state: dict[str, Any] = {"writer": None}

    def flush(buffer: list[pa.RecordBatch]) -> None:
        # One write per row group: readers batch small files' 64k-row batches into few row groups.
        table = pa.Table.from_batches(buffer).select(schema.names).cast(schema)
        offset = 0
        while offset < table.num_rows:
            if state["writer"] is None:
                path = os.path.join(out, f"part-{len(written):05d}.parquet")
                state["writer"] = pq.ParquetWriter(
                    path, schema, compression=compression, coerce_timestamps="us"
                )
                written.append([path, 0])
            take = min(rows_per_file - written[-1][1], table.num_rows - offset)
            state["writer"].write_table(table.slice(offset, take), row_group_size=ROW_GROUP_ROWS)
            offset += take
            written[-1][1] += take
            if written[-1][1] >= rows_per_file:
                state["writer"].close()
                state["writer"] = None

    try:
        buffer: list[pa.RecordBatch] = []
        buffered_rows = buffered_bytes = 0
        for batch in batches:
            buffer.append(batch)
            buffered_rows += batch.num_rows
            buffered_bytes += batch.nbytes
            if buffered_rows >= ROW_GROUP_ROWS or buffered_bytes >= ROW_GROUP_BYTES:
                flush(buffer)
                buffer, buffered_rows, buffered_bytes = [], 0, 0
        if buffer:
            flush(buffer)
    finally:
        if state["writer"] is not None:
            state["writer"].close()
    return [(path, os.path.getsize(path), rows) for path, rows in written]


class ArrowGroupTask:
    """The body of the Spark task that rewrites one group with the spec reader and pyarrow;
    picklable, run in a Spark Python worker."""

    RESULT_SCHEMA = "path string, size long, rows long"

    def __init__(
        self, reader: Any, slices: list[FileSlice], schema: pa.Schema, out: str, **options: Any
    ) -> None:
        self.reader, self.slices, self.schema, self.out, self.options = reader, slices, schema, out, options

    def __call__(self, items: Iterator[Any]) -> Iterator[tuple[str, int, int]]:
        for _ in items:
            pass
        yield from write_arrow_group(self.reader, self.slices, self.schema, self.out, **self.options)

    def arrow(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The same for ``mapInArrow`` (Spark Connect, where there are no RDDs)."""
        rows = list(self(batches))
        yield pa.RecordBatch.from_pylist(
            [{"path": p, "size": size, "rows": n} for p, size, n in rows],
            schema=pa.schema([("path", pa.string()), ("size", pa.int64()), ("rows", pa.int64())]),
        )

    def run(self, spark: Any) -> list[tuple[str, int, int]]:
        """One Spark job of one task."""
        try:
            context = spark.sparkContext
        except Exception:  # Spark Connect
            context = None
        if context is not None:
            # An RDD task needs neither pandas nor Arrow on the JVM side.
            return context.parallelize([0], 1).mapPartitions(self).collect()
        frame = spark.range(1, numPartitions=1).mapInArrow(self.arrow, self.RESULT_SCHEMA)
        return [(r["path"], r["size"], r["rows"]) for r in frame.collect()]


class GroupWriter:
    """Writes the groups of a plan into ``staging``, one Spark job per group (see the module
    docstring). ``reader`` reads slices with deletes applied and must be picklable: it runs in
    Spark tasks. ``engine`` "arrow" (default) runs the spec reader and pyarrow in the task;
    "spark-sql" lets Spark's parquet reader and writer do groups without deletes."""

    def __init__(
        self,
        context: ProcessContext,
        reader: Callable[[list[FileSlice]], Iterable[pa.RecordBatch]],
        schema: pa.Schema,
        staging: Path,
        *,
        settings: CompactionSettings,
        field_ids: bool,
        sort_columns: Iterable[str] = (),
        compression: str = "snappy",
    ) -> None:
        self.context = context
        self.reader = reader
        self.schema = schema
        self.staging = staging
        self.settings = settings
        self.field_ids = field_ids
        self.sort_columns = [c for c in sort_columns if c in schema.names]
        self.compression = compression
        self._spark_schema: Any = None

    def write_all(
        self, groups: list[RewriteGroup], *, progress_total: int | None = None
    ) -> list[WrittenGroup]:
        total = progress_total or len(groups)
        if not groups:
            return []
        self.staging.mkdir(parents=True, exist_ok=True)
        spark = self.context.spark
        if self.settings.engine == "spark-sql":
            # Iceberg field ids: written from the schema's field metadata, matched on read.
            spark.conf.set("spark.sql.parquet.fieldId.write.enabled", "true")
            spark.conf.set("spark.sql.parquet.fieldId.read.enabled", "true")
            # A group lists dozens of files: list them on the driver, not in a Spark job.
            spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "100000")
        workers = self.settings.max_concurrent_groups or self._cores()
        # Spark job tags (which cancel and kill interrupt) are per thread: carry them over.
        from pyspark.util import inheritable_thread_target

        target = inheritable_thread_target(spark)(self.write_group)
        results: list[WrittenGroup] = []
        queue = list(groups)
        pending: set[Future] = set()
        pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(groups))), thread_name_prefix="rewrite")
        try:
            while queue or pending:
                while queue and len(pending) < workers:
                    pending.add(pool.submit(target, queue.pop(0)))
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    results.append(future.result())
                self.context.check_cancelled()
                self.context.report_progress(
                    len(results), total, f"rewrote {len(results)} of {len(groups)} file groups"
                )
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        results.sort(key=lambda w: w.group.index)
        return results

    def _cores(self) -> int:
        try:
            return max(1, int(self.context.spark.sparkContext.defaultParallelism))
        except Exception:  # Spark Connect has no SparkContext on the client
            return os.cpu_count() or 2

    def _outputs(self, group: RewriteGroup) -> int:
        return max(1, math.ceil(group.size_bytes / self.settings.target_file_size))

    def write_group(self, group: RewriteGroup) -> WrittenGroup:
        out = self.staging / f"group-{group.index:05d}"
        if self.settings.engine == "spark-sql" and self._spark_sql_can_write(group):
            try:
                return WrittenGroup(group, self._write_spark_sql(group, out), "spark-sql")
            except Exception:
                self.context.check_cancelled()  # an interrupted job is a cancel, not a fallback
                logger.warning(
                    "Spark SQL could not rewrite group %s; using Arrow", group.index, exc_info=True
                )
                shutil.rmtree(out, ignore_errors=True)
        task = ArrowGroupTask(
            self.reader,
            group.slices,
            self.schema,
            str(out),
            compression=self.compression,
            sort_columns=self.sort_columns,
            rows_per_file=max(1, math.ceil(group.record_count / self._outputs(group))),
        )
        results = task.run(self.context.spark)
        return WrittenGroup(group, [Path(p) for p, _, _ in results], "arrow", [int(n) for _, n, _ in results])

    def _spark_sql_can_write(self, group: RewriteGroup) -> bool:
        from processes.factories.spark_types import spark_schema

        if self._spark_schema is None:
            self._spark_schema = spark_schema(self.schema, field_ids=self.field_ids) or False
        return (
            bool(self._spark_schema)
            and not group.has_deletes
            and not any(GLOB_CHARACTERS & set(local_path(p)) for p in group.paths)
        )

    def _write_spark_sql(self, group: RewriteGroup, out: Path) -> list[Path]:
        spark = self.context.spark
        outputs = self._outputs(group)
        frame = spark.read.schema(self._spark_schema).parquet(*[local_path(p) for p in group.paths])
        frame = frame.coalesce(outputs)
        if self.sort_columns:
            frame = frame.sortWithinPartitions(*self.sort_columns)
        writer = frame.write.mode("overwrite").option("compression", self.compression)
        if outputs > 1:
            writer = writer.option("maxRecordsPerFile", math.ceil(group.record_count / outputs))
        writer.parquet(str(out))
        return sorted(p for p in out.glob("*.parquet") if p.stat().st_size > 0)
