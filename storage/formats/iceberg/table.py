"""``IcebergSpecTable``: one Iceberg table (a pyiceberg ``Table``) behind the spec interface."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, cast

import pyarrow as pa

from storage.formats.iceberg.index import IcebergFileIndex
from storage.formats.iceberg.read import SliceReader, iter_parts
from storage.spec.errors import InstantNotFound
from storage.spec.models import (
    FileContent,
    FileSlice,
    Instant,
    PartitionField,
    PartitionSpec,
    ReadingMode,
    Split,
    SplitPart,
    TableDefinition,
    TableFormat,
    TableId,
    TableSummary,
)
from storage.spec.table import InstantRef, SpecTable, Timeline


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


class IcebergTimeline(Timeline):
    """Snapshots of the table, oldest first (by sequence number, then commit time)."""

    def __init__(self, metadata: Any) -> None:
        snapshots = sorted(metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
        self._instants = [
            Instant(
                id=s.snapshot_id,
                timestamp=_utc(s.timestamp_ms),
                operation=s.summary.operation.value if s.summary is not None else "unknown",
                parent_id=s.parent_snapshot_id,
                summary=dict(s.summary.additional_properties) if s.summary is not None else {},
                sequence=position,
            )
            for position, s in enumerate(snapshots)
        ]
        self._by_id = {i.id: i for i in self._instants}

    def instants(self) -> list[Instant]:
        return list(self._instants)

    def get(self, instant_id: Instant | int | str) -> Instant:
        if isinstance(instant_id, Instant):
            instant_id = instant_id.id
        try:
            return self._by_id[int(instant_id)]
        except (KeyError, ValueError, TypeError):
            raise InstantNotFound(f"no snapshot {instant_id!r} in this table's history") from None


class IcebergSpecTable(SpecTable):
    """An Iceberg table read through the spec API.

    Reads use the current schema (columns added later read as nulls in older snapshots), so that
    filters and projections mean the same thing at every snapshot.
    """

    format: ClassVar[TableFormat] = TableFormat.ICEBERG
    supported_modes: ClassVar[frozenset[ReadingMode]] = frozenset(
        {ReadingMode.SNAPSHOT, ReadingMode.INCREMENTAL}
    )

    def __init__(self, table: Any, location: str, identifier: str | None = None) -> None:
        self.pyiceberg_table = table
        self._location = location
        self._identifier = identifier

    # -- description ----------------------------------------------------------------------

    @functools.cached_property
    def definition(self) -> TableDefinition:
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        metadata = self.pyiceberg_table.metadata
        schema = metadata.schema()
        spec = metadata.spec()
        fields = tuple(
            PartitionField(
                name=f.name,
                source_column=schema.find_column_name(f.source_id) or str(f.source_id),
                transform=str(f.transform),
            )
            for f in spec.fields
        )
        sort_order = metadata.sort_order_by_id(metadata.default_sort_order_id)
        sort_columns = tuple(
            schema.find_column_name(f.source_id) or str(f.source_id)
            for f in (sort_order.fields if sort_order else ())
        )
        return TableDefinition(
            id=TableId(format=TableFormat.ICEBERG, location=self._location, identifier=self._identifier),
            schema=schema_to_pyarrow(schema, include_field_ids=True),
            partition_spec=PartitionSpec(fields),
            properties=dict(metadata.properties),
            sort_columns=sort_columns,
        )

    def timeline(self) -> IcebergTimeline:
        return self._timeline

    @functools.cached_property
    def _timeline(self) -> IcebergTimeline:
        return IcebergTimeline(self.pyiceberg_table.metadata)

    def file_index(self) -> IcebergFileIndex:
        return self._file_index

    @functools.cached_property
    def _file_index(self) -> IcebergFileIndex:
        return IcebergFileIndex(self)

    def summary(self) -> TableSummary:
        metadata = self.pyiceberg_table.metadata
        snapshot = metadata.current_snapshot()
        totals = dict(snapshot.summary.additional_properties) if snapshot and snapshot.summary else {}
        needed = ("total-data-files", "total-files-size", "total-records")
        if snapshot is None:
            files = size = records = 0
        elif all(key in totals for key in needed):
            files, size, records = (int(totals[key]) for key in needed)
            # Rows a read returns: position deletes remove exactly their count. Equality deletes
            # cannot be counted from metadata, so with them the figure is an upper bound.
            records -= int(totals.get("total-position-deletes", 0))
        else:
            # writers that omit totals: count by streaming the listing
            files = size = records = 0
            seen_deletes: set[str] = set()
            for file_slice in self.file_index().list_files_at(snapshot.snapshot_id):
                base = file_slice.base_file
                if base is None:  # never for Iceberg: every slice has its data file
                    continue
                files += 1
                size += base.size_bytes
                records += base.record_count
                for delete in file_slice.delete_files:
                    if delete.path not in seen_deletes:
                        seen_deletes.add(delete.path)
                        size += delete.size_bytes
                        if delete.content == FileContent.POSITION_DELETES:
                            records -= delete.record_count
        return TableSummary(
            current_instant_id=snapshot.snapshot_id if snapshot else None,
            file_count=files,
            total_bytes=size,
            record_count=records,
            instant_count=len(metadata.snapshots),
            last_updated=_utc(metadata.last_updated_ms),
        )

    # -- helpers --------------------------------------------------------------------------

    def snapshot_for(self, instant: InstantRef) -> Any:
        """The pyiceberg snapshot for an instant (current when None; None for an empty table)."""
        metadata = self.pyiceberg_table.metadata
        if instant is None:
            return metadata.current_snapshot()
        found = self.timeline().get(instant)
        return metadata.snapshot_by_id(int(found.id))

    def bind(self, filters: Any) -> Any:
        """The filter bound to the table schema, or None when it keeps every row."""
        if filters is None or filters == "":
            return None
        from storage.spec.expressions import AlwaysTrue, bind_filter

        expr = bind_filter(filters, self.schema)
        return None if expr is None or isinstance(expr, AlwaysTrue) else expr

    def plain_parquet_layout(self) -> bool:
        """Spark reads parquet columns by name, Iceberg by field id: the same rows when every
        schema in the table's history spells each field id the same way with a type Spark reads
        as the current one, and never gives a name to two ids. Never for a table with an identity
        partition field (in any spec): a file may lack the column, which Iceberg reads from the
        file's partition tuple and Spark's parquet reader would read as nulls."""
        from pyiceberg.schema import index_by_id, index_by_name
        from pyiceberg.transforms import IdentityTransform

        metadata = self.pyiceberg_table.metadata
        current = metadata.schema()
        columns = index_by_id(current)
        for spec in metadata.partition_specs:
            if any(
                isinstance(f.transform, IdentityTransform) and f.source_id in columns for f in spec.fields
            ):
                return False
        current_ids = index_by_name(current)
        for schema in metadata.schemas:
            for name, field_id in index_by_name(schema).items():
                if name in current_ids and current_ids[name] != field_id:
                    return False  # the name was dropped and re-added: old files hold other data under it
                try:
                    now = current.find_field(field_id)
                except ValueError:
                    continue  # dropped column: Spark ignores it, as Iceberg does
                if current.find_column_name(field_id) != name:
                    return False
                if not _spark_reads_as(schema.find_field(field_id).field_type, now.field_type):
                    return False
        return True

    # -- reads ----------------------------------------------------------------------------

    def read(
        self,
        source: Split | FileSlice | Iterable[FileSlice] | InstantRef = None,
        columns: list[str] | None = None,
        filters: Any = None,
        mode: ReadingMode = ReadingMode.SNAPSHOT,
        *,
        end_instant: InstantRef = None,
    ) -> Iterator[pa.RecordBatch]:
        """Record batches with position and equality deletes applied.

        INCREMENTAL reads the rows of the data files that snapshots after ``source`` (exclusive)
        up to ``end_instant`` (inclusive, current when None) added and that are still live at
        ``end_instant``, with the deletes live at ``end_instant`` applied. Appends, overwrites
        and deletes are all accepted: the surviving rows of a file rewritten by an overwrite or
        a copy-on-write delete count as added (they are in a new file); rows removed by a
        delete are not reported (this mode yields additions only, not a change feed).
        """
        self.check_mode(mode)
        expr = self.bind(filters)
        reader = SliceReader(self.pyiceberg_table.io, self.schema, columns, expr)
        index = self.file_index()
        parts: Iterable[tuple[FileSlice, int | None, int | None]]
        if mode is ReadingMode.INCREMENTAL:
            start = None if isinstance(source, (Split, SplitPart, FileSlice)) else cast(InstantRef, source)
            snapshots = index.snapshots_between(start, end_instant)
            parts = ((s, None, None) for s in index.scan_added(snapshots, expr))
        elif source is None or isinstance(source, (Instant, int, str)):
            parts = ((s, None, None) for s in index.list_files_at(source, expr))
        else:
            parts = iter_parts(source)
        return self._read_parts(reader, parts)

    @staticmethod
    def _read_parts(
        reader: SliceReader, parts: Iterable[tuple[FileSlice, int | None, int | None]]
    ) -> Iterator[pa.RecordBatch]:
        for file_slice, start, length in parts:
            yield from reader.read(file_slice, start, length)

    def read_arrow(
        self, source: Any = None, columns: list[str] | None = None, filters: Any = None, **kwargs: Any
    ) -> pa.Table:
        """``read`` gathered into one table (notebooks and tests)."""
        schema = self.schema if columns is None else pa.schema([self.schema.field(c) for c in columns])
        return pa.Table.from_batches(list(self.read(source, columns, filters, **kwargs)), schema=schema)


def _spark_reads_as(old: Any, new: Any) -> bool:
    """Whether Spark's parquet reader reads a file column of Iceberg type ``old`` as ``new``: the
    same type, or one of Iceberg's promotions that Spark 4 widens while reading (int to long, float
    to double, a decimal's precision)."""
    from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType

    if old == new:
        return True
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return old.scale == new.scale and old.precision <= new.precision
    return False
