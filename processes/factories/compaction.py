"""Compaction shared by the Iceberg and Delta rewrite processes: planning and writing.

Planning (format-neutral, on ``FileSlice`` listings): per partition, files smaller than
``max(target / 8, min-file-size)`` (plus files carrying at least ``delete-file-threshold`` delete
files) are bin-packed, first fit by decreasing size, into groups of at most the target size. A
partition is only rewritten when it has ``min-input-files`` candidates, or candidates worth a whole
target file; a group of one file without deletes is dropped (rewriting it changes nothing).

Writing: each group becomes one file (several if it exceeds the target) in the process's staging
folder. Groups run concurrently, one Spark job each, as many at once as Spark has cores: a group is
read and written by one task (``coalesce``), so output files approach the target size while the
cores stay busy with different groups. Groups without delete files are read by Spark straight from
their parquet paths (the fast path); groups with deletes, or schemas Spark cannot carry field ids
for (lists, maps, uuid...), are read through the spec API (deletes applied) and written by pyarrow.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from processes.plugin import ProcessContext
from storage.spec.models import FileSlice, PartitionDescriptor

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
DEFAULT_TARGET_FILE_SIZE = 128 * MIB
FIELD_ID_KEY = b"PARQUET:field_id"
GLOB_CHARACTERS = set("{}[]*?\\")

#: Properties of both rewrite factories (admin-editable, overridable per table by the same name).
REWRITE_PROPERTIES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "interval": {"type": "integer", "minimum": 60, "description": "Seconds between evaluations"},
        "parallelism": {"type": "integer", "minimum": 1, "description": "Rewrites running at once"},
        "target-file-size": {"type": "integer", "minimum": 65536, "description": "Bytes per output file"},
        "min-file-size": {
            "type": "integer",
            "minimum": 0,
            "description": "Files below this size are rewritten even when above target/8",
        },
        "min-input-files": {"type": "integer", "minimum": 2},
        "delete-file-threshold": {
            "type": "integer",
            "minimum": 0,
            "description": "Rewrite files with at least this many delete files (0: off)",
        },
        "max-concurrent-groups": {
            "type": "integer",
            "minimum": 0,
            "description": "Groups written at once (0: as many as Spark has cores)",
        },
        "compression-codec": {"type": "string", "enum": ["", "snappy", "zstd", "gzip", "lz4", "none"]},
    },
}
REWRITE_DEFAULTS: dict[str, Any] = {
    "interval": 3600,
    "parallelism": 1,
    "target-file-size": DEFAULT_TARGET_FILE_SIZE,
    "min-file-size": 0,
    "min-input-files": 5,
    "delete-file-threshold": 0,
    "max-concurrent-groups": 0,
    "compression-codec": "",
}
REWRITE_PARAMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        key: REWRITE_PROPERTIES_SCHEMA["properties"][key]
        for key in ("target-file-size", "min-file-size", "min-input-files", "delete-file-threshold")
    },
    "additionalProperties": False,
}


class RewriteConflict(Exception):
    """The table changed under the rewrite in a way its plan cannot survive."""


@dataclass(frozen=True)
class CompactionSettings:
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    min_file_size: int = 0
    min_input_files: int = 5
    delete_file_threshold: int = 0
    max_concurrent_groups: int = 0
    compression_codec: str = ""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> CompactionSettings:
        merged = {**REWRITE_DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
        return cls(
            target_file_size=int(merged["target-file-size"]),
            min_file_size=int(merged["min-file-size"]),
            min_input_files=max(2, int(merged["min-input-files"])),
            delete_file_threshold=int(merged["delete-file-threshold"]),
            max_concurrent_groups=int(merged["max-concurrent-groups"]),
            compression_codec=str(merged["compression-codec"] or ""),
        )

    @property
    def small_file_size(self) -> int:
        return max(self.target_file_size // 8, self.min_file_size)


# --- planning ------------------------------------------------------------------------------------


@dataclass
class RewriteGroup:
    index: int
    partition: PartitionDescriptor
    slices: list[FileSlice]

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.slices)

    @property
    def record_count(self) -> int:
        return sum(s.record_count for s in self.slices)

    @property
    def has_deletes(self) -> bool:
        return any(s.delete_files for s in self.slices)

    @property
    def paths(self) -> list[str]:
        return [s.base_file.path for s in self.slices]


@dataclass
class CompactionPlan:
    instant: int | str | None
    groups: list[RewriteGroup] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.groups

    @property
    def files_in(self) -> int:
        return sum(len(g.slices) for g in self.groups)

    @property
    def bytes_in(self) -> int:
        return sum(g.size_bytes for g in self.groups)

    @property
    def partitions(self) -> int:
        return len({g.partition.path for g in self.groups})


def bin_pack(slices: Iterable[FileSlice], capacity: int) -> list[list[FileSlice]]:
    """First fit by decreasing size: few bins, each at most ``capacity`` (an item larger than the
    capacity gets a bin of its own)."""
    bins: list[tuple[int, list[FileSlice]]] = []
    for item in sorted(slices, key=lambda s: (-s.size_bytes, s.path)):
        size = item.size_bytes
        for position, (used, members) in enumerate(bins):
            if used + size <= capacity:
                members.append(item)
                bins[position] = (used + size, members)
                break
        else:
            bins.append((size, [item]))
    return [members for _, members in bins]


def plan_compaction(
    slices: Iterable[FileSlice],
    settings: CompactionSettings,
    *,
    instant: int | str | None,
    eligible: Callable[[FileSlice], bool] = lambda s: True,
    partition_key: Callable[[FileSlice], Any] = lambda s: s.partition.path,
) -> CompactionPlan:
    """The groups worth rewriting (see the module docstring for the rules)."""
    candidates: dict[Any, list[FileSlice]] = defaultdict(list)
    partitions: dict[Any, PartitionDescriptor] = {}
    threshold = settings.delete_file_threshold
    for file_slice in slices:
        base = file_slice.base_file
        if base is None or base.file_format != "parquet" or not eligible(file_slice):
            continue
        small = base.size_bytes < settings.small_file_size
        many_deletes = threshold > 0 and len(file_slice.delete_files) >= threshold
        if small or many_deletes:
            key = partition_key(file_slice)
            candidates[key].append(file_slice)
            partitions.setdefault(key, file_slice.partition)
    plan = CompactionPlan(instant=instant)
    for key in sorted(candidates, key=str):
        members = candidates[key]
        total = sum(s.size_bytes for s in members)
        if len(members) < settings.min_input_files and not (
            len(members) >= 2 and total >= settings.target_file_size
        ):
            if not (threshold > 0 and any(len(s.delete_files) >= threshold for s in members)):
                continue
        for packed in bin_pack(members, settings.target_file_size):
            if len(packed) < 2 and not packed[0].delete_files:
                continue
            plan.groups.append(RewriteGroup(len(plan.groups), partitions[key], packed))
    return plan


# --- Spark schemas -------------------------------------------------------------------------------


def spark_type(arrow_type: pa.DataType, *, field_ids: bool) -> Any:
    """The Spark type for an Arrow type, or None when the fast path cannot write it faithfully
    (Spark carries Iceberg field ids only on struct fields, so lists and maps need the Arrow path
    when field ids matter)."""
    from pyspark.sql import types as T

    if pa.types.is_boolean(arrow_type):
        return T.BooleanType()
    if pa.types.is_int32(arrow_type):
        return T.IntegerType()
    if pa.types.is_int64(arrow_type):
        return T.LongType()
    if pa.types.is_float32(arrow_type):
        return T.FloatType()
    if pa.types.is_float64(arrow_type):
        return T.DoubleType()
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return T.StringType()
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return T.BinaryType()
    if pa.types.is_date32(arrow_type):
        return T.DateType()
    if pa.types.is_timestamp(arrow_type) and arrow_type.unit == "us":
        return T.TimestampType() if arrow_type.tz else T.TimestampNTZType()
    if pa.types.is_decimal128(arrow_type):
        return T.DecimalType(arrow_type.precision, arrow_type.scale)
    if pa.types.is_struct(arrow_type):
        return spark_schema(pa.schema(list(arrow_type)), field_ids=field_ids)
    if not field_ids and (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
        element = spark_type(arrow_type.value_type, field_ids=False)
        return None if element is None else T.ArrayType(element, arrow_type.value_field.nullable)
    if not field_ids and pa.types.is_map(arrow_type):
        key = spark_type(arrow_type.key_type, field_ids=False)
        value = spark_type(arrow_type.item_type, field_ids=False)
        if key is None or value is None:
            return None
        return T.MapType(key, value, arrow_type.item_field.nullable)
    return None


def spark_schema(schema: pa.Schema, *, field_ids: bool, exclude: Iterable[str] = ()) -> Any:
    from pyspark.sql import types as T

    excluded = set(exclude)
    fields = []
    for arrow_field in schema:
        if arrow_field.name in excluded:
            continue
        data_type = spark_type(arrow_field.type, field_ids=field_ids)
        if data_type is None:
            return None
        metadata = {}
        if field_ids:
            if not arrow_field.metadata or FIELD_ID_KEY not in arrow_field.metadata:
                return None
            metadata["parquet.field.id"] = int(arrow_field.metadata[FIELD_ID_KEY])
        fields.append(T.StructField(arrow_field.name, data_type, True, metadata))
    return T.StructType(fields)


# --- writing -------------------------------------------------------------------------------------


def local_path(path: str) -> str:
    """The filesystem path of a local path or ``file:`` URI (object stores are not supported).
    Like pyiceberg's file IO, the URI path is taken literally (not percent-decoded)."""
    if path.startswith("file:"):
        return urlparse(path).path
    if "://" in path:
        raise ValueError(f"{path} is not on a local filesystem; rewrites need local table storage")
    return path


@dataclass
class WrittenGroup:
    group: RewriteGroup
    files: list[Path]
    fast_path: bool
    sizes: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.sizes:
            self.sizes = [f.stat().st_size for f in self.files]

    @property
    def size_bytes(self) -> int:
        return sum(self.sizes)


class GroupWriter:
    """Writes the groups of a plan into ``staging`` (see the module docstring)."""

    def __init__(
        self,
        context: ProcessContext,
        read_slices: Callable[[list[FileSlice]], Iterable[pa.RecordBatch]],
        schema: pa.Schema,
        staging: Path,
        *,
        settings: CompactionSettings,
        field_ids: bool,
        sort_columns: Iterable[str] = (),
        compression: str = "snappy",
    ) -> None:
        self.context = context
        self.read_slices = read_slices
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
        workers = self.settings.max_concurrent_groups or self._cores()
        results: list[WrittenGroup] = []
        pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(groups))), thread_name_prefix="rewrite")
        pending: set[Future] = set()
        queue = list(groups)
        use_spark = self._fast_schema() is not None and any(not g.has_deletes for g in groups)
        target = self.write_group
        if use_spark:
            spark = self.context.spark
            # Iceberg field ids: written from the schema's field metadata, matched on read.
            spark.conf.set("spark.sql.parquet.fieldId.write.enabled", "true")
            spark.conf.set("spark.sql.parquet.fieldId.read.enabled", "true")
            # Spark job tags (which cancel and kill interrupt) are per thread: carry them over.
            from pyspark.util import inheritable_thread_target

            target = inheritable_thread_target(spark)(self.write_group)
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
        if self._fast_schema() is None:
            return os.cpu_count() or 2
        try:
            return max(1, int(self.context.spark.sparkContext.defaultParallelism))
        except Exception:  # Spark Connect has no SparkContext on the client
            return os.cpu_count() or 2

    def _fast_schema(self) -> Any:
        if self._spark_schema is None:
            self._spark_schema = spark_schema(self.schema, field_ids=self.field_ids) or False
        return self._spark_schema or None

    def write_group(self, group: RewriteGroup) -> WrittenGroup:
        out = self.staging / f"group-{group.index:05d}"
        fast = (
            self._fast_schema() is not None
            and not group.has_deletes
            and not any(GLOB_CHARACTERS & set(local_path(p)) for p in group.paths)
        )
        if fast:
            try:
                return WrittenGroup(group, self._write_spark(group, out), True)
            except Exception:
                self.context.check_cancelled()  # an interrupted job is a cancel, not a fallback
                logger.warning(
                    "Spark could not rewrite group %s; using the Arrow path", group.index, exc_info=True
                )
                shutil.rmtree(out, ignore_errors=True)
        return WrittenGroup(group, self._write_arrow(group, out), False)

    def _write_spark(self, group: RewriteGroup, out: Path) -> list[Path]:
        spark = self.context.spark
        outputs = max(1, math.ceil(group.size_bytes / self.settings.target_file_size))
        frame = spark.read.schema(self._fast_schema()).parquet(*[local_path(p) for p in group.paths])
        frame = frame.coalesce(outputs)
        if self.sort_columns:
            frame = frame.sortWithinPartitions(*self.sort_columns)
        writer = frame.write.mode("overwrite").option("compression", self.compression)
        if outputs > 1:
            writer = writer.option("maxRecordsPerFile", math.ceil(group.record_count / outputs))
        writer.parquet(str(out))
        return sorted(p for p in out.glob("*.parquet") if p.stat().st_size > 0)

    def _write_arrow(self, group: RewriteGroup, out: Path) -> list[Path]:
        out.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_batches(list(self.read_slices(group.slices)))
        table = table.select(self.schema.names).cast(self.schema)
        if self.sort_columns:
            table = table.sort_by([(c, "ascending") for c in self.sort_columns])
        outputs = max(1, math.ceil(group.size_bytes / self.settings.target_file_size))
        rows_per_file = max(1, math.ceil(table.num_rows / outputs))
        files = []
        for number, start in enumerate(range(0, max(table.num_rows, 1), rows_per_file)):
            path = out / f"part-{number:05d}.parquet"
            pq.write_table(
                table.slice(start, rows_per_file),
                path,
                compression=self.compression,
                coerce_timestamps="us",
                allow_truncated_timestamps=False,
            )
            files.append(path)
        return files


def publish(staged: Path, directory: str) -> str:
    """Move a staged file into the table's data folder under a fresh name; returns its path.
    A rename within the table location: cheap, and atomic on one filesystem."""
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(directory, f"{uuid.uuid4()}-compacted.parquet")
    os.replace(staged, target)
    return target


def unpublish(paths: Iterable[str]) -> None:
    """Delete published files that no commit references (after a failed commit)."""
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError:
            logger.warning("could not delete unreferenced file %s", path, exc_info=True)


def rewrite_summary(plan: CompactionPlan, written: list[WrittenGroup], **extra: Any) -> dict[str, Any]:
    return {
        "files_in": plan.files_in,
        "bytes_in": plan.bytes_in,
        "files_out": sum(len(w.files) for w in written),
        "bytes_out": sum(w.size_bytes for w in written),
        "groups": len(plan.groups),
        "partitions": plan.partitions,
        "fast_path_groups": sum(1 for w in written if w.fast_path),
        **extra,
    }
