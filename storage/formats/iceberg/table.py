"""``IcebergSpecTable``: one Iceberg table (a pyiceberg ``Table``) behind the spec interface."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar, cast

import pyarrow as pa

from storage.formats.iceberg._lineage import NAMES as LINEAGE_NAMES
from storage.formats.iceberg._lineage import has_row_lineage, with_lineage
from storage.formats.iceberg._lineage import mentions as mentions_lineage
from storage.formats.iceberg._lineage import metadata_columns as lineage_columns
from storage.formats.iceberg._metadata import MetadataExtras
from storage.formats.iceberg._parquet_layout import IdentitySources, reads_by_name
from storage.formats.iceberg._types import arrow_schema, check_variant, has_variant
from storage.formats.iceberg.index import IcebergFileIndex
from storage.formats.iceberg.read import SliceReader, iter_parts, positional_deletes
from storage.spec.errors import FilterError, InstantNotFound
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
from storage.spec.table import InstantRef, SpecTable, Timeline, output_columns


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


class IcebergTimeline(Timeline):
    """Snapshots of the table, oldest first (by sequence number, then commit time).

    ``latest()`` is the table's *current* snapshot (``current-snapshot-id``), as in the Java
    reference, not the newest one listed: after a rollback the current snapshot is an older one,
    and a table without a current snapshot (legacy v1 metadata without ``current-snapshot-id``,
    or ``-1``) has none, so every read, listing, split plan, lookup and count "at the latest
    instant" sees an empty table. The snapshots stay in ``instants()`` and time travel to any of
    them works."""

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
        current = metadata.current_snapshot_id
        self._current = self._by_id.get(current) if current is not None else None

    def instants(self) -> list[Instant]:
        return list(self._instants)

    def latest(self) -> Instant | None:
        """The current snapshot (None when the table has none; see the class docstring)."""
        return self._current

    def get(self, instant_id: Instant | int | str) -> Instant:
        if isinstance(instant_id, Instant):
            instant_id = instant_id.id
        try:
            return self._by_id[int(instant_id)]
        except (KeyError, ValueError, TypeError):
            raise InstantNotFound(f"no snapshot {instant_id!r} in this table's history") from None


class IcebergSpecTable(SpecTable):
    """An Iceberg table read through the spec API.

    Reading the table at a snapshot (``read``/``read_arrow`` with an instant) uses that
    snapshot's own schema (its ``schema-id``): columns added later are absent, dropped ones
    present, renamed ones under their old name, and ``filters``/``columns`` name columns of that
    schema, or a current column added after the snapshot (explicitly named, it reads as its
    initial default or nulls, so a caller holding the current schema can still ask for it). Splits that ``plan_splits`` planned at such a snapshot read with its schema
    too (their files carry ``READ_SNAPSHOT``); other file slices and incremental reads use the
    current schema. Columns a data file lacks read as their
    identity partition value, else their ``initial-default`` (``_defaults``), else nulls.

    On a table with v3 row lineage, ``columns`` and ``filters`` may also name the metadata columns
    ``_row_id`` and ``_last_updated_sequence_number`` (``metadata_columns``, ``_lineage``); a read
    without ``columns`` never returns them. "Latest" (no instant) is the current snapshot
    (``IcebergTimeline``): none, and the table reads empty.
    """

    format: ClassVar[TableFormat] = TableFormat.ICEBERG
    supported_modes: ClassVar[frozenset[ReadingMode]] = frozenset(
        {ReadingMode.SNAPSHOT, ReadingMode.INCREMENTAL}
    )

    def __init__(
        self,
        table: Any,
        location: str,
        identifier: str | None = None,
        extras: MetadataExtras | None = None,
    ) -> None:
        self.pyiceberg_table = table
        self._location = location
        self._identifier = identifier
        self._extras = extras if extras is not None else MetadataExtras()
        self._arrow_schemas: dict[int, pa.Schema] = {}

    # -- description ----------------------------------------------------------------------

    def arrow_schema(self, schema: Any) -> pa.Schema:
        """The Arrow schema of one Iceberg schema: field ids, defaults, variants (``_types``)."""
        found = self._arrow_schemas.get(schema.schema_id)
        if found is None:
            found = arrow_schema(schema, self._extras)
            self._arrow_schemas[schema.schema_id] = found
        return found

    def schema_at(self, instant: InstantRef = None) -> pa.Schema:
        """The schema of the table at ``instant`` (its snapshot's ``schema-id``; the current
        schema for the current snapshot, an empty table or a snapshot that records none)."""
        if instant is None:
            return self.schema
        snapshot = self.snapshot_for(instant)
        metadata = self.pyiceberg_table.metadata
        schema_id = getattr(snapshot, "schema_id", None) if snapshot is not None else None
        if schema_id is None or schema_id == metadata.current_schema_id:
            return self.schema
        schema = metadata.schema_by_id(schema_id)
        if schema is None:
            from storage.spec.errors import CorruptTable

            raise CorruptTable(
                f"snapshot {snapshot.snapshot_id} has schema {schema_id}, which the metadata lacks"
            )
        return self.arrow_schema(schema)

    @functools.cached_property
    def definition(self) -> TableDefinition:
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
            schema=self.arrow_schema(schema),
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
            # A Puffin file holds several deletion vectors: each is counted once, by its offset.
            seen_deletes: set[tuple[str, Any]] = set()
            for file_slice in self.file_index().list_files_at(snapshot.snapshot_id):
                base = file_slice.base_file
                if base is None:  # never for Iceberg: every slice has its data file
                    continue
                files += 1
                size += base.size_bytes
                records += base.record_count
                for delete in file_slice.delete_files:
                    key = (delete.path, delete.extra.get("content_offset"))
                    if key not in seen_deletes:
                        seen_deletes.add(key)
                        size += delete.size_bytes
                        if delete.content in (FileContent.POSITION_DELETES, FileContent.DELETION_VECTOR):
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

    def positional_deletes(self, file_slices: Iterable[FileSlice]) -> dict[str, Any]:
        """Position delete files and deletion vectors, as row positions by data file path."""
        return positional_deletes(self.pyiceberg_table.io, file_slices)

    def plain_parquet_layout(self) -> bool:
        """Whether Spark's parquet reader reads every data file as Iceberg does (``reads_by_name``
        in ``_parquet_layout``). Never for a table with an identity partition field (in any spec):
        a file may lack the column, which Iceberg reads from the file's partition tuple."""
        return self.parquet_partition_columns() == () and not self._identity_sources.paths

    def parquet_partition_columns(self) -> tuple[str, ...] | None:
        """The top-level columns identity partition fields (of any spec) take their values from,
        when Spark's parquet reader reads the files' stored columns as Iceberg does; a file may
        lack one (``parquet_partition_values`` says which); None when the files cannot be read
        by name (renamed fields, defaults, variants...)."""
        metadata = self.pyiceberg_table.metadata
        if self._extras.variants:
            return None  # variant columns are read as their metadata/value pair
        if not reads_by_name(metadata, self.arrow_schema):
            return None
        return self._identity_sources.columns

    def parquet_partition_values(self, file_slice: FileSlice, columns: Sequence[str]) -> dict[str, Any]:
        """The identity source columns of ``columns`` that the slice's data file lacks, with the
        values Iceberg reads for them (``IdentitySources.filled``); the file's footer is read
        when its statistics do not show the column."""
        if not self._identity_sources.paths:
            return {}
        return self._identity_sources.filled(self.pyiceberg_table.io, file_slice.base, columns)

    @functools.cached_property
    def _identity_sources(self) -> IdentitySources:
        return IdentitySources.of(self.pyiceberg_table.metadata, self.arrow_schema)

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
        schema = self._read_schema(source, mode)
        if schema is not self.schema:
            snapshot_columns = schema.names
            schema = _with_later_columns(schema, self.schema)
            if columns is None:
                columns = snapshot_columns
        readable = self._readable(schema, columns)
        if columns is None and readable is not schema:
            columns = schema.names  # the lineage columns only when asked for
        expr = self._bind_to(filters, readable)
        reader = SliceReader(self.pyiceberg_table.io, readable, columns, expr)
        index = self.file_index()
        # lineage columns are not in the manifests' statistics: such a filter prunes no file
        prunable = expr if expr is None or not mentions_lineage(expr.columns()) else None
        parts: Iterable[tuple[FileSlice, int | None, int | None]]
        if mode is ReadingMode.INCREMENTAL:
            start = None if isinstance(source, (Split, SplitPart, FileSlice)) else cast(InstantRef, source)
            snapshots = index.snapshots_between(start, end_instant)
            parts = ((s, None, None) for s in index.scan_added(snapshots, prunable))
        elif source is None or isinstance(source, (Instant, int, str)):
            # files are pruned with the current schema's names: a filter on an older schema
            # prunes only when its columns mean the same field ids in both
            prune = prunable if schema is self.schema or self._same_ids(prunable, schema) else None
            parts = ((s, None, None) for s in index.list_files_at(source, prune))
        else:
            parts = iter_parts(source)
        variants = has_variant(readable.field(c) for c in output_columns(columns, readable))
        return self._read_parts(reader, parts, variants)

    def metadata_columns(self, instant: InstantRef = None) -> pa.Schema:
        """The v3 row lineage columns (``_row_id``, ``_last_updated_sequence_number``) a read
        returns when asked for them by name, on a table with row lineage (``_lineage``)."""
        if not has_row_lineage(self.pyiceberg_table.metadata):
            return pa.schema([])
        return lineage_columns(self.schema_at(instant) if instant is not None else self.schema)

    def _readable(self, schema: pa.Schema, columns: list[str] | None) -> pa.Schema:
        """``schema`` with the row lineage columns a read may name (tables with row lineage); a
        lineage column asked of a table without lineage is a ``FilterError`` that says so."""
        if has_row_lineage(self.pyiceberg_table.metadata):
            return with_lineage(schema)
        for name in columns or ():
            if name in LINEAGE_NAMES and name not in schema.names:
                raise FilterError(
                    f"{name!r} is a row lineage column; this table does not track row lineage"
                    f" (format v{self.pyiceberg_table.metadata.format_version} without next-row-id:"
                    " only v3 tables do)",
                    token=name,
                )
        return schema

    def _read_schema(self, source: Any, mode: ReadingMode) -> pa.Schema:
        """The schema a read returns: the snapshot's own for a snapshot read at an instant, and
        for the splits ``plan_splits`` planned at one (``READ_SNAPSHOT`` in their files' extra)."""
        if mode is not ReadingMode.SNAPSHOT:
            return self.schema
        if isinstance(source, (Instant, int, str)):
            return self.schema_at(source)
        planned_at = _planned_at(source)
        return self.schema if planned_at is None else self.schema_at(planned_at)

    def plan_splits(
        self,
        instant: InstantRef = None,
        filters: Any = None,
        target_size: int = 128 * 1024 * 1024,
        open_file_cost: int = 4 * 1024 * 1024,
        lookback: int = 10,
    ) -> Iterator[Split]:
        """Splits of the table at ``instant``. At a snapshot whose schema is not today's, the
        filter names that snapshot's columns and the files carry the snapshot id
        (``READ_SNAPSHOT``), so that reading a split returns that snapshot's columns."""
        from storage.spec.splits import plan_splits

        schema = self.schema_at(instant)
        slices: Iterable[FileSlice]
        if schema is self.schema:
            expr = self._bind_to(filters, self._readable(schema, None))
            prune = None if expr is not None and mentions_lineage(expr.columns()) else expr
            slices = self.file_index().list_files_at(instant, prune)
        else:
            snapshot_id = self.snapshot_for(instant).snapshot_id
            expr = self._bind_to(filters, self._readable(_with_later_columns(schema, self.schema), None))
            prune = expr if self._same_ids(expr, schema) else None
            slices = (_tagged(s, snapshot_id) for s in self.file_index().list_files_at(instant, prune))
        return plan_splits(
            (self.with_split_offsets(s, target_size) for s in slices),
            target_size=target_size,
            open_file_cost=open_file_cost,
            lookback=lookback,
        )

    def with_split_offsets(self, file_slice: FileSlice, target_size: int) -> FileSlice:
        """An ORC file is read whole (its stripes cannot be located, ``_orc``): the stripe
        offsets its writer records are dropped so the planner never cuts it."""
        base = file_slice.base_file
        if base is not None and base.file_format.lower() == "orc":
            if base.split_offsets is None:
                return file_slice
            return dataclasses.replace(file_slice, base_file=dataclasses.replace(base, split_offsets=None))
        return super().with_split_offsets(file_slice, target_size)

    @staticmethod
    def _bind_to(filters: Any, schema: pa.Schema) -> Any:
        if filters is None or filters == "":
            return None
        from storage.spec.expressions import AlwaysTrue, bind_filter

        expr = bind_filter(filters, schema)
        return None if expr is None or isinstance(expr, AlwaysTrue) else expr

    def _same_ids(self, expr: Any, schema: pa.Schema) -> bool:
        if expr is None:
            return True
        current = _ids_by_name(self.schema)
        old = _ids_by_name(schema)
        return all(old.get(c) is not None and old.get(c) == current.get(c) for c in expr.columns())

    def _read_parts(
        self,
        reader: SliceReader,
        parts: Iterable[tuple[FileSlice, int | None, int | None]],
        variants: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        for file_slice, start, length in parts:
            base = file_slice.base_file
            if variants and base is not None and base.file_format.lower() == "parquet":
                self._check_variants(base.path)
            yield from reader.read(file_slice, start, length)

    def _check_variants(self, path: str) -> None:
        import pyarrow.parquet as pq

        try:
            with self.pyiceberg_table.io.new_input(path).open(seekable=True) as handle:
                file_schema = pq.ParquetFile(handle).schema_arrow
        except FileNotFoundError:
            return  # the reader reports the missing file
        check_variant(file_schema, path)

    def read_arrow(
        self, source: Any = None, columns: list[str] | None = None, filters: Any = None, **kwargs: Any
    ) -> pa.Table:
        """``read`` gathered into one table (notebooks and tests); the schema is the snapshot's
        own for a snapshot read at an instant."""
        full = self._read_schema(source, kwargs.get("mode", ReadingMode.SNAPSHOT))
        if columns is not None and full is not self.schema:
            full = _with_later_columns(full, self.schema)
        if columns is not None:
            full = self._readable(full, columns)
        schema = (
            full if columns is None else pa.schema([full.field(c) for c in output_columns(columns, full)])
        )
        return pa.Table.from_batches(list(self.read(source, columns, filters, **kwargs)), schema=schema)


READ_SNAPSHOT = "iceberg_read_snapshot_id"


def _tagged(file_slice: FileSlice, snapshot_id: int) -> FileSlice:
    base = file_slice.base_file
    if base is None:
        return file_slice
    extra = {**base.extra, READ_SNAPSHOT: snapshot_id}
    return dataclasses.replace(file_slice, base_file=dataclasses.replace(base, extra=extra))


def _planned_at(source: Any) -> int | None:
    """The snapshot a split (part, slice, or a list of them) was planned at by ``plan_splits``
    when that snapshot's schema is not today's; else None."""
    first: Any = source
    if isinstance(first, Split):
        first = first.parts[0] if first.parts else None
    elif isinstance(first, (list, tuple)):
        first = first[0] if first else None
        if isinstance(first, Split):
            first = first.parts[0] if first.parts else None
    if isinstance(first, SplitPart):
        first = first.file_slice
    if not isinstance(first, FileSlice) or first.base_file is None:
        return None
    found = first.base_file.extra.get(READ_SNAPSHOT)
    return found if isinstance(found, int) else None


def _with_later_columns(snapshot: pa.Schema, current: pa.Schema) -> pa.Schema:
    """The snapshot's schema followed by the current columns added after it (a field id and a
    name the snapshot's schema lacks): ``columns`` and ``filters`` of a read at an old snapshot
    may name them (read as their initial default, else null), the snapshot's own names first."""
    ids = set(_ids_by_name(snapshot).values())
    names = set(snapshot.names)
    later = [
        f
        for f in current
        if f.name not in names
        and (f.metadata or {}).get(b"PARQUET:field_id") is not None
        and int(f.metadata[b"PARQUET:field_id"]) not in ids
    ]
    return pa.schema([*snapshot, *later]) if later else snapshot


def _ids_by_name(schema: pa.Schema | pa.StructType, prefix: str = "") -> dict[str, int]:
    """Dotted column name -> field id, struct children included."""
    found: dict[str, int] = {}
    for field in schema:
        name = f"{prefix}{field.name}"
        if field.metadata and b"PARQUET:field_id" in field.metadata:
            found[name] = int(field.metadata[b"PARQUET:field_id"])
        if pa.types.is_struct(field.type):
            found.update(_ids_by_name(field.type, f"{name}."))
    return found
