"""Iceberg ``compute-statistics``: distinct-value sketches in a Puffin file on the snapshot.

What Iceberg's ``compute_table_stats`` procedure (``ComputeTableStatsSparkAction``) writes: for one
snapshot (the current one, or ``snapshot-id``) and its columns (``columns``, default every top-level
primitive column of the snapshot's schema), one ``apache-datasketches-theta-v1`` blob per column in
a Puffin file ``<metadata folder>/<snapshot-id>-<uuid>.stats``, registered on the snapshot with
``set-statistics`` in a catalog commit (statistics the snapshot had are replaced; their file stays
for orphan cleanup, as older metadata versions still name it). Each blob lists the column's field
id in ``fields``, the snapshot id and sequence number, and the estimate in its ``ndv`` property (the
estimate truncated to an integer, as Iceberg's ``(long) sketch.getEstimate()``).

The sketches are what Iceberg's ``ThetaSketchAgg`` builds, byte for byte where that is defined:
every non-null value is turned into its Iceberg single-value binary serialization (ints and dates
4 bytes little-endian, longs, times and timestamps 8, floats and doubles their raw IEEE bits, strings
UTF-8, UUIDs their 16 big-endian bytes, fixed and binary as is, decimals the unscaled value's
minimal two's-complement big-endian bytes), hashed with MurmurHash3_x64_128 and DataSketches'
default seed 9001 (``update(ByteBuffer)``: the first 64 bits, shifted right once; an empty value is
rejected, as DataSketches rejects an empty buffer), and kept in a theta sketch of nominal size
4096 (``lg_k`` 12, the default). Below 4096 distinct values the count is exact. Above, the sketch
keeps the 4096 smallest hashes and theta is the next one (a KMV sketch: the state a DataSketches
QuickSelect sketch has after ``rebuild()``/``trim()``, in Java and in C++; Iceberg's Java sketch is
of the Alpha family, whose theta differs slightly in that range, and both merge with each other).
The serialized form is the compact, ordered sketch of serial version 3 exactly as the Java library
writes it (``CompactSketch.toByteArray()``: the C++/Python library's bytes differ only where readers
ignore them), so below 4096 distinct values a blob is byte for byte what Iceberg writes. Blobs are
zstd-compressed, as Iceberg's ``NDVSketchUtil`` writes them (``blob-compression: none`` stores them
as they are). The hashing is vectorised with numpy for fixed-width values and uses ``mmh3`` for
strings, binaries and decimals, after de-duplicating each batch.

The rows are read through the spec API at the snapshot (its own schema, deletes applied), split by
split; each Spark task sketches its share of the splits in bounded memory (one batch and one
sketch per column at a time) and the driver merges the sketches (the union of KMV sketches is the
sketch of the union). Bad ``columns`` (unknown, not primitive, a type without a single-value
serialization) fail before anything is read or written. The Puffin file is written in the
process's staging folder and moved into the metadata folder just before the commit (object stores:
written in place under its unique name), and deleted again when the commit does not land.
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import TYPE_CHECKING, Any

from processes.maintenance.errors import InputError
from processes.maintenance.iceberg.plan import spec_view
from processes.maintenance.iceberg.statistics.scan import (
    ColumnPlan,
    SketchTask,
    chunk_splits,
    plan_columns,
    run_sketches,
    spark_cores,
)
from processes.maintenance.iceberg.statistics.sketches import ThetaSketch
from processes.maintenance.outputs import local_path
from processes.maintenance.schemas import INTERVAL, MAX_INT64, MIN_INT64, PARALLELISM, with_defaults
from processes.maintenance.targets import NO_CATALOG, iceberg_catalog_table, iceberg_commit_target
from processes.plugin import (
    COMPUTE_STATISTICS,
    Preview,
    ProcessContext,
    ProcessFactory,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.formats.iceberg.commit.puffin import puffin_file, statistics_file
from storage.io import is_object_store
from storage.wording import counted

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

    from processes.runtime import TableRuntime

logger = logging.getLogger(__name__)

THETA_BLOB_TYPE = "apache-datasketches-theta-v1"
NDV_PROPERTY = "ndv"
COMMIT_ATTEMPTS = 4

# --- the process ---------------------------------------------------------------------------------


class StatisticsConflict(RuntimeError):
    """The statistics could not be registered (snapshot gone, catalog refusing)."""


class IcebergStatisticsProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(COMPUTE_STATISTICS, params)
        merged = {**IcebergComputeStatisticsFactory.default_properties, **config, **params}
        self.snapshot_id = params.get("snapshot-id")
        self.columns = merged.get("columns")
        self.compression = merged["blob-compression"]
        self.engine = merged["engine"]

    def run(self, context: ProcessContext) -> dict[str, Any]:
        table = iceberg_commit_target(context.table, context.guard)
        table.refresh()
        metadata = table.metadata
        snapshot = self._snapshot(metadata)
        if snapshot is None:
            return {"snapshot_id": None, "note": "the table has no snapshot: nothing to compute"}
        schema = _snapshot_schema(metadata, snapshot)
        columns = plan_columns(schema, self.columns)
        if not columns:
            raise InputError("the snapshot's schema has no primitive column to compute statistics for")
        spec = spec_view(table)
        splits = list(spec.plan_splits(snapshot.snapshot_id))
        chunks = chunk_splits(splits, spark_cores(context, self.engine) * 2)
        context.report_progress(
            0, 3, f"sketching {counted(len(columns), 'column')} over {counted(len(splits), 'split')}"
        )
        task = SketchTask(table.io, spec.schema_at(snapshot.snapshot_id), columns, chunks)
        sketches, rows = run_sketches(context, task, engine=self.engine)
        context.check_cancelled()
        context.report_progress(1, 3, "writing the Puffin file")
        blobs = [_blob(column, sketches[column.field_id], snapshot) for column in columns]
        data, footer_size, written = puffin_file(blobs, compression=self.compression)
        name = f"{snapshot.snapshot_id}-{uuid.uuid4()}.stats"
        path = table.location_provider().new_metadata_location(name)
        stats = statistics_file(path, snapshot.snapshot_id, data, footer_size, written)
        replaced = [s.statistics_path for s in metadata.statistics if s.snapshot_id == snapshot.snapshot_id]
        context.report_progress(2, 3, "committing")
        attempts = _publish_and_commit(context, table, stats, data)
        context.report_progress(3, 3, "committed")
        return {
            "snapshot_id": snapshot.snapshot_id,
            "statistics_file": path,
            "file_size_in_bytes": len(data),
            "rows_read": rows,
            "ndv": {column.name: int(sketches[column.field_id].estimate) for column in columns},
            "replaced_statistics_files": replaced,
            "commit_attempts": attempts,
        }

    def _snapshot(self, metadata: TableMetadata) -> Any:
        if self.snapshot_id is None:
            return metadata.current_snapshot()
        snapshot = metadata.snapshot_by_id(int(self.snapshot_id))
        if snapshot is None:
            raise InputError(f"snapshot-id {self.snapshot_id} is not a snapshot of this table")
        return snapshot


def _snapshot_schema(metadata: TableMetadata, snapshot: Any) -> Any:
    schema_id = getattr(snapshot, "schema_id", None)
    schema = metadata.schema_by_id(schema_id) if schema_id is not None else None
    return schema if schema is not None else metadata.schema()


def _blob(column: ColumnPlan, sketch: ThetaSketch, snapshot: Any) -> tuple[dict[str, Any], bytes]:
    metadata = {
        "type": THETA_BLOB_TYPE,
        "fields": [column.field_id],
        "snapshot-id": snapshot.snapshot_id,
        "sequence-number": snapshot.sequence_number or 0,
        "properties": {NDV_PROPERTY: str(int(sketch.estimate))},
    }
    return metadata, sketch.serialize()


def _publish_and_commit(context: ProcessContext, table: Table, stats: Any, data: bytes) -> int:
    """Write the Puffin file where ``stats`` says (local: staged, then moved in just before the
    commit), register it, and delete it again if the commit does not land: the commits tried."""
    path = stats.statistics_path
    staged = None
    if not is_object_store(path):
        context.staging_dir.mkdir(parents=True, exist_ok=True)
        staged = context.staging_dir / os.path.basename(path)
        staged.write_bytes(data)
    landed = False
    try:
        context.checkpoint("before-commit")
        if staged is not None:
            os.makedirs(os.path.dirname(local_path(path)), exist_ok=True)
            os.replace(staged, local_path(path))
        else:
            with table.io.new_output(path).create(overwrite=False) as stream:
                stream.write(data)
        attempts = commit_statistics(table, stats)
        landed = True
        return attempts
    finally:
        if not landed and not _registered(table, path):
            _delete_quietly(table.io, path)


def commit_statistics(table: Table, stats: Any) -> int:
    """Register ``stats`` on its snapshot through the catalog, again on the refreshed table when
    another writer got in first: the commits tried. ``StatisticsConflict`` when the snapshot is
    gone or the catalog keeps refusing."""
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        table.refresh()
        if table.metadata.snapshot_by_id(stats.snapshot_id) is None:
            raise StatisticsConflict(
                f"snapshot {stats.snapshot_id} was expired while its statistics were computed"
            )
        try:
            table.update_statistics().set_statistics(stats).commit()
            return attempt
        except CommitFailedException as error:
            if attempt == COMMIT_ATTEMPTS:
                raise StatisticsConflict(
                    f"the catalog refused the commit {attempt} times: {error}"
                ) from error
            logger.info("statistics commit of %s refused (%s); trying again", table.name(), error)
    raise AssertionError("unreachable")


def _registered(table: Table, path: str) -> bool:
    """Whether the table's metadata names ``path`` (True when that cannot be told: keep the file)."""
    try:
        table.refresh()
    except Exception:
        return True
    return any(s.statistics_path == path for s in table.metadata.statistics)


def _delete_quietly(io: FileIO, path: str) -> None:
    try:
        io.delete(path)
    except FileNotFoundError:
        pass
    except OSError:
        logger.warning("could not delete the uncommitted statistics file %s", path, exc_info=True)


COLUMNS_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {"type": "null"},
        {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
    ],
    "description": "Columns to sketch (dotted names for struct fields; null: every top-level primitive"
    " column with a single-value serialization)",
}
COMPRESSION_SCHEMA: dict[str, Any] = {
    "enum": ["zstd", "none"],
    "description": "Compression of the sketch blobs in the Puffin file (zstd, as Iceberg writes them)",
}
ENGINE_SCHEMA: dict[str, Any] = {
    "enum": ["spark", "local"],
    "description": "spark: Spark tasks sketch the splits; local: the worker reads them itself",
}


class IcebergComputeStatisticsFactory(ProcessFactory):
    name = "iceberg-compute-statistics"
    description = "Computes per-column NDV theta sketches into a Puffin statistics file (Iceberg)"
    default_properties = {
        "interval": 86400,
        "parallelism": 1,
        "columns": None,
        "blob-compression": "zstd",
        "engine": "spark",
    }
    properties_schema = with_defaults(
        {
            "type": "object",
            "properties": {
                "interval": INTERVAL,
                "parallelism": PARALLELISM,
                "columns": COLUMNS_SCHEMA,
                "blob-compression": COMPRESSION_SCHEMA,
                "engine": ENGINE_SCHEMA,
            },
        },
        default_properties,
    )
    params_schema = {
        "type": "object",
        "properties": {
            "snapshot-id": {
                "type": "integer",
                "minimum": MIN_INT64,
                "maximum": MAX_INT64,
                "description": "The snapshot to compute statistics for (default: the current one)",
            },
            "columns": COLUMNS_SCHEMA,
            "blob-compression": COMPRESSION_SCHEMA,
            "engine": ENGINE_SCHEMA,
        },
        "additionalProperties": False,
    }

    def supported_actions(self) -> dict[str, set[str]]:
        return {"iceberg": {COMPUTE_STATISTICS}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:
        return TriggerStrategy.from_properties(self.properties, on_new_snapshot=True)

    def trigger(self, runtime: TableRuntime, action: str) -> TableProcess | None:
        """Due when the current snapshot has no statistics file yet."""
        table = iceberg_catalog_table(runtime)
        if table is None:
            return runtime.nothing_to_do(NO_CATALOG)
        snapshot = table.metadata.current_snapshot()
        if snapshot is None:
            return runtime.nothing_to_do("nothing to do: the table has no snapshot")
        if any(s.snapshot_id == snapshot.snapshot_id for s in table.metadata.statistics):
            return runtime.nothing_to_do("nothing to do: the current snapshot already has a statistics file")
        return IcebergStatisticsProcess({}, runtime.config)

    def recover(self, runtime: TableRuntime, record: ProcessRecord) -> TableProcess:
        return IcebergStatisticsProcess(dict(record.params), runtime.config)

    def validate(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> None:
        self._columns(runtime, params)

    def preview(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> Preview | None:
        """The files the run reads (the snapshot's data files) and the Puffin file it writes."""
        resolved = self._columns(runtime, params, strict=True)
        if resolved is None:
            return Preview(notes=["nothing to do: the table has no snapshot"])
        table, snapshot, columns = resolved
        files = list(spec_view(table).file_index().list_files_at(snapshot.snapshot_id))
        replaced = [
            s.statistics_path for s in table.metadata.statistics if s.snapshot_id == snapshot.snapshot_id
        ]
        return Preview(
            groups=len(columns),
            files_in=sum(1 for f in files if f.base_file is not None),
            bytes_in=sum(f.size_bytes for f in files),
            files_out=1,
            details={
                "snapshot_id": snapshot.snapshot_id,
                "columns": [c.name for c in columns],
                "rows_in": sum(f.record_count for f in files),
                "delete_files_applied": sum(len(f.delete_files) for f in files),
                "replaced_statistics_files": replaced,
            },
            notes=["a replaced statistics file stays until orphan cleanup (older metadata names it)"]
            if replaced
            else [],
        )

    def _columns(self, runtime: TableRuntime, params: dict[str, Any], *, strict: bool = False) -> Any:
        """(table, snapshot, columns) the run would sketch; None without a snapshot (or, unless
        ``strict``, without a catalog: the run refuses it); ``InputError`` for bad parameters."""
        table = iceberg_catalog_table(runtime, strict=strict)
        if table is None:
            return None
        process = IcebergStatisticsProcess(dict(params), runtime.config)
        snapshot = process._snapshot(table.metadata)
        if snapshot is None:
            return None
        columns = plan_columns(_snapshot_schema(table.metadata, snapshot), process.columns)
        if not columns:
            raise InputError("the snapshot's schema has no primitive column to compute statistics for")
        return table, snapshot, columns
