"""Delta ``rewrite`` (compaction of small files) and ``purge-deletion-vectors``: new files hold the
same rows, committed as remove + add actions with ``dataChange=false`` (change-feed and streaming
readers skip the commit: no data changed).

Planning and writing are the Iceberg rewrite's (``compaction``, ``group_writer``); files are read
through the spec API (``DeltaSliceReader``): deletion vectors applied, columns found by physical
name under column mapping, partition columns left out (Delta keeps them in the log). Files with
deletion vectors are compacted like any small file (and, with ``delete-file-threshold`` 1, however
large); ``purge-deletion-vectors`` rewrites the files whose vectors delete at least
``deleted-ratio-threshold`` of their rows (Delta Spark's ``REORG TABLE ... APPLY (PURGE)``).
Column-mapped tables are written with the physical column names and the field ids in the parquet
schema, and their statistics and partition values keyed by physical names, as Delta requires.

Every table commits through our own commit writer (``delta_commit``: the removes carry the
deletion vectors of the adds they remove; operation ``OPTIMIZE``, or ``REORG`` for a purge;
put-if-absent by hard link on a file system, by a ``PUT`` with ``If-None-Match: *`` on S3, as
deltalake's own commit does). Before committing, the latest version is read: every file to remove
must still be live there with the same deletion vector (a vector added meanwhile deletes rows the
new file would bring back) and the protocol and metadata must be unchanged, else the run re-plans
once and then fails cleanly.

Object stores: new files are written in place under unique names (``outputs``) and deleted when
the commit does not land. A store that ignores ``If-None-Match`` would let a second put overwrite
the first commit: such a store is only safe with a single writer per table.

Two rewrites of one Delta table must never run at once (both would commit and duplicate rows):
the executor's per-table lock guarantees it; these processes rely on it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from processes.maintenance import planning
from processes.maintenance import preview as rewrite_preview
from processes.maintenance.group_writer import GroupWriter, WrittenGroup
from processes.maintenance.outputs import RewriteOutputs, rewrite_outputs
from processes.maintenance.planning import (
    REWRITE_DEFAULTS,
    REWRITE_PARAMS_SCHEMA,
    REWRITE_PROPERTIES_SCHEMA,
    STRATEGY_PROPERTY,
    CompactionPlan,
    CompactionSettings,
    Ordering,
    RewriteGroup,
    clustered_files,
    delta_ordering,
)
from processes.maintenance.schemas import MIN_BENEFIT, with_defaults
from processes.maintenance.targets import store_options
from processes.plugin import (
    PURGE_DELETION_VECTORS,
    REWRITE,
    ProcessContext,
    ProcessFactory,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.formats.delta import commit as delta_commit
from storage.formats.delta import has_variant, unique_id
from storage.formats.delta.commit import (
    CommitRefused,
    RewriteCommit,
    add_action,
    check_writable,
    delta_stats,
    live_files,
    open_version,
)
from storage.io import StoreOptions, filesystem, is_local
from storage.spec.errors import RewriteConflict
from storage.spec.models import FileSlice

if TYPE_CHECKING:
    from processes.runtime import TableRuntime

logger = logging.getLogger(__name__)

__all__ = ["DeltaPurgeDeletionVectorsFactory", "DeltaRewriteFactory", "open_version"]

DEFAULT_DELETED_RATIO = 0.1
_RATIO = {
    "type": "number",
    "minimum": 0,
    "maximum": 1,
    "description": "Rewrite a file once its deletion vector deletes at least this share of its rows "
    "(deleted rows / numRecords; 0: every file with a deletion vector)",
}
PURGE_DEFAULTS: dict[str, Any] = {
    "interval": 3600,
    "parallelism": 1,
    MIN_BENEFIT: 1,
    "target-file-size": REWRITE_DEFAULTS["target-file-size"],
    "max-concurrent-groups": 0,
    "compression-codec": "",
    "deleted-ratio-threshold": DEFAULT_DELETED_RATIO,
}
_SHARED = REWRITE_PROPERTIES_SCHEMA["properties"]
PURGE_PROPERTIES_SCHEMA: dict[str, Any] = with_defaults(
    {
        "type": "object",
        "properties": {
            **{key: _SHARED[key] for key in PURGE_DEFAULTS if key in _SHARED},
            "deleted-ratio-threshold": _RATIO,
        },
    },
    PURGE_DEFAULTS,
)
PURGE_PARAMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "deleted-ratio-threshold": _RATIO,
        "target-file-size": REWRITE_PROPERTIES_SCHEMA["properties"]["target-file-size"],
    },
    "additionalProperties": False,
}


def delta_table(location: str, storage: StoreOptions | None = None) -> Any:
    """deltalake's DeltaTable, with the store's options on an object store."""
    from deltalake import DeltaTable

    if is_local(location):
        return DeltaTable(location)
    return DeltaTable(location, storage_options=(storage or StoreOptions.from_env()).delta_options())


@dataclass(frozen=True)
class WriteLayout:
    """How one version's data columns are read (logical names) and written (the file schema:
    physical names and field ids under column mapping)."""

    columns: list[str]
    schema: pa.Schema
    mapped: bool

    @classmethod
    def of(cls, spec: Any) -> WriteLayout:
        """The layout, or ``CommitRefused`` for a table the rewrite cannot write."""
        state = spec.state(spec.version)
        check_writable(state.snapshot.protocol, f"Delta table {spec.location_uri}")
        schema = state.schema
        variants = [f["name"] for f in schema.fields if has_variant(f["type"])]
        if variants:
            raise CommitRefused(
                f"Delta table {spec.location_uri} holds variant columns ({', '.join(variants)}), "
                "which the rewrite does not write: the table is left as it is"
            )
        partition_columns = set(schema.partition_columns)
        columns = [f.name for f in schema.arrow if f.name not in partition_columns]
        if schema.mapped:
            return cls(columns, pa.schema([schema.physical_field(c) for c in columns]), True)
        return cls(columns, pa.schema([schema.arrow.field(c) for c in columns]), False)


def plan_delta(
    spec: Any, settings: CompactionSettings, *, vectors: bool = True, ordering: Ordering | None = None
) -> CompactionPlan:
    """The compaction plan; without ``vectors``, files with a deletion vector are left out."""
    clustered = clustered_files(spec, ordering) if ordering is not None else set()
    return planning.plan_compaction(
        spec.file_index().list_files_at(),
        settings,
        instant=spec.version,
        eligible=lambda s: vectors or not s.delete_files,
        clustered=lambda s: s.base.path in clustered,
        ordering=ordering,
    )


def deleted_ratio(spec: Any, file_slice: FileSlice) -> float:
    """Rows the slice's deletion vector deletes / rows of its file (footer when stats lack it)."""
    base = file_slice.base_file
    assert base is not None
    deleted = sum(d.record_count for d in file_slice.delete_files)
    rows = base.record_count
    if not base.extra.get("record_count_known", True):
        fs, path = filesystem(base.path, spec.store.storage)
        with fs.open_input_file(path) as handle:
            rows = pq.read_metadata(handle).num_rows
    return deleted / rows if rows else 1.0


def plan_purge(spec: Any, settings: CompactionSettings, threshold: float) -> CompactionPlan:
    """Files whose deletion vector deletes at least ``threshold`` of their rows, bin-packed per
    partition into groups of at most the target size (a file alone is a group)."""
    candidates: dict[str, list[FileSlice]] = defaultdict(list)
    for file_slice in spec.file_index().list_files_at():
        base = file_slice.base_file
        if base is None or base.file_format != "parquet" or not file_slice.delete_files:
            continue
        if deleted_ratio(spec, file_slice) >= threshold:
            candidates[file_slice.partition.path].append(file_slice)
    plan = CompactionPlan(instant=spec.version)
    for key in sorted(candidates):
        for packed in planning.bin_pack(candidates[key], settings.target_file_size):
            plan.groups.append(RewriteGroup(len(plan.groups), packed[0].partition, packed))
    return plan


class DeltaSliceReader:
    """Reads slices through the spec table (picklable: Spark tasks reopen it at its version);
    with ``physical``, batches come under the file schema's names (column mapping)."""

    def __init__(self, spec: Any, columns: list[str], physical: pa.Schema | None = None) -> None:
        self.spec, self.columns, self.physical = spec, columns, physical

    def __call__(self, slices: list[Any]) -> Any:
        batches = self.spec.read(slices, columns=self.columns)
        if self.physical is None:
            return batches
        return (self.as_physical(batch) for batch in batches)

    def as_physical(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Logical to physical names at every level: the same layout, so nothing is copied."""
        assert self.physical is not None
        arrays = [column.view(f.type) for column, f in zip(batch.columns, self.physical, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.physical)


def _slice_key(file_slice: FileSlice) -> tuple[str, str | None]:
    base = file_slice.base_file
    assert base is not None
    return base.path, unique_id(base.extra.get("deletion_vector"))


class DeltaRewriteProcess(TableProcess):
    """Compaction (``rewrite``); ``DeltaPurgeProcess`` changes the plan and the commit's name."""

    operation = "OPTIMIZE"

    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(REWRITE, params)
        self.settings = CompactionSettings.from_config({**config, **params})
        self.ordering: Ordering | None = None

    def plan(self, spec: Any, *, in_place: bool) -> tuple[CompactionPlan, dict[str, Any]]:
        """The plan and notes for the summary."""
        ordering = self.ordering or delta_ordering(spec, self.settings)
        return plan_delta(spec, self.settings, ordering=ordering), {}

    def operation_parameters(self) -> dict[str, str]:
        return {"predicate": "[]", "targetSize": str(self.settings.target_file_size)}

    def before_commit(self, context: ProcessContext, plan: CompactionPlan) -> None:
        """Called after the groups are written, before the cancel check and the commit (a test seam)."""

    def run(self, context: ProcessContext) -> dict[str, Any]:
        storage = store_options(context)
        for attempt in (1, 2):
            spec = open_version(context.runtime.location, storage=storage)
            if attempt == 1:  # an ordering the table cannot have fails before anything is done
                self.ordering = delta_ordering(spec, self.settings)
            try:
                return self._attempt(context, spec, attempt, storage)
            except RewriteConflict as conflict:
                if attempt == 2:
                    raise RewriteConflict(f"the table changed during the rewrite twice: {conflict}") from None
                logger.info("%s of %s re-plans: %s", self.action, context.runtime.location, conflict)
        raise AssertionError("unreachable")

    def _attempt(
        self, context: ProcessContext, spec: Any, attempt: int, storage: StoreOptions | None
    ) -> dict[str, Any]:
        location = context.runtime.location
        layout = WriteLayout.of(spec)
        plan, notes = self.plan(spec, in_place=not is_local(location))
        notes.update(operation=self.operation)
        if plan.empty:
            return planning.rewrite_summary(plan, [], version=spec.version, attempts=attempt, **notes)
        notes["deletion_vectors_applied"] = sum(1 for g in plan.groups for s in g.slices if s.delete_files)
        settings = self.settings
        if layout.mapped and settings.engine != "arrow":
            settings = dataclasses.replace(settings, engine="arrow")
            notes["engine_note"] = "column-mapped tables are rewritten with the arrow engine"
        outputs = rewrite_outputs(
            location, context.staging_dir / f"attempt-{attempt}", storage, context.process_id, context.guard
        )
        reader = DeltaSliceReader(spec, layout.columns, layout.schema if layout.mapped else None)
        writer = GroupWriter(
            context,
            reader,
            layout.schema,
            outputs,
            settings=settings,
            field_ids=layout.mapped,
            compression=settings.compression_codec or "snappy",
            ordering=self._physical_ordering(spec, layout),
        )
        total = len(plan.groups) + 1
        try:
            written = writer.write_all(plan.groups, progress_total=total)
            context.checkpoint("after-write")
            self.before_commit(context, plan)
            context.report_progress(len(plan.groups), total, "committing")
            context.checkpoint("before-commit")
            version = self.commit(context, spec, plan, written, layout.schema, outputs, storage)
        except BaseException:
            outputs.discard()
            raise
        outputs.finish()
        context.report_progress(total, total, "committed")
        if writer.notes:
            notes["engine_note"] = writer.notes[0]
        return planning.rewrite_summary(plan, written, version=version, attempts=attempt, **notes)

    def _physical_ordering(self, spec: Any, layout: WriteLayout) -> Ordering | None:
        """The ordering over the names the writer sees (physical ones under column mapping)."""
        if self.ordering is None or not layout.mapped:
            return self.ordering
        return self.ordering.renamed(dict(zip(layout.columns, layout.schema.names, strict=True)))

    def commit_properties(self, context: ProcessContext) -> dict[str, str]:
        """The commitInfo entries naming this run (and the ordering of a clustering rewrite)."""
        custom = {"lakewarden.process-id": str(context.process_id), "lakewarden.operation": self.action}
        if self.ordering is not None:
            custom[STRATEGY_PROPERTY] = self.ordering.signature
        return custom

    def commit(
        self,
        context: ProcessContext,
        spec: Any,
        plan: CompactionPlan,
        written: list[WrittenGroup],
        schema: pa.Schema,
        outputs: RewriteOutputs,
        storage: StoreOptions | None,
    ) -> int:
        """Publish the new files and commit them with the removes; the new version."""
        location = context.runtime.location
        published: list[str] = []
        try:
            request = RewriteCommit(
                read_spec=spec,
                removed=[_slice_key(s) for group in plan.groups for s in group.slices],
                adds=new_files(spec, written, schema, outputs, published, storage),
                operation=self.operation,
                parameters=self.operation_parameters(),
                custom=self.commit_properties(context),
            )
            return delta_commit.commit(location, request, storage, context.guard)
        except BaseException as error:
            # Interrupted after the commit file was linked (a soft time limit, say): the files
            # are the table's now, whatever the caller does next.
            if not _landed(location, published, storage):
                raise
            outputs.keep = True
            if not isinstance(error, Exception):
                raise
            logger.warning("%s of %s: the commit landed despite %s", self.action, location, error)
            return open_version(location, storage=storage).version


class DeltaPurgeProcess(DeltaRewriteProcess):
    """``purge-deletion-vectors``: rewrite the files whose vectors delete a large share of rows."""

    operation = "REORG"

    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        merged = {**PURGE_DEFAULTS, **config, **params}
        super().__init__(params, {**merged, "min-input-files": 2, "engine": "arrow"})
        self.action = PURGE_DELETION_VECTORS
        self.threshold = float(merged["deleted-ratio-threshold"])

    def plan(self, spec: Any, *, in_place: bool) -> tuple[CompactionPlan, dict[str, Any]]:
        plan = plan_purge(spec, self.settings, self.threshold)
        deleted = sum(d.record_count for g in plan.groups for s in g.slices for d in s.delete_files)
        return plan, {"deleted_ratio_threshold": self.threshold, "deleted_rows_purged": deleted}

    def operation_parameters(self) -> dict[str, str]:
        return {"predicate": "[]", "applyPurge": "true", "deletedRatioThreshold": str(self.threshold)}


# --- new files -----------------------------------------------------------------------------------


def new_files(
    spec: Any,
    written: list[WrittenGroup],
    schema: pa.Schema,
    outputs: RewriteOutputs,
    published: list[str],
    storage: StoreOptions | None = None,
) -> list[dict[str, Any]]:
    """Add actions for the written files, published next to each group's first file with its
    partition values as the log spells them (``published`` collects the new locations)."""
    by_location = {location: add for (location, _), add in live_files(spec).items()}
    now_ms = int(time.time() * 1000)
    adds = []
    for result in written:
        beside = result.group.paths[0]
        first = by_location[beside]
        # The log path of the first file is already encoded the way this table's log spells it.
        absolute = "://" in first["path"]
        relative_dir = os.path.dirname(first["path"])
        for path, size in zip(result.files, result.sizes, strict=True):
            target = outputs.publish(path, beside)
            published.append(target)
            name = target.rsplit("/", 1)[-1]
            log_path = f"{relative_dir}/{name}" if relative_dir else name
            if target in outputs.relocated:  # written in the table's own data/ (outputs.py)
                log_path = f"data/{name}"
            if absolute:
                log_path = ("file://" + target) if is_local(target) else target
            stats = delta_stats(target, schema, storage)
            adds.append(add_action(log_path, size, first.get("partitionValues") or {}, stats, now_ms))
    return adds


# --- committing ------------------------------------------------------------------------------------


def _key(location: str) -> str:
    """A comparable spelling of a data file's location (normalised paths locally, URIs as is)."""
    return os.path.normpath(location) if is_local(location) else location


def _landed(location: str, published: list[str], storage: StoreOptions | None = None) -> bool:
    """Whether the commit reached the log despite an error (any published file is live)."""
    if not published:
        return False
    try:
        live = {_key(uri) for uri, _ in live_files(open_version(location, storage=storage))}
    except Exception:
        return True  # cannot tell: keep the files (an orphan is safer than a missing file)
    return any(_key(p) in live for p in published)


# --- factories -----------------------------------------------------------------------------------


class DeltaRewriteFactory(ProcessFactory):
    name = "delta-rewrite"
    description = "Compacts small Delta data files (deletion vectors applied) into target-size files (Spark)"
    properties_schema = REWRITE_PROPERTIES_SCHEMA
    default_properties = REWRITE_DEFAULTS
    params_schema = REWRITE_PARAMS_SCHEMA
    process_class: type[DeltaRewriteProcess] = DeltaRewriteProcess
    action = REWRITE

    def supported_actions(self) -> dict[str, set[str]]:
        return {"delta": {self.action}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:
        return TriggerStrategy.from_properties(self.properties, on_new_snapshot=True)

    def trigger(self, runtime: TableRuntime, action: str) -> TableProcess | None:
        options = getattr(runtime, "store_options", None)
        spec = open_version(runtime.location, storage=options() if callable(options) else None)
        process = self.process_class({}, runtime.config)
        try:
            WriteLayout.of(spec)
            plan, _ = process.plan(spec, in_place=not is_local(runtime.location))
        except (CommitRefused, ValueError) as error:  # a manual run says the same
            return runtime.nothing_to_do(f"nothing would run: {error}")
        if plan.empty:
            return runtime.nothing_to_do(rewrite_preview.rewrite_idle_note(process.settings, plan.ordering))
        return process

    def recover(self, runtime: TableRuntime, record: ProcessRecord) -> TableProcess:
        return self.process_class(dict(record.params), runtime.config)

    def validate(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> None:
        process = self.process_class(dict(params), runtime.config)
        rewrite_preview.delta_validate(process, runtime)

    def preview(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> Any:
        process = self.process_class(dict(params), runtime.config)
        return rewrite_preview.delta_preview(process, runtime, WriteLayout.of)


class DeltaPurgeDeletionVectorsFactory(DeltaRewriteFactory):
    name = "delta-purge-deletion-vectors"
    description = "Rewrites Delta files whose deletion vectors delete a large share of their rows (Spark)"
    properties_schema = PURGE_PROPERTIES_SCHEMA
    default_properties = PURGE_DEFAULTS
    params_schema = PURGE_PARAMS_SCHEMA
    process_class = DeltaPurgeProcess
    action = PURGE_DELETION_VECTORS
