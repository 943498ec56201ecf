"""``LanceFileIndex``: a version's fragments as file slices, and the changes between versions.

Lance keeps no per-fragment column statistics in its manifest, so a filter is checked (a bad one
raises ``FilterError``) but prunes nothing: every fragment may hold a matching row. Changes walk
the versions of the range one step at a time; a fragment whose deletion file changed is removed
with its old deletion file and added with the new one (same data files), as Delta does for a
deletion vector.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lakewarden_lance._dataset import fragment_slices, slice_key
from storage.spec.expressions import bind_filter
from storage.spec.models import ChangeKind, FileChange, FileSlice
from storage.spec.table import FileIndex, InstantRef

if TYPE_CHECKING:
    from lakewarden_lance.table import LanceSpecTable


class LanceFileIndex(FileIndex):
    def __init__(self, table: LanceSpecTable) -> None:
        self._table = table

    def list_files_at(self, instant: InstantRef = None, filters: Any = None) -> Iterator[FileSlice]:
        version = self._table.resolve(instant)
        bind_filter(filters, self._table.schema_at(version))
        return fragment_slices(self._table.files, self._table.dataset(version))

    def list_files_between(
        self, start_exclusive: InstantRef, end_inclusive: InstantRef, filters: Any = None
    ) -> Iterator[FileChange]:
        start, end = self._table.version_range(start_exclusive, end_inclusive)
        bind_filter(filters, self._table.schema_at(end))
        steps = [
            int(i.id)
            for i in self._table.timeline().instants()
            if (start is None or int(i.id) > start) and int(i.id) <= end
        ]
        return self._changes(start, steps)

    def _changes(self, start: int | None, steps: list[int]) -> Iterator[FileChange]:
        previous = {} if start is None else self._keyed(start)
        for version in steps:
            current = self._keyed(version)
            for key, file_slice in previous.items():
                if key not in current:
                    yield FileChange(ChangeKind.REMOVED, file_slice, version)
            for key, file_slice in current.items():
                if key not in previous:
                    yield FileChange(ChangeKind.ADDED, file_slice, version)
            previous = current

    def _keyed(self, version: int) -> dict[tuple[str, ...], FileSlice]:
        dataset = self._table.dataset(version)
        return {slice_key(s): s for s in fragment_slices(self._table.files, dataset)}
