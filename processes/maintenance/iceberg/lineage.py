"""v3 row lineage through a rewrite: rows moved to a new file keep their ``_row_id`` and
``_last_updated_sequence_number`` (Iceberg spec, "Row Lineage": a writer that moves rows must write
the values it read), as Iceberg's own rewrite does.

On a table with row lineage the rewrite reads the two metadata columns (inherited values filled
in by the reader) and writes them into the new files under their reserved field ids; the new
files' own ``first_row_id`` is then never used for these rows, since stored values win. Spark's
own parquet path (``spark-sql`` engine) cannot produce them, so such tables rewrite on ``arrow``.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pyarrow as pa

from processes.maintenance.planning import CompactionSettings
from storage.formats.iceberg import (
    LAST_UPDATED_FIELD_ID,
    LAST_UPDATED_SEQUENCE_NUMBER,
    ROW_ID,
    ROW_ID_FIELD_ID,
    has_row_lineage,
    with_lineage,
)

LINEAGE_NOTE = "row lineage is carried into the new files: the table rewrites on the arrow engine"


def rewrite_inputs(metadata: Any, schema: pa.Schema, settings: CompactionSettings) -> tuple[pa.Schema, Any]:
    """The schema a rewrite reads and writes, and its settings: with the lineage columns (and
    the arrow engine) on a table with row lineage, else as given."""
    if not has_row_lineage(metadata):
        return schema, settings
    return with_lineage(schema), dataclasses.replace(settings, engine="arrow")


def statistics_inputs(metadata: Any) -> tuple[dict[str, int], dict[int, Any]]:
    """pyiceberg's (parquet column path -> field id, field id -> statistics collector) for the
    files a rewrite wrote: the table schema's, plus the lineage columns (full metrics: row-id ranges prune) where the
    table tracks row lineage (pyiceberg's own mapping does not know their reserved ids)."""
    from pyiceberg.io.pyarrow import (
        MetricModeTypes,
        MetricsMode,
        StatisticsCollector,
        compute_statistics_plan,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.types import LongType

    schema = metadata.schema()
    mapping = parquet_path_to_id_mapping(schema)
    plan = compute_statistics_plan(schema, metadata.properties)
    if has_row_lineage(metadata):
        for name, field_id in (
            (ROW_ID, ROW_ID_FIELD_ID),
            (LAST_UPDATED_SEQUENCE_NUMBER, LAST_UPDATED_FIELD_ID),
        ):
            mapping[name] = field_id
            plan[field_id] = StatisticsCollector(
                field_id=field_id,
                iceberg_type=LongType(),
                mode=MetricsMode(MetricModeTypes.FULL),
                column_name=name,
            )
    return mapping, plan


def orc_data_file(metadata: Any, path: str, partition: Any, spec_id: int, size: int, metrics: bytes) -> Any:
    """The pyiceberg ``DataFile`` of an ORC file written for the table (``OrcOutputFile``), its
    metrics (``OrcMetrics.dumps``) kept as the table's metrics modes say (none, counts,
    truncate(n), full), bounds serialized and truncated as pyiceberg does for parquet."""
    from pyiceberg.io.pyarrow import MetricModeTypes, PrimitiveToPhysicalType, StatsAggregator
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.schema import visit

    _, plan = statistics_inputs(metadata)
    counts: dict[str, dict[int, Any]] = {
        name: {} for name in ("value_counts", "null_value_counts", "nan_value_counts")
    }
    bounds: dict[str, dict[int, bytes]] = {"lower_bounds": {}, "upper_bounds": {}}
    written = pickle.loads(metrics)
    for field_id, (values, nulls, nans, low, high) in written["columns"].items():
        collector = plan.get(field_id)
        if collector is None or collector.mode.type == MetricModeTypes.NONE:
            continue
        counts["value_counts"][field_id], counts["null_value_counts"][field_id] = values, nulls
        if nans is not None:
            counts["nan_value_counts"][field_id] = nans
        if collector.mode.type == MetricModeTypes.COUNTS or low is None:
            continue
        iceberg_type = collector.iceberg_type
        physical = visit(iceberg_type, PrimitiveToPhysicalType())
        aggregate = StatsAggregator(iceberg_type, physical, collector.mode.length)
        aggregate.update_min(low)
        aggregate.update_max(high)
        for name, value in (
            ("lower_bounds", aggregate.min_as_bytes()),
            ("upper_bounds", aggregate.max_as_bytes()),
        ):
            if value is not None:
                bounds[name][field_id] = value
    data_file = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.ORC,
        partition=partition,
        record_count=written["rows"],
        file_size_in_bytes=size,
        **counts,
        **bounds,
    )
    data_file.spec_id = spec_id
    return data_file
