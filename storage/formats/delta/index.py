"""``DeltaFileIndex``: file slices at a version and file changes between versions, from the log.

Adds are streamed from the log replay (``_log``) and pruned on partition values first, then on
their statistics, before a ``FileSlice`` is built; a deletion vector becomes the slice's delete
file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from storage.formats.delta._dv import relative_path
from storage.formats.delta._types import (
    millis_to_datetime,
    parse_partition_value,
    parse_stats,
    partition_path,
)
from storage.spec.errors import CorruptTable
from storage.spec.expressions import Expression, might_match_partition, might_match_stats
from storage.spec.models import (
    ChangeKind,
    DataFile,
    FileChange,
    FileContent,
    FileSlice,
    PartitionDescriptor,
)
from storage.spec.table import FileIndex, InstantRef

if TYPE_CHECKING:
    from storage.formats.delta.table import DeltaSpecTable, VersionState


class DeltaFileIndex(FileIndex):
    def __init__(self, table: DeltaSpecTable) -> None:
        self._table = table
        self._log = table.log
        self._store = table.store

    def list_files_at(self, instant: InstantRef = None, filters: Any = None) -> Iterator[FileSlice]:
        # Resolve and bind now so a bad instant or filter fails at the call, not at first next().
        table = self._table
        state = table.state(table.resolve(instant))
        return self.live_slices(state, table.bind(filters, state.schema))

    def list_files_between(
        self, start_exclusive: InstantRef, end_inclusive: InstantRef, filters: Any = None
    ) -> Iterator[FileChange]:
        table = self._table
        start, end = table.version_range(start_exclusive, end_inclusive)
        state = table.state(end)
        expr = table.bind(filters, state.schema)
        return self._file_changes(start, end, state, expr)

    def _file_changes(
        self, start: int, end: int, state: VersionState, expr: Expression | None
    ) -> Iterator[FileChange]:
        for version, kind, action, _ in self.changes(start, end):
            file_slice = self.file_slice(action, state, expr)
            if file_slice is not None:
                yield FileChange(kind=kind, file_slice=file_slice, instant_id=version)

    # --- slices of log actions --------------------------------------------------------------------

    def live_slices(self, state: VersionState, expr: Expression | None) -> Iterator[FileSlice]:
        """Slices of the files live in ``state`` that ``expr`` does not rule out."""
        for add in self._log.live_adds(state.snapshot):
            file_slice = self.file_slice(add, state, expr)
            if file_slice is not None:
                yield file_slice

    def file_slice(
        self, action: Mapping[str, Any], state: VersionState, expr: Expression | None
    ) -> FileSlice | None:
        """The file slice of an add (or remove) action, or None when ``expr`` rules it out:
        partition values first (cheap), statistics only for files that pass."""
        schema = state.schema
        raw_values = action.get("partitionValues")
        known = raw_values is not None or not schema.partition_columns
        # Remove actions of old writers carry no partition values: unknown, so never pruned.
        raw = {
            logical: (raw_values or {}).get(physical)
            for physical, logical in schema.logical_partition_keys().items()
            if known
        }
        try:
            values = {name: parse_partition_value(raw[name], schema.arrow.field(name).type) for name in raw}
        except (ValueError, ArithmeticError) as exc:
            raise CorruptTable(
                f"file {action.get('path')} of Delta table {self._table.location_uri} has an unreadable partition value: {exc}"
            ) from exc
        if expr is not None and known and state.spec.is_partitioned:
            if not might_match_partition(expr, state.spec, values):
                return None
        stats = parse_stats(action.get("stats") or action.get("stats_parsed"), schema)
        if expr is not None and not might_match_stats(
            expr,
            lower=stats.lower,
            upper=stats.upper,
            null_counts=stats.null_counts,
            record_count=stats.record_count,
        ):
            return None
        partition = PartitionDescriptor(path=partition_path(schema.partition_columns, raw), values=values)
        return self._slice(action, stats, partition, state.snapshot.version)

    def _slice(
        self, action: Mapping[str, Any], stats: Any, partition: PartitionDescriptor, version: int
    ) -> FileSlice:
        path = self._store.uri(self._store.data_path(action["path"]))
        descriptor = action.get("deletionVector")
        extra: dict[str, Any] = {
            "data_change": bool(action.get("dataChange", True)),
            "record_count_known": stats.record_count is not None,
            # The version listed at: its schema reads the slice (time travel, splits).
            "delta_version": version,
        }
        if action.get("modificationTime") is not None:
            extra["modification_time"] = millis_to_datetime(action["modificationTime"])
        delete_files: tuple[DataFile, ...] = ()
        if descriptor:
            extra["deletion_vector"] = dict(descriptor)
            delete_files = (self._deletion_vector_file(descriptor, path),)
        base = DataFile(
            path=path,
            size_bytes=int(action.get("size") or 0),
            record_count=stats.record_count or 0,
            partition=partition.values,
            lower_bounds=stats.lower,
            upper_bounds=stats.upper,
            null_counts=stats.null_counts,
            extra=extra,
        )
        return FileSlice(partition=partition, base_file=base, delete_files=delete_files)

    def _deletion_vector_file(self, descriptor: Mapping[str, Any], base_path: str) -> DataFile:
        relative = relative_path(descriptor)
        if relative is None:
            path = f"{base_path}#inline-deletion-vector"
        elif descriptor["storageType"] == "p":
            path = relative
        else:
            path = self._store.uri(self._store.table_path(relative))
        return DataFile(
            path=path,
            size_bytes=int(descriptor.get("sizeInBytes") or 0),
            record_count=int(descriptor.get("cardinality") or 0),
            content=FileContent.DELETION_VECTOR,
            file_format="roaring-bitmap-array",
            extra={"deletion_vector": dict(descriptor)},
        )

    # --- changes between versions -------------------------------------------------------------------

    def changes(self, start: int, end: int) -> Iterator[tuple[int, ChangeKind, Mapping[str, Any], bool]]:
        """(version, kind, action, from_commit) for the adds and removes of commits (start, end].

        From the table's creation (``start`` -1) on a log cleaned up below a checkpoint, the
        files live at the checkpoint come first, as added at the checkpoint's version.
        """
        log = self._log
        first = start + 1
        if first < log.earliest:
            for add in log.live_adds(log.snapshot(log.earliest)):
                yield log.earliest, ChangeKind.ADDED, add, False
            first = log.earliest + 1
        for version in range(first, end + 1):
            for action in log.read_commit(version):
                if "add" in action:
                    yield version, ChangeKind.ADDED, action["add"], True
                elif "remove" in action:
                    yield version, ChangeKind.REMOVED, action["remove"], True

    def added_rows_slices(
        self, start: int, end: int, state: VersionState, expr: Expression | None
    ) -> Iterator[FileSlice]:
        """Slices of the files that data-changing commits in (start, end] added and that are
        still live at ``end``, read with their deletion vectors at ``end`` (as the Iceberg
        adapter does): rows later deleted are not reported, rows an overwrite or copy-on-write
        delete rewrote into a new file are. An add re-adding a file its own commit removes only
        attaches a deletion vector: it adds no rows. Memory holds the paths added in the range.
        """
        added = self._paths_added(start, end)
        if added is not None and not added:
            return
        for action in self._log.live_adds(state.snapshot):
            if added is None or action["path"] in added:
                file_slice = self.file_slice(action, state, expr)
                if file_slice is not None:
                    yield file_slice

    def _paths_added(self, start: int, end: int) -> set[str] | None:
        """Paths data-changing commits in (start, end] added; None when everything live was
        (from the creation of a log cleaned up below a checkpoint)."""
        first = start + 1
        if first < self._log.earliest:
            return None
        added: set[str] = set()
        for version in range(first, end + 1):
            removed: set[str] = set()
            adds: list[tuple[str, bool]] = []
            for action in self._log.read_commit(version):
                if "add" in action and action["add"].get("dataChange", True):
                    adds.append((action["add"]["path"], bool(action["add"].get("deletionVector"))))
                elif "remove" in action:
                    removed.add(action["remove"]["path"])
            added.update(path for path, has_vector in adds if not (has_vector and path in removed))
        return added


__all__ = ["DeltaFileIndex"]
