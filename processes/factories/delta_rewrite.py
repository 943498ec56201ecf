"""Delta ``rewrite``: compaction of small files, committed as remove + add actions with
``dataChange=false`` (readers of the change feed and streaming readers skip it: no data changed).

Planning and writing are the Iceberg rewrite's (``compaction``); files are read without their
partition columns (Delta keeps those in the log, not in the files). Files
with deletion vectors are not rewritten (see ``plan_delta``). Before committing,
the latest version is read: every file to remove must still be live there with the same deletion
vector (a vector added meanwhile deletes rows the new file would bring back), else the run
re-plans once and then fails cleanly. The add actions carry statistics read from the footers of
the written files (numRecords, nullCount, min/max of integer, string and date columns).

Two compactions of one Delta table must never run at once (both would commit and duplicate rows):
the executor's per-table lock guarantees it; this process relies on it.

Object stores: new files are written in place under unique names (``outputs``) and deleted when
the commit does not land. The commit is deltalake's: the next ``_delta_log/NNN.json`` is created
with a conditional put (``If-None-Match: *``, ``conditional_put`` in ``StoreOptions.delta_options``),
so when another writer took that version first the store refuses ours (412), deltalake checks the
winner for conflicts and commits at the next version, or raises (the run re-plans). A store that
ignores ``If-None-Match`` would let the second put overwrite the first commit: such a store is
only safe with a single writer per table.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
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
from processes.factories.outputs import RewriteOutputs, rewrite_outputs
from processes.plugin import (
    REWRITE,
    ProcessContext,
    ProcessFactory,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.io import StoreOptions, filesystem, is_local

logger = logging.getLogger(__name__)


def open_version(location: str, version: int | None = None, storage: StoreOptions | None = None) -> Any:
    from storage.formats.delta import DeltaAdapter

    return DeltaAdapter.open(location, storage=storage, version=version)


def delta_table(location: str, storage: StoreOptions | None = None) -> Any:
    """deltalake's DeltaTable, with the store's options on an object store."""
    from deltalake import DeltaTable

    if is_local(location):
        return DeltaTable(location)
    return DeltaTable(location, storage_options=(storage or StoreOptions.from_env()).delta_options())


def store_options(context: ProcessContext) -> StoreOptions | None:
    """The table's object-store credentials (None for a local table or outside the console)."""
    options = getattr(context.runtime, "store_options", None)
    return options() if callable(options) else None


def column_mapping(spec: Any) -> str:
    return str(spec.definition.properties.get("delta.columnMapping.mode") or "none").lower()


def plan_delta(spec: Any, settings: CompactionSettings) -> CompactionPlan:
    """Files with a deletion vector are left out: deltalake's RemoveAction cannot name the vector,
    and a remove without it does not match the add (the file would stay live next to its copy)."""
    return compaction.plan_compaction(
        spec.file_index().list_files_at(),
        settings,
        instant=spec.version,
        eligible=lambda s: not s.delete_files and not s.base_file.extra.get("deletion_vector"),
    )


class DeltaSliceReader:
    """Reads slices through the spec table (picklable: Spark tasks reopen it at its version)."""

    def __init__(self, spec: Any, columns: list[str]) -> None:
        self.spec, self.columns = spec, columns

    def __call__(self, slices: list[Any]) -> Any:
        return self.spec.read(slices, columns=self.columns)


class DeltaRewriteProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(REWRITE, params)
        self.settings = CompactionSettings.from_config({**config, **params})

    def before_commit(self, context: ProcessContext, plan: CompactionPlan) -> None:
        """Called after the groups are written, before the cancel check and the commit (a test seam)."""

    def run(self, context: ProcessContext) -> dict[str, Any]:
        location = context.runtime.location
        storage = store_options(context)
        for attempt in (1, 2):
            spec = open_version(location, storage=storage)
            if column_mapping(spec) != "none":
                raise RewriteConflict(
                    "Delta tables with column mapping are not rewritten (physical names differ)"
                )
            plan = plan_delta(spec, self.settings)
            if plan.empty:
                return compaction.rewrite_summary(plan, [], version=spec.version, attempts=attempt)
            partition_columns = set(spec.partition_spec.names)
            data_schema = pa.schema([f for f in spec.schema if f.name not in partition_columns])
            outputs = rewrite_outputs(
                location, context.staging_dir / f"attempt-{attempt}", storage, context.process_id
            )
            writer = GroupWriter(
                context,
                DeltaSliceReader(spec, data_schema.names),
                data_schema,
                outputs,
                settings=self.settings,
                field_ids=False,
                compression=self.settings.compression_codec or "snappy",
            )
            try:
                written = writer.write_all(plan.groups, progress_total=len(plan.groups) + 1)
                context.checkpoint("after-write")
                self.before_commit(context, plan)
                context.report_progress(len(plan.groups), len(plan.groups) + 1, "committing")
                context.checkpoint("before-commit")
                version = commit_delta(
                    location, plan, written, data_schema, context.process_id, outputs, storage
                )
            except RewriteConflict as conflict:
                outputs.discard()
                if attempt == 2:
                    raise RewriteConflict(f"the table changed during the rewrite twice: {conflict}") from None
                logger.info("rewrite of %s re-plans: %s", location, conflict)
                continue
            except BaseException:
                outputs.discard()
                raise
            outputs.finish()
            context.report_progress(len(plan.groups) + 1, len(plan.groups) + 1, "committed")
            extra = {"engine_note": writer.notes[0]} if writer.notes else {}
            return compaction.rewrite_summary(plan, written, version=version, attempts=attempt, **extra)
        raise AssertionError("unreachable")


def _key(location: str) -> str:
    """A comparable spelling of a data file's location (normalised paths locally, URIs as is)."""
    return os.path.normpath(location) if is_local(location) else location


def _disk_path(root: str, log_path: str) -> str:
    """The comparable location (``_key``) of an add/remove ``path`` of the table at ``root``."""
    if is_local(root):
        if "://" in log_path:
            return os.path.normpath(compaction.local_path(log_path))
        return os.path.normpath(os.path.join(root, unquote(log_path)))
    if "://" in log_path:
        return log_path
    return f"{root}/{unquote(log_path)}"


def partition_string(value: Any) -> str | None:
    """A typed partition value as the Delta log spells it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _stat_value(value: Any, arrow_type: pa.DataType) -> Any:
    """A footer min/max as a Delta stats JSON value, or None to leave it out (unknown is safe;
    timestamps, floats and decimals are left out rather than risk a rounded bound)."""
    if pa.types.is_integer(arrow_type) and isinstance(value, int):
        return value
    if (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)) and isinstance(value, str):
        return value
    if pa.types.is_date32(arrow_type) and isinstance(value, dt.date):
        return value.isoformat()
    return None


def delta_stats(path: str, schema: pa.Schema, storage: StoreOptions | None = None) -> str:
    """Delta add-action statistics from a parquet footer (a ranged read on an object store)."""
    fs, fs_path = filesystem(path, storage)
    with fs.open_input_file(fs_path) as stream:
        metadata = pq.read_metadata(stream)
    leaves: dict[str, pa.DataType] = {}

    def collect(prefix: str, fields: Any) -> None:
        for field in fields:
            name = f"{prefix}{field.name}"
            if pa.types.is_struct(field.type):
                collect(f"{name}.", list(field.type))
            elif not (
                pa.types.is_list(field.type)
                or pa.types.is_map(field.type)
                or pa.types.is_large_list(field.type)
            ):
                leaves[name] = field.type

    collect("", schema)
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    complete: dict[str, bool] = {}
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for column in range(row_group.num_columns):
            chunk = row_group.column(column)
            name = chunk.path_in_schema
            if name not in leaves:
                continue
            stats = chunk.statistics
            if stats is None or not stats.has_null_count:
                complete[name] = False
                continue
            nulls[name] = nulls.get(name, 0) + stats.null_count
            if not stats.has_min_max:
                if stats.null_count < row_group.num_rows:
                    complete[name] = False
                continue
            low, high = _stat_value(stats.min, leaves[name]), _stat_value(stats.max, leaves[name])
            if low is None or high is None:
                complete[name] = False
                continue
            minimum[name] = low if name not in minimum else min(minimum[name], low)
            maximum[name] = high if name not in maximum else max(maximum[name], high)
    result: dict[str, Any] = {
        "numRecords": metadata.num_rows,
        "minValues": {},
        "maxValues": {},
        "nullCount": {},
    }
    for name in leaves:
        if name in nulls and complete.get(name, True):
            _put(result["nullCount"], name, nulls[name])
            if name in minimum:
                _put(result["minValues"], name, minimum[name])
                _put(result["maxValues"], name, maximum[name])
    return json.dumps(result)


def _put(target: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for parent in parents:
        target = target.setdefault(parent, {})
    target[leaf] = value


def commit_delta(
    location: str,
    plan: CompactionPlan,
    written: list[WrittenGroup],
    schema: pa.Schema,
    process_id: int,
    outputs: RewriteOutputs,
    storage: StoreOptions | None = None,
) -> int:
    """Validate at the latest version, publish, commit remove + add; the new version. Files of a
    commit that did not land are the caller's to discard (``outputs.keep`` when it landed despite
    an error or its outcome is unknown)."""
    from deltalake.exceptions import CommitFailedError, DeltaError
    from deltalake.transaction import CommitProperties

    table = delta_table(location, storage)
    root = table.table_uri.rstrip("/")
    if is_local(root):
        root = compaction.local_path(root)
    _validate_still_live(location, table.version(), plan, storage)
    actions = pa.table(table.get_add_actions(flatten=False)).to_pylist()
    by_key = {_disk_path(root, a["path"]): a for a in actions}
    published: list[str] = []
    try:
        removes, adds = _rewrite_actions(by_key, written, schema, outputs, published, storage)
        table.create_write_transaction(
            actions=removes + adds,
            mode="append",
            schema=table.schema(),
            partition_by=table.metadata().partition_columns,
            commit_properties=CommitProperties(
                custom_metadata={"lakewarden.process-id": str(process_id), "lakewarden.operation": "rewrite"}
            ),
        )
    except BaseException as error:
        if _landed(location, root, published, storage):
            outputs.keep = True
            if isinstance(error, Exception):
                logger.warning("rewrite of %s: the commit landed despite %s", location, error)
                return delta_table(location, storage).version()
            raise
        if isinstance(error, CommitFailedError):
            raise RewriteConflict(f"the commit was refused: {error}") from error
        if isinstance(error, DeltaError) and any(
            word in str(error).lower() for word in ("conflict", "concurrent")
        ):
            raise RewriteConflict(f"the commit was refused: {error}") from error
        raise
    return delta_table(location, storage).version()


def _validate_still_live(
    location: str, version: int, plan: CompactionPlan, storage: StoreOptions | None = None
) -> None:
    """Every planned file is still live at ``version`` and got no deletion vector meanwhile."""
    latest = open_version(location, version, storage)
    live = {_key(s.base_file.path): s for s in latest.file_index().list_files_at()}
    for group in plan.groups:
        for planned in group.slices:
            now = live.get(_key(planned.base_file.path))
            if now is None:
                raise RewriteConflict(f"{planned.base_file.path} is no longer live")
            if now.delete_files or now.base_file.extra.get("deletion_vector"):
                raise RewriteConflict(f"{planned.base_file.path} got a deletion vector")


def _rewrite_actions(
    by_key: dict[str, dict],
    written: list[WrittenGroup],
    schema: pa.Schema,
    outputs: RewriteOutputs,
    published: list[str],
    storage: StoreOptions | None = None,
) -> tuple[list, list]:
    """Remove actions for the rewritten files and add actions for the new ones, published next to
    each group's first file (``published`` collects them, to tell whether the commit landed)."""
    from deltalake.transaction import AddAction, RemoveAction

    now_ms = int(time.time() * 1000)
    removes, adds = [], []
    for result in written:
        beside = result.group.paths[0]
        first = by_key[_key(beside)]
        values = {k: partition_string(v) for k, v in (first.get("partition") or {}).items()}
        for path in result.group.paths:
            action = by_key[_key(path)]
            removes.append(RemoveAction(action["path"], False, now_ms, action["size_bytes"], values))
        # New files go next to the group's first file; its log path is already encoded the way
        # this table's log spells that folder.
        absolute = "://" in first["path"]
        relative_dir = os.path.dirname(first["path"])
        for path, size in zip(result.files, result.sizes, strict=True):
            target = outputs.publish(path, beside)
            published.append(target)
            name = target.rsplit("/", 1)[-1]
            log_path = f"{relative_dir}/{name}" if relative_dir else name
            if absolute:
                log_path = ("file://" + target) if is_local(target) else target
            stats = delta_stats(target, schema, storage)
            adds.append(AddAction(log_path, size, values, now_ms, False, stats))
    return removes, adds


def _landed(location: str, root: str, published: list[str], storage: StoreOptions | None = None) -> bool:
    """Whether the commit reached the log despite an error (any published file is live)."""
    if not published:
        return False
    try:
        table = delta_table(location, storage)
        actions = pa.table(table.get_add_actions(flatten=False)).column("path").to_pylist()
    except Exception:
        return True  # cannot tell: keep the files (an orphan is safer than a missing file)
    live = {_disk_path(root, p) for p in actions}
    return any(_key(p) in live for p in published)


class DeltaRewriteFactory(ProcessFactory):
    name = "delta-rewrite"
    description = "Compacts small Delta data files into files of the target size (Spark)"
    properties_schema = REWRITE_PROPERTIES_SCHEMA
    default_properties = REWRITE_DEFAULTS
    params_schema = REWRITE_PARAMS_SCHEMA

    def supported_actions(self) -> dict[str, set[str]]:
        return {"delta": {REWRITE}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:
        return TriggerStrategy.from_properties(self.properties, on_new_snapshot=True)

    def trigger(self, runtime: Any, action: str) -> TableProcess | None:
        options = getattr(runtime, "store_options", None)
        spec = open_version(runtime.location, storage=options() if callable(options) else None)
        if column_mapping(spec) != "none":
            return None
        process = DeltaRewriteProcess({}, runtime.config)
        return None if plan_delta(spec, process.settings).empty else process

    def recover(self, runtime: Any, record: ProcessRecord) -> TableProcess:
        return DeltaRewriteProcess(dict(record.params), runtime.config)
