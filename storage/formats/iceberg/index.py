"""The Iceberg file index: streaming listings at a snapshot and between two snapshots.

Listing a snapshot reads its manifest list, drops the manifests whose partition summaries cannot
match the filter, reads the (few) delete manifests into a ``DeleteIndex``, then streams the data
manifests (fetched a few ahead, decoded one at a time), dropping entries whose partition values
or column bounds cannot match. Memory is bounded by the read-ahead window and one manifest's
entries, so it does not grow with the number of files listed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from storage.formats.iceberg._avro import plain_data_file, plain_slices, reject_bounds
from storage.formats.iceberg._deletes import DeleteIndex
from storage.formats.iceberg._entries import EncodedEntries, iter_joined, iter_manifests
from storage.formats.iceberg._manifests import (
    CONTENT_DATA,
    CONTENT_DELETES,
    STATUS_ADDED,
    STATUS_DELETED,
    ListingIO,
    ManifestInfo,
    SpecContext,
    inherited_sequence,
    make_data_file,
    plain_context,
    read_manifest_list,
    slots_builder,
)
from storage.formats.iceberg._prune import Check, native_clauses, partition_check, stats_check
from storage.formats.iceberg._values import ColumnDecoder, malformed_stats, stats_map
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


_file_slice = slots_builder(FileSlice)
# Entries plain_slices builds at a time: the slices of a whole manifest (hundreds) built before the
# consumer drops the first survive young collections and are traversed again by older ones; at 200k
# entries a manifest at a time took 1.2-1.3 s, 32 at a time 0.9-1.1 s, 4 or 8 at a time 0.8 s
_CHUNK = 8


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


# the probes of decode_filtered, in its order: (path in manifest_entry, the op reading it)
_PROBES = (
    (("status",), "long"),
    (("data_file", "content"), "long"),
    (("data_file", "partition"), "record"),
    (("data_file", "lower_bounds"), "raw_int_bytes_map"),
    (("data_file", "upper_bounds"), "raw_int_bytes_map"),
)


V = TypeVar("V")


def _kept(verdicts: dict[Any, V], key: Any, verdict: V) -> V:
    """``verdict``, kept in ``verdicts`` under ``key`` (not kept for None), the dict cleared rather
    than grown past 4096 keys."""
    if key is not None:
        if len(verdicts) > 4096:
            verdicts.clear()
        verdicts[key] = verdict
    return verdict


class _Checks:
    """The filter of one listing and its cheap pre-checks (``_prune``), compiled once per spec."""

    def __init__(self, expr: Any, decoder: ColumnDecoder) -> None:
        self.expr = expr
        self._check_stats = stats_check(expr, decoder)
        # the compiled part of the stats pre-check (None without the compiled decoder): its
        # clauses run in C on the still-encoded bounds, the rest of the filter in Python
        self._native: tuple[Any, Check | None, Callable[[Any, Any, Any], bool]] | None = None
        if expr is not None and reject_bounds is not None:
            clauses, rest = native_clauses(expr, decoder)
            if clauses:
                self._native = (clauses, None if rest is None else stats_check(rest, decoder), reject_bounds)
        self._rejecters: dict[int, Callable[[Any, dict[str, Any], dict[str, Any]], bool]] = {}
        self._partition_checks: dict[int, Callable[[Mapping[str, Any]], bool] | None] = {}
        # (spec id, id of the decoder) -> (the decoder, kept so its id is not reused; the filter)
        self._drops: dict[tuple[int, int], tuple[Any, tuple[Any, ...] | None]] = {}
        # per spec id: partition key -> (might_match_partition's verdict, whether the partition
        # proves every row matches: always_matches_partition), bounded like the cache of
        # SpecContext.partitions, whose keys these are
        self._partition_verdicts: dict[int, dict[Any, tuple[bool, bool]]] = {}
        if expr is not None:
            from storage.spec.expressions import (
                always_matches_partition,
                might_match_file_stats,
                might_match_partition,
            )

            self._partition_matches = might_match_partition
            self._partition_proves = always_matches_partition
            self._stats_match = might_match_file_stats

    def file_matches(self, data_file: Any, context: SpecContext, key: Any) -> bool:
        """``might_match_file`` (the authority the pre-checks leave survivors to), with its
        partition verdict kept by the partition's key (entries share few partitions), and its
        statistics check left out where the partition proves every row matches (a day filter on
        a day-partitioned table: ``always_matches_partition``)."""
        spec = context.model
        if spec.fields and data_file.partition:
            verdicts = self._partition_verdicts.setdefault(context.spec_id, {})
            found = verdicts.get(key) if key is not None else None
            if found is None:
                partition = data_file.partition
                matches = self._partition_matches(self.expr, spec, partition)
                found = _kept(
                    verdicts, key, (matches, matches and self._partition_proves(self.expr, spec, partition))
                )
            matches, proved = found
            if not matches or proved:
                return matches
        return self._stats_match(self.expr, data_file)

    def rejecter(self, context: SpecContext) -> Callable[[Any, dict[str, Any], dict[str, Any]], bool] | None:
        """None without a filter, else a test of an entry of ``context``'s spec on its partition
        entry (``SpecContext.partitions``: key and values) and raw data file: True when the
        pre-checks prove it cannot match (the survivors are judged by ``might_match_file``).
        Partition verdicts are kept by raw partition key (bounded like that cache)."""
        if self.expr is None:
            return None
        found = self._rejecters.get(context.spec_id)
        if found is not None:
            return found
        check_partition = self._partition_check(context)
        check_stats = self._check_stats
        clauses, check_rest, reject = self._native if self._native is not None else ((), None, None)
        verdicts: dict[Any, bool] = {}

        def rejects(key: Any, values: dict[str, Any], raw: dict[str, Any]) -> bool:
            if check_partition is not None:
                verdict = verdicts.get(key) if key is not None else None
                if verdict is None:
                    verdict = _kept(verdicts, key, bool(check_partition(values)))
                if not verdict:
                    return True
            if check_stats is None or raw.get("content"):
                return False
            lower, upper = raw.get("lower_bounds"), raw.get("upper_bounds")
            if reject is not None and type(lower) is not dict and type(upper) is not dict:  # kept raw
                try:
                    if reject(lower, upper, clauses):
                        return True
                except ValueError as exc:
                    raise malformed_stats(exc) from None
                if check_rest is None:
                    return False
                check = check_rest
            else:
                check = check_stats
            return not check(
                None if lower is None else stats_map(lower), None if upper is None else stats_map(upper)
            )

        found = self._rejecters[context.spec_id] = rejects
        return found

    def _partition_check(self, context: SpecContext) -> Callable[[Mapping[str, Any]], bool] | None:
        if context.spec_id not in self._partition_checks:
            check = None
            if context.names:
                from storage.spec.expressions import partition_projection

                check = partition_check(partition_projection(self.expr, context.model), context.names)
            self._partition_checks[context.spec_id] = check
        return self._partition_checks[context.spec_id]

    def drop(self, manifest: ManifestInfo, decoder: Any, context: SpecContext) -> tuple[Any, ...] | None:
        """The filter of the compiled ``decode_filtered`` for the entries of ``manifest`` (read by
        ``decoder``), or None: it drops what ``_manifest_slices`` would drop (deleted entries,
        those ``rejecter`` rejects by partition or by the compiled bounds clauses) before their
        dicts are built. None without a filter, and when the manifest's entries inherit row ids
        (dropped ones are counted)."""
        if self.expr is None or not RowIds(manifest).inactive:
            return None
        key = (context.spec_id, id(decoder))
        if key in self._drops:
            return self._drops[key][1]
        probes = decoder.probes(_PROBES)
        check_partition = self._partition_check(context) if probes[2] >= 0 else None
        partition_rejects: Callable[[dict[str, Any]], bool] | None = None
        if check_partition is not None:
            partition_of = context.partitions(decoder.partition_names)
            check = check_partition

            def partition_rejects(raw: dict[str, Any]) -> bool:
                try:
                    return not check(partition_of(raw)[1])
                except Exception:  # kept: the listing loop raises what it raises for this entry
                    return False

        clauses = self._native[0] if self._native is not None and self._check_stats is not None else None
        found: tuple[Any, ...] | None = None
        if partition_rejects is not None or clauses is not None:
            found = (probes, {}, partition_rejects, clauses)
        self._drops[key] = (decoder, found)
        return found


def _compiled_loop(
    entries: list[dict[str, Any]] | EncodedEntries, scan: tuple[Any, ...], one: Callable[[Any], Any]
) -> Iterator[list[FileSlice]]:
    """The slices of ``plain_slices`` (``scan`` is its) over decoded entries, a few at a time, or
    of ``plain_decode`` straight over entries still encoded where it reads them."""
    if isinstance(entries, EncodedEntries):
        layout = entries.layout(scan[3]) if scan[2] is not None else None  # (keys, cache)
        if layout is not None:
            yield from entries.slices(layout, scan, one, _CHUNK)
            return
        entries = entries.records()
    for start in range(0, len(entries), _CHUNK):  # few slices alive at once (see _CHUNK)
        yield plain_slices(scan, entries[start : start + _CHUNK], one)


class IcebergFileIndex(FileIndex):
    def __init__(self, table: IcebergSpecTable) -> None:
        self._table = table
        self._metadata = table.pyiceberg_table.metadata
        self._io = ListingIO(table.pyiceberg_table.io)
        self._decoder = ColumnDecoder(self._metadata.schema())
        self._specs: dict[int, SpecContext] = {}
        # (the filter, manifest summaries' key -> verdict): _manifest_might_match
        self._summary_verdicts: tuple[Any, dict[Any, bool]] = (None, {})

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
        """Whether the manifest's partition summaries admit ``expr``; the verdict is kept by the
        summaries' encoded bounds (a snapshot's manifests often share them: each spans the same
        days), for as long as this index's filter stays the same one."""
        if expr is None:
            return True
        context = self.spec_context(manifest.spec_id)
        if not context.names or manifest.partitions is None:
            return True
        key = (
            manifest.spec_id,
            *(
                (s.get("contains_null", True), s.get("lower_bound"), s.get("upper_bound"))
                for s in manifest.partitions
            ),
        )
        verdicts = self._summary_verdicts
        if verdicts[0] is not expr:
            verdicts = self._summary_verdicts = (expr, {})
        try:
            found = verdicts[1].get(key)
        except TypeError:  # a summary value that is not hashable (not one a manifest list holds)
            return self._summary_verdict(context, manifest, expr)
        if found is None:
            found = _kept(verdicts[1], key, self._summary_verdict(context, manifest, expr))
        return found

    @staticmethod
    def _summary_verdict(context: SpecContext, manifest: ManifestInfo, expr: Any) -> bool:
        from storage.spec.expressions import might_match_partition_bounds

        bounds = context.summary_bounds(manifest)
        if bounds is None:
            return True
        lower, upper, nulls = bounds
        return might_match_partition_bounds(expr, context.model, lower, upper, nulls)

    def _delete_index(self, manifests: list[ManifestInfo], expr: Any) -> DeleteIndex:
        index = DeleteIndex()
        selected = (
            m
            for m in manifests
            if m.content == CONTENT_DELETES and m.may_have_live_files and self._manifest_might_match(m, expr)
        )
        for manifest, records, avro_names in iter_manifests(self._io, selected):
            context = self.spec_context(manifest.spec_id)
            partition_of = context.partitions(avro_names)
            for record in records:
                if record["status"] == STATUS_DELETED:
                    continue
                sequence, snapshot_id = inherited_sequence(record, manifest)
                _, values, _ = partition_of(record["data_file"]["partition"])
                delete_file = make_data_file(
                    record, values, self._decoder, sequence, snapshot_id, context, avro_names
                )
                index.add(record, delete_file, sequence, context.spec_id, unpartitioned=not context.names)
        return index

    def _scan(self, snapshot: Any, expr: Any, added_by: set[int] | None = None) -> Iterator[FileSlice]:
        """The slices, one at a time: the loops below hand them over a few at a time (lists), so
        that a slice passes through one generator here rather than through each of theirs (five
        deep cost the main thread about 10 ms of 200,000 slices)."""
        for chunk in self._scan_chunks(snapshot, expr, added_by):
            yield from chunk

    def _scan_chunks(self, snapshot: Any, expr: Any, added_by: set[int] | None) -> Iterator[list[FileSlice]]:
        manifests = self._manifests(snapshot)
        deletes = self._delete_index(manifests, expr) or None  # None: no deletes to look up
        selected = (
            m
            for m in manifests
            if m.content == CONTENT_DATA and m.may_have_live_files and self._manifest_might_match(m, expr)
        )
        checks = _Checks(expr, self._decoder)

        def drop(manifest: ManifestInfo, decoder: Any) -> tuple[Any, ...] | None:
            return checks.drop(manifest, decoder, self.spec_context(manifest.spec_id))

        if expr is None:  # nothing to drop while decoding: entries may be read straight into slices
            for manifest, joined in iter_joined(self._io, selected):
                entries = EncodedEntries(manifest, joined)
                context = self.spec_context(manifest.spec_id)
                yield from self._manifest_slices(
                    manifest, entries, entries.partition_names, context, checks, deletes, added_by
                )
            return
        for manifest, records, avro_names in iter_manifests(self._io, selected, drop):
            context = self.spec_context(manifest.spec_id)
            yield from self._manifest_slices(
                manifest, records, avro_names, context, checks, deletes, added_by
            )

    def _manifest_slices(
        self,
        manifest: ManifestInfo,
        entries: list[dict[str, Any]] | EncodedEntries,
        avro_names: dict[int, str],
        context: SpecContext,
        checks: _Checks,
        deletes: DeleteIndex | None,
        added_by: set[int] | None,
    ) -> Iterator[list[FileSlice]]:
        """The live data files of one manifest that may match, a few slices at a time (``_CHUNK``):
        ``one`` gives an entry's, or None; without filter, deletes, row lineage or snapshot range
        the compiled ``plain_slices`` loops (``one`` gets the entries it does not cover), reading
        ``entries`` still encoded straight into slices (``plain_decode``) where it can."""
        decoder, spec_id = self._decoder, context.spec_id
        partition_of = context.partitions(avro_names)
        rejects = checks.rejecter(context)
        row_ids = RowIds(manifest)
        assign = None if row_ids.inactive else row_ids.assign
        plain = plain_context(decoder, context)  # None: make_data_file builds every model

        def one(record: dict[str, Any]) -> FileSlice | None:
            if record["status"] == STATUS_DELETED:
                return None
            first_row_id = assign(record) if assign is not None else None
            sequence, snapshot_id = inherited_sequence(record, manifest)
            if added_by is not None and snapshot_id not in added_by:
                return None
            raw = record["data_file"]
            key, values, descriptor = partition_of(raw["partition"])
            if rejects is not None and rejects(key, values, raw):
                return None
            data_file = (
                plain_data_file(plain, raw, values, sequence, snapshot_id)
                if plain is not None and first_row_id is None
                else None
            ) or make_data_file(
                record, values, decoder, sequence, snapshot_id, context, avro_names, first_row_id
            )
            if checks.expr is not None and not checks.file_matches(data_file, context, key):
                return None
            delete_files = deletes.for_data_file(data_file.path, sequence, spec_id, values) if deletes else ()
            # partition, base_file, delete_files, file_group_id, base_instant (slots_builder)
            return _file_slice(descriptor, data_file, delete_files, None, snapshot_id)

        if plain is not None and plain_slices is not None and not (rejects or assign or deletes or added_by):
            cache, keys = context.partition_cache(avro_names)
            sequence, added = manifest.sequence_number, manifest.added_snapshot_id
            scan = (plain, _file_slice, cache, keys, partition_of, sequence, added)
            yield from _compiled_loop(entries, scan, one)
            return
        records = entries.records() if isinstance(entries, EncodedEntries) else entries
        for start in range(0, len(records), _CHUNK):
            yield [found for found in map(one, records[start : start + _CHUNK]) if found is not None]

    def _changes(self, snapshots: list[Any], expr: Any) -> Iterator[FileChange]:
        for snapshot in snapshots:
            snapshot_id = snapshot.snapshot_id
            # Inline v1 manifest lists do not say which snapshot added a manifest: read its
            # entries, which name their own snapshot (checked in _manifest_changes).
            selected = (
                m
                for m in self._manifests(snapshot)
                if (m.added_snapshot_id is None or m.added_snapshot_id == snapshot_id)
                and self._manifest_might_match(m, expr)
            )
            for manifest, records, avro_names in iter_manifests(self._io, selected):
                yield from self._manifest_changes(snapshot_id, manifest, records, avro_names, expr)

    def _manifest_changes(
        self,
        snapshot_id: int,
        manifest: ManifestInfo,
        records: list[dict[str, Any]],
        avro_names: dict[int, str],
        expr: Any,
    ) -> Iterator[FileChange]:
        if expr is not None:
            from storage.spec.expressions import might_match_file

        context = self.spec_context(manifest.spec_id)
        partition_of = context.partitions(avro_names)
        row_ids = RowIds(manifest)
        for record in records:
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
            _, values, descriptor = partition_of(record["data_file"]["partition"])
            data_file = make_data_file(
                record, values, self._decoder, sequence, entry_snapshot, context, avro_names, first_row_id
            )
            if expr is not None and not might_match_file(expr, data_file, context.model):
                continue
            if data_file.content is FileContent.DATA:
                file_slice = FileSlice(descriptor, data_file, base_instant=snapshot_id)
            else:
                # a delete file on its own: the slice carries it without a base file
                file_slice = FileSlice(descriptor, None, (data_file,), base_instant=snapshot_id)
            yield FileChange(kind=kind, file_slice=file_slice, instant_id=snapshot_id)
