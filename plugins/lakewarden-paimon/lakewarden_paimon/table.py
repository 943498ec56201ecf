"""``PaimonSpecTable``: a Paimon table (append-only or primary-key) written by pypaimon or Paimon's
Java writers, read through pypaimon. Snapshots are the timeline (their ``commitKind`` the
operation), tags are listed in each tagged snapshot's summary."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from lakewarden_paimon import _meta
from lakewarden_paimon._files import Files
from lakewarden_paimon.index import PaimonFileIndex
from lakewarden_paimon.read import check_readable, read_files, read_snapshot, reader_table
from storage.spec.errors import InstantNotFound, InvalidRange, UnsupportedFeature
from storage.spec.expressions import bind_filter
from storage.spec.models import (
    FileSlice,
    Instant,
    PartitionField,
    PartitionSpec,
    ReadingMode,
    Split,
    SplitPart,
    TableDefinition,
    TableId,
    TableSummary,
)
from storage.spec.splits import part_weight
from storage.spec.table import MIB, SpecTable, Timeline


class PaimonFormat(enum.StrEnum):
    """The format's name where the spec expects a ``TableFormat`` (a closed enum of the built-ins:
    see the plugin's README for the API change that would make this unnecessary)."""

    PAIMON = "paimon"


def arrow_schema(table_schema: Any) -> pa.Schema:
    from pypaimon.schema.data_types import PyarrowFieldParser

    return PyarrowFieldParser.from_paimon_schema(table_schema.fields)


class PaimonTimeline(Timeline):
    def __init__(self, table: PaimonSpecTable) -> None:
        self.table = table

    @functools.cached_property
    def _instants(self) -> list[Instant]:
        store = self.table.store
        tags: dict[int, list[str]] = {}
        for name, tag in _meta.tag_snapshots(store).items():
            tags.setdefault(tag.id, []).append(name)
        instants, parent = [], None
        for sequence, snapshot_id in enumerate(self.table.snapshot_ids()):
            snapshot = _meta.load_snapshot(store, snapshot_id)
            summary = {
                "commit-kind": snapshot.commit_kind,
                "total-record-count": snapshot.total_record_count,
                "delta-record-count": snapshot.delta_record_count,
                "schema-id": snapshot.schema_id,
                "commit-user": snapshot.commit_user,
            }
            if snapshot_id in tags:
                summary["tags"] = ",".join(tags[snapshot_id])
            instants.append(
                Instant(
                    id=snapshot_id,
                    timestamp=dt.datetime.fromtimestamp(snapshot.time_millis / 1000, dt.UTC),
                    operation=str(snapshot.commit_kind).lower(),
                    parent_id=parent,
                    summary=summary,
                    sequence=sequence,
                )
            )
            parent = snapshot_id
        return instants

    def instants(self) -> list[Instant]:
        return list(self._instants)


class PaimonSpecTable(SpecTable):
    format = PaimonFormat.PAIMON  # type: ignore[assignment]
    supported_modes = frozenset({ReadingMode.SNAPSHOT, ReadingMode.INCREMENTAL})

    def __init__(self, store: Any, location: str, storage: Any = None) -> None:
        self.store = store
        self.storage = storage
        self._location = location
        self._ids = _meta.snapshot_ids(store)

    @functools.cached_property
    def files(self) -> Files:
        """The table's files (maintenance lists and deletes through it)."""
        return Files(self._location, self.storage)

    @property
    def is_primary_key_table(self) -> bool:
        return bool(self.store.primary_keys)

    def file_rows_are_records(self) -> bool:
        """A primary-key table's files hold every version of a key until compaction merges them."""
        return not self.is_primary_key_table

    @functools.cached_property
    def definition(self) -> TableDefinition:
        schema = self.store.table_schema
        properties = dict(schema.options)
        properties["paimon.table-type"] = "primary-key" if self.is_primary_key_table else "append-only"
        if self.is_primary_key_table:
            properties["paimon.primary-keys"] = ",".join(self.store.primary_keys)
        return TableDefinition(
            id=TableId(PaimonFormat.PAIMON, self._location),  # type: ignore[arg-type]
            schema=arrow_schema(schema),
            partition_spec=PartitionSpec(tuple(PartitionField(k, k) for k in schema.partition_keys)),
            properties=properties,
            sort_columns=tuple(self.store.primary_keys),
            table_type=properties["paimon.table-type"],
        )

    def snapshot_ids(self) -> list[int]:
        return list(self._ids)

    def resolve(self, instant: Any) -> int | None:
        """The snapshot id ``instant`` names (the latest when None); InstantNotFound otherwise."""
        if instant is None:
            return self._ids[-1] if self._ids else None
        raw = instant.id if isinstance(instant, Instant) else instant
        try:
            snapshot_id = int(str(raw))
        except ValueError:
            snapshot_id = -1
        if snapshot_id not in self._ids:
            raise InstantNotFound(f"no snapshot {raw!r} in this Paimon table (it has {self._describe()})")
        return snapshot_id

    def _describe(self) -> str:
        return f"snapshots {self._ids[0]} to {self._ids[-1]}" if self._ids else "no snapshot"

    def schema_at(self, instant: Any = None) -> pa.Schema:
        """The columns a read at ``instant`` returns: the table's current schema at the latest
        snapshot (Paimon reads a table with its newest schema, also one committed after the last
        write), an older snapshot's own schema when time travelling to it (Paimon's rule)."""
        snapshot = self._own_schema(None if instant is None else self.resolve(instant))
        if snapshot is None:
            return self.schema
        return arrow_schema(self.store.schema_manager.get_schema(snapshot.schema_id))

    def _own_schema(self, snapshot_id: int | None) -> Any:
        """The snapshot (pypaimon's) when a read at ``snapshot_id`` is in that snapshot's own
        schema; None when it is in the current one."""
        if snapshot_id is None or snapshot_id == self._ids[-1]:
            return None
        snapshot = _meta.load_snapshot(self.store, snapshot_id)
        return None if snapshot.schema_id == self.store.table_schema.id else snapshot

    def timeline(self) -> PaimonTimeline:
        return PaimonTimeline(self)

    def file_index(self) -> PaimonFileIndex:
        return PaimonFileIndex(self)

    def summary(self) -> TableSummary:
        latest = self.resolve(None)
        files = list(self.file_index().list_files_at(latest)) if latest is not None else []
        last = _meta.load_snapshot(self.store, latest) if latest is not None else None
        return TableSummary(
            current_instant_id=latest,
            file_count=len(files),
            total_bytes=sum(s.size_bytes for s in files),
            record_count=self._record_count(latest, files),
            instant_count=len(self._ids),
            last_updated=None if last is None else dt.datetime.fromtimestamp(last.time_millis / 1000, dt.UTC),
        )

    def _record_count(self, latest: int | None, files: list[FileSlice]) -> int:
        """Rows a read returns: from the manifests when no key can appear twice (append-only, or
        one file per bucket with no retractions), else by reading the primary key columns. A
        table whose merge this reader cannot do (``check_readable``) counts the rows its files
        hold: an upper bound, as for Iceberg equality deletes."""
        if latest is None:
            return 0
        groups = [s.file_group_id for s in files]
        merged = any(s.base_file and s.base_file.extra.get("delete_row_count") for s in files)
        if not self.is_primary_key_table or (len(groups) == len(set(groups)) and not merged):
            return sum(s.record_count for s in files)
        try:
            check_readable(self.store)
        except UnsupportedFeature:
            return sum(s.record_count for s in files)
        keys = list(self.store.primary_keys)
        return sum(b.num_rows for b in self.read(latest, columns=keys))

    def read(
        self,
        source: Split | FileSlice | Iterable[FileSlice] | Any = None,
        columns: list[str] | None = None,
        filters: Any = None,
        mode: ReadingMode = ReadingMode.SNAPSHOT,
        *,
        end_instant: Any = None,
    ) -> Iterator[pa.RecordBatch]:
        mode = ReadingMode(mode)
        self.check_mode(mode)
        if mode is ReadingMode.INCREMENTAL:
            return self._read_added(source, end_instant, columns, filters)
        if source is None or isinstance(source, Instant | int | str):
            snapshot_id = self.resolve(source)
            schema = self.schema_at(snapshot_id)
            expr = bind_filter(filters, schema)
            if snapshot_id is None:
                return iter(())
            reader = reader_table(self.store, self._own_schema(snapshot_id))
            return read_snapshot(reader, snapshot_id, schema, columns, expr)
        slices = (
            [p.file_slice for p in source.parts]
            if isinstance(source, Split)
            else ([source] if isinstance(source, FileSlice) else list(source))
        )
        # slices planned at an older snapshot in its own schema say so (``plan_splits``)
        planned_at = next((s.base_file.extra.get(READ_SCHEMA_OF) for s in slices if s.base_file), None)
        schema = self.schema if planned_at is None else self.schema_at(planned_at)
        expr = bind_filter(filters, schema)
        files = [(s.base_instant, s.base_file.extra["file_name"]) for s in slices if s.base_file is not None]
        reader = reader_table(self.store, None if planned_at is None else self._own_schema(planned_at))
        return read_files(reader, files, schema, columns, expr)

    def _read_added(
        self, start: Any, end: Any, columns: list[str] | None, filters: Any
    ) -> Iterator[pa.RecordBatch]:
        """Rows the APPEND snapshots after ``start`` up to ``end`` added (their delta files, as
        Paimon's incremental scan reads them without a changelog producer)."""
        start_id = None if start is None else self.resolve(start)
        end_id = self.resolve(end)
        if start_id is not None and end_id is not None and start_id > end_id:
            raise InvalidRange(f"snapshot {start_id} is after snapshot {end_id}")
        expr = bind_filter(filters, self.schema)
        files = []
        for snapshot_id in self._ids:
            if (start_id is not None and snapshot_id <= start_id) or end_id is None or snapshot_id > end_id:
                continue
            snapshot = _meta.load_snapshot(self.store, snapshot_id)
            if snapshot.commit_kind != "APPEND":
                continue
            for entry in _meta.entries(self.store, [snapshot.delta_manifest_list]):
                if entry.kind == _meta.ADD:
                    files.append((snapshot_id, entry.file.file_name))
        return read_files(self.store, files, self.schema, columns, expr)

    def plan_splits(
        self,
        instant: Any = None,
        filters: Any = None,
        target_size: int = 128 * MIB,
        open_file_cost: int = 4 * MIB,
        lookback: int = 10,
    ) -> Iterator[Split]:
        """Append-only tables: the spec's planner. Primary-key tables: the files of a bucket are
        merged on read, so a bucket is never divided; whole buckets are packed up to the target.
        At an older snapshot read in its own schema, the slices carry its id (``READ_SCHEMA_OF``)
        so that reading a split returns that snapshot's columns."""
        if not self.is_primary_key_table:
            splits = super().plan_splits(instant, filters, target_size, open_file_cost, lookback)
        else:
            splits = _pack_buckets(
                self.file_index().list_files_at(instant, filters), target_size, open_file_cost
            )
        own = self._own_schema(self.resolve(instant))
        return splits if own is None else (_read_in_schema_of(split, own.id) for split in splits)


#: ``DataFile.extra`` key of slices planned at an older snapshot read in its own schema
READ_SCHEMA_OF = "paimon_read_schema_of_snapshot"


def _read_in_schema_of(split: Split, snapshot_id: int) -> Split:
    parts = []
    for part in split.parts:
        base = part.file_slice.base_file
        if base is not None:
            base = dataclasses.replace(base, extra={**base.extra, READ_SCHEMA_OF: snapshot_id})
        parts.append(
            dataclasses.replace(part, file_slice=dataclasses.replace(part.file_slice, base_file=base))
        )
    return Split(tuple(parts), split.weight)


def _pack_buckets(slices: Iterable[FileSlice], target_size: int, open_file_cost: int) -> Iterator[Split]:
    buckets: dict[str, list[SplitPart]] = {}
    for file_slice in slices:
        size = file_slice.size_bytes
        part = SplitPart(file_slice, 0, size, file_slice.record_count)
        buckets.setdefault(file_slice.file_group_id or file_slice.path, []).append(part)
    current: list[SplitPart] = []
    weight = 0
    for parts in buckets.values():
        bucket_weight = sum(part_weight(p, open_file_cost=open_file_cost) for p in parts)
        if current and weight + bucket_weight > target_size:
            yield Split(tuple(current), weight)
            current, weight = [], 0
        current.extend(parts)
        weight += bucket_weight
    if current:
        yield Split(tuple(current), weight)
