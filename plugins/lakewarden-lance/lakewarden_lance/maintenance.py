"""Maintenance of Lance datasets, each action done by Lance's own library.

- ``rewrite`` (factory ``lance-rewrite``): ``lance.optimize.Compaction``: plan, execute each task
  (checking for cancel between them), commit. Small fragments are merged up to
  ``target-rows-per-fragment`` rows; fragments whose deletion files delete at least
  ``materialize-deletions-threshold`` of their rows are rewritten without them. Lance writes the
  new fragments under ``data/`` with unique names that no version references until the commit
  (it cannot write to a staging folder); when the commit does not land they are deleted, so a
  failed or cancelled run leaves the dataset as it was. The commit is Lance's own, checked against
  concurrent commits (a concurrent delete on a rewritten fragment makes it fail).
- ``expire-snapshots`` (factory ``lance-expire-snapshots``): ``cleanup_old_versions``: a version
  goes when it is older than ``older-than-hours`` *and* not among the newest ``retain-versions``;
  the current version and tagged versions are always kept, and only files no kept version
  references are deleted (Lance's rule). Files of unfinished transactions are never touched.
- ``optimize-indices`` (factory ``lance-optimize-indices``): ``optimize_indices`` folds fragments
  written since an index was built into it; offered only for datasets with indices.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from typing import TYPE_CHECKING, Any

from lakewarden_lance._dataset import Files, live_rows, open_dataset
from processes.maintenance.schemas import MAX_AGE_HOURS, MAX_CONCURRENCY, MAX_COUNT, MAX_INT32
from processes.plugin import (
    EXPIRE_SNAPSHOTS,
    REWRITE,
    Preview,
    ProcessContext,
    ProcessFactory,
    ProcessInputError,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
    register_action,
)
from storage.io.guard import OutsideTable

if TYPE_CHECKING:
    from lance.optimize import CompactionOptions

logger = logging.getLogger(__name__)

OPTIMIZE_INDICES = register_action(
    "optimize-indices", "Add fragments written since an index was built to the index (Lance)"
)
FORMAT = "lance"
MAX_ROWS_PER_FILE = 1024 * 1024
_SCHEDULE = {
    "interval": {"type": "integer", "minimum": 60, "maximum": 366 * 86_400},
    "parallelism": {"type": "integer", "minimum": 1, "maximum": MAX_CONCURRENCY},
}


def _dataset(runtime: Any) -> Any:
    return open_dataset(runtime.location, runtime.store_options())


class _LanceFactory(ProcessFactory):
    """What the three factories share: one format, one action, a schedule from properties."""

    action: str
    on_new_snapshot = False

    def supported_actions(self) -> dict[str, set[str]]:
        return {FORMAT: {self.action}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:
        return TriggerStrategy.from_properties(self.properties, on_new_snapshot=self.on_new_snapshot)

    def process(self, runtime: Any, params: dict[str, Any]) -> TableProcess:
        raise NotImplementedError

    def recover(self, runtime: Any, record: ProcessRecord) -> TableProcess:
        return self.process(runtime, dict(record.params))


#: Why there is nothing to do (the preview's note and the scheduler's decision).
NO_COMPACTION = "nothing to do: no fragments are small or carry enough deletions"
NO_OLD_VERSIONS = "nothing to do: no version is old enough outside the newest kept"

# --- rewrite ---------------------------------------------------------------------------------------


def _compaction_options(params: dict[str, Any], config: dict[str, Any]) -> CompactionOptions:
    merged = {**LanceRewriteFactory.default_properties, **config, **params}
    return {
        "target_rows_per_fragment": int(merged["target-rows-per-fragment"]),
        "materialize_deletions": bool(merged["materialize-deletions"]),
        "materialize_deletions_threshold": float(merged["materialize-deletions-threshold"]),
        "num_threads": int(merged["num-threads"]),
    }


def _plan(dataset: Any, options: CompactionOptions) -> Any:
    from lance.optimize import Compaction

    return Compaction.plan(dataset, options)


def _task_facts(task: Any) -> tuple[int, int, int]:
    """(data files, bytes, live rows) of one compaction task's input fragments."""
    files = size = rows = 0
    for metadata in task.fragments:
        files += len(metadata.files)
        size += sum(int(f.file_size_bytes or 0) for f in metadata.files)
        rows += live_rows(metadata)
    return files, size, rows


class LanceRewriteProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(REWRITE, params)
        self.options = _compaction_options(params, config)

    def run(self, context: ProcessContext) -> dict[str, Any]:
        from lance.optimize import Compaction

        dataset = _dataset(context.runtime)
        plan = _plan(dataset, self.options)
        summary: dict[str, Any] = {"version_before": dataset.version, "options": self.options}
        tasks = list(plan.tasks)
        if not tasks:
            return {**summary, "version_after": dataset.version, "groups": 0, "note": "nothing to compact"}
        results: list[Any] = []
        try:
            for number, task in enumerate(tasks):
                context.check_cancelled()
                context.report_progress(number, len(tasks), f"compacting group {number + 1} of {len(tasks)}")
                results.append(task.execute(dataset))
            context.checkpoint("before-commit")
            metrics = Compaction.commit(dataset, results, self.options)
        except BaseException:
            _delete_uncommitted(context.runtime, results)
            raise
        context.report_progress(len(tasks), len(tasks), "committed")
        after = _dataset(context.runtime)
        return {
            **summary,
            "version_after": after.version,
            "groups": len(tasks),
            "fragments_removed": metrics.fragments_removed,
            "fragments_added": metrics.fragments_added,
            "files_removed": metrics.files_removed,
            "files_added": metrics.files_added,
            "rows": after.count_rows(),
        }


def _delete_uncommitted(runtime: Any, results: list[Any]) -> None:
    """Delete the data files written by executed tasks, unless the latest version references them
    (a commit that raised after landing)."""
    written = [f.path for result in results for metadata in result.new_fragments for f in metadata.files]
    if not written:
        return
    latest = _dataset(runtime)
    referenced = {f.path for fragment in latest.get_fragments() for f in fragment.metadata.files}
    files = Files(runtime.location, runtime.store_options())
    guard = runtime.guard()
    for relative in written:
        if relative in referenced:
            continue
        try:
            guard.delete(files.data_path(relative), runtime.store_options())
        except OutsideTable:
            logger.warning("left %s in place: the table's path guard refuses it", relative)


class LanceRewriteFactory(_LanceFactory):
    name = "lance-rewrite"
    description = "Compacts Lance datasets: merges small fragments, materialises deletions"
    action = REWRITE
    on_new_snapshot = True
    _options = {
        "target-rows-per-fragment": {"type": "integer", "minimum": 1, "maximum": MAX_INT32},
        "materialize-deletions": {"type": "boolean"},
        "materialize-deletions-threshold": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    }
    properties_schema = {
        "type": "object",
        "properties": {
            **_SCHEDULE,
            **_options,
            "num-threads": {"type": "integer", "minimum": 1, "maximum": MAX_CONCURRENCY},
        },
    }
    default_properties = {
        "interval": 3600,
        "parallelism": 1,
        "target-rows-per-fragment": 1024 * 1024,
        "materialize-deletions": True,
        "materialize-deletions-threshold": 0.1,
        "num-threads": 1,
    }
    params_schema = {"type": "object", "properties": _options, "additionalProperties": False}

    def process(self, runtime: Any, params: dict[str, Any]) -> TableProcess:
        return LanceRewriteProcess(params, runtime.config)

    def trigger(self, runtime: Any, action: str) -> TableProcess | None:
        plan = _plan(_dataset(runtime), _compaction_options({}, runtime.config))
        if not plan.num_tasks():
            return runtime.nothing_to_do(NO_COMPACTION)
        return self.process(runtime, {})

    def preview(self, runtime: Any, action: str, params: dict[str, Any]) -> Preview:
        options = _compaction_options(params, runtime.config)
        plan = _plan(_dataset(runtime), options)
        preview = Preview(groups=plan.num_tasks(), details={"read_version": plan.read_version})
        rows_in = 0
        for task in plan.tasks:
            files, size, rows = _task_facts(task)
            preview.files_in += files
            preview.bytes_in += size
            # a task writes its rows as one fragment (files of at most Lance's default 1 Mi rows)
            preview.files_out += max(1, math.ceil(rows / MAX_ROWS_PER_FILE))
            rows_in += rows
        preview.bytes_out = preview.bytes_in
        preview.details["rows"] = rows_in
        if not preview.groups:
            preview.notes.append(NO_COMPACTION)
        return preview


# --- expire-snapshots ------------------------------------------------------------------------------


def _cleanup_arguments(params: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    merged = {**LanceExpireSnapshotsFactory.default_properties, **config, **params}
    return {
        "older_than": dt.timedelta(hours=float(merged["older-than-hours"])),
        "retain_versions": int(merged["retain-versions"]),
        "error_if_tagged_old_versions": False,  # tagged versions are kept, never an error
        "delete_unverified": False,  # files of a transaction still in flight stay
    }


def _check_guard(context: ProcessContext) -> None:
    """Lance's own cleanup deletes the files: it cannot be told to keep off a registered table
    nested in the dataset folder, so it does not run then (nor when the dataset's location is
    outside the allowed roots); ``ProcessInputError``, nothing deleted."""
    guard = context.guard
    try:
        guard.check_location()
    except OutsideTable as refused:
        raise ProcessInputError(f"nothing was deleted: {refused}") from None
    if guard.others:
        raise ProcessInputError(
            f"nothing was deleted: registered table(s) {', '.join(guard.others[:5])} lie inside this Lance"
            " dataset, and Lance's cleanup cannot be told to keep off them"
        )


def _stats(stats: Any) -> dict[str, int]:
    names = (
        "old_versions",
        "bytes_removed",
        "data_files_removed",
        "deletion_files_removed",
        "index_files_removed",
        "transaction_files_removed",
    )
    return {name: int(getattr(stats, name)) for name in names}


class LanceExpireSnapshotsProcess(TableProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(EXPIRE_SNAPSHOTS, params)
        self.arguments = _cleanup_arguments(params, config)
        self.dry_run = bool(params.get("dry-run", False))

    def run(self, context: ProcessContext) -> dict[str, Any]:
        _check_guard(context)
        dataset = _dataset(context.runtime)
        before = [int(v["version"]) for v in dataset.versions()]
        tagged = sorted({int(t["version"]) for t in dataset.tags.list().values()})
        summary: dict[str, Any] = {
            "dry_run": self.dry_run,
            "older_than_hours": self.arguments["older_than"].total_seconds() / 3600,
            "retain_versions": self.arguments["retain_versions"],
            "tagged_versions": tagged,
            "versions_before": len(before),
        }
        context.report_progress(0, 1, "planning")
        if self.dry_run:
            explained = dataset.explain_cleanup_old_versions(**self.arguments)
            return {**summary, **_stats(explained.stats)}
        context.checkpoint("before-commit")
        stats = dataset.cleanup_old_versions(**self.arguments)
        after = [int(v["version"]) for v in _dataset(context.runtime).versions()]
        context.report_progress(1, 1, "done")
        return {
            **summary,
            **_stats(stats),
            "versions_after": len(after),
            "expired": sorted(set(before) - set(after)),
        }


class LanceExpireSnapshotsFactory(_LanceFactory):
    name = "lance-expire-snapshots"
    description = "Removes old Lance versions (tagged versions kept) and the files only they used"
    action = EXPIRE_SNAPSHOTS
    _options = {
        "older-than-hours": {"type": "number", "minimum": 0, "maximum": MAX_AGE_HOURS},
        "retain-versions": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT},
    }
    properties_schema = {"type": "object", "properties": {**_SCHEDULE, **_options}}
    default_properties = {"interval": 86400, "parallelism": 1, "older-than-hours": 168, "retain-versions": 1}
    params_schema = {
        "type": "object",
        "properties": {**_options, "dry-run": {"type": "boolean"}},
        "additionalProperties": False,
    }

    def process(self, runtime: Any, params: dict[str, Any]) -> TableProcess:
        return LanceExpireSnapshotsProcess(params, runtime.config)

    def trigger(self, runtime: Any, action: str) -> TableProcess | None:
        explained = _dataset(runtime).explain_cleanup_old_versions(**_cleanup_arguments({}, runtime.config))
        if not explained.stats.old_versions:
            return runtime.nothing_to_do(NO_OLD_VERSIONS)
        return self.process(runtime, {})

    def preview(self, runtime: Any, action: str, params: dict[str, Any]) -> Preview:
        arguments = _cleanup_arguments(params, runtime.config)
        explained = _dataset(runtime).explain_cleanup_old_versions(**arguments)
        stats = _stats(explained.stats)
        files = sum(v for k, v in stats.items() if k.endswith("_files_removed"))
        preview = Preview(objects_to_delete=files, bytes_to_delete=stats["bytes_removed"], details=stats)
        preview.notes.extend(explained.warnings)
        if not stats["old_versions"]:
            preview.notes.append(NO_OLD_VERSIONS)
        return preview


# --- optimize-indices ------------------------------------------------------------------------------


def _unindexed(dataset: Any) -> dict[str, int]:
    """Index name -> fragments it does not cover yet."""
    found = {}
    for index in dataset.describe_indices():
        statistics = dataset.stats.index_stats(index.name)
        found[index.name] = int(statistics.get("num_unindexed_fragments") or 0)
    return found


class LanceOptimizeIndicesProcess(TableProcess):
    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(OPTIMIZE_INDICES, params)

    def run(self, context: ProcessContext) -> dict[str, Any]:
        dataset = _dataset(context.runtime)
        before = _unindexed(dataset)
        if not any(before.values()):
            return {"indices": sorted(before), "version_before": dataset.version, "note": "nothing to do"}
        context.checkpoint("before-commit")
        dataset.optimize.optimize_indices()
        after = _dataset(context.runtime)
        return {
            "indices": sorted(before),
            "version_before": dataset.version,
            "version_after": after.version,
            "unindexed_fragments_before": before,
            "unindexed_fragments_after": _unindexed(after),
        }


class LanceOptimizeIndicesFactory(_LanceFactory):
    name = "lance-optimize-indices"
    description = "Adds fragments written since a Lance index was built to the index"
    action = OPTIMIZE_INDICES
    on_new_snapshot = True
    properties_schema = {"type": "object", "properties": dict(_SCHEDULE)}
    default_properties = {"interval": 3600, "parallelism": 1}
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def process(self, runtime: Any, params: dict[str, Any]) -> TableProcess:
        return LanceOptimizeIndicesProcess(params)

    def trigger(self, runtime: Any, action: str) -> TableProcess | None:
        if not any(_unindexed(_dataset(runtime)).values()):
            return runtime.nothing_to_do("nothing to do: every index covers every fragment")
        return self.process(runtime, {})
