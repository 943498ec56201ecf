"""The format-neutral table interface every format adapter implements.

A format adapter (a package ``storage/formats/<name>/``) provides a ``TableFormatAdapter`` subclass,
registered under the ``lakewarden.table_formats`` entry-point group, whose ``open`` returns a
``SpecTable``. Everything above this layer (console, processes, Spark jobs) reads tables only
through these classes.

Instants may be passed as an ``Instant`` or as its native id (Iceberg snapshot id, Delta
version, Hudi instant time); filters as an ``Expression`` or as filter text (see
``storage.spec.expressions``). Listings are lazy iterators: a caller that consumes them as a
stream holds one entry at a time, whatever the table's size.
"""

from __future__ import annotations

import abc
import dataclasses
import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from storage.spec.errors import FilterError, InstantNotFound, NotSupported
from storage.spec.models import (
    ChangeKind,
    DataFile,
    FileChange,
    FileSlice,
    Instant,
    PartitionChange,
    PartitionSnapshot,
    ReadingMode,
    Split,
    TableDefinition,
    TableFormat,
    TableSummary,
)

if TYPE_CHECKING:
    from storage.io.stores import StoreOptions
    from storage.spec.record_index import RecordIndex

MIB = 1024 * 1024
InstantRef = Instant | int | str | None


def output_columns(columns: Sequence[str] | None, schema: pa.Schema) -> list[str]:
    """The top-level columns a read returns: ``columns`` (all of them when None), checked against
    ``schema``; ``FilterError`` naming the first unknown one."""
    names = schema.names
    if columns is None:
        return list(names)
    unknown = [c for c in columns if c not in names]
    if unknown:
        raise FilterError(
            f"unknown column {unknown[0]!r}; the table has {', '.join(names)}", token=unknown[0]
        )
    return list(columns)


class Timeline(abc.ABC):
    """The table's completed instants, oldest first."""

    @abc.abstractmethod
    def instants(self) -> list[Instant]: ...

    def latest(self) -> Instant | None:
        instants = self.instants()
        return instants[-1] if instants else None

    def get(self, instant_id: Instant | int | str) -> Instant:
        if isinstance(instant_id, Instant):
            return instant_id
        wanted = str(instant_id)
        for instant in self.instants():
            if str(instant.id) == wanted:
                return instant
        raise InstantNotFound(f"no instant {instant_id!r} in this table's timeline")

    def latest_at(self, timestamp: dt.datetime) -> Instant:
        """The last instant committed at or before ``timestamp`` (naive means UTC)."""
        if timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=dt.UTC)
        found = None
        for instant in self.instants():
            if instant.timestamp <= timestamp:
                found = instant
        if found is None:
            raise InstantNotFound(f"the table has no instant at or before {timestamp.isoformat()}")
        return found


#: Maintenance aims at 128 MiB files; a file under an eighth of the target counts as small.
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
SMALL_FILE_FRACTION = 8


class FileIndex(abc.ABC):
    """Lists file slices at an instant, or the changes between two instants, pruned by filters."""

    def small_file_bytes(self) -> int:
        """Files below this size count as small (formats may read it from table properties)."""
        return DEFAULT_TARGET_FILE_SIZE // SMALL_FILE_FRACTION

    def partitions_at(self, instant: InstantRef = None, filters: Any = None) -> list[PartitionSnapshot]:
        """Per-partition file counts, bytes, records, delete files and small files at ``instant``.

        Streams the listing: memory grows with the number of partitions, not of files.
        """
        small = self.small_file_bytes()
        by_path: dict[str, PartitionSnapshot] = {}
        for file_slice in self.list_files_at(instant, filters):
            partition = by_path.get(file_slice.partition.path)
            if partition is None:
                partition = by_path[file_slice.partition.path] = PartitionSnapshot(file_slice.partition)
            base = file_slice.base_file
            partition.delete_file_count += len(file_slice.delete_files)
            if base is None:
                continue
            partition.file_count += 1
            partition.total_bytes += base.size_bytes
            partition.record_count += base.record_count
            partition.small_file_count += base.size_bytes < small
        return sorted(by_path.values(), key=lambda p: p.partition.path)

    def partition_changes_between(
        self, start_exclusive: InstantRef, end_inclusive: InstantRef, filters: Any = None
    ) -> list[PartitionChange]:
        """Base files, bytes and records added and removed per partition between two instants."""
        by_path: dict[str, PartitionChange] = {}
        for change in self.list_files_between(start_exclusive, end_inclusive, filters):
            base = change.file_slice.base_file
            if base is None:
                continue
            partition = by_path.get(change.file_slice.partition.path)
            if partition is None:
                partition = by_path[change.file_slice.partition.path] = PartitionChange(
                    change.file_slice.partition
                )
            if change.kind is ChangeKind.ADDED:
                partition.files_added += 1
                partition.bytes_added += base.size_bytes
                partition.records_added += base.record_count
            else:
                partition.files_removed += 1
                partition.bytes_removed += base.size_bytes
                partition.records_removed += base.record_count
        return sorted(by_path.values(), key=lambda p: p.partition.path)

    @abc.abstractmethod
    def list_files_at(self, instant: InstantRef = None, filters: Any = None) -> Iterator[FileSlice]:
        """Live file slices at ``instant`` (latest when None) that might hold rows matching
        ``filters``. Never drops a slice that could hold a matching row."""

    @abc.abstractmethod
    def list_files_between(
        self, start_exclusive: InstantRef, end_inclusive: InstantRef, filters: Any = None
    ) -> Iterator[FileChange]:
        """Files added and removed by the instants after ``start_exclusive`` up to and including
        ``end_inclusive``. ``start_exclusive`` None means from the table's creation."""


class SpecTable(abc.ABC):
    """One table, format-neutral."""

    format: ClassVar[TableFormat]
    supported_modes: ClassVar[frozenset[ReadingMode]] = frozenset({ReadingMode.SNAPSHOT})

    @property
    @abc.abstractmethod
    def definition(self) -> TableDefinition: ...

    @property
    def schema(self) -> pa.Schema:
        return self.definition.schema

    def schema_at(self, instant: InstantRef = None) -> pa.Schema:
        """The columns of the table as they were at ``instant`` (time travel reads an old snapshot
        with its own schema); today's without an instant. Formats with schema history override it."""
        return self.schema

    def metadata_columns(self, instant: InstantRef = None) -> pa.Schema:
        """Columns outside the schema that a read returns only when ``columns`` names them (a
        format's metadata columns, e.g. Iceberg v3 row lineage ``_row_id``); none by default.
        ``SELECT *`` (``columns=None``) never includes them."""
        return pa.schema([])

    @property
    def partition_spec(self):
        return self.definition.partition_spec

    @property
    def location(self) -> str:
        return self.definition.id.location

    @abc.abstractmethod
    def timeline(self) -> Timeline: ...

    @abc.abstractmethod
    def file_index(self) -> FileIndex: ...

    @abc.abstractmethod
    def summary(self) -> TableSummary:
        """Current instant, live file count, bytes, records, from metadata where possible."""

    @abc.abstractmethod
    def read(
        self,
        source: Split | FileSlice | Iterable[FileSlice] | InstantRef = None,
        columns: list[str] | None = None,
        filters: Any = None,
        mode: ReadingMode = ReadingMode.SNAPSHOT,
        *,
        end_instant: InstantRef = None,
    ) -> Iterator[pa.RecordBatch]:
        """Arrow record batches with deletes and logs applied.

        ``source`` is a split, a file slice, several slices, or an instant (all the table at it).
        For INCREMENTAL and CDC, ``source`` is the exclusive start instant and ``end_instant``
        the inclusive end. ``filters`` both prunes files and filters rows exactly.
        """

    def record_index(self, key_columns: str | Sequence[str] | None = None) -> RecordIndex:
        """Which file holds each record key (``storage.spec.record_index``); ``key_columns``
        default to the table's declared record key. Formats with a native index override this."""
        from storage.spec.record_index import RecordIndex

        return RecordIndex(self, key_columns)

    def plan_splits(
        self,
        instant: InstantRef = None,
        filters: Any = None,
        target_size: int = 128 * MIB,
        open_file_cost: int = 4 * MIB,
        lookback: int = 10,
    ) -> Iterator[Split]:
        from storage.spec.splits import plan_splits

        slices = self.file_index().list_files_at(instant, filters)
        return plan_splits(
            (self.with_split_offsets(s, target_size) for s in slices),
            target_size=target_size,
            open_file_cost=open_file_cost,
            lookback=lookback,
        )

    def with_split_offsets(self, file_slice: FileSlice, target_size: int) -> FileSlice:
        """The slice with its base file's row-group offsets when the planner may cut it: a base
        file larger than the target, with no deletes or logs (those are merged whole)."""
        base = file_slice.base_file
        if (
            base is None
            or file_slice.delete_files
            or base.split_offsets is not None
            or base.size_bytes <= target_size
        ):
            return file_slice
        offsets = self.row_group_offsets(base)
        if offsets is None:
            return file_slice
        return dataclasses.replace(file_slice, base_file=dataclasses.replace(base, split_offsets=offsets))

    def file_rows_are_records(self) -> bool:
        """Whether the rows stored in the live data files (delete files applied) are the table's
        records. False where later rows replace earlier ones only on read (a merge-on-read
        primary-key table): counts replayed from the files would overstate its records, so the
        records timeline is left out rather than drawn wrong."""
        return True

    def row_group_offsets(self, data_file: DataFile) -> tuple[int, ...] | None:
        """Row-group start offsets of a data file whose metadata does not record them (read
        from its footer); None keeps the file whole. Iceberg manifests carry them already."""
        return None

    def plain_parquet_layout(self) -> bool:
        """Whether the table's data files store its columns as plain parquet, under the table's
        column names and types, so Spark's parquet reader given the table schema reads the same
        values as ``read`` (delete files and non-parquet files are checked per slice by the
        caller). False keeps readers on ``read``; an adapter says True only when sure."""
        return False

    def parquet_partition_columns(self) -> tuple[str, ...] | None:
        """The columns a reader of the data files must fill from each file slice's partition
        values (``FileSlice.partition.values``) because the files do not store them, when every
        other column is stored as ``plain_parquet_layout`` says; ``()`` for a plain layout, None
        when the files cannot be read as plain parquet even with partition values filled in."""
        return () if self.plain_parquet_layout() else None

    def parquet_partition_values(self, file_slice: FileSlice, columns: Sequence[str]) -> dict[str, Any]:
        """The values a reader of the slice's base file fills in for ``columns`` (some of
        ``parquet_partition_columns()``), by column: every column the file does not store, as
        the table reads it; a column the file stores is left out (read from the file). By
        default (Delta) the files store none: each is the slice's partition value.
        ``UnsupportedFeature`` when the file stores one in a way a reader by name cannot read
        exactly (says which file and column)."""
        values = file_slice.partition.values
        return {name: values.get(name) for name in columns}

    def positional_deletes(self, file_slices: Iterable[FileSlice]) -> dict[str, Any]:
        """The sorted, unique row positions (numpy ``int64``) that the delete files of
        ``file_slices`` remove from their base files, by base file path; a slice without deletes
        has no entry. For readers that apply deletes themselves by row position (Spark's parquet
        reader joined on ``_metadata.row_index``). ``NotSupported`` when a slice deletes by
        value (equality deletes, log files) or the format does not answer positions."""
        raise NotSupported(self.format.value, "deleted row positions")

    def check_mode(self, mode: ReadingMode) -> None:
        if mode not in self.supported_modes:
            raise NotSupported(self.format.value, f"the {mode.value} reading mode")


class TableFormatAdapter(abc.ABC):
    """Registered under ``lakewarden.table_formats``: recognises and opens tables of one format."""

    name: ClassVar[str]
    #: How the console names the format ("Lance"); empty: the name capitalised.
    label: ClassVar[str] = ""
    #: What ``detect`` looks for, named when no format recognises a location ("a _delta_log folder").
    looks_for: ClassVar[str] = ""

    @classmethod
    @abc.abstractmethod
    def detect(cls, location: str, storage: StoreOptions | None = None) -> bool:
        """True when ``location`` (a local path or URI) holds a table of this format. ``storage``
        carries the object store's credentials (None: from the environment)."""

    @classmethod
    @abc.abstractmethod
    def open(
        cls, location_or_identifier: str, catalog: Any = None, storage: StoreOptions | None = None
    ) -> SpecTable:
        """Open the table, raising ``TableNotFound``/``CorruptTable``/``UnsupportedFeature``."""

    @classmethod
    def metadata_pointer(cls, location: str, storage: StoreOptions | None = None) -> str | None:
        """The cheapest read that changes whenever the table at ``location`` does (a refresh pass
        re-reads only tables whose pointer moved), or None when the format has none (the table is
        then refreshed every pass). Raises what reading it raised."""
        return None
