"""Iceberg ``rewrite``: compaction of small files, committed as one atomic pyiceberg snapshot.

The run plans from the current snapshot (see ``compaction``), writes the groups into staging with
Spark, then validates against a freshly loaded table before committing: the planned snapshot must
still be an ancestor of the head, no delete file may have been committed since (it could apply to
rows the new files carry), and every file to remove must still be live. If the head moved and the
plan still holds, the commit goes on top of the head (appends landed meanwhile stay as they are);
if not, the run re-plans once from the new head, and fails cleanly if that conflicts too. New files
are moved out of staging into the table's data folder only just before the commit, and deleted
again if the commit does not land, so no failure leaves the table referencing a missing file or
staging holding a referenced one.

Data files with an Iceberg v3 deletion vector are left out of the plan: the rewrite would have to
remove the vector in the same commit, and pyiceberg 0.12 cannot (it matches files to remove by
path, and the vectors of several data files share one Puffin file path, so it would drop them
all). The run's summary counts them (``skipped_deletion_vector_files``) with a ``note``.
"""

from __future__ import annotations

import logging
import os
import shutil
from typing import Any

import pyarrow.parquet as pq

from processes.factories import compaction
from processes.factories.compaction import (
    REWRITE_DEFAULTS,
    REWRITE_PARAMS_SCHEMA,
    REWRITE_PROPERTIES_SCHEMA,
    CompactionPlan,
    CompactionSettings,
    RewriteConflict,
)
from processes.factories.group_writer import GroupWriter, WrittenGroup
from processes.plugin import (
    REWRITE,
    ProcessContext,
    ProcessFactory,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.spec.models import FileContent

logger = logging.getLogger(__name__)

DELETE_FILE_SUMMARY_KEYS = (
    "added-delete-files",
    "added-position-delete-files",
    "added-equality-delete-files",
)


class IcebergSliceReader:
    """Reads slices like ``IcebergSpecTable.read`` (deletes applied, columns by field id);
    picklable, so Spark tasks can run it."""

    def __init__(self, io: Any, schema: Any) -> None:
        self.io, self.schema = io, schema

    def __call__(self, slices: list[Any]) -> Any:
        from storage.formats.iceberg.read import SliceReader

        reader = SliceReader(self.io, self.schema, None, None)
        for file_slice in slices:
            yield from reader.read(file_slice)


class IcebergRewriteProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(REWRITE, params)
        self.settings = CompactionSettings.from_config({**config, **params})

    def before_commit(self, context: ProcessContext, plan: CompactionPlan) -> None:
        """Called after the groups are written, before the cancel check and the commit (a seam
        for tests that simulate a concurrent writer or a late cancel)."""

    def run(self, context: ProcessContext) -> dict[str, Any]:
        table = _catalog_table(context.table)
        for attempt in (1, 2):
            table.refresh()
            spec = spec_view(table)
            skipped: list[str] = []
            plan = plan_rewrite(spec, self.settings, skipped)
            if plan.empty:
                return compaction.rewrite_summary(
                    plan, [], snapshot_id=plan.instant, attempts=attempt, **skip_summary(skipped)
                )
            staging = context.staging_dir / f"attempt-{attempt}"
            writer = GroupWriter(
                context,
                IcebergSliceReader(table.io, spec.schema),
                spec.schema,
                staging,
                settings=self.settings,
                field_ids=True,
                sort_columns=spec.definition.sort_columns,
                compression=_codec(self.settings, table.metadata.properties),
            )
            written = writer.write_all(plan.groups, progress_total=len(plan.groups) + 1)
            context.checkpoint("after-write")
            self.before_commit(context, plan)
            context.report_progress(len(plan.groups), len(plan.groups) + 1, "committing")
            context.checkpoint("before-commit")
            try:
                snapshot_id = commit_rewrite(table, plan, written, context.process_id)
            except RewriteConflict as conflict:
                shutil.rmtree(staging, ignore_errors=True)
                if attempt == 2:
                    raise RewriteConflict(f"the table changed during the rewrite twice: {conflict}") from None
                logger.info("rewrite of %s re-plans: %s", table.name(), conflict)
                continue
            shutil.rmtree(staging, ignore_errors=True)
            context.report_progress(len(plan.groups) + 1, len(plan.groups) + 1, "committed")
            return compaction.rewrite_summary(
                plan, written, snapshot_id=snapshot_id, attempts=attempt, **skip_summary(skipped)
            )
        raise AssertionError("unreachable")


def _catalog_table(spec_table: Any) -> Any:
    from pyiceberg.table import StaticTable

    table = getattr(spec_table, "pyiceberg_table", None)
    if table is None or isinstance(table, StaticTable):
        raise ValueError(
            "this Iceberg table is registered by location without a catalog: rewrites need a catalog"
            " to commit (register it through an Iceberg catalog)"
        )
    return table


def spec_view(table: Any) -> Any:
    """A spec view of the pyiceberg table as it is now (a spec table caches its listings, so
    each plan takes a new one)."""
    from storage.formats.iceberg import IcebergSpecTable

    return IcebergSpecTable(table, table.location(), ".".join(table.name()))


def _codec(settings: CompactionSettings, properties: dict[str, str]) -> str:
    codec = settings.compression_codec or properties.get("write.parquet.compression-codec") or "zstd"
    return "none" if codec == "uncompressed" else codec


def plan_rewrite(spec: Any, settings: CompactionSettings, skipped: list[str] | None = None) -> CompactionPlan:
    """The compaction plan at the table's current snapshot (files of the current spec only: a
    file of an older partition spec may hold rows of several current partitions). Data files
    with a deletion vector are left out, their paths appended to ``skipped`` (module docstring)."""
    metadata = spec.pyiceberg_table.metadata
    snapshot = metadata.current_snapshot()
    if snapshot is None:
        return CompactionPlan(instant=None)
    spec_id = metadata.default_spec_id

    def eligible(file_slice: Any) -> bool:
        if any(f.content is FileContent.DELETION_VECTOR for f in file_slice.delete_files):
            if skipped is not None:
                skipped.append(file_slice.base_file.path)
            return False
        return bool(file_slice.base_file.extra.get("spec_id", spec_id) == spec_id)

    return compaction.plan_compaction(
        spec.file_index().list_files_at(snapshot.snapshot_id),
        settings,
        instant=snapshot.snapshot_id,
        eligible=eligible,
    )


def skip_summary(skipped: list[str]) -> dict[str, Any]:
    """The summary lines of the data files left out because of their deletion vectors."""
    if not skipped:
        return {}
    return {
        "skipped_deletion_vector_files": len(skipped),
        "note": f"{len(skipped)} data file(s) with a deletion vector (Iceberg v3) were not rewritten:"
        " pyiceberg cannot commit the removal of a deletion vector",
    }


def validate_rewrite(table: Any, plan: CompactionPlan) -> dict[str, Any]:
    """The live pyiceberg DataFiles to remove, keyed by path; ``RewriteConflict`` when the plan no
    longer holds at the table's (refreshed) head."""
    metadata = table.metadata
    head = metadata.current_snapshot()
    if head is None:
        raise RewriteConflict("the table has no current snapshot any more")
    chain = []
    current = head
    while current is not None and current.snapshot_id != plan.instant:
        chain.append(current)
        parent = current.parent_snapshot_id
        current = metadata.snapshot_by_id(parent) if parent is not None else None
    if current is None:
        raise RewriteConflict(f"the planned snapshot {plan.instant} is no longer an ancestor of the head")
    for snapshot in chain:
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if any(int(summary.get(key, 0) or 0) for key in DELETE_FILE_SUMMARY_KEYS):
            raise RewriteConflict(f"snapshot {snapshot.snapshot_id} added delete files after the plan")
    wanted = {path for group in plan.groups for path in group.paths}
    live: dict[str, Any] = {}
    from pyiceberg.manifest import ManifestContent

    for manifest in head.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.data_file.file_path in wanted:
                live[entry.data_file.file_path] = entry.data_file
    missing = wanted - live.keys()
    if missing:
        raise RewriteConflict(f"{len(missing)} planned file(s) are no longer live, e.g. {sorted(missing)[0]}")
    return live


def iceberg_data_file(table: Any, path: str, partition: Any, spec_id: int) -> Any:
    """A pyiceberg DataFile with metrics from the footer of a file written for the table.

    Like pyiceberg's ``parquet_file_to_data_file``, minus its nullability check: Spark writes
    every column as optional, which holds required columns' values just as well.
    """
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    metadata = table.metadata
    schema = metadata.schema()
    parquet_metadata = pq.read_metadata(compaction.local_path(path))
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=parquet_metadata,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        file_size_in_bytes=os.path.getsize(compaction.local_path(path)),
        sort_order_id=None,
        spec_id=spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )


def commit_rewrite(table: Any, plan: CompactionPlan, written: list[WrittenGroup], process_id: int) -> int:
    """Validate at the head, publish the staged files, commit one overwrite; the new snapshot id."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    table.refresh()
    live = validate_rewrite(table, plan)
    published: list[str] = []
    head_before = table.metadata.current_snapshot().snapshot_id
    committed = False
    try:
        removed = [live[path] for group in plan.groups for path in group.paths]
        added = []
        for result in written:
            first = live[result.group.paths[0]]
            directory = os.path.dirname(compaction.local_path(first.file_path))
            for staged in result.files:
                target = compaction.publish(staged, directory)
                published.append(target)
                uri = ("file://" + target) if first.file_path.startswith("file:") else target
                added.append(iceberg_data_file(table, uri, first.partition, first.spec_id))
        properties = {"lakewarden.process-id": str(process_id), "lakewarden.operation": "rewrite"}
        with table.transaction() as transaction:
            with transaction.update_snapshot(snapshot_properties=properties).overwrite() as rewrite:
                for data_file in removed:
                    rewrite.delete_data_file(data_file)
                for data_file in added:
                    rewrite.append_data_file(data_file)
        committed = True
    except (CommitFailedException, ValidationException) as error:
        raise RewriteConflict(f"the commit was refused: {error}") from error
    finally:
        if not committed and not _landed(table, head_before, process_id):
            compaction.unpublish(published)
    return table.metadata.current_snapshot().snapshot_id


def _landed(table: Any, head_before: int, process_id: int) -> bool:
    """Whether a commit of this process reached the table despite an error (unknown outcome)."""
    try:
        table.refresh()
    except Exception:
        return True  # cannot tell: keep the files (an orphan is safer than a missing file)
    wanted = str(process_id)
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if summary.get("lakewarden.process-id") == wanted and snapshot.snapshot_id != head_before:
            return True
    return False


class IcebergRewriteFactory(ProcessFactory):
    name = "iceberg-rewrite"
    description = "Compacts small Iceberg data files into files of the target size (Spark)"
    properties_schema = REWRITE_PROPERTIES_SCHEMA
    default_properties = REWRITE_DEFAULTS
    params_schema = REWRITE_PARAMS_SCHEMA

    def supported_actions(self) -> dict[str, set[str]]:
        return {"iceberg": {REWRITE}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:

        return TriggerStrategy.from_properties(self.properties, on_new_snapshot=True)

    def trigger(self, runtime: Any, action: str) -> TableProcess | None:
        spec_table = runtime.load()
        table = getattr(spec_table, "pyiceberg_table", None)
        from pyiceberg.table import StaticTable

        if table is None or isinstance(table, StaticTable):
            return None  # no catalog to commit through
        process = IcebergRewriteProcess({}, runtime.config)
        if plan_rewrite(spec_table, process.settings).empty:
            return None
        return process

    def recover(self, runtime: Any, record: ProcessRecord) -> TableProcess:
        return IcebergRewriteProcess(dict(record.params), runtime.config)
