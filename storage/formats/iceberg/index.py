"""The Iceberg file index: streaming listings at a snapshot and between two snapshots.

Listing a snapshot reads its manifest list, drops the manifests whose partition summaries cannot
match the filter, reads the (few) delete manifests into a ``DeleteIndex``, then streams the data
manifests one entry at a time, dropping entries whose partition values or column bounds cannot
match. Only one manifest's bytes and one entry are alive at a time, so memory does not grow with
the number of files listed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from storage.formats.iceberg._manifests import (
    CONTENT_DATA,
    CONTENT_DELETES,
    STATUS_ADDED,
    STATUS_DELETED,
    DeleteIndex,
    ManifestInfo,
    SpecContext,
    inherited_sequence,
    iter_manifest_records,
    make_data_file,
    read_manifest_list,
)
from storage.formats.iceberg._prune import partition_check, stats_check
from storage.formats.iceberg._values import ColumnDecoder
from storage.spec.errors import CorruptTable, InvalidRange
from storage.spec.models import (
    ChangeKind,
    FileChange,
    FileContent,
    FileSlice,
)
from storage.spec.table import DEFAULT_TARGET_FILE_SIZE, SMALL_FILE_FRACTION, FileIndex, InstantRef

if TYPE_CHECKING:
    from storage.formats.iceberg.table import IcebergSpecTable

# Iceberg's own default write.target-file-size-bytes is 512 MiB; the maintenance processes aim at
# 128 MiB files, so the table property decides only when set (see FileIndex.small_file_bytes).


class RowIds:
    """v3 row lineage: the ``first_row_id`` of the live entries of one data manifest. An entry
    without one inherits the manifest's ``first_row_id`` plus the record counts of the entries
    before it in the manifest that inherited theirs too (the Iceberg spec's rule)."""

    def __init__(self, manifest: ManifestInfo) -> None:
        self._next = manifest.first_row_id if manifest.content == CONTENT_DATA else None

    @property
    def inactive(self) -> bool:
        """No entry inherits a row id: entries may be dropped without being counted."""
        return self._next is None

    def assign(self, record: dict[str, Any]) -> int | None:
        data = record["data_file"]
        own = data.get("first_row_id")
        if own is not None or self._next is None or data.get("content"):
            return own
        assigned = self._next
        self._next += data["record_count"]
        return assigned


def _acceptor(context: SpecContext, check_partition: Any, check_stats: Any) -> Any:
    """The cheap rejections of ``IcebergFileIndex._scan`` on a probed entry (see
    ``iter_manifest_records``): False only for an entry that ``_scan`` would drop too."""

    verdicts: dict[tuple[Any, ...], bool] = {}  # of the partitions seen in this manifest

    def accept(record: dict[str, Any], avro_names: dict[int, str]) -> bool:
        if record["status"] == STATUS_DELETED:
            return False
        raw = record["data_file"]
        if check_partition is not None:
            partition = raw["partition"]  # a dict (checked_entry)
            key = tuple(partition.values())
            verdict = verdicts.get(key)
            if verdict is None:
                values = context.partition_values(partition, avro_names)
                verdict = verdicts[key] = bool(check_partition(values))
            if not verdict:
                return False
        if check_stats is not None and not raw.get("content"):
            return bool(check_stats(raw.get("lower_bounds"), raw.get("upper_bounds")))
        return True

    return accept


class IcebergFileIndex(FileIndex):
    def __init__(self, table: IcebergSpecTable) -> None:
        self._table = table
        self._metadata = table.pyiceberg_table.metadata
        self._io = table.pyiceberg_table.io
        self._decoder = ColumnDecoder(self._metadata.schema())
        self._specs: dict[int, SpecContext] = {}

    # -- public API -----------------------------------------------------------------------

    def list_files_at(self, instant: InstantRef = None, filters: Any = None) -> Iterator[FileSlice]:
        snapshot = self._table.snapshot_for(instant)
        expr = self._table.bind(filters)
        if snapshot is None:
            return iter(())
        return self._scan(snapshot, expr)

    def list_files_between(
        self, start_exclusive: InstantRef, end_inclusive: InstantRef, filters: Any = None
    ) -> Iterator[FileChange]:
        snapshots = self.snapshots_between(start_exclusive, end_inclusive)
        expr = self._table.bind(filters)
        return self._changes(snapshots, expr)

    def small_file_bytes(self) -> int:
        """Small means under ``write.target-file-size-bytes`` / 8 (128 MiB / 8 when unset)."""
        target = int(self._metadata.properties.get("write.target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE))
        return target // SMALL_FILE_FRACTION

    # -- helpers shared with reads --------------------------------------------------------

    def snapshots_between(self, start_exclusive: InstantRef, end_inclusive: InstantRef) -> list[Any]:
        """pyiceberg snapshots after ``start_exclusive`` up to ``end_inclusive``, oldest first.

        Walks the parent chain back from the end, which is the set of commits a reader of the
        end snapshot sees (snapshots of other branches are not part of the range).
        """
        timeline = self._table.timeline()
        end = timeline.get(end_inclusive) if end_inclusive is not None else timeline.latest()
        if end is None:
            return []
        start = timeline.get(start_exclusive) if start_exclusive is not None else None
        if start is not None and start.sequence > end.sequence:
            raise InvalidRange(f"snapshot {start.id} comes after snapshot {end.id}: swap from and to")
        chain = []
        current = self._metadata.snapshot_by_id(int(end.id))
        while current is not None and (start is None or current.snapshot_id != start.id):
            chain.append(current)
            parent = current.parent_snapshot_id
            current = self._metadata.snapshot_by_id(parent) if parent is not None else None
        if start is not None and current is None:
            raise InvalidRange(f"snapshot {start.id} is not an ancestor of snapshot {end.id}")
        chain.reverse()
        return chain

    def scan_added(self, snapshots: list[Any], expr: Any) -> Iterator[FileSlice]:
        """Data files live at the last of ``snapshots`` that one of them added (deletes attached)."""
        if not snapshots:
            return iter(())
        added_by = {s.snapshot_id for s in snapshots}
        return self._scan(snapshots[-1], expr, added_by=added_by)

    def spec_context(self, spec_id: int) -> SpecContext:
        context = self._specs.get(spec_id)
        if context is None:
            specs = self._metadata.specs()
            if spec_id not in specs:
                raise CorruptTable(
                    f"a manifest refers to partition spec {spec_id}, which the table metadata lacks"
                )
            context = self._specs[spec_id] = SpecContext(specs[spec_id], self._metadata.schema())
        return context

    # -- internals ------------------------------------------------------------------------

    def _manifests(self, snapshot: Any) -> list[ManifestInfo]:
        if not snapshot.manifest_list:
            raise CorruptTable(f"snapshot {snapshot.snapshot_id} has no manifest list")
        try:
            return read_manifest_list(self._io, snapshot.manifest_list)
        except CorruptTable as exc:
            raise CorruptTable(f"cannot read snapshot {snapshot.snapshot_id}: {exc}") from None

    def _manifest_might_match(self, manifest: ManifestInfo, expr: Any) -> bool:
        if expr is None:
            return True
        from storage.spec.expressions import might_match_partition_bounds

        context = self.spec_context(manifest.spec_id)
        if not context.names:
            return True
        bounds = context.summary_bounds(manifest)
        if bounds is None:
            return True
        lower, upper, nulls = bounds
        return might_match_partition_bounds(expr, context.model, lower, upper, nulls)

    def _delete_index(self, manifests: list[ManifestInfo], expr: Any) -> DeleteIndex:
        index = DeleteIndex()
        for manifest in manifests:
            if manifest.content != CONTENT_DELETES or not manifest.may_have_live_files:
                continue
            if not self._manifest_might_match(manifest, expr):
                continue
            context = self.spec_context(manifest.spec_id)
            for record, avro_names in iter_manifest_records(self._io, manifest):
                if record["status"] == STATUS_DELETED:
                    continue
                sequence, snapshot_id = inherited_sequence(record, manifest)
                values = context.partition_values(record["data_file"].get("partition"), avro_names)
                delete_file = make_data_file(
                    record, values, self._decoder, sequence, snapshot_id, context, avro_names
                )
                index.add(record, delete_file, sequence, context.spec_id, unpartitioned=not context.names)
        return index

    def _scan(self, snapshot: Any, expr: Any, added_by: set[int] | None = None) -> Iterator[FileSlice]:
        if expr is not None:
            from storage.spec.expressions import might_match_file, partition_projection

        manifests = self._manifests(snapshot)
        deletes = self._delete_index(manifests, expr) or None  # None: no deletes to look up
        decoder = self._decoder
        check_stats = stats_check(expr, decoder)
        partition_checks: dict[int, Any] = {}
        for manifest in manifests:
            if manifest.content != CONTENT_DATA or not manifest.may_have_live_files:
                continue
            if not self._manifest_might_match(manifest, expr):
                continue
            context = self.spec_context(manifest.spec_id)
            spec_model = context.model
            if expr is not None and context.spec_id not in partition_checks:
                projected = partition_projection(expr, spec_model) if context.names else None
                partition_checks[context.spec_id] = partition_check(projected, context.names)
            check_partition = partition_checks.get(context.spec_id)
            row_ids = RowIds(manifest)
            # probe when a pre-check can reject entries, but v3 row ids and added_by need every
            # live entry's fields
            probing = (check_partition, check_stats) != (None, None) and added_by is None and row_ids.inactive
            accept = _acceptor(context, check_partition, check_stats) if probing else None
            for record, avro_names in iter_manifest_records(self._io, manifest, accept):
                if record["status"] == STATUS_DELETED:
                    continue
                first_row_id = row_ids.assign(record)
                sequence, snapshot_id = inherited_sequence(record, manifest)
                if added_by is not None and snapshot_id not in added_by:
                    continue
                raw = record["data_file"]
                values = context.partition_values(raw.get("partition"), avro_names)
                if expr is not None:
                    # cheap rejections first; survivors are judged by might_match_file below
                    if check_partition is not None and not check_partition(values):
                        continue
                    if (
                        check_stats is not None
                        and not raw.get("content")
                        and not check_stats(raw.get("lower_bounds"), raw.get("upper_bounds"))
                    ):
                        continue
                data_file = make_data_file(
                    record, values, decoder, sequence, snapshot_id, context, avro_names, first_row_id
                )
                if expr is not None and not might_match_file(expr, data_file, spec_model):
                    continue
                delete_files = (
                    deletes.for_data_file(data_file.path, sequence, context.spec_id, values)
                    if deletes
                    else ()
                )
                yield FileSlice(
                    partition=context.descriptor(values),
                    base_file=data_file,
                    delete_files=delete_files,
                    base_instant=snapshot_id,
                )

    def _changes(self, snapshots: list[Any], expr: Any) -> Iterator[FileChange]:
        if expr is not None:
            from storage.spec.expressions import might_match_file

        decoder = self._decoder
        for snapshot in snapshots:
            snapshot_id = snapshot.snapshot_id
            for manifest in self._manifests(snapshot):
                # Inline v1 manifest lists do not say which snapshot added a manifest: read its
                # entries, which name their own snapshot (checked below).
                if manifest.added_snapshot_id is not None and manifest.added_snapshot_id != snapshot_id:
                    continue
                if not self._manifest_might_match(manifest, expr):
                    continue
                context = self.spec_context(manifest.spec_id)
                row_ids = RowIds(manifest)
                for record, avro_names in iter_manifest_records(self._io, manifest):
                    status = record["status"]
                    first_row_id = row_ids.assign(record) if status != STATUS_DELETED else None
                    if status == STATUS_ADDED:
                        kind = ChangeKind.ADDED
                    elif status == STATUS_DELETED:
                        kind = ChangeKind.REMOVED
                    else:
                        continue
                    sequence, entry_snapshot = inherited_sequence(record, manifest)
                    if entry_snapshot != snapshot_id:
                        continue
                    values = context.partition_values(record["data_file"].get("partition"), avro_names)
                    data_file = make_data_file(
                        record, values, decoder, sequence, entry_snapshot, context, avro_names, first_row_id
                    )
                    if expr is not None and not might_match_file(expr, data_file, context.model):
                        continue
                    if data_file.content is FileContent.DATA:
                        file_slice = FileSlice(
                            context.descriptor(values), data_file, base_instant=snapshot_id
                        )
                    else:
                        # a delete file on its own: the slice carries it without a base file
                        file_slice = FileSlice(
                            context.descriptor(values), None, (data_file,), base_instant=snapshot_id
                        )
                    yield FileChange(kind=kind, file_slice=file_slice, instant_id=snapshot_id)
