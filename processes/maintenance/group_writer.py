"""Writing the groups of a compaction plan: into a process's staging folder (local tables) or in
place under unique names (object stores; see ``outputs``).

Each group becomes one file (several if it exceeds the target). Groups run concurrently, one Spark job of one task each, as many at once as Spark has cores,
so every output file approaches the target size while the cores stay busy with different groups
(coalescing a whole partition in one job instead serialises the reads). By default (engine
``arrow``) the task reads the group through the spec API's slice reader (deletes applied, Iceberg
columns matched by field id) and writes it with pyarrow: every type round-trips, field ids and
TIMESTAMP_MICROS included, and it is the fastest path measured (bench/compaction.py). Engine
``spark-sql`` has Spark's own parquet reader and writer do the groups without deletes; on an
object store it would need the cluster's ``s3a`` support (hadoop-aws), which Lakewarden does not
assume: the process says so once and uses ``arrow``, whose tasks reach the store through pyarrow
with the table's credentials (``StoreOptions``, shipped to the task as JSON).

A clustering rewrite (``Ordering``: strategy ``sort`` or ``zorder``) is always written by the arrow
engine: the task gathers the group, orders it as a whole (``order_table``) and cuts it into files in
that order, so file 1 holds the smallest keys. The z-order key is Iceberg's (Spark's
``ZOrderByteUtils``): every column becomes an 8-byte order-preserving unsigned key (``column_key``),
and the keys' bits are interleaved, most significant first, column after column (``zorder_key``).
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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from processes.maintenance.orc_output import ORC, PARQUET, OrcOutputFile
from processes.maintenance.outputs import RewriteOutputs, StagingOutputs, local_path
from processes.maintenance.planning import MIB, SORT, CompactionSettings, Ordering, RewriteGroup
from processes.plugin import ProcessContext
from storage.io import StoreOptions, filesystem, is_local, uri
from storage.spec.models import FileSlice

logger = logging.getLogger(__name__)

GLOB_CHARACTERS = set("{}[]*?\\")
# Row groups of the rewritten files (pyarrow's own default is 1Mi rows).
ROW_GROUP_ROWS = 1024 * 1024
ROW_GROUP_BYTES = 128 * MIB


S3A_FALLBACK = (
    "the spark-sql engine reads and writes through Spark's own file systems, which need s3a support "
    "(hadoop-aws) on the Spark cluster for object-store tables; this rewrite uses the arrow engine"
)

_FALLBACK_SAID: set[int | None] = set()


@dataclass
class WrittenGroup:
    """A written group: its files (local paths in staging, or object-store URIs in place)."""

    group: RewriteGroup
    files: list[str]
    engine: str
    sizes: list[int] = field(default_factory=list)
    # per file: the partition key the group's partitioner gave its rows (None: not split)
    partitions: list[str | None] = field(default_factory=list)
    # per file: an ORC file's metrics (``orc_output.OrcMetrics.dumps``), b"" for parquet
    metrics: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.files = [str(f) for f in self.files]
        if not self.sizes:
            self.sizes = [os.path.getsize(f) for f in self.files]
        if not self.partitions:
            self.partitions = [None] * len(self.files)
        if not self.metrics:
            self.metrics = [b""] * len(self.files)

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
    name_prefix: str = "",
    storage_json: str = "",
    partitioner: Callable[[pa.Table], list[tuple[str, pa.Table]]] | None = None,
    ordering: Ordering | None = None,
    file_format: str = PARQUET,
) -> list[tuple[str, int, int, str | None, bytes]]:
    """Read ``slices`` (deletes applied) and write them as ``<name_prefix>part-NNNNN.parquet``
    (``.orc`` with ``file_format`` orc) files of at most ``rows_per_file`` rows under ``out`` (a
    local folder, or an object-store prefix reached with the ``StoreOptions`` in
    ``storage_json``): [(path or URI, bytes, rows, key, metrics)]. Field ids travel in the
    schema's field metadata; parquet timestamps are written as TIMESTAMP_MICROS; an ORC file's
    metrics are ``orc_output.OrcMetrics.dumps()`` (b"" for parquet: its footer has them). With a
    ``partitioner`` (rows -> [(key, rows)]) each key's rows go to files of their own, whose key is
    returned (None without one). With an ``ordering`` the group is ordered as a whole first."""
    storage = StoreOptions.from_json(storage_json) if storage_json else None
    fs, root = filesystem(out, storage)
    if is_local(out):
        os.makedirs(root, exist_ok=True)
    batches = (
        _ordered_batches(reader(slices), ordering)
        if ordering is not None
        else _sorted_batches(reader(slices), sort_columns)
    )
    files = _OutputFiles(fs, f"{root}/{name_prefix}", schema, compression, rows_per_file, file_format)

    def flush(buffer: list[pa.RecordBatch]) -> None:
        # One write per row group: readers batch small files' 64k-row batches into few row groups.
        table = pa.Table.from_batches(buffer).select(schema.names).cast(schema)
        for key, rows in partitioner(table) if partitioner is not None else [(None, table)]:
            files.write(key, rows)

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
        files.close()
    written = files.written
    sizes = [info.size for info in fs.get_file_info([path for path, _, _, _ in written])]
    return [
        (uri(out, path), int(size), rows, key, file.metrics.dumps() if file_format == ORC else b"")
        for (path, rows, key, file), size in zip(written, sizes, strict=True)
    ]


class _OutputFiles:
    """The files one task writes: ``<prefix>part-NNNNN.parquet`` (or ``.orc``), one open per
    partition key, the next one started when it holds ``rows_per_file`` rows; ``written``:
    [path, rows, key, writer]."""

    def __init__(
        self, fs: Any, prefix: str, schema: pa.Schema, compression: str, rows_per_file: int, file_format: str
    ) -> None:
        self.fs, self.prefix, self.schema = fs, prefix, schema
        self.compression, self.rows_per_file, self.file_format = compression, rows_per_file, file_format
        self.written: list[list[Any]] = []
        self._open: dict[str | None, tuple[Any, list[Any]]] = {}

    def _new(self, path: str) -> Any:
        if self.file_format == ORC:
            return OrcOutputFile(self.fs, path, self.schema, self.compression)
        return pq.ParquetWriter(
            path, self.schema, compression=self.compression, coerce_timestamps="us", filesystem=self.fs
        )

    def write(self, key: str | None, table: pa.Table) -> None:
        offset = 0
        while offset < table.num_rows:
            if key not in self._open:
                path = f"{self.prefix}part-{len(self.written):05d}.{self.file_format}"
                parquet = self._new(path)
                self.written.append([path, 0, key, parquet])
                self._open[key] = (parquet, self.written[-1])
            parquet, row = self._open[key]
            take = min(self.rows_per_file - row[1], table.num_rows - offset)
            parquet.write_table(table.slice(offset, take), row_group_size=ROW_GROUP_ROWS)
            offset += take
            row[1] += take
            if row[1] >= self.rows_per_file:
                self._open.pop(key)[0].close()

    def close(self) -> None:
        for parquet, _ in self._open.values():
            parquet.close()
        self._open = {}


def _sorted_batches(batches: Iterable[pa.RecordBatch], sort_columns: list[str]) -> Iterable[pa.RecordBatch]:
    """The non-empty batches, sorted by ``sort_columns`` when there are any (gathered first)."""
    batches = (b for b in batches if b.num_rows)
    if not sort_columns:
        return batches
    gathered = list(batches)
    if not gathered:
        return []
    return pa.Table.from_batches(gathered).sort_by([(c, "ascending") for c in sort_columns]).to_batches()


def _ordered_batches(batches: Iterable[pa.RecordBatch], ordering: Ordering) -> Iterable[pa.RecordBatch]:
    gathered = [b for b in batches if b.num_rows]
    if not gathered:
        return []
    return order_table(pa.Table.from_batches(gathered), ordering).to_batches()


def order_table(table: pa.Table, ordering: Ordering) -> pa.Table:
    """``table``'s rows in ``ordering``'s order (stable: ties keep their order)."""
    if ordering.kind == SORT:
        keys: dict[str, pa.Array] = {}
        sort_keys: list[tuple[str, str]] = []
        for position, f in enumerate(ordering.fields):
            column = table.column(f.column).combine_chunks()
            # nulls as a key of their own before the values: each field has its own placement
            keys[f"n{position}"] = pc.is_null(column, nan_is_null=False)
            keys[f"v{position}"] = column
            sort_keys += [(f"n{position}", "descending" if f.nulls_first else "ascending")]
            sort_keys += [(f"v{position}", "descending" if f.descending else "ascending")]
        indices = pc.sort_indices(pa.table(keys), sort_keys=sort_keys)
    else:
        words = zorder_key([table.column(c) for c in ordering.columns])
        indices = pa.array(np.lexsort(words.T[::-1]))
    return table.take(indices)


SIGN = np.uint64(1 << 63)


def column_key(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An unsigned 64-bit key per value whose order is the values' order, as Iceberg's
    ``ZOrderByteUtils``: whole numbers, dates, times and timestamps by their value with the sign
    bit flipped; floats (and decimals, as float64) by the IEEE trick (negatives: every bit
    flipped; positives: the sign bit); strings and binaries by their first 8 bytes, zero padded,
    big-endian; booleans in the top bit. Nulls are 0 (first). (Iceberg's float key shifts by 31
    where 63 is meant; this one is exact.)"""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    t = pa.types
    kind = column.type
    if t.is_dictionary(kind):
        column, kind = column.dictionary_decode(), kind.value_type
    if t.is_boolean(kind):
        keys = np.where(column.fill_null(False).to_numpy(zero_copy_only=False), SIGN, np.uint64(0))
    elif t.is_floating(kind) or t.is_decimal(kind):
        values = pc.cast(column, pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
        bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
        keys = np.where(bits & SIGN, ~bits, bits | SIGN)
    elif any(check(kind) for check in (t.is_string, t.is_large_string, t.is_binary, t.is_large_binary)):
        keys = _prefix_keys(column)
    elif t.is_fixed_size_binary(kind):
        keys = _prefix_keys(pc.cast(column, pa.binary()))
    elif t.is_integer(kind) or t.is_temporal(kind):
        physical = pa.int64() if not t.is_unsigned_integer(kind) else pa.uint64()
        raw = (
            column.view(pa.int32() if kind.bit_width == 32 else pa.int64()) if t.is_temporal(kind) else column
        )
        values = pc.cast(raw, physical).fill_null(0).to_numpy(zero_copy_only=False)
        keys = values.astype(np.uint64) if t.is_unsigned_integer(kind) else values.view(np.uint64) ^ SIGN
    else:
        raise TypeError(f"a column of type {kind} cannot be z-ordered")
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    return np.where(valid, keys, np.uint64(0)).astype(np.uint64)


def _prefix_keys(column: pa.Array) -> np.ndarray:
    """The first 8 bytes of each value (zero padded; nulls: empty) as a big-endian unsigned key."""
    column = pc.cast(column, pa.large_binary()).fill_null(b"")
    zeros = pa.scalar(b"\0" * 8, pa.large_binary())
    empty = pa.scalar(b"", pa.large_binary())
    padded = pc.binary_join_element_wise(pc.binary_slice(column, 0, 8), zeros, empty)
    fixed = pc.binary_slice(padded, 0, 8)
    return np.frombuffer(_fixed_bytes(fixed), dtype=">u8").astype(np.uint64)


def _fixed_bytes(column: pa.Array) -> bytes:
    """The concatenated values of a large binary array whose values are all 8 bytes long."""
    buffers = column.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[column.offset : column.offset + len(column) + 1]
    return bytes(buffers[2])[offsets[0] : offsets[-1]]


def zorder_key(columns: list[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """The z-order key of each row: the bits of its columns' ``column_key`` interleaved, the
    most significant bit of column 1, of column 2, ..., then the next bit of each; as an
    (rows, columns) array of uint64 words, big-endian (compare rows word by word)."""
    keys = np.stack([column_key(c) for c in columns], axis=1)  # (rows, n)
    rows, n = keys.shape
    out = np.empty((rows, n), dtype=np.uint64)
    for start in range(0, rows, 65536):  # bounded memory: 64 bytes per column and row at once
        chunk = keys[start : start + 65536]
        bits = np.unpackbits(chunk.astype(">u8").view(np.uint8).reshape(len(chunk), n, 8), axis=2)
        interleaved = bits.transpose(0, 2, 1).reshape(len(chunk), 64 * n)  # bit b of col c at b*n+c
        packed = np.packbits(interleaved, axis=1)
        out[start : start + len(chunk)] = packed.view(">u8").astype(np.uint64)
    return out


class ArrowGroupTask:
    """The body of the Spark task that rewrites one group with the spec reader and pyarrow;
    picklable, run in a Spark Python worker."""

    RESULT_SCHEMA = "path string, size long, rows long, partition string, metrics binary"

    def __init__(
        self, reader: Any, slices: list[FileSlice], schema: pa.Schema, out: str, **options: Any
    ) -> None:
        self.reader, self.slices, self.schema, self.out, self.options = reader, slices, schema, out, options

    def __call__(self, items: Iterator[Any]) -> Iterator[tuple[str, int, int, str | None, bytes]]:
        for _ in items:
            pass
        yield from write_arrow_group(self.reader, self.slices, self.schema, self.out, **self.options)

    def arrow(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The same for ``mapInArrow`` (Spark Connect, where there are no RDDs)."""
        rows = list(self(batches))
        yield pa.RecordBatch.from_pylist(
            [
                {"path": p, "size": size, "rows": n, "partition": key, "metrics": metrics}
                for p, size, n, key, metrics in rows
            ],
            schema=pa.schema(
                [
                    ("path", pa.string()),
                    ("size", pa.int64()),
                    ("rows", pa.int64()),
                    ("partition", pa.string()),
                    ("metrics", pa.binary()),
                ]
            ),
        )

    def run(self, spark: Any) -> list[tuple[str, int, int, str | None, bytes]]:
        """One Spark job of one task."""
        try:
            context = spark.sparkContext
        except Exception:  # Spark Connect
            context = None
        if context is not None:
            # An RDD task needs neither pandas nor Arrow on the JVM side.
            return context.parallelize([0], 1).mapPartitions(self).collect()
        frame = spark.range(1, numPartitions=1).mapInArrow(self.arrow, self.RESULT_SCHEMA)
        return [(r["path"], r["size"], r["rows"], r["partition"], r["metrics"]) for r in frame.collect()]


class GroupWriter:
    """Writes the groups of a plan to ``outputs`` (a staging folder, or ``RewriteOutputs``), one
    Spark job per group (see the module docstring). ``reader`` reads slices with deletes applied
    and must be picklable: it runs in Spark tasks. ``engine`` "arrow" (default) runs the spec
    reader and pyarrow in the task; "spark-sql" lets Spark's parquet reader and writer do groups
    of parquet files without deletes into parquet (local tables only). ``file_format`` "orc"
    writes ORC files (``orc_output``; ``compression`` is then an ORC codec). ``partitioner(group)``
    may give a group a picklable splitter of its rows by partition (``write_arrow_group``); such a
    group is written by arrow."""

    def __init__(
        self,
        context: ProcessContext,
        reader: Callable[[list[FileSlice]], Iterable[pa.RecordBatch]],
        schema: pa.Schema,
        outputs: Path | RewriteOutputs,
        *,
        settings: CompactionSettings,
        field_ids: bool,
        sort_columns: Iterable[str] = (),
        compression: str = "snappy",
        partitioner: Callable[[RewriteGroup], Any] | None = None,
        ordering: Ordering | None = None,
        file_format: str = PARQUET,
    ) -> None:
        self.context = context
        self.file_format = file_format
        self.ordering = ordering
        self.reader = reader
        self.schema = schema
        self.outputs = StagingOutputs(outputs) if isinstance(outputs, Path) else outputs
        self.settings = settings
        self.field_ids = field_ids
        self.sort_columns = [c for c in sort_columns if c in schema.names]
        self.compression = compression
        self.partitioner = partitioner
        self._spark_schema: Any = None
        self.notes: list[str] = []
        self.engine = settings.engine
        if self.engine == "spark-sql" and self.outputs.in_place:
            process_id = getattr(context, "process_id", None)
            if process_id not in _FALLBACK_SAID:  # once per process, whatever its attempts
                _FALLBACK_SAID.add(process_id)
                logger.warning("process %s: %s", process_id, S3A_FALLBACK)
            self.notes.append(S3A_FALLBACK)
            self.engine = "arrow"
        if ordering is not None and self.engine != "arrow":
            self.notes.append(f"a {ordering.kind} rewrite orders each group in one arrow task")
            self.engine = "arrow"

    def write_all(
        self, groups: list[RewriteGroup], *, progress_total: int | None = None
    ) -> list[WrittenGroup]:
        total = progress_total or len(groups)
        if not groups:
            return []
        self.outputs.prepare()
        spark = self.context.spark
        if self.engine == "spark-sql":
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
        out, name_prefix = self.outputs.target(group)
        split = self.partitioner(group) if self.partitioner is not None else None
        if self.engine == "spark-sql" and split is None and self._spark_sql_can_write(group):
            try:
                return WrittenGroup(group, self._write_spark_sql(group, Path(out)), "spark-sql")
            except Exception:
                self.context.check_cancelled()  # an interrupted job is a cancel, not a fallback
                logger.warning(
                    "Spark SQL could not rewrite group %s; using Arrow", group.index, exc_info=True
                )
                shutil.rmtree(out, ignore_errors=True)
        storage = self.outputs.storage
        task = ArrowGroupTask(
            self.reader,
            group.slices,
            self.schema,
            out,
            compression=self.compression,
            sort_columns=self.sort_columns,
            rows_per_file=max(1, math.ceil(group.record_count / self._outputs(group))),
            name_prefix=name_prefix,
            storage_json=storage.to_json() if storage is not None else "",
            partitioner=split,
            ordering=self.ordering,
            file_format=self.file_format,
        )
        results = task.run(self.context.spark)
        return WrittenGroup(
            group,
            [p for p, _, _, _, _ in results],
            "arrow",
            [int(n) for _, n, _, _, _ in results],
            [key for _, _, _, key, _ in results],
            [bytes(metrics or b"") for _, _, _, _, metrics in results],
        )

    def _spark_sql_can_write(self, group: RewriteGroup) -> bool:
        from processes.maintenance.spark_types import spark_schema

        if self._spark_schema is None:
            self._spark_schema = spark_schema(self.schema, field_ids=self.field_ids) or False
        return (
            bool(self._spark_schema)
            and self.file_format == PARQUET
            and all(s.base.file_format == PARQUET for s in group.slices)
            and not group.has_deletes
            and not any(GLOB_CHARACTERS & set(local_path(p)) for p in group.paths)
        )

    def _write_spark_sql(self, group: RewriteGroup, out: Path) -> list[str]:
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
        return sorted(str(p) for p in out.glob("*.parquet") if p.stat().st_size > 0)
