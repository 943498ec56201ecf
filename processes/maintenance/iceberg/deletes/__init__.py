"""Iceberg delete-file maintenance (factory ``iceberg-deletes``): Apache Amoro's "minor optimizing"
and Iceberg's own delete-file procedures, as three actions.

* ``remove-dangling-deletes`` (Iceberg's ``RemoveDanglingDeletesSparkAction``): removes the delete
  files that delete no row of a live data file: equality deletes whose data sequence number is not
  greater than that of any live data file of their partition (every partition for an unpartitioned
  spec), position deletes that name no live data file of their partition with a data sequence
  number at most theirs (by ``referenced_data_file`` or ``file_path`` bounds, else by reading their
  ``file_path`` column), deletion vectors whose data file is gone (v3), and position delete files
  shadowed by deletion vectors (v3 readers ignore them).
* ``rewrite-position-deletes`` (Iceberg's ``rewrite_position_delete_files``): the position delete
  files of each partition holding at least ``min-delete-files`` of them become one file, sorted by
  ``file_path`` and ``pos``, without the entries that delete nothing (their data file is gone or
  not one they apply to); the new file keeps the greatest data sequence number of the files it
  replaces, as Java does, so it applies to exactly the data files they applied to.
* ``convert-equality-deletes`` (Amoro's minor optimizing): every live equality delete file is
  replaced by position deletes of the rows it deletes: for each live data file equality deletes
  apply to (a smaller data sequence number, same partition, or any partition for an unpartitioned
  spec) the matching rows are found by our reader, one position delete file is written per
  partition of those data files, with the greatest data sequence number of the equality deletes
  behind it (a position delete applies to data files of a sequence number at most its own; each
  named data file's is smaller). Afterwards pyiceberg can scan the table (it refuses equality
  deletes).

What each delete file applies to comes from the spec file index, the same rules our reader applies
deletes by (``state``). Every action commits one ``replace`` snapshot (``iceberg_commit.
RewriteFiles``: Java commits all three through ``RewriteFiles``, operation ``replace``; the rows of
the table do not change, so streaming readers skip it), through the catalog's atomic commit. Before
committing, the plan is checked at the head (``state.validate_at_head``): the planned snapshot
must be an ancestor, every delete file to remove still live, and no data file committed since may
lie in a removed delete file's scope with a data sequence number it could apply to (appends never
do; a rewrite keeping old sequence numbers can). A plan that no longer holds is made again once
from the new head, and the run fails cleanly if that conflicts too; a commit the catalog refuses
(another writer got in first) is validated and tried again at the new head. New files are written
like the data rewrite's (``outputs``: staged and renamed beside the files they replace on a local
disk, unique names in place on an object store) and deleted again if the commit does not land.
Position delete files must not be added to v3 tables (the spec's deletion vectors replace them):
on a v3 table the two writing actions write deletion vectors instead (``vectors``: one per data
file, in one Puffin file; ``convert-equality-deletes`` merges the vector a data file had,
``rewrite-position-deletes`` turns the position delete files a v2 past left into vectors, where
no vector shadows them); ``remove-dangling-deletes`` handles v2 and v3. Tables
registered by location without a catalog are refused (no atomic commit).

Delete files may be parquet or ORC (Hive, Impala, Trino and Spark write ORC ones): both are read
(position deletes by ``state``, equality deletes by the spec reader), and the new position delete
files are written in the table's ``write.delete.format.default`` (default: its
``write.format.default``, else parquet; ``orc_output``); any other format is refused
before anything is written.

``validate`` and ``preview`` (``preview``) answer at submission what the run would refuse and what
it would do, without writing anything.

Properties (defaults): ``interval`` 3600 s and ``parallelism`` 1 (each action is evaluated on its
own, only after a new snapshot); ``min-delete-files`` 2. Run-now parameters: ``dry-run`` (plan
and report, change nothing) and ``min-delete-files`` (``rewrite-position-deletes`` only).
The scheduler runs an action when it has work: dangling deletes found from the metadata alone
(those only their contents show are found when the action runs), a partition with
``min-delete-files`` position delete files, any equality delete file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from processes.maintenance.iceberg.deletes.commit import commit_deletes
from processes.maintenance.iceberg.deletes.state import (
    EQUALITY,
    DeleteState,
    LiveDelete,
    find_dangling,
    read_state,
    removed_summary,
)
from processes.maintenance.iceberg.deletes.vectors import plan_vectors
from processes.maintenance.iceberg.deletes.writing import (
    DeleteFileWriter,
    StagedDeleteFile,
    convert_equality,
    position_groups,
    rewrite_group,
)
from processes.maintenance.iceberg.plan import spec_view
from processes.maintenance.iceberg.rewrite import sweep_ended_rewrites
from processes.maintenance.iceberg.validation import planned_twice
from processes.maintenance.orc_output import ORC, PARQUET, delete_format, orc_codec
from processes.maintenance.outputs import rewrite_outputs
from processes.maintenance.schemas import (
    INTERVAL,
    MAX_COUNT,
    MIN_BENEFIT,
    MIN_BENEFIT_SCHEMA,
    PARALLELISM,
    with_defaults,
)
from processes.maintenance.targets import (
    NO_CATALOG,
    iceberg_catalog_table,
    iceberg_commit_target,
    store_options,
)
from processes.plugin import (
    CONVERT_EQUALITY_DELETES,
    REMOVE_DANGLING_DELETES,
    REWRITE_POSITION_DELETES,
    Preview,
    ProcessContext,
    ProcessFactory,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.formats.iceberg.commit import check_v3_metadata
from storage.spec.errors import RewriteConflict

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from processes.runtime import TableRuntime

logger = logging.getLogger(__name__)

MIN_DELETE_FILES = "min-delete-files"
DRY_RUN = "dry-run"
DEFAULTS: dict[str, Any] = {"interval": 3600, "parallelism": 1, MIN_BENEFIT: 1, MIN_DELETE_FILES: 2}


@dataclass
class DeletePlan:
    """What one attempt does: the delete files it removes, its work (position groups, equality
    targets) and the plan's part of the summary."""

    snapshot_id: int
    removed: list[LiveDelete]
    work: list[Any] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


class DeleteFilesProcess(TableProcess):
    """The run shared by the three actions: plan at the head, write, validate, commit (module
    docstring); subclasses plan and write."""

    action_name: ClassVar[str]
    writes_files: ClassVar[bool] = True
    #: Whether the action writes deletion vectors instead of position delete files on v3 tables.
    writes_vectors: ClassVar[bool] = False

    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(self.action_name, params)
        if MIN_DELETE_FILES in params and self.action_name != REWRITE_POSITION_DELETES:
            raise ValueError(f"{MIN_DELETE_FILES} is a parameter of {REWRITE_POSITION_DELETES} only")
        merged = {**DEFAULTS, **config, **params}
        self.min_files = max(1, int(merged[MIN_DELETE_FILES]))
        self.dry_run = bool(params.get(DRY_RUN, False))

    def plan(self, table: Table, snapshot: Snapshot) -> DeletePlan:
        raise NotImplementedError

    def write(
        self, context: ProcessContext, table: Table, plan: DeletePlan, writer: DeleteFileWriter
    ) -> list[Any]:
        """The new delete files of the plan, staged (``StagedDeleteFile``); updates ``plan.summary``."""
        return []

    def due(self, table: Table, snapshot: Snapshot) -> bool:
        """Whether the scheduler should run the action (cheap: from the metadata)."""
        raise NotImplementedError

    def before_commit(self, context: ProcessContext, plan: DeletePlan) -> None:
        """Called after the new files are written, before the commit (a seam for tests that
        simulate a concurrent writer)."""

    def check_table(self, table: Table) -> None:
        if self.writes_files and not self.writes_vectors and table.metadata.format_version >= 3:
            raise ValueError(
                f"{self.action_name} writes position delete files, which must not be added to a v3 table"
                " (the spec's deletion vectors replace them); this table is not changed"
            )
        check_v3_metadata(table)
        self.file_format, self.compression = self.delete_output(table)

    def delete_output(self, table: Table) -> tuple[str, str]:
        """The format and codec of the position delete files written: the table's delete format
        (``orc_output.delete_format``: parquet or ORC; ``InputError`` for another, before anything
        is written). v3 tables get Puffin deletion vectors instead."""
        if not self.writes_files or table.metadata.format_version >= 3:
            return PARQUET, "zstd"
        properties = table.metadata.properties
        file_format = delete_format(properties)
        return file_format, orc_codec("", properties) if file_format == ORC else "zstd"

    def run(self, context: ProcessContext) -> dict[str, Any]:
        table = iceberg_commit_target(context.table, context.guard)
        self.check_table(table)
        swept = sweep_ended_rewrites(table, context) if self.writes_files else []
        return planned_twice(lambda attempt: self._attempt(context, table, attempt), swept)

    def _outputs(self, context: ProcessContext, table: Table, attempt: int) -> Any:
        staging = context.staging_dir / f"attempt-{attempt}"
        return rewrite_outputs(
            table.location(), staging, store_options(context), context.process_id, context.guard
        )

    def _attempt(self, context: ProcessContext, table: Table, attempt: int) -> dict[str, Any] | None:
        """One plan, write and commit: the run's summary, or None to plan again."""
        table.refresh()
        snapshot = table.metadata.current_snapshot()
        if snapshot is None:
            return {
                "snapshot_id": None,
                "dry_run": self.dry_run,
                "removed_delete_files": 0,
                "attempts": attempt,
            }
        context.report_progress(0, 3, "planning")
        plan = self.plan(table, snapshot)
        summary = {"planned_snapshot_id": plan.snapshot_id, "dry_run": self.dry_run}
        summary.update(removed_summary(plan.removed))
        if not plan.removed or self.dry_run:
            return {**summary, **plan.summary, "snapshot_id": plan.snapshot_id, "attempts": attempt}
        outputs = self._outputs(context, table, attempt) if self.writes_files else None
        try:
            writer = (
                DeleteFileWriter(outputs, self.compression, self.file_format) if outputs is not None else None
            )
            staged = self.write(context, table, plan, writer) if writer is not None else []
            self.before_commit(context, plan)
            context.report_progress(2, 3, "committing")
            context.checkpoint("before-commit")
            added = writer.publish(staged) if writer is not None else []
            snapshot_id, commits = commit_deletes(
                table, plan.snapshot_id, plan.removed, added, context.process_id, self.action_name, outputs
            )
        except RewriteConflict as conflict:
            if outputs is not None:
                outputs.discard()
            if attempt == 2:
                raise RewriteConflict(
                    f"the table changed during {self.action_name} twice: {conflict}"
                ) from None
            logger.info("%s of %s plans again: %s", self.action_name, table.name(), conflict)
            return None
        except BaseException:
            if outputs is not None:
                outputs.discard()
            raise
        if outputs is not None:
            outputs.finish()
        context.report_progress(3, 3, "committed")
        return {
            **summary,
            **plan.summary,
            "snapshot_id": snapshot_id,
            "added_delete_files": len(added),
            "attempts": attempt,
            "commit_attempts": commits,
        }


def _has_delete_files(snapshot: Snapshot) -> bool:
    """False only when the snapshot's summary says it has no delete files."""
    summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
    return str(summary.get("total-delete-files", "1")) != "0"


class RemoveDanglingDeletes(DeleteFilesProcess):
    action_name = REMOVE_DANGLING_DELETES
    writes_files = False

    def plan(self, table: Table, snapshot: Snapshot) -> DeletePlan:
        state = read_state(table, snapshot)
        dangling, read = find_dangling(table.io, state, read_contents=True)
        return DeletePlan(state.snapshot_id, dangling, summary={"delete_files_read": read})

    def due(self, table: Table, snapshot: Snapshot) -> bool:
        state = read_state(table, snapshot)
        return bool(find_dangling(table.io, state, read_contents=False)[0])


class RewritePositionDeletes(DeleteFilesProcess):
    action_name = REWRITE_POSITION_DELETES
    writes_vectors = True

    def plan(self, table: Table, snapshot: Snapshot) -> DeletePlan:
        state = read_state(table, snapshot)
        groups = position_groups(state, self.min_files)
        removed = [live for group in groups for live in group.deletes]
        return DeletePlan(
            state.snapshot_id,
            removed,
            groups,
            {"partitions": len(groups), "min_delete_files": self.min_files},
        )

    def write(
        self, context: ProcessContext, table: Table, plan: DeletePlan, writer: DeleteFileWriter
    ) -> list[Any]:
        staged: list[StagedDeleteFile] = []
        entries_in = entries_out = 0
        for done, group in enumerate(plan.work):
            context.check_cancelled()
            context.report_progress(
                1, 3, f"rewriting the position deletes of partition {done + 1}/{len(plan.work)}"
            )
            result = rewrite_group(table.io, group, writer, vectors=table.metadata.format_version >= 3)
            entries_in += result.entries_in
            entries_out += result.entries_out
            if result.staged is not None:
                staged.append(result.staged)
        plan.summary.update(
            entries_in=entries_in,
            entries_out=entries_out,
            dropped_entries=entries_in - entries_out,
            bytes_in=sum(live.data_file.file_size_in_bytes for live in plan.removed),
            bytes_out=writer.bytes_written,
        )
        return staged

    def due(self, table: Table, snapshot: Snapshot) -> bool:
        return bool(position_groups(read_state(table, snapshot, attach=False), self.min_files))


class ConvertEqualityDeletes(DeleteFilesProcess):
    action_name = CONVERT_EQUALITY_DELETES
    writes_vectors = True

    def plan(self, table: Table, snapshot: Snapshot) -> DeletePlan:
        state = read_state(table, snapshot, equality_targets=True)
        removed = state.of_kind(EQUALITY)
        if removed and table.metadata.format_version >= 3:
            removed += plan_vectors(state)  # merged into the new vectors (``vectors``)
        summary = {"data_files_to_read": len(state.equality_targets)}
        return DeletePlan(state.snapshot_id, removed, [state], summary)

    def write(
        self, context: ProcessContext, table: Table, plan: DeletePlan, writer: DeleteFileWriter
    ) -> list[Any]:
        state: DeleteState = plan.work[0]
        schema = spec_view(table).schema_at(state.snapshot_id)

        def progress(done: int, total: int) -> None:
            context.check_cancelled()
            context.report_progress(1, 3, f"finding the deleted rows of data file {done + 1}/{total}")

        conversion = convert_equality(table, schema, state, writer, progress)
        plan.summary.update(
            data_files_read=conversion.data_files_read, positions_written=conversion.positions
        )
        return conversion.staged

    def due(self, table: Table, snapshot: Snapshot) -> bool:
        return bool(read_state(table, snapshot, attach=False).of_kind(EQUALITY))


PROCESSES: dict[str, type[DeleteFilesProcess]] = {
    process.action_name: process
    for process in (RemoveDanglingDeletes, RewritePositionDeletes, ConvertEqualityDeletes)
}


class IcebergDeletesFactory(ProcessFactory):
    name = "iceberg-deletes"
    description = (
        "Maintains Iceberg delete files: removes dangling deletes, compacts position deletes per"
        " partition, converts equality deletes into position deletes"
    )
    properties_schema = {
        "type": "object",
        "properties": {
            "interval": INTERVAL,
            "parallelism": PARALLELISM,
            MIN_BENEFIT: MIN_BENEFIT_SCHEMA,
            MIN_DELETE_FILES: {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_COUNT,
                "description": f"{REWRITE_POSITION_DELETES}: a partition's position delete files are"
                " compacted when it holds at least this many",
            },
        },
    }
    default_properties = DEFAULTS
    properties_schema = with_defaults(properties_schema, default_properties)
    params_schema = {
        "type": "object",
        "properties": {
            DRY_RUN: {"type": "boolean", "description": "Plan and report only; change nothing"},
            MIN_DELETE_FILES: {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_COUNT,
                "description": f"{REWRITE_POSITION_DELETES} only: compact partitions with at least this many"
                " position delete files",
            },
        },
        "additionalProperties": False,
    }

    def supported_actions(self) -> dict[str, set[str]]:
        return {"iceberg": set(PROCESSES)}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:
        return TriggerStrategy.from_properties(self.properties, on_new_snapshot=True)

    def trigger(self, runtime: TableRuntime, action: str) -> TableProcess | None:
        table = iceberg_catalog_table(runtime)
        if table is None:
            return runtime.nothing_to_do(NO_CATALOG)
        snapshot = table.metadata.current_snapshot()
        if snapshot is None or not _has_delete_files(snapshot):
            return runtime.nothing_to_do("nothing to do: the current snapshot has no delete file")
        process = PROCESSES[action]({}, runtime.config)
        if process.writes_files and not process.writes_vectors and table.metadata.format_version >= 3:
            return runtime.decline(f"{action} writes position delete files, which a v3 table does not take")
        try:
            process.delete_output(table)
        except ValueError as error:  # a delete format it cannot write: a manual run says the same
            return runtime.nothing_to_do(f"nothing would run: {error}")
        if not process.due(table, snapshot):
            from processes.maintenance.iceberg.deletes.preview import NOTHING_TO_DO

            idle = NOTHING_TO_DO.get(action, f"nothing to do: no delete file {action} would change")
            return runtime.nothing_to_do(idle.format(min_files=getattr(process, "min_files", "")))
        return process

    def recover(self, runtime: TableRuntime, record: ProcessRecord) -> TableProcess:
        return PROCESSES[record.action](dict(record.params), runtime.config)

    def validate(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> None:
        from processes.maintenance.iceberg.deletes.preview import delete_validate

        delete_validate(PROCESSES[action], runtime, params)

    def preview(self, runtime: TableRuntime, action: str, params: dict[str, Any]) -> Preview:
        """Delete files in, delete files expected out, from a plan made as the run makes it;
        nothing is written (``preview``)."""
        from processes.maintenance.iceberg.deletes.preview import delete_preview

        return delete_preview(PROCESSES[action], runtime, params)
