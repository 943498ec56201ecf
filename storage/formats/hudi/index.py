"""Listing a Hudi table: file slices at an instant, file changes between two instants.

Partitions are pruned from their folder names before any file is listed; hudi-rs then lists
only the surviving folders (a partition ``IN`` filter) and we turn its slices into ours one at a
time, as the caller consumes them. Memory: hudi-rs answers a listing with one list and keeps a
file-system view of every folder it listed (about 13 KB per file measured with hudi 0.5), so a
Hudi listing is bounded by hudi-rs's view, not by this module, which adds one slice at a time
plus the partition paths. Column statistics come from a base file's parquet footer, read only
when the filter names a non-partition column, and only for slices without log files (a log may
update a row so that it matches whatever the base file's bounds say).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from storage.formats.hudi._layout import (
    HIVE_DEFAULT_PARTITION,
    LEGACY_DEFAULT_PARTITION,
    list_partition_paths,
)
from storage.formats.hudi._metadata import (
    is_log_file,
    is_null_commit,
    iter_write_stats,
    log_file_base_instant,
)
from storage.spec.errors import CorruptTable, InvalidRange
from storage.spec.models import (
    ChangeKind,
    DataFile,
    FileChange,
    FileContent,
    FileSlice,
    Instant,
    PartitionDescriptor,
    PartitionSpec,
)
from storage.spec.table import FileIndex, InstantRef

if TYPE_CHECKING:
    from storage.formats.hudi.table import HudiSpecTable

# Up to this many partitions go to hudi-rs as an IN filter; its cost grows with the list's length.
PARTITION_FILTER_LIMIT = 256
# Folder values hudi-rs's partition filter parses the way we do (no list separators, no escapes).
_SAFE_PARTITION_VALUE = re.compile(r"[A-Za-z0-9_.:+/\-]+")
_PARTITION_PATH_COLUMN = "_hoodie_partition_path"


class HudiFileIndex(FileIndex):
    def __init__(self, table: HudiSpecTable) -> None:
        self._table = table

    # --- at an instant -------------------------------------------------------------------------

    def list_files_at(self, instant: InstantRef = None, filters: Any = None) -> Iterator[FileSlice]:
        timeline = self._table.timeline()
        target = timeline.resolve(instant) or timeline.latest()
        expr = self._table.bind(filters)
        if target is None:
            return iter(())
        return self.slices_at(target, expr)

    def slices_at(self, target: Instant, expr: Any, *, base_only: bool = False) -> Iterator[FileSlice]:
        """Slices at ``target`` that might hold rows matching ``expr``; ``base_only`` drops logs
        (read-optimized), which also lets column statistics prune merge-on-read slices."""
        table = self._table
        stats_columns = self._stats_columns(expr)
        excluded = frozenset() if base_only else table.logs_written_after(target)
        surviving = list(self.partitions(expr))
        descriptors = dict(surviving)
        hudi_slices = self.hudi_slices_in(str(target.id), surviving, base_only)
        for hudi_slice in hudi_slices:
            descriptor, exact = descriptors[hudi_slice.partition_path]
            file_slice = table.to_file_slice(hudi_slice, descriptor, target, excluded)
            if base_only and file_slice.delete_files:
                file_slice = replace(file_slice, delete_files=())
            if stats_columns and not file_slice.delete_files and file_slice.base_file is not None:
                base = table.with_footer(file_slice.base_file, stats_columns)
                file_slice = replace(file_slice, base_file=base)
                if not self._file_might_match(expr, base, exact):
                    continue
            yield file_slice

    def hudi_slices_in(self, as_of: str, partitions: list[tuple[str, Any]], base_only: bool) -> list[Any]:
        """hudi-rs's slices as of ``as_of`` in ``partitions``, sorted by partition and file group.

        hudi-rs walks every partition folder on each call and keeps what it lists in its own
        file-system view, so calls are not batched: a few surviving partitions go to hudi-rs as
        a partition filter (it then lists only those folders), many go as one unfiltered call.
        """
        if not partitions:
            return []
        wanted = {path for path, _ in partitions}
        partition_filter = (
            self._partition_filter(partitions) if len(partitions) <= PARTITION_FILTER_LIMIT else None
        )
        hudi_slices = self._table.hudi_slices(as_of, partition_filter, base_only)
        return sorted(
            (s for s in hudi_slices if s.partition_path in wanted),
            key=lambda s: (s.partition_path, s.file_id),
        )

    def partitions(self, expr: Any) -> Iterator[tuple[str, tuple[PartitionDescriptor, bool]]]:
        """``(path, (descriptor, exact))`` of each partition folder that might hold matching rows."""
        layout = self._table.layout
        for path in list_partition_paths(self._table.filesystem, self._table.root, layout.partitioned):
            matched = self.partition_might_match(expr, path)
            if matched is not None:
                yield path, matched

    def partition_might_match(self, expr: Any, path: str) -> tuple[PartitionDescriptor, bool] | None:
        """The partition of folder ``path`` and whether its values are exact, or None when its
        identity values rule out every row ``expr`` matches."""
        from storage.spec.expressions import might_match_partition

        layout = self._table.layout
        pruning = layout.pruning_spec
        descriptor, exact = layout.descriptor(path)
        if expr is not None and exact and pruning.fields:
            values = {name: descriptor.values[name] for name in pruning.names}
            if not might_match_partition(expr, pruning, values):
                return None
        return descriptor, exact

    def _stats_columns(self, expr: Any) -> tuple[str, ...]:
        if expr is None:
            return ()
        partition_columns = {f.source_column for f in self._table.layout.pruning_spec.fields}
        return tuple(sorted(set(expr.columns()) - partition_columns))

    def _file_might_match(self, expr: Any, data_file: DataFile, exact: bool) -> bool:
        from storage.spec.expressions import might_match_file

        # Only identity values are column values; a time-based folder value is not.
        pruning = self._table.layout.pruning_spec if exact else PartitionSpec()
        values = {name: data_file.partition[name] for name in pruning.names}
        return might_match_file(expr, replace(data_file, partition=values), pruning)

    def _partition_filter(self, batch: list[tuple[str, Any]]) -> list[tuple[str, str, str]] | None:
        """A hudi-rs filter selecting (a superset of) the batch's partitions, so hudi-rs lists only
        those folders; None (list all, keep ours) when a value could be misread by hudi-rs."""
        layout = self._table.layout
        if not layout.spec.is_partitioned or layout.url_encoded:
            return None
        with self._table.errors("reading the partition schema"):
            hudi_fields = self._table.hudi.get_partition_schema().names
        paths = [path for path, _ in batch]
        if hudi_fields == [_PARTITION_PATH_COLUMN]:
            columns = [paths]
        elif hudi_fields == list(layout.spec.names):
            raw = [layout.raw_values(path) for path in paths]
            known = [values for values in raw if values is not None]
            if len(known) < len(raw):
                return None
            columns = [sorted({values[i] for values in known}) for i in range(len(hudi_fields))]
        else:
            return None
        filters = []
        for name, values in zip(hudi_fields, columns, strict=True):
            if not all(_is_safe_value(v) for v in values):
                return None
            filters.append((name, "IN", ",".join(values)))
        return filters

    # --- between two instants ------------------------------------------------------------------

    def list_files_between(
        self, start_exclusive: InstantRef, end_inclusive: InstantRef, filters: Any = None
    ) -> Iterator[FileChange]:
        timeline = self._table.timeline()
        start = timeline.resolve(start_exclusive)
        end = timeline.resolve(end_inclusive) or timeline.latest()
        expr = self._table.bind(filters)
        if end is None:
            return iter(())
        if start is not None and start.sequence > end.sequence:
            raise InvalidRange(
                f"instant {start.id} is after instant {end.id}: the start of a range must not follow its end"
            )
        return self._changes(timeline.after(start, end), expr)

    def _changes(self, instants: list[Instant], expr: Any) -> Iterator[FileChange]:
        """Per instant, in timeline order: a new base file version replaces its file group's
        previous slice; a replace commit removes whole file groups; log files are added."""
        table = self._table
        stats_columns = self._stats_columns(expr)
        for instant in instants:
            metadata = table.commit_metadata.get(str(instant.id))
            written: dict[str, list[dict[str, Any]]] = {}
            for stat in iter_write_stats(metadata):
                written.setdefault(stat["partitionPath"] or "", []).append(stat)
            replaced = {
                p: list(ids or ()) for p, ids in (metadata.get("partitionToReplaceFileIds") or {}).items()
            }
            surviving = []
            for path in sorted(set(written) | set(replaced)):
                matched = self.partition_might_match(expr, path)
                if matched is not None:
                    surviving.append((path, *matched))
            previous = self._previous_slices(instant, surviving, written, replaced)
            for path, descriptor, exact in surviving:
                for stat in written.get(path, ()):
                    yield from self._stat_changes(
                        instant, stat, descriptor, exact, previous, expr, stats_columns
                    )
                for file_id in replaced.get(path, ()):
                    old = previous.pop((path, file_id), None)
                    if old is None:
                        old = FileSlice(partition=descriptor, base_file=None, file_group_id=file_id)
                    yield FileChange(ChangeKind.REMOVED, old, instant.id)

    def _previous_slices(
        self,
        instant: Instant,
        surviving: list[tuple[str, PartitionDescriptor, bool]],
        written: dict[str, list[dict[str, Any]]],
        replaced: dict[str, list[str]],
    ) -> dict[tuple[str, str | None], FileSlice]:
        """The slices, at the parent instant, of partitions where file groups get a new base file
        or are replaced; hudi-rs lists them, we keep only the groups the instant touches."""
        touched: dict[str, set[str]] = {}
        for path, _, _ in surviving:
            ids = set(replaced.get(path, ()))
            ids |= {
                s["fileId"]
                for s in written.get(path, ())
                if not is_log_file(s.get("path") or "") and not is_null_commit(s.get("prevCommit"))
            }
            if ids:
                touched[path] = ids
        if not touched or instant.parent_id is None:
            return {}
        table = self._table
        parent = table.timeline().get(instant.parent_id)
        excluded = table.logs_written_after(parent)
        descriptors = {path: (descriptor, exact) for path, descriptor, exact in surviving}
        previous: dict[tuple[str, str | None], FileSlice] = {}
        entries = [(path, descriptors[path]) for path in sorted(touched)]
        for hudi_slice in self.hudi_slices_in(str(parent.id), entries, False):
            if hudi_slice.file_id in touched[hudi_slice.partition_path]:
                descriptor = descriptors[hudi_slice.partition_path][0]
                previous[(hudi_slice.partition_path, hudi_slice.file_id)] = table.to_file_slice(
                    hudi_slice, descriptor, parent, excluded
                )
        return previous

    def _stat_changes(
        self,
        instant: Instant,
        stat: dict[str, Any],
        descriptor: PartitionDescriptor,
        exact: bool,
        previous: dict[tuple[str, str | None], FileSlice],
        expr: Any,
        stats_columns: tuple[str, ...],
    ) -> Iterator[FileChange]:
        table = self._table
        relative = stat.get("path") or ""
        file_id = stat.get("fileId")
        size = int(stat.get("fileSizeInBytes") or stat.get("totalWriteBytes") or 0)
        records = int(stat.get("numWrites") or 0)
        extra = {"as_of_instant": instant.id}
        if is_log_file(relative):
            prev_commit = stat.get("prevCommit")
            log = DataFile(
                path=table.absolute(relative),
                size_bytes=size,
                record_count=records,
                content=FileContent.LOG,
                file_format="hudi_log",
                partition=descriptor.values,
                extra=extra,
            )
            base_instant = log_file_base_instant(relative) if is_null_commit(prev_commit) else prev_commit
            added = FileSlice(descriptor, None, (log,), file_group_id=file_id, base_instant=base_instant)
            yield FileChange(ChangeKind.ADDED, added, instant.id)
            return
        prev_commit = stat.get("prevCommit")
        if not is_null_commit(prev_commit):
            old = previous.pop((descriptor.path, file_id), None)
            if old is None:  # the old version is outside the active timeline or already cleaned
                old = FileSlice(descriptor, None, file_group_id=file_id, base_instant=prev_commit)
            yield FileChange(ChangeKind.REMOVED, old, instant.id)
        base = DataFile(
            path=table.absolute(relative),
            size_bytes=size,
            record_count=records,
            file_format=table.properties.get("hoodie.table.base.file.format", "PARQUET").lower(),
            partition=descriptor.values,
            extra=extra,
        )
        if stats_columns:
            try:
                base = table.with_footer(base, stats_columns)
            except CorruptTable:  # a cleaned file: no stats, so it might match
                pass
            else:
                if not self._file_might_match(expr, base, exact):
                    return
        added = FileSlice(descriptor, base, (), file_group_id=file_id, base_instant=instant.id)
        yield FileChange(ChangeKind.ADDED, added, instant.id)


def _is_safe_value(value: str) -> bool:
    return (
        bool(_SAFE_PARTITION_VALUE.fullmatch(value))
        and value not in (HIVE_DEFAULT_PARTITION, LEGACY_DEFAULT_PARTITION)
        and "," not in value
    )
