"""Iceberg ``rewrite-manifests``: the current snapshot's data manifests, clustered by partition.

What Iceberg's ``rewrite_manifests`` procedure does: the live entries of the current snapshot's
data manifests (those of every partition spec, or of ``spec-id`` only) are written again, grouped
by partition spec and ordered by partition tuple, into manifests of about
``target-manifest-size-bytes`` (default: the table's ``commit.manifest.target-size-bytes``, else
8 MiB, Iceberg's default), and committed as a ``replace`` snapshot whose data files are exactly the
old ones. A partition's entries go to one manifest when they fit in one (a partition larger than
the target spans several of its own), so a scan filtering on partitions opens few manifests.
Entries keep the snapshot that added them and their data and file sequence numbers (they are
written as ``EXISTING``); deleted entries are dropped; delete manifests, and data manifests of the
specs left out, are kept as they are. The summary carries Iceberg's ``manifests-created``,
``manifests-replaced``, ``manifests-kept`` and ``entries-processed`` and the previous totals
(``total-records`` and the others are unchanged).

The entries are read twice (counted per partition to cut the manifests, then routed to them as
they stream by: memory grows with the number of partitions and of new manifests, not of files),
and the new manifests are read back and checked against the old ones (same entries, same
sequence numbers) before anything is committed. pyiceberg 0.12 has no public rewrite of manifests:
the commit is a ``_SnapshotProducer`` of operation ``replace`` whose existing manifests are the new
ones and the kept ones. It goes through the catalog with the head snapshot as a requirement; when
another writer commits first, pyiceberg's commit retry re-plans the rewrite at the new head
(nothing a manifest rewrite does conflicts with an append or a delete) and commits again, up to the
table's ``commit.retry.num-retries``; manifests of a refused attempt are deleted. Old manifests stay
on disk for time travel until snapshot expiry removes them. Format v3 tables are refused (pyiceberg
0.12 writes no v3 manifests, and row lineage would have to be kept).

Due (scheduler) when the current snapshot has more than ``min-manifests`` data manifests and at
least two of them are small (under half the target).
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from processes.maintenance.errors import InputError
from processes.maintenance.schemas import (
    BYTES,
    INTERVAL,
    MAX_COUNT,
    MAX_FILE_BYTES,
    MAX_INT32,
    PARALLELISM,
    UNIT,
    with_defaults,
)
from processes.maintenance.targets import NO_CATALOG, iceberg_catalog_table, iceberg_commit_target
from processes.plugin import (
    REWRITE_MANIFESTS,
    Preview,
    ProcessContext,
    ProcessFactory,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from processes.runtime import TableRuntime

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
DEFAULT_TARGET_MANIFEST_SIZE = 8 * MIB
TARGET_SIZE_PROPERTY = "commit.manifest.target-size-bytes"
SUMMARY_KEYS = ("manifests-created", "manifests-replaced", "manifests-kept", "entries-processed")


def partition_key(partition: Any) -> tuple[Any, ...]:
    return tuple(partition[i] for i in range(len(partition)))


def _order(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A sort key for partition tuples with nulls (nulls last)."""
    return tuple((1, 0) if value is None else (0, value) for value in key)


def entry_digest(entry: Any) -> int:
    """A 128-bit digest of what a rewrite must keep of a live entry."""
    data_file = entry.data_file
    text = repr(
        (
            data_file.file_path,
            int(data_file.content),
            data_file.spec_id,
            partition_key(data_file.partition),
            data_file.record_count,
            data_file.file_size_in_bytes,
            entry.snapshot_id,
            entry.sequence_number,
            entry.file_sequence_number,
        )
    )
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=16).digest(), "big")


@dataclass
class Route:
    """Where a partition's entries go: ``bins`` manifests from ``first``, ``per_bin`` entries each."""

    first: int
    bins: int
    per_bin: int


@dataclass
class ManifestPlan:
    """The rewrite of one snapshot's data manifests (see the module docstring)."""

    snapshot_id: int
    rewrite: list[Any]
    keep: list[Any]
    counts: dict[int, dict[tuple[Any, ...], int]] = field(default_factory=dict)
    entries: int = 0
    digest: int = 0
    entry_bytes: float = 1.0
    routes: dict[int, dict[tuple[Any, ...], Route]] = field(default_factory=dict)
    bins: dict[int, int] = field(default_factory=dict)  # bin -> spec id

    @property
    def empty(self) -> bool:
        """Nothing worth rewriting: no data manifest, or one that would be written again as one."""
        return not self.rewrite or (len(self.rewrite) == 1 and len(self.bins) == 1)


def plan_manifests(
    io: FileIO, snapshot: Snapshot, *, target: int, spec_id: int | None = None
) -> ManifestPlan:
    """Count the live entries per partition of the data manifests to rewrite and cut them into
    manifests of about ``target`` bytes (estimated from the old manifests' bytes per entry)."""
    from pyiceberg.manifest import ManifestContent

    manifests = list(snapshot.manifests(io))
    rewrite = [
        m
        for m in manifests
        if m.content == ManifestContent.DATA and (spec_id is None or m.partition_spec_id == spec_id)
    ]
    rewritten = {m.manifest_path for m in rewrite}
    kept = [m for m in manifests if m.manifest_path not in rewritten]
    plan = ManifestPlan(snapshot.snapshot_id, rewrite, kept)
    counts: dict[int, dict[tuple[Any, ...], int]] = defaultdict(lambda: defaultdict(int))
    read_entries = 0
    for manifest in rewrite:
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
            read_entries += 1
            if int(entry.status) == 2:  # DELETED
                continue
            counts[entry.data_file.spec_id][partition_key(entry.data_file.partition)] += 1
            plan.entries += 1
            plan.digest = (plan.digest + entry_digest(entry)) % (1 << 128)
    plan.counts = {spec: dict(by_key) for spec, by_key in counts.items()}
    plan.entry_bytes = max(1.0, sum(m.manifest_length for m in rewrite) / max(1, read_entries))
    _assign_bins(plan, target)
    return plan


def _assign_bins(plan: ManifestPlan, target: int) -> None:
    """Partitions in order, packed into bins of ``target`` estimated bytes; a partition goes to
    one bin when it fits in one, else to bins of its own."""
    per_target = max(1, int(target // plan.entry_bytes))
    for spec_id in sorted(plan.counts):
        routes: dict[tuple[Any, ...], Route] = {}
        current, filled = None, 0
        for key in sorted(plan.counts[spec_id], key=_order):
            count = plan.counts[spec_id][key]
            if count > per_target:
                bins = math.ceil(count / per_target)
                first = len(plan.bins)
                for offset in range(bins):
                    plan.bins[first + offset] = spec_id
                routes[key] = Route(first, bins, math.ceil(count / bins))
                current = None
                continue
            if current is None or filled + count > per_target:
                current, filled = len(plan.bins), 0
                plan.bins[current] = spec_id
            routes[key] = Route(current, 1, count)
            filled += count
        plan.routes[spec_id] = routes


def write_manifests(producer: Any, io: FileIO, plan: ManifestPlan, progress: Any = None) -> list[Any]:
    """Stream the live entries of the planned manifests into their new manifests (written as
    EXISTING), then read those back and check them against the plan: the new ManifestFiles."""
    writers: dict[int, Any] = {}
    seen: dict[tuple[int, tuple[Any, ...]], int] = defaultdict(int)
    try:
        for position, manifest in enumerate(plan.rewrite):
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                spec_id = entry.data_file.spec_id
                key = partition_key(entry.data_file.partition)
                route = plan.routes[spec_id][key]
                index = route.first + min(seen[spec_id, key] // route.per_bin, route.bins - 1)
                seen[spec_id, key] += 1
                writer = writers.get(index)
                if writer is None:
                    writer = writers[index] = producer.new_manifest_writer(producer.spec(spec_id))
                    writer.__enter__()
                writer.existing(entry)
            if progress is not None:
                progress(position + 1, len(plan.rewrite))
    finally:
        for writer in writers.values():
            writer.__exit__(None, None, None)
    written = [writers[index].to_manifest_file() for index in sorted(writers)]
    _check(io, plan, written)
    return written


def _check(io: FileIO, plan: ManifestPlan, written: list[Any]) -> None:
    """``RuntimeError`` unless the new manifests hold exactly the planned live entries."""
    entries = digest = 0
    for manifest in written:
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
            entries += 1
            digest = (digest + entry_digest(entry)) % (1 << 128)
    if (entries, digest) != (plan.entries, plan.digest):
        raise RuntimeError(
            f"the rewritten manifests hold {entries} entries, the old ones {plan.entries} live"
            " entries (or their contents differ): nothing was committed"
        )


def _producer_class() -> type:
    """The pyiceberg snapshot producer of a manifest rewrite (built lazily: pyiceberg imports)."""
    from pyiceberg.table.snapshots import Operation, Summary
    from pyiceberg.table.update.snapshot import _SnapshotProducer

    class RewriteManifestsProducer(_SnapshotProducer["RewriteManifestsProducer"]):
        """A ``replace`` snapshot whose manifests are the rewritten and the kept ones."""

        def __init__(self, transaction: Any, io: FileIO, plan: ManifestPlan, **options: Any) -> None:
            super().__init__(Operation.REPLACE, transaction, io, snapshot_properties=options["properties"])
            self.plan, self.target, self.spec_id = plan, options["target"], options["spec_id"]
            self.progress = options.get("progress")
            self.created: list[Any] = []

        def _validate_concurrency(self) -> None:
            """Nothing a concurrent commit does conflicts: the rewrite is planned at the new head."""

        def _deleted_entries(self) -> list[Any]:
            return []

        def _existing_manifests(self) -> list[Any]:
            metadata = self._transaction.table_metadata
            if self.plan.snapshot_id != self._parent_snapshot_id:
                parent_id = self._parent_snapshot_id
                parent = metadata.snapshot_by_id(parent_id) if parent_id is not None else None
                if parent is None:
                    raise RuntimeError("the table has no snapshot to rewrite the manifests of any more")
                logger.info("manifest rewrite re-plans at snapshot %s", self._parent_snapshot_id)
                self.plan = plan_manifests(self._io, parent, target=self.target, spec_id=self.spec_id)
            self.created = (
                write_manifests(self, self._io, self.plan, self.progress) if self.plan.rewrite else []
            )
            return self.created + self.plan.keep

        def _summary(self, snapshot_properties: Any = None) -> Any:
            metadata = self._transaction.table_metadata
            parent_id = self._parent_snapshot_id
            parent = metadata.snapshot_by_id(parent_id) if parent_id is not None else None
            previous = parent.summary.additional_properties if parent and parent.summary else {}
            totals = {k: v for k, v in previous.items() if k.startswith("total-")}
            counts = dict(
                zip(
                    SUMMARY_KEYS,
                    (len(self.created), len(self.plan.rewrite), len(self.plan.keep), self.plan.entries),
                    strict=True,
                )
            )
            extra = {k: str(v) for k, v in counts.items()}
            return Summary(Operation.REPLACE, **totals, **extra, **dict(snapshot_properties or {}))

    return RewriteManifestsProducer


class IcebergRewriteManifestsProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(REWRITE_MANIFESTS, params)
        merged = {**IcebergRewriteManifestsFactory.default_properties, **config, **params}
        self.target = merged.get("target-manifest-size-bytes")
        self.spec_id = params.get("spec-id")
        self.min_manifests = int(merged["min-manifests"])

    def target_size(self, table: Table) -> int:
        if self.target is not None:
            return int(self.target)
        configured = table.metadata.properties.get(TARGET_SIZE_PROPERTY)
        return int(configured) if configured else DEFAULT_TARGET_MANIFEST_SIZE

    def run(self, context: ProcessContext) -> dict[str, Any]:
        table = iceberg_commit_target(context.table, context.guard)
        table.refresh()
        metadata = table.metadata
        _check_table(metadata, self.spec_id)
        snapshot = metadata.current_snapshot()
        if snapshot is None:
            return {"snapshot_id": None, "note": "the table has no snapshot: nothing to rewrite"}
        target = self.target_size(table)
        context.report_progress(0, 3, "reading the data manifests")
        plan = plan_manifests(table.io, snapshot, target=target, spec_id=self.spec_id)
        context.check_cancelled()
        if plan.empty:
            return {**_plan_summary(plan, target), "snapshot_id": snapshot.snapshot_id, "rewritten": False}
        snapshot_id, producer = commit_rewrite(context, table, plan, target, self.spec_id)
        return {
            **_plan_summary(producer.plan, target),
            "rewritten": True,
            "snapshot_id": snapshot_id,
            "parent_snapshot_id": producer._parent_snapshot_id,
            "manifests_created": len(producer.created),
        }


def _check_table(metadata: TableMetadata, spec_id: int | None) -> None:
    """``InputError`` (no retry mends it) for a v3 table or a spec id the table does not have."""
    if metadata.format_version > 2:
        raise InputError(
            f"rewrite-manifests supports Iceberg format versions 1 and 2; this table is v{metadata.format_version}"
            " (pyiceberg 0.12 writes no v3 manifests, and row lineage would have to be kept)"
        )
    if spec_id is not None and spec_id not in metadata.specs():
        raise InputError(
            f"spec-id {spec_id} is not a partition spec of this table ({sorted(metadata.specs())})"
        )


def _plan_summary(plan: ManifestPlan, target: int) -> dict[str, Any]:
    return {
        "target_manifest_size_bytes": target,
        "planned_snapshot_id": plan.snapshot_id,
        "manifests_replaced": len(plan.rewrite),
        "manifests_kept": len(plan.keep),
        "entries": plan.entries,
        "partitions": sum(len(keys) for keys in plan.counts.values()),
        "manifests_planned": len(plan.bins),
    }


def commit_rewrite(
    context: ProcessContext, table: Table, plan: ManifestPlan, target: int, spec_id: int | None
) -> tuple[int, Any]:
    """Write the new manifests and commit the ``replace`` snapshot: (its id, the producer). New
    files of an attempt that does not land are deleted (by pyiceberg for a refused commit)."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    def progress(done: int, total: int) -> None:
        context.report_progress(1, 3, f"rewrote the entries of {done} of {total} manifests")

    transaction = table.transaction()
    properties = {"lakewarden.process-id": str(context.process_id), "lakewarden.operation": REWRITE_MANIFESTS}
    producer = _producer_class()(
        transaction, table.io, plan, properties=properties, target=target, spec_id=spec_id, progress=progress
    )
    try:
        producer.commit()  # writes the manifests and the manifest list, stages the snapshot
        context.report_progress(2, 3, "committing")
        context.checkpoint("before-commit")
        transaction.commit_transaction()
    except (CommitFailedException, ValidationException):
        raise  # nothing landed; pyiceberg deleted what it wrote
    except BaseException:
        if not _landed(table, producer.snapshot_id):
            producer._clean_all_uncommitted()
        raise
    context.report_progress(3, 3, "committed")
    return producer.snapshot_id, producer


def _landed(table: Table, snapshot_id: int) -> bool:
    """Whether the snapshot reached the table (True when that cannot be told: keep the files)."""
    try:
        table.refresh()
    except Exception:
        return True
    return table.metadata.snapshot_by_id(snapshot_id) is not None


def data_manifests(io: FileIO, snapshot: Snapshot) -> list[Any]:
    from pyiceberg.manifest import ManifestContent

    return [m for m in snapshot.manifests(io) if m.content == ManifestContent.DATA]


def is_due(manifests: Iterable[Any], *, min_manifests: int, target: int) -> bool:
    """More than ``min_manifests`` data manifests, at least two of them under half the target."""
    manifests = list(manifests)
    small = sum(1 for m in manifests if m.manifest_length < target // 2)
    return len(manifests) > min_manifests and small >= 2


class IcebergRewriteManifestsFactory(ProcessFactory):
    name = "iceberg-rewrite-manifests"
    description = "Rewrites Iceberg data manifests clustered by partition at the target manifest size"
    default_properties = {
        "interval": 86400,
        "parallelism": 1,
        "min-manifests": 10,
        "target-manifest-size-bytes": None,
    }
    properties_schema = with_defaults(
        {
            "type": "object",
            "properties": {
                "interval": INTERVAL,
                "parallelism": PARALLELISM,
                "min-manifests": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_COUNT,
                    "description": "Scheduled runs wait for more data manifests than this, two of them"
                    " under half the target size",
                },
                "target-manifest-size-bytes": {
                    "oneOf": [
                        {"type": "null"},
                        {"type": "integer", "minimum": 1024, "maximum": MAX_FILE_BYTES},
                    ],
                    "description": "Bytes per new manifest (null: the table's"
                    " commit.manifest.target-size-bytes, else 8 MiB)",
                },
            },
        },
        default_properties,
    )
    params_schema = {
        "type": "object",
        "properties": {
            "target-manifest-size-bytes": {
                "type": "integer",
                "minimum": 1024,
                "maximum": MAX_FILE_BYTES,
                UNIT: BYTES,
                "description": "Bytes per new manifest (default: the property)",
            },
            "spec-id": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_INT32,
                "description": "Rewrite only the data manifests of this partition spec (default: all)",
            },
        },
        "additionalProperties": False,
    }

    def supported_actions(self) -> dict[str, set[str]]:
        return {"iceberg": {REWRITE_MANIFESTS}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:
        return TriggerStrategy.from_properties(self.properties, on_new_snapshot=True)

    def trigger(self, runtime: TableRuntime, action: str) -> TableProcess | None:
        table = iceberg_catalog_table(runtime)
        if table is None:
            return runtime.nothing_to_do(NO_CATALOG)
        if table.metadata.format_version > 2:
            return runtime.decline(f"manifests of a v{table.metadata.format_version} table are not rewritten")
        snapshot = table.metadata.current_snapshot()
        if snapshot is None:
            return runtime.nothing_to_do("nothing to do: the table has no snapshot")
        process = IcebergRewriteManifestsProcess({}, runtime.config)
        manifests = data_manifests(table.io, snapshot)
        target = process.target_size(table)
        if not is_due(manifests, min_manifests=process.min_manifests, target=target):
            return runtime.nothing_to_do(
                f"nothing to do: not more than {process.min_manifests} data manifests with two under "
                f"{target // 2} bytes"
            )
        return process

    def recover(self, runtime: TableRuntime, record: ProcessRecord) -> TableProcess:
        return IcebergRewriteManifestsProcess(dict(record.params), runtime.config)

    def validate(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> None:
        table = iceberg_catalog_table(runtime)
        if table is not None:
            _check_table(table.metadata, params.get("spec-id"))

    def preview(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> Preview | None:
        """The run's plan (entries counted per partition and cut into manifests), not written."""
        table = iceberg_catalog_table(runtime, strict=True)
        process = IcebergRewriteManifestsProcess(dict(params), runtime.config)
        _check_table(table.metadata, process.spec_id)
        snapshot = table.metadata.current_snapshot()
        if snapshot is None:
            return Preview(notes=["nothing to do: the table has no snapshot"])
        target = process.target_size(table)
        plan = plan_manifests(table.io, snapshot, target=target, spec_id=process.spec_id)
        preview = Preview(
            groups=len(plan.bins),
            files_in=0 if plan.empty else len(plan.rewrite),
            bytes_in=0 if plan.empty else sum(m.manifest_length for m in plan.rewrite),
            files_out=0 if plan.empty else len(plan.bins),
            bytes_out=0 if plan.empty else round(plan.entries * plan.entry_bytes),
            details={**_plan_summary(plan, target), "snapshots_added": int(not plan.empty)},
        )
        preview.notes.append(
            "nothing to do: the data manifests would be written again as they are"
            if plan.empty
            else "the replaced manifests stay on storage until snapshot expiry deletes them"
        )
        return preview
