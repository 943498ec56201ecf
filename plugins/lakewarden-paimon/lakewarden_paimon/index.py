"""``PaimonFileIndex``: data files live at a snapshot and changes between snapshots, streamed from
the manifests. Every file is its own slice, carrying its LSM ``level`` and ``bucket`` in
``DataFile.extra``; files of one bucket of a primary-key table share a ``file_group_id`` (they are
merged on read)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lakewarden_paimon import _meta
from storage.spec.errors import InvalidRange
from storage.spec.expressions import bind_filter, might_match_partition
from storage.spec.models import ChangeKind, DataFile, FileChange, FileSlice, PartitionDescriptor
from storage.spec.table import FileIndex, InstantRef

if TYPE_CHECKING:
    from lakewarden_paimon.table import PaimonSpecTable


def partition_path(values: dict[str, Any]) -> str:
    return "/".join(f"{name}={'__DEFAULT_PARTITION__' if v is None else v}" for name, v in values.items())


def bucket_group(values: dict[str, Any], bucket: int) -> str:
    path = partition_path(values)
    return f"{path}/bucket-{bucket}" if path else f"bucket-{bucket}"


class PaimonFileIndex(FileIndex):
    def __init__(self, table: PaimonSpecTable) -> None:
        self.table = table

    def file_slice(self, entry: Any, snapshot_id: int) -> FileSlice:
        values = _meta.partition_values(entry)
        meta = entry.file
        name = meta.file_name
        data_file = DataFile(
            path=_meta.data_file_path(self.table.store, entry),
            size_bytes=int(meta.file_size),
            record_count=int(meta.row_count),
            file_format=name.rsplit(".", 1)[-1] if "." in name else "parquet",
            partition=values,
            extra={
                "bucket": entry.bucket,
                "level": meta.level,
                "file_name": name,
                "schema_id": meta.schema_id,
                "delete_row_count": meta.delete_row_count,
                "min_sequence_number": meta.min_sequence_number,
                "max_sequence_number": meta.max_sequence_number,
                "file_source": meta.file_source,
            },
        )
        return FileSlice(
            partition=PartitionDescriptor(partition_path(values), values),
            base_file=data_file,
            file_group_id=bucket_group(values, entry.bucket),
            base_instant=snapshot_id,
        )

    def _expr(self, filters: Any, snapshot_id: int | None):
        return bind_filter(filters, self.table.schema_at(snapshot_id))

    def list_files_at(self, instant: InstantRef = None, filters: Any = None) -> Iterator[FileSlice]:
        snapshot_id = self.table.resolve(instant)
        expr = self._expr(filters, snapshot_id)
        if snapshot_id is None:
            return iter(())
        return self._live(snapshot_id, expr)

    def _live(self, snapshot_id: int, expr: Any) -> Iterator[FileSlice]:
        store, spec = self.table.store, self.table.partition_spec
        for entry in _meta.live_entries(store, _meta.load_snapshot(store, snapshot_id)):
            if expr is None or might_match_partition(expr, spec, _meta.partition_values(entry)):
                yield self.file_slice(entry, snapshot_id)

    def list_files_between(
        self, start_exclusive: InstantRef, end_inclusive: InstantRef, filters: Any = None
    ) -> Iterator[FileChange]:
        start = None if start_exclusive is None else self.table.resolve(start_exclusive)
        end = self.table.resolve(end_inclusive)
        if start is not None and end is not None and start > end:
            raise InvalidRange(f"snapshot {start} is after snapshot {end}")
        expr = self._expr(filters, end)
        ids = [
            i
            for i in self.table.snapshot_ids()
            if (start is None or i > start) and end is not None and i <= end
        ]
        return self._changes(ids, start is None, expr)

    def _changes(self, ids: list[int], from_creation: bool, expr: Any) -> Iterator[FileChange]:
        store, spec = self.table.store, self.table.partition_spec
        for position, snapshot_id in enumerate(ids):
            snapshot = _meta.load_snapshot(store, snapshot_id)
            if position == 0 and from_creation:
                # the first kept snapshot's base list is the state before it (older ones expired)
                base = _meta.live_entries(store, _with_empty_delta(snapshot))
                for entry in base:
                    if expr is None or might_match_partition(expr, spec, _meta.partition_values(entry)):
                        yield FileChange(ChangeKind.ADDED, self.file_slice(entry, snapshot_id), snapshot_id)
            delta = [
                e
                for e in _meta.entries(store, [snapshot.delta_manifest_list])
                if expr is None or might_match_partition(expr, spec, _meta.partition_values(e))
            ]
            # removals first: a compaction that only moves a file to another level removes and
            # adds the same file in one snapshot, and must leave it live
            for entry in sorted(delta, key=lambda e: e.kind != _meta.DELETE):
                kind = ChangeKind.ADDED if entry.kind == _meta.ADD else ChangeKind.REMOVED
                yield FileChange(kind, self.file_slice(entry, snapshot_id), snapshot_id)


class _BaseOnly:
    """A snapshot seen through its base manifest list only (the files live before it)."""

    def __init__(self, snapshot: Any) -> None:
        self.base_manifest_list = snapshot.base_manifest_list
        self.delta_manifest_list = None


def _with_empty_delta(snapshot: Any) -> Any:
    return _BaseOnly(snapshot)
