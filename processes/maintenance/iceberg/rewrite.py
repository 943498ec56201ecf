"""Iceberg ``rewrite``: compaction of small files, committed as one atomic ``replace`` snapshot.

The run plans from the current snapshot (see ``compaction``): files of every partition spec,
grouped by (spec, partition); a file of another spec than the output spec (param
``output-spec-id``, default the table's default spec; an id the table does not have fails the run
before anything is done) is always rewritten, its rows split by their partition in the output spec
as they are written. Data files with Iceberg v3 deletion vectors are rewritten like files with
position deletes: the group reader applies the vectors, and the commit removes exactly the
rewritten files' vectors, keeping the other vectors of the same Puffin file.

The groups are written into staging with Spark, then validated against a freshly loaded table
before committing: the planned snapshot must still be an ancestor of the head, no delete file or
deletion vector may have been committed since (it could apply to rows the new files carry), and
every file and vector to remove must still be live. If the head moved and the plan still holds,
the commit goes on top of the head (appends landed meanwhile stay as they are); if not, the run
re-plans once from the new head, and fails cleanly if that conflicts too.

The commit is ``iceberg_commit.RewriteFiles``: a ``replace`` snapshot like Iceberg's own
RewriteFiles (streaming readers skip it), committed through the catalog's atomic commit (a SQL
catalog's compare-and-swap, a REST catalog's ``POST .../tables/{t}`` with the head snapshot as a
requirement): when another writer commits between the validation and the commit, the catalog
refuses it and the run validates again at the new head and commits again (up to
``COMMIT_ATTEMPTS`` times), without rewriting anything. v3 tables in a SQL catalog are committed
with ``iceberg_commit.v3_metadata_writes`` (pyiceberg 0.12 cannot serialise v3 metadata); a v3
table whose metadata holds fields pyiceberg's model would drop is refused before anything is
done. v3 row lineage: data files kept in a rewritten manifest keep their row ids, but the rows of
the rewritten files get new ones (the new files carry no ``_row_id`` column).

Local tables: new files are moved out of staging into the table's data folder only just before the
commit. Object stores: they are written in place under unique names (``outputs``). Either way
they are deleted again if the commit does not land, so no failure leaves the table referencing a
missing file or the store holding a file only this run wrote.

Tables registered by location (no catalog) are not rewritten, on any storage: a commit needs an
atomic swap of the current metadata pointer, which only a catalog gives. (On a file system or an
object store, the "latest ``vN.metadata.json``" convention cannot refuse a second writer: two
writers both write ``v6``, or one overwrites the other's, and a snapshot is lost.) The factory
does not trigger them and a manual run fails with a message saying to register the table through
a catalog.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from processes.maintenance import planning
from processes.maintenance.errors import InputError
from processes.maintenance.group_writer import GroupWriter, WrittenGroup
from processes.maintenance.iceberg.batches import (
    PARTIAL_PROGRESS_DEFAULTS,
    PARTIAL_PROGRESS_SCHEMA,
    BatchContext,
    Batching,
    PartialProgress,
    RewritePartiallyCommitted,
)
from processes.maintenance.iceberg.lineage import orc_data_file, rewrite_inputs
from processes.maintenance.iceberg.plan import (
    OUTPUT_SPEC_ID,
    output_spec,
    plan_rewrite,
    planned_vectors,
    portable_io,
    spec_view,
)
from processes.maintenance.iceberg.validation import (
    COMMIT_ATTEMPTS,
    delete_refused_metadata,
    iceberg_data_file,
    landed,
    planned_twice,
    snapshot_ids,
    validate_rewrite,
)
from processes.maintenance.orc_output import ORC, PARQUET, data_format, orc_codec, orc_schema
from processes.maintenance.outputs import RewriteOutputs, rewrite_outputs, sweep_leftovers
from processes.maintenance.planning import (
    REWRITE_DEFAULTS,
    REWRITE_PARAMS_SCHEMA,
    REWRITE_PROPERTIES_SCHEMA,
    CompactionPlan,
    CompactionSettings,
    iceberg_strategy,
)
from processes.maintenance.preview import iceberg_inputs, iceberg_preview, rewrite_idle_note
from processes.maintenance.schemas import MAX_INT32, with_defaults
from processes.maintenance.targets import iceberg_commit_target, store_options
from processes.plugin import (
    REWRITE,
    ProcessCancelled,
    ProcessContext,
    ProcessFactory,
    ProcessInputError,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.formats.iceberg.commit import (
    OutputPartitioner,
    RewriteFiles,
    check_v3_metadata,
    decode_partition,
    v3_metadata_writes,
)
from storage.io import is_object_store
from storage.spec.errors import RewriteConflict

logger = logging.getLogger(__name__)

ICEBERG_REWRITE_PARAMS_SCHEMA: dict[str, Any] = {
    **REWRITE_PARAMS_SCHEMA,
    "properties": {
        **REWRITE_PARAMS_SCHEMA["properties"],
        OUTPUT_SPEC_ID: {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_INT32,
            "description": "Partition spec of the rewritten files (default: the table's default spec);"
            " files of every other spec are rewritten into it",
        },
        **PARTIAL_PROGRESS_SCHEMA,
    },
}
ICEBERG_REWRITE_PROPERTIES_SCHEMA: dict[str, Any] = {
    **REWRITE_PROPERTIES_SCHEMA,
    "properties": {**REWRITE_PROPERTIES_SCHEMA["properties"], **PARTIAL_PROGRESS_SCHEMA},
}
ICEBERG_REWRITE_DEFAULTS: dict[str, Any] = {**REWRITE_DEFAULTS, **PARTIAL_PROGRESS_DEFAULTS}


class IcebergSliceReader:
    """Reads slices like ``IcebergSpecTable.read`` (deletes applied, columns by field id);
    picklable, so Spark tasks can run it (the file IO travels as its string properties: a REST
    catalog's IO also holds its auth manager, which neither pickles nor belongs in a task)."""

    def __init__(self, io: Any, schema: Any) -> None:
        self.io, self.schema = portable_io(io), schema

    def __call__(self, slices: list[Any]) -> Any:
        from storage.formats.iceberg.read import SliceReader

        reader = SliceReader(self.io, self.schema, None, None)
        for file_slice in slices:
            yield from reader.read(file_slice)


class _Run(NamedTuple):
    """One attempt of a rewrite: the table, its spec view and output spec, and the progress
    steps (a step per group and per batch commit)."""

    table: Any
    spec: Any
    spec_id: int
    attempt: int
    steps: int
    batches: int

    def say(self, word: str, number: int, partial: bool) -> str:
        return f"{word} batch {number} of {self.batches}" if partial else word


class IcebergRewriteProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(REWRITE, params)
        self.settings = CompactionSettings.from_config({**config, **params})
        self.batching = Batching.from_config({**config, **params})

    def before_commit(self, context: ProcessContext, plan: CompactionPlan) -> None:
        """Called after the groups (of a batch) are written, before the cancel check and the commit
        (a seam for tests that simulate a concurrent writer or a late cancel)."""

    def run(self, context: ProcessContext) -> dict[str, Any]:
        table = iceberg_commit_target(context.table, context.guard)
        spec_id = output_spec(table, self.params.get(OUTPUT_SPEC_ID))  # refused before anything is done
        self.ordering = iceberg_strategy(table.metadata, spec_id, self.settings, spec_view(table).schema)
        self.output = output_format(table, self.settings)  # a format or type it cannot write: refused
        check_v3_metadata(table)
        swept = sweep_ended_rewrites(table, context)
        self.progress = PartialProgress()
        return planned_twice(lambda attempt: self._attempt(context, table, attempt), swept)

    def _attempt(self, context: ProcessContext, table: Any, attempt: int) -> dict[str, Any] | None:
        """One plan, written and committed batch by batch (one batch without partial progress):
        the run's summary, or None to plan again (a batch's plan did not hold at the head on the
        first attempt). With partial progress a conflict fails only its batch."""
        table.refresh()
        spec_id = output_spec(table, self.params.get(OUTPUT_SPEC_ID))
        spec = spec_view(table)
        plan = plan_rewrite(spec, self.settings, output_spec_id=spec_id, ordering=self.ordering)
        if plan.empty and not (self.progress.committed or self.progress.failed):
            return planning.rewrite_summary(plan, [], snapshot_id=plan.instant, attempts=attempt)
        batches = self.batching.split(plan) if not plan.empty else []
        run = _Run(table, spec, spec_id, attempt, len(plan.groups) + len(batches), len(batches))
        notes: list[str] = []
        done = 0
        for number, batch in enumerate(batches, 1):
            try:
                notes += self._batch(context, run, batch, number, done)
            except RewriteConflict as conflict:
                if not self.batching.partial:
                    if attempt == 2:
                        raise RewriteConflict(
                            f"the table changed during the rewrite twice: {conflict}"
                        ) from None
                    logger.info("rewrite of %s re-plans: %s", table.name(), conflict)
                    return None
                logger.info("rewrite of %s: batch %s failed: %s", table.name(), number, conflict)
                self.progress.conflicted(attempt, number, batch, str(conflict))
            except (ProcessCancelled, ProcessInputError):
                raise
            except Exception as error:
                if not self.progress.committed:
                    raise
                reason = f"{self.progress.describe()}; then {type(error).__name__}: {error}"
                raise RewritePartiallyCommitted(reason) from error
            done += len(batch.groups) + 1
        if self.progress.failed_in(attempt) and attempt == 1:
            logger.info("rewrite of %s re-plans what its failed batches left", table.name())
            return None
        if self.progress.failed_in(attempt) and not self.progress.committed:
            reason = self.progress.failed[-1]["reason"]
            raise RewriteConflict(f"the table changed during the rewrite twice: {reason}")
        return self._summary(plan, attempt, spec_id, notes, len(batches))

    def _batch(
        self, context: ProcessContext, run: _Run, batch: CompactionPlan, number: int, done: int
    ) -> list[str]:
        """Write and commit one batch of groups (the whole plan without partial progress); its
        files are deleted on every path where its commit did not land. Returns the writer's notes."""
        partial = self.batching.partial
        outputs = rewrite_outputs(
            run.table.location(),
            context.staging_dir / f"attempt-{run.attempt}-batch-{number}",
            store_options(context),
            context.process_id,
            context.guard,
        )
        label = run.say("file groups of", number, partial)
        view = BatchContext(context, done_before=done, total=run.steps, label=label) if partial else context
        writer = self._writer(view, run, outputs)
        try:
            written = writer.write_all(batch.groups, progress_total=run.steps)
            context.checkpoint("after-write")
            self.before_commit(context, batch)
            context.report_progress(
                done + len(batch.groups), run.steps, run.say("committing", number, partial)
            )
            context.checkpoint("before-commit")
            if partial:
                context.checkpoint(f"before-commit-batch-{number}")  # fault tests stop at one batch
            snapshot_id, commits = commit_rewrite(
                run.table, batch, written, context.process_id, outputs, run.spec_id
            )
        except BaseException:
            outputs.discard()
            raise
        outputs.finish()
        self.progress.commits += commits
        self.progress.landed(run.attempt, number, batch, written, snapshot_id)
        context.report_progress(
            done + len(batch.groups) + 1, run.steps, run.say("committed", number, partial)
        )
        if number < run.batches:
            context.checkpoint("after-batch-commit")  # a cancel here keeps the committed batches
        return writer.notes

    def _writer(self, context: Any, run: _Run, outputs: RewriteOutputs) -> GroupWriter:
        table, spec = run.table, run.spec
        schema, settings = rewrite_inputs(table.metadata, spec.schema, self.settings)  # v3 row lineage
        return GroupWriter(
            context,
            IcebergSliceReader(table.io, schema),
            schema,
            outputs,
            settings=settings,
            field_ids=True,
            sort_columns=spec.definition.sort_columns,
            compression=self.output.compression,
            partitioner=group_partitioner(table, run.spec_id),
            ordering=self.ordering,
            file_format=self.output.file_format,
        )

    def _summary(
        self, plan: CompactionPlan, attempt: int, spec_id: int, notes: list[str], batches: int
    ) -> dict[str, Any]:
        """The summary of what landed (every batch of a rewrite without partial progress)."""
        progress = self.progress
        extra: dict[str, Any] = {"commit_attempts": progress.commits, "output_spec_id": spec_id}
        if notes:
            extra["engine_note"] = notes[0]
        if self.batching.partial:
            extra["partial_progress"] = progress.report(batches)
        snapshot_id = progress.committed[-1]["snapshot_id"] if progress.committed else plan.instant
        landed_plan = progress.plan(plan.instant, self.ordering)
        return planning.rewrite_summary(
            landed_plan, progress.written, snapshot_id=snapshot_id, attempts=attempt, **extra
        )


def sweep_ended_rewrites(table: Any, context: ProcessContext) -> list[str]:
    """On an object store: delete what an ended rewrite of this table wrote and never committed,
    anywhere under its location (``outputs.sweep_leftovers``; referenced = anything any
    snapshot's manifests name, streamed)."""
    finished = getattr(context.runtime, "finished_processes", None)
    if finished is None or not is_object_store(table.location()):
        return []
    from processes.maintenance.iceberg.orphans import iter_referenced, normalise

    table.refresh()
    return sweep_leftovers(
        table.location(),
        store_options(context),
        current=context.process_id,
        finished=finished,
        referenced=lambda: iter_referenced(table),
        comparable=normalise,
        guard=context.guard,
    )


class OutputFormat(NamedTuple):
    file_format: str
    compression: str


def output_format(table: Any, settings: CompactionSettings) -> OutputFormat:
    """The format and codec of the new files: the table's ``write.format.default`` (parquet
    without one; ``orc_output``), its codec property or the ``compression-codec`` parameter.
    ``InputError`` before anything is written for a format, codec or column type not written."""
    properties = table.metadata.properties
    if data_format(properties) == ORC:
        orc_schema(rewrite_inputs(table.metadata, spec_view(table).schema, settings)[0])
        return OutputFormat(ORC, orc_codec(settings.compression_codec, properties))
    codec = settings.compression_codec or properties.get("write.parquet.compression-codec") or "zstd"
    return OutputFormat(PARQUET, "none" if codec == "uncompressed" else codec)


def group_partitioner(table: Any, spec_id: int) -> Any:
    """``GroupWriter``'s partitioner: groups of files of another spec than ``spec_id`` are split
    by the output spec's partitions (a group of the output spec is one partition already)."""
    splitter = OutputPartitioner(table.metadata.specs()[spec_id], table.metadata.schema())

    def partitioner(group: Any) -> OutputPartitioner | None:
        group_spec = group.slices[0].base_file.extra.get("spec_id", spec_id)
        return splitter if group_spec != spec_id else None

    return partitioner


def commit_rewrite(
    table: Any,
    plan: CompactionPlan,
    written: list[WrittenGroup],
    process_id: int,
    outputs: RewriteOutputs,
    spec_id: int | None = None,
) -> tuple[int, int]:
    """Validate at the head, publish, commit one ``replace`` snapshot (``RewriteFiles``: the new
    files in partition spec ``spec_id``, default the table's) through the catalog, again at the
    new head when another writer got in first: (snapshot id, commits tried); ``RewriteConflict``
    when the plan no longer holds. ``outputs.keep`` is set when the commit landed despite an
    error or its outcome is unknown (the caller discards the files otherwise)."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    table.refresh()
    spec_id = table.metadata.default_spec_id if spec_id is None else spec_id
    live = validate_rewrite(table, plan)
    known = snapshot_ids(table)
    added_paths = [
        (result, outputs.publish(path, result.group.paths[0]), size, key, metrics)
        for result in written
        for path, size, key, metrics in zip(
            result.files, result.sizes, result.partitions, result.metrics, strict=True
        )
    ]
    properties = {"lakewarden.process-id": str(process_id), "lakewarden.operation": "rewrite"}
    properties.update(plan.commit_properties)  # a clustering rewrite's ordering
    state: dict[str, Any] = {}
    for commit in range(1, COMMIT_ATTEMPTS + 1):
        try:
            if commit > 1:
                table.refresh()
                live = validate_rewrite(table, plan)
            _commit_once(table, plan, live, added_paths, spec_id, properties, state)
            return table.metadata.current_snapshot().snapshot_id, commit
        except (CommitFailedException, ValidationException) as error:
            # Refused by the catalog (another writer got in first), or by the producer at a new
            # head (a planned file or vector is not live): validate at the new head, try again.
            if landed(table, known, process_id):
                outputs.keep = True
                return table.metadata.current_snapshot().snapshot_id, commit
            if "producer" in state:
                state["producer"]._clean_all_uncommitted()
            delete_refused_metadata(table.io, state.get("transaction"))
            if commit == COMMIT_ATTEMPTS:
                raise RewriteConflict(f"the catalog refused the commit {commit} times: {error}") from error
            logger.info(
                "rewrite of %s: commit %s was refused (%s); committing again", table.name(), commit, error
            )
        except RewriteConflict:
            raise
        except BaseException:
            if landed(table, known, process_id):
                outputs.keep = True
            raise
    raise AssertionError("unreachable")


def _commit_once(
    table: Any,
    plan: CompactionPlan,
    live: dict[str, Any],
    added_paths: list[tuple[WrittenGroup, str, int, str | None, bytes]],
    spec_id: int,
    properties: dict[str, str],
    state: dict[str, Any],
) -> None:
    """One catalog commit of the rewrite (``state`` keeps its transaction and producer, for
    the cleanup of a refused one)."""
    added = [
        orc_data_file(table.metadata, path, _partition(result, key, live), spec_id, size, metrics)
        if metrics  # an ORC file: its metrics came from the writing task (``orc_output``)
        else iceberg_data_file(table, path, _partition(result, key, live), spec_id, size)
        for result, path, size, key, metrics in added_paths
    ]
    state["transaction"] = transaction = table.transaction()
    state["producer"] = producer = RewriteFiles(
        transaction,
        removed=[live[path] for group in plan.groups for path in group.paths],
        removed_dvs=planned_vectors(plan),
        added=added,
        spec_id=spec_id,
        snapshot_properties=properties,
    )
    producer.commit()
    with v3_metadata_writes(table):
        transaction.commit_transaction()


def _partition(result: WrittenGroup, key: str | None, live: dict[str, Any]) -> Any:
    """A new file's partition record: its rows' key when the group was split by the output
    spec, else its group's (whose files are all of the output spec and one partition)."""
    if key is not None:
        return decode_partition(key)
    return live[result.group.paths[0]].partition


class IcebergRewriteFactory(ProcessFactory):
    name = "iceberg-rewrite"
    description = "Compacts small Iceberg data files into files of the target size (Spark)"
    properties_schema = with_defaults(ICEBERG_REWRITE_PROPERTIES_SCHEMA, ICEBERG_REWRITE_DEFAULTS)
    default_properties = ICEBERG_REWRITE_DEFAULTS
    params_schema = ICEBERG_REWRITE_PARAMS_SCHEMA

    def supported_actions(self) -> dict[str, set[str]]:
        return {"iceberg": {REWRITE}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:

        return TriggerStrategy.from_properties(self.properties, on_new_snapshot=True)

    def trigger(self, runtime: Any, action: str) -> TableProcess | None:
        spec_table = runtime.load()
        try:
            table = iceberg_commit_target(spec_table)
        except InputError as error:
            return runtime.nothing_to_do(f"nothing would run: {error}")
        process = IcebergRewriteProcess({}, runtime.config)
        try:
            ordering = iceberg_strategy(table.metadata, None, process.settings, spec_table.schema)
            output_format(table, process.settings)
        except ValueError as error:
            return runtime.nothing_to_do(f"nothing would run: {error} (a manual run says the same)")
        plan = plan_rewrite(spec_table, process.settings, ordering=ordering)
        if plan.empty:
            return runtime.nothing_to_do(rewrite_idle_note(process.settings, plan.ordering))
        return process

    def recover(self, runtime: Any, record: ProcessRecord) -> TableProcess:
        return IcebergRewriteProcess(dict(record.params), runtime.config)

    def validate(self, runtime: Any, action: str, params: dict[str, Any]) -> None:
        inputs = iceberg_inputs(runtime, params)  # output-spec-id, sort/z-order columns (rewrite_preview)
        if inputs is not None:
            output_format(inputs.table, inputs.settings)  # write.format.default, codec, ORC types

    def preview(self, runtime: Any, action: str, params: dict[str, Any]) -> Any:
        return iceberg_preview(runtime, params)
