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
from typing import Any

import pyarrow.parquet as pq

from processes.factories import compaction
from processes.factories.compaction import (
    REWRITE_DEFAULTS,
    REWRITE_PARAMS_SCHEMA,
    REWRITE_PROPERTIES_SCHEMA,
    CompactionPlan,
    CompactionSettings,
    Ordering,
    RewriteConflict,
    clustered_snapshots,
    iceberg_strategy,
)
from processes.factories.group_writer import GroupWriter, WrittenGroup
from processes.factories.iceberg_commit import (
    DVKey,
    OutputPartitioner,
    RewriteFiles,
    check_v3_metadata,
    decode_partition,
    v3_metadata_writes,
)
from processes.factories.iceberg_lineage import rewrite_inputs, statistics_inputs
from processes.factories.outputs import RewriteOutputs, rewrite_outputs, sweep_leftovers
from processes.plugin import (
    REWRITE,
    ProcessContext,
    ProcessFactory,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.io import is_object_store
from storage.spec.models import FileContent

logger = logging.getLogger(__name__)

#: Catalog commits tried per written plan when another writer commits in between.
COMMIT_ATTEMPTS = 4

DELETE_FILE_SUMMARY_KEYS = (
    "added-delete-files",
    "added-position-delete-files",
    "added-equality-delete-files",
    "added-dvs",
)
OUTPUT_SPEC_ID = "output-spec-id"
ICEBERG_REWRITE_PARAMS_SCHEMA: dict[str, Any] = {
    **REWRITE_PARAMS_SCHEMA,
    "properties": {
        **REWRITE_PARAMS_SCHEMA["properties"],
        OUTPUT_SPEC_ID: {
            "type": "integer",
            "minimum": 0,
            "description": "Partition spec of the rewritten files (default: the table's default spec);"
            " files of every other spec are rewritten into it",
        },
    },
}


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


class IcebergRewriteProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(REWRITE, params)
        self.settings = CompactionSettings.from_config({**config, **params})

    def before_commit(self, context: ProcessContext, plan: CompactionPlan) -> None:
        """Called after the groups are written, before the cancel check and the commit (a seam
        for tests that simulate a concurrent writer or a late cancel)."""

    def run(self, context: ProcessContext) -> dict[str, Any]:
        table = _catalog_table(context.table)
        spec_id = output_spec(table, self.params.get(OUTPUT_SPEC_ID))  # refused before anything is done
        self.ordering = iceberg_strategy(table.metadata, spec_id, self.settings, spec_view(table).schema)
        check_v3_metadata(table)
        swept = _sweep(table, context)
        for attempt in (1, 2):
            summary = self._attempt(context, table, attempt)
            if summary is not None:
                if swept:
                    summary["swept_leftover_objects"] = len(swept)
                return summary
        raise AssertionError("unreachable")

    def _attempt(self, context: ProcessContext, table: Any, attempt: int) -> dict[str, Any] | None:
        """One plan, write and commit: the run's summary, or None to plan again (the table
        changed under the first attempt)."""
        table.refresh()
        spec_id = output_spec(table, self.params.get(OUTPUT_SPEC_ID))
        spec = spec_view(table)
        plan = plan_rewrite(spec, self.settings, output_spec_id=spec_id, ordering=self.ordering)
        if plan.empty:
            return compaction.rewrite_summary(plan, [], snapshot_id=plan.instant, attempts=attempt)
        outputs = rewrite_outputs(
            table.location(),
            context.staging_dir / f"attempt-{attempt}",
            _store_options(context),
            context.process_id,
        )
        schema, settings = rewrite_inputs(table.metadata, spec.schema, self.settings)  # v3 row lineage
        writer = GroupWriter(
            context,
            IcebergSliceReader(table.io, schema),
            schema,
            outputs,
            settings=settings,
            field_ids=True,
            sort_columns=spec.definition.sort_columns,
            compression=_codec(self.settings, table.metadata.properties),
            partitioner=group_partitioner(table, spec_id),
            ordering=self.ordering,
        )
        steps = len(plan.groups) + 1
        try:
            written = writer.write_all(plan.groups, progress_total=steps)
            context.checkpoint("after-write")
            self.before_commit(context, plan)
            context.report_progress(len(plan.groups), steps, "committing")
            context.checkpoint("before-commit")
            snapshot_id, commits = commit_rewrite(table, plan, written, context.process_id, outputs, spec_id)
        except RewriteConflict as conflict:
            outputs.discard()
            if attempt == 2:
                raise RewriteConflict(f"the table changed during the rewrite twice: {conflict}") from None
            logger.info("rewrite of %s re-plans: %s", table.name(), conflict)
            return None
        except BaseException:
            outputs.discard()
            raise
        outputs.finish()
        context.report_progress(steps, steps, "committed")
        extra: dict[str, Any] = {"commit_attempts": commits, "output_spec_id": spec_id}
        if writer.notes:
            extra["engine_note"] = writer.notes[0]
        return compaction.rewrite_summary(plan, written, snapshot_id=snapshot_id, attempts=attempt, **extra)


def _sweep(table: Any, context: ProcessContext) -> list[str]:
    """On an object store: delete what an ended rewrite of this table wrote and never committed
    (``outputs.sweep_leftovers``; referenced = anything any snapshot's manifests name)."""
    finished = getattr(context.runtime, "finished_processes", None)
    if finished is None or not is_object_store(table.location()):
        return []
    from processes.factories.iceberg_orphans import normalise, referenced_paths

    table.refresh()
    return sweep_leftovers(
        f"{table.location()}/data",
        _store_options(context),
        current=context.process_id,
        finished=finished,
        referenced=lambda: referenced_paths(table),
        comparable=normalise,
    )


def _store_options(context: ProcessContext) -> Any:
    """The table's object-store credentials (None for local tables or outside the console)."""
    options = getattr(context.runtime, "store_options", None)
    return options() if callable(options) else None


def portable_io(io: Any) -> Any:
    """A file IO of the same kind built from ``io``'s string properties only (picklable)."""
    properties = {k: v for k, v in (io.properties or {}).items() if isinstance(v, str)}
    if len(properties) == len(io.properties or {}):
        return io
    return type(io)(properties)


def _catalog_table(spec_table: Any) -> Any:
    from pyiceberg.table import StaticTable

    table = getattr(spec_table, "pyiceberg_table", None)
    if table is None or isinstance(table, StaticTable):
        raise ValueError(
            "this Iceberg table is registered by location without a catalog, or its catalog serves"
            " legacy v1 metadata pyiceberg cannot write back (read-only): rewrites need a catalog to"
            " commit atomically (a second writer could overwrite or lose a metadata version)"
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


def output_spec(table: Any, requested: int | None) -> int:
    """The partition spec the rewritten files are written in: ``requested``, else the table's
    default spec; ``ValueError`` for a spec the table does not have."""
    specs = table.metadata.specs()
    if requested is None:
        return int(table.metadata.default_spec_id)
    if requested not in specs:
        raise ValueError(
            f"output-spec-id {requested} is not a partition spec of this table"
            f" (its specs: {', '.join(str(s) for s in sorted(specs))}); nothing was rewritten"
        )
    return int(requested)


def plan_rewrite(
    spec: Any,
    settings: CompactionSettings,
    *,
    output_spec_id: int | None = None,
    ordering: Ordering | None = None,
) -> CompactionPlan:
    """The compaction plan at the table's current snapshot. Files of every partition spec are
    planned, grouped by (spec, partition); a file of another spec than the output spec (default:
    the table's default spec) is always rewritten, into the output spec. Data files with deletion
    vectors are planned like any other (the commit removes their vectors)."""
    metadata = spec.pyiceberg_table.metadata
    snapshot = metadata.current_snapshot()
    if snapshot is None:
        return CompactionPlan(instant=None)
    output = metadata.default_spec_id if output_spec_id is None else output_spec_id

    def spec_of(file_slice: Any) -> int:
        return int(file_slice.base_file.extra.get("spec_id", output))

    return compaction.plan_compaction(
        spec.file_index().list_files_at(snapshot.snapshot_id),
        settings,
        instant=snapshot.snapshot_id,
        eligible=_removable,
        partition_key=lambda s: (spec_of(s), s.partition.path),
        always=lambda s: spec_of(s) != output,
        clustered=clustered_snapshots(metadata, ordering),
        ordering=ordering,
    )


def _removable(file_slice: Any) -> bool:
    """Whether the commit can remove the slice's deletion vectors exactly: a vector entry without
    ``referenced_data_file`` (out of spec) cannot be told from the other vectors of its Puffin
    file, so its data file is left out (and logged)."""
    for delete_file in file_slice.delete_files:
        if delete_file.content is FileContent.DELETION_VECTOR and not delete_file.extra.get(
            "referenced_data_file"
        ):
            logger.warning(
                "%s is not rewritten: its deletion vector entry lacks referenced_data_file",
                file_slice.base_file.path,
            )
            return False
    return True


def planned_vectors(plan: CompactionPlan) -> set[DVKey]:
    """The deletion vectors of the planned data files, as the commit removes them."""
    return {
        (d.path, d.extra.get("referenced_data_file"), d.extra.get("content_offset"))
        for group in plan.groups
        for file_slice in group.slices
        for d in file_slice.delete_files
        if d.content is FileContent.DELETION_VECTOR
    }


def group_partitioner(table: Any, spec_id: int) -> Any:
    """``GroupWriter``'s partitioner: groups of files of another spec than ``spec_id`` are split
    by the output spec's partitions (a group of the output spec is one partition already)."""
    splitter = OutputPartitioner(table.metadata.specs()[spec_id], table.metadata.schema())

    def partitioner(group: Any) -> OutputPartitioner | None:
        group_spec = group.slices[0].base_file.extra.get("spec_id", spec_id)
        return splitter if group_spec != spec_id else None

    return partitioner


def validate_rewrite(table: Any, plan: CompactionPlan) -> dict[str, Any]:
    """The live pyiceberg DataFiles to remove, keyed by path; ``RewriteConflict`` when the plan no
    longer holds at the table's (refreshed) head: the planned snapshot is no ancestor of it, a
    delete file or deletion vector was committed since (by the summary, or by a delete manifest
    adding files in a snapshot since), or a planned file is not live. (The deletion vectors to
    remove are checked by the commit itself: ``RewriteFiles``.)"""
    from pyiceberg.manifest import ManifestContent

    head = table.metadata.current_snapshot()
    if head is None:
        raise RewriteConflict("the table has no current snapshot any more")
    since = _snapshots_since(table.metadata, head, plan.instant)
    manifests = head.manifests(table.io)
    for manifest in manifests:
        if (
            manifest.content == ManifestContent.DELETES
            and manifest.added_snapshot_id in since
            and (manifest.added_files_count or 0) > 0
        ):
            raise RewriteConflict(f"snapshot {manifest.added_snapshot_id} added delete files after the plan")
    wanted = {path for group in plan.groups for path in group.paths}
    live: dict[str, Any] = {}
    for manifest in manifests:
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.data_file.file_path in wanted:
                live[entry.data_file.file_path] = entry.data_file
    missing = wanted - live.keys()
    if missing:
        raise RewriteConflict(f"{len(missing)} planned file(s) are no longer live, e.g. {sorted(missing)[0]}")
    return live


def _snapshots_since(metadata: Any, head: Any, instant: Any) -> set[int]:
    """The ids of the snapshots from ``instant`` (exclusive) to ``head``; ``RewriteConflict`` when
    ``instant`` is not an ancestor of the head or one of them added delete files."""
    since: set[int] = set()
    current = head
    while current is not None and current.snapshot_id != instant:
        summary = current.summary.additional_properties if current.summary is not None else {}
        if any(int(summary.get(key, 0) or 0) for key in DELETE_FILE_SUMMARY_KEYS):
            raise RewriteConflict(f"snapshot {current.snapshot_id} added delete files after the plan")
        since.add(current.snapshot_id)
        parent = current.parent_snapshot_id
        current = metadata.snapshot_by_id(parent) if parent is not None else None
    if current is None:
        raise RewriteConflict(f"the planned snapshot {instant} is no longer an ancestor of the head")
    return since


def iceberg_data_file(table: Any, path: str, partition: Any, spec_id: int, size: int) -> Any:
    """A pyiceberg DataFile with metrics from the footer of a file written for the table (read
    through the table's file IO: a ranged read on an object store).

    Like pyiceberg's ``parquet_file_to_data_file``, minus its nullability check: Spark writes
    every column as optional, which holds required columns' values just as well.
    """
    from pyiceberg.io.pyarrow import data_file_statistics_from_parquet_metadata
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    with table.io.new_input(path).open() as stream:
        parquet_metadata = pq.read_metadata(stream)
    mapping, plan = statistics_inputs(table.metadata)  # the table's columns, and row lineage's
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=parquet_metadata, stats_columns=plan, parquet_column_mapping=mapping
    )
    data_file = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        file_size_in_bytes=size,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
    data_file.spec_id = spec_id
    return data_file


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
    head_before = table.metadata.current_snapshot().snapshot_id
    added_paths = [
        (result, outputs.publish(path, result.group.paths[0]), size, key)
        for result in written
        for path, size, key in zip(result.files, result.sizes, result.partitions, strict=True)
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
            if _landed(table, head_before, process_id):
                outputs.keep = True
                return table.metadata.current_snapshot().snapshot_id, commit
            if "producer" in state:
                state["producer"]._clean_all_uncommitted()
            _delete_refused_metadata(table.io, state.get("transaction"))
            if commit == COMMIT_ATTEMPTS:
                raise RewriteConflict(f"the catalog refused the commit {commit} times: {error}") from error
            logger.info(
                "rewrite of %s: commit %s was refused (%s); committing again", table.name(), commit, error
            )
        except RewriteConflict:
            raise
        except BaseException:
            if _landed(table, head_before, process_id):
                outputs.keep = True
            raise
    raise AssertionError("unreachable")


def _commit_once(
    table: Any,
    plan: CompactionPlan,
    live: dict[str, Any],
    added_paths: list[tuple[WrittenGroup, str, int, str | None]],
    spec_id: int,
    properties: dict[str, str],
    state: dict[str, Any],
) -> None:
    """One catalog commit of the rewrite (``state`` keeps its transaction and producer, for
    the cleanup of a refused one)."""
    added = [
        iceberg_data_file(table, path, _partition(result, key, live), spec_id, size)
        for result, path, size, key in added_paths
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


def _delete_refused_metadata(io: Any, transaction: Any) -> None:
    """Delete the manifest list and the new manifests pyiceberg wrote for a commit the catalog
    refused (a refused commit is final: nothing references them)."""
    if transaction is None:
        return
    from pyiceberg.table.update import AddSnapshotUpdate

    for update in getattr(transaction, "_updates", ()):
        if not isinstance(update, AddSnapshotUpdate):
            continue
        snapshot = update.snapshot
        try:
            manifests = list(snapshot.manifests(io))
        except OSError:  # pyiceberg cleaned up after itself already
            manifests = []
        doomed = [m.manifest_path for m in manifests if m.added_snapshot_id == snapshot.snapshot_id]
        if snapshot.manifest_list:
            doomed.append(snapshot.manifest_list)
        for path in doomed:
            try:
                io.delete(path)
            except FileNotFoundError:
                pass
            except OSError:
                logger.warning("could not delete %s of a refused commit", path, exc_info=True)


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
    params_schema = ICEBERG_REWRITE_PARAMS_SCHEMA

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
        try:
            ordering = iceberg_strategy(table.metadata, None, process.settings, spec_table.schema)
        except ValueError:
            return None  # a manual run says why
        if plan_rewrite(spec_table, process.settings, ordering=ordering).empty:
            return None
        return process

    def recover(self, runtime: Any, record: ProcessRecord) -> TableProcess:
        return IcebergRewriteProcess(dict(record.params), runtime.config)
