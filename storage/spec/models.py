"""Format-neutral models of a lakehouse table.

Plain Python (no Django): usable from a notebook, a Celery task or a Spark executor.
Schemas are ``pyarrow.Schema`` objects because all three format libraries speak Arrow;
an Iceberg field id, where known, is kept in the Arrow field metadata under
``b"PARQUET:field_id"`` (the key pyarrow itself uses when reading parquet).

Statistics and partition values are plain Python values of the column's type:
``int``, ``float``, ``decimal.Decimal``, ``str``, ``bytes``, ``bool``, ``datetime.date``,
``datetime.datetime`` (timezone-aware UTC for ``timestamptz``, naive for ``timestamp``).
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


class TableFormat(enum.StrEnum):
    ICEBERG = "iceberg"
    DELTA = "delta"
    HUDI = "hudi"


class ReadingMode(enum.StrEnum):
    """How a read interprets the table.

    SNAPSHOT: the rows visible at an instant, deletes and logs applied (every format).
    READ_OPTIMIZED: base files only, logs ignored (Hudi merge-on-read).
    INCREMENTAL: rows added between two instants (every format).
    CDC: change rows with a change type between two instants (Delta change data feed).
    """

    SNAPSHOT = "snapshot"
    READ_OPTIMIZED = "read_optimized"
    INCREMENTAL = "incremental"
    CDC = "cdc"


class FileContent(enum.StrEnum):
    DATA = "data"
    POSITION_DELETES = "position_deletes"
    EQUALITY_DELETES = "equality_deletes"
    DELETION_VECTOR = "deletion_vector"
    LOG = "log"


@dataclass(frozen=True, slots=True)
class PartitionField:
    """One partition column: ``transform`` is ``identity``, ``year``, ``month``, ``day``,
    ``hour``, ``bucket[N]``, ``truncate[W]`` or ``void``."""

    name: str
    source_column: str
    transform: str = "identity"


@dataclass(frozen=True, slots=True)
class PartitionSpec:
    fields: tuple[PartitionField, ...] = ()

    @property
    def is_partitioned(self) -> bool:
        return bool(self.fields)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


@dataclass(frozen=True, slots=True)
class TableId:
    format: TableFormat
    location: str
    identifier: str | None = None  # catalog identifier, e.g. "demo.orders" for Iceberg

    @property
    def display_name(self) -> str:
        return self.identifier or self.location.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True, slots=True)
class TableDefinition:
    id: TableId
    schema: pa.Schema
    partition_spec: PartitionSpec = PartitionSpec()
    properties: Mapping[str, str] = field(default_factory=dict)
    sort_columns: tuple[str, ...] = ()
    table_type: str | None = None  # Hudi: COPY_ON_WRITE / MERGE_ON_READ


@dataclass(frozen=True, slots=True)
class Instant:
    """A point in the table's history: Iceberg snapshot, Delta version, Hudi completed instant.

    ``id`` is the native identifier (Iceberg snapshot id int, Delta version int, Hudi instant
    time str); ``sequence`` orders instants (position in the timeline, oldest 0).
    """

    id: int | str
    timestamp: dt.datetime  # timezone-aware UTC
    operation: str  # append, overwrite, delete, replace, write, merge, upsert, ...
    parent_id: int | str | None = None
    summary: Mapping[str, Any] = field(default_factory=dict)
    sequence: int = 0


@dataclass(frozen=True, slots=True)
class DataFile:
    """A file of the table: data, delete, deletion vector or log file."""

    path: str  # absolute path or URI the format library can open
    size_bytes: int
    record_count: int
    content: FileContent = FileContent.DATA
    file_format: str = "parquet"
    partition: Mapping[str, Any] = field(default_factory=dict)  # partition field name -> value
    lower_bounds: Mapping[str, Any] | None = None  # column name -> value; None when unknown
    upper_bounds: Mapping[str, Any] | None = None
    null_counts: Mapping[str, int] | None = None
    split_offsets: tuple[int, ...] | None = None  # row-group start offsets where known
    equality_columns: tuple[str, ...] = ()  # equality deletes
    extra: Mapping[str, Any] = field(default_factory=dict)  # format specifics (Delta DV descriptor...)


@dataclass(frozen=True, slots=True)
class PartitionDescriptor:
    path: str  # "" for an unpartitioned table; "region=eu/day=2024-01-01" style otherwise
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A base file with the delete files or log files that apply to it.

    Hudi merge-on-read may have a slice with log files only (``base_file`` None).
    """

    partition: PartitionDescriptor
    base_file: DataFile | None
    delete_files: tuple[DataFile, ...] = ()
    file_group_id: str | None = None
    base_instant: int | str | None = None

    @property
    def size_bytes(self) -> int:
        base = self.base_file.size_bytes if self.base_file else 0
        return base + sum(f.size_bytes for f in self.delete_files)

    @property
    def record_count(self) -> int:
        return self.base_file.record_count if self.base_file else 0

    @property
    def path(self) -> str:
        if self.base_file is not None:
            return self.base_file.path
        return self.delete_files[0].path if self.delete_files else ""

    @property
    def base(self) -> DataFile:
        """``base_file`` of a slice that has one (every slice but a Hudi log-only one);
        ``ValueError`` for a slice without."""
        if self.base_file is None:
            raise ValueError(f"the slice of {self.path or 'no file'} has no base file")
        return self.base_file


@dataclass(frozen=True, slots=True)
class FileGroup:
    id: str
    partition: PartitionDescriptor
    slices: tuple[FileSlice, ...]


@dataclass(slots=True)
class PartitionSnapshot:
    """Aggregate of one partition at an instant (counts, not file lists: listing streams)."""

    partition: PartitionDescriptor
    file_count: int = 0
    total_bytes: int = 0
    record_count: int = 0
    delete_file_count: int = 0
    small_file_count: int = 0


class ChangeKind(enum.StrEnum):
    ADDED = "added"
    REMOVED = "removed"


@dataclass(frozen=True, slots=True)
class FileChange:
    kind: ChangeKind
    file_slice: FileSlice
    instant_id: int | str | None = None


@dataclass(slots=True)
class PartitionChange:
    partition: PartitionDescriptor
    files_added: int = 0
    files_removed: int = 0
    bytes_added: int = 0
    bytes_removed: int = 0
    records_added: int = 0
    records_removed: int = 0


@dataclass(frozen=True, slots=True)
class SplitPart:
    """A byte range of one file slice; ``length`` of the base file, deletes read whole."""

    file_slice: FileSlice
    start: int
    length: int
    estimated_rows: int


@dataclass(frozen=True, slots=True)
class Split:
    parts: tuple[SplitPart, ...]
    weight: int  # bytes, counting open-file cost and delete/log bytes

    @property
    def size_bytes(self) -> int:
        return sum(p.length for p in self.parts)

    @property
    def estimated_rows(self) -> int:
        return sum(p.estimated_rows for p in self.parts)


@dataclass(frozen=True, slots=True)
class TableSummary:
    """Cheap facts for list pages: answered from metadata, no file reads where possible.

    ``total_bytes`` counts base files plus the delete files, deletion vectors and log files that
    apply to them; ``record_count`` is the rows a read returns (deletes applied; with Iceberg
    equality deletes, an upper bound).
    """

    current_instant_id: int | str | None
    file_count: int
    total_bytes: int
    record_count: int
    instant_count: int
    last_updated: dt.datetime | None
