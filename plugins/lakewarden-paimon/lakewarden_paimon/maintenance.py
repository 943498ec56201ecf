"""Process factories for Paimon tables: ``expire-snapshots`` and ``clean-orphan-files``.

Both plan from metadata first (``_cleanup``), so ``preview`` and ``dry-run`` answer without
deleting anything. Expiry takes Paimon's own table options when the table sets them
(``snapshot.num-retained.min``, ``snapshot.num-retained.max``, ``snapshot.time-retained``,
``snapshot.expire.limit``), else the factory's properties; run-now parameters win over both.

Compaction of primary-key tables is not offered: merging an LSM bucket's sorted runs is a Paimon
writer's job (its compaction keeps sequence numbers and changelog semantics). ``declined_actions``
says so, for a console that shows declined actions with their reason.
"""

from __future__ import annotations

import re
from typing import Any

from lakewarden_paimon import _cleanup, _meta
from processes.maintenance.schemas import INTERVAL, MAX_AGE_SECONDS, MAX_INT32, PARALLELISM
from processes.plugin import (
    CLEAN_ORPHAN_FILES,
    EXPIRE_SNAPSHOTS,
    REWRITE,
    Preview,
    ProcessContext,
    ProcessFactory,
    ProcessInputError,
    ProcessRecord,
    TableProcess,
    TriggerStrategy,
)
from storage.io.guard import kept_summary
from storage.wording import counted

FORMAT = "paimon"
LIST_LIMIT = 50
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|min|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1}
COMPACTION_NOTE = (
    "Compaction of Paimon primary-key tables is done by a Paimon writer (Flink or Spark with "
    "Paimon, or a dedicated compaction job): it merges an LSM bucket's sorted runs keeping sequence "
    "numbers and changelogs, which Lakewarden does not rewrite."
)


def paimon_duration_ms(value: str) -> int:
    """A Paimon duration option (``1 h``, ``30 min``, ``3600 s``) in milliseconds."""
    match = _DURATION.match(str(value).lower())
    if not match:
        raise ValueError(f"cannot read the Paimon duration {value!r}")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


_INTEGER = {"type": "integer", "minimum": 1, "maximum": MAX_INT32}  # Paimon's options are Java ints
_SCHEDULING = {"interval": INTERVAL, "parallelism": PARALLELISM}
_DRY_RUN = {"dry-run": {"type": "boolean"}}
_EXPIRE_RULES = {
    "retain-min": _INTEGER,
    "retain-max": _INTEGER,
    "time-retained-seconds": {"type": "integer", "minimum": 0, "maximum": MAX_AGE_SECONDS},
    "expire-limit": _INTEGER,
}
_MIN_AGE = {"older-than-seconds": {"type": "integer", "minimum": 3600, "maximum": MAX_AGE_SECONDS}}


def _schema(*groups: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema object of the named properties, nothing else allowed."""
    return {
        "type": "object",
        "properties": {k: v for g in groups for k, v in g.items()},
        "additionalProperties": False,
    }


def _table(context_or_runtime: Any) -> Any:
    """The ``PaimonSpecTable`` of a runtime (``load()``) or a process context (``table``, whose
    file operations then go through the process's path guard)."""
    if hasattr(context_or_runtime, "load"):
        return context_or_runtime.load()
    table = context_or_runtime.table
    table.files.guard = context_or_runtime.guard
    return table


class _PaimonProcess(TableProcess):
    """A Paimon process that can say what it would delete before deleting it."""

    def preview(self, table: Any) -> Preview:
        raise NotImplementedError

    def check(self, table: Any) -> None:
        """Raise ``ProcessInputError`` when the parameters do not fit the table."""


class _PaimonFactory(ProcessFactory):
    action: str

    def process(self, runtime: Any, params: dict[str, Any]) -> _PaimonProcess:
        raise NotImplementedError

    def recover(self, runtime: Any, record: ProcessRecord) -> TableProcess:
        return self.process(runtime, record.params)

    def validate(self, runtime: Any, action: str, params: dict[str, Any]) -> None:
        self.process(runtime, params).check(_table(runtime))

    def supported_actions(self) -> dict[str, set[str]]:
        return {FORMAT: {self.action}}

    def declined_actions(self) -> dict[str, dict[str, str]]:
        return {FORMAT: {REWRITE: COMPACTION_NOTE}}

    def trigger_strategy(self, format: str, action: str) -> TriggerStrategy:
        return TriggerStrategy.from_properties(
            self.properties, on_new_snapshot=self.action == EXPIRE_SNAPSHOTS
        )

    def preview(self, runtime: Any, action: str, params: dict[str, Any]) -> Preview | None:
        return self.process(runtime, params).preview(_table(runtime))

    def trigger(self, runtime: Any, action: str) -> TableProcess | None:
        process = self.process(runtime, {})
        found = process.preview(_table(runtime))
        if not found.objects_to_delete:
            return runtime.nothing_to_do(found.notes[-1] if found.notes else "nothing to do")
        return process


# --- expire-snapshots --------------------------------------------------------------------------


class PaimonExpireSnapshots(_PaimonProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(EXPIRE_SNAPSHOTS, params)
        self.config = {**PaimonExpireSnapshotsFactory.default_properties, **config}

    def rules(self, store: Any) -> dict[str, int]:
        options = dict(store.table_schema.options)
        rules = {
            "retain_min": int(options.get("snapshot.num-retained.min", self.config["retain-min"])),
            "retain_max": int(options.get("snapshot.num-retained.max", self.config["retain-max"])),
            "time_retained_ms": paimon_duration_ms(options["snapshot.time-retained"])
            if "snapshot.time-retained" in options
            else int(self.config["time-retained-seconds"]) * 1000,
            "expire_limit": int(options.get("snapshot.expire.limit", self.config["expire-limit"])),
        }
        for key in ("retain-min", "retain-max", "expire-limit"):
            if key in self.params:
                rules[key.replace("-", "_")] = int(self.params[key])
        if "time-retained-seconds" in self.params:
            rules["time_retained_ms"] = int(self.params["time-retained-seconds"]) * 1000
        if rules["retain_min"] < 1 or rules["retain_max"] < rules["retain_min"]:
            raise ProcessInputError(
                f"retain-min ({rules['retain_min']}) must be at least 1 and retain-max "
                f"({rules['retain_max']}) at least retain-min"
            )
        return rules

    def check(self, table: Any) -> None:
        self.rules(table.store)

    def plan(self, table: Any) -> tuple[_cleanup.ExpirePlan, dict[str, int]]:
        store = table.store
        rules = self.rules(store)
        ids = _meta.snapshot_ids(store)
        if not ids:
            return _cleanup.ExpirePlan(), rules
        expired = _cleanup.expire_range(
            ids,
            lambda i: _meta.load_snapshot(store, i).time_millis,
            retain_min=rules["retain_min"],
            retain_max=rules["retain_max"],
            older_than_ms=_cleanup.now_ms() - rules["time_retained_ms"],
            expire_limit=rules["expire_limit"],
        )
        return _cleanup.plan_expire(store, table.files, expired), rules

    def preview(self, table: Any) -> Preview:
        plan, rules = self.plan(table)
        files = {**plan.data_files, **plan.metadata_files}
        notes = [] if plan.snapshots else ["nothing to do: no snapshot is past the retention rules"]
        return Preview(
            objects_to_delete=len(files) + len(plan.snapshots),
            bytes_to_delete=sum(files.values()),
            details={"snapshots_to_expire": plan.snapshots, "snapshots_kept": plan.kept, **rules},
            notes=notes,
        )

    def run(self, context: ProcessContext) -> dict[str, Any]:
        table = _table(context)
        plan, rules = self.plan(table)
        summary: dict[str, Any] = {
            "dry_run": bool(self.params.get("dry-run", False)),
            "expired_snapshots": plan.snapshots,
            "kept_snapshots": len(plan.kept),
            "data_files": len(plan.data_files),
            "metadata_files": len(plan.metadata_files),
            "bytes": sum(plan.data_files.values()) + sum(plan.metadata_files.values()),
            "files": sorted(plan.data_files)[:LIST_LIMIT],
            **rules,
        }
        context.report_progress(0, 1, f"expiring {counted(len(plan.snapshots), 'snapshot')}")
        if not summary["dry_run"] and plan.snapshots:
            context.checkpoint("before-commit")
            summary["deleted_files"] = _cleanup.execute_expire(
                table.store, table.files, plan, context.check_cancelled
            )
        context.report_progress(1, 1, "done")
        return {**summary, **kept_summary(table.files.kept)}


class PaimonExpireSnapshotsFactory(_PaimonFactory):
    name = "paimon-expire-snapshots"
    action = EXPIRE_SNAPSHOTS
    description = "Expire Paimon snapshots by Paimon's retention rules; delete files only they need"
    default_properties = {
        "retain-min": 10,
        "retain-max": 2147483647,
        "time-retained-seconds": 3600,
        "expire-limit": 10,
        "interval": 3600,
        "parallelism": 1,
    }
    properties_schema = _schema(_EXPIRE_RULES, _SCHEDULING)
    params_schema = _schema(_EXPIRE_RULES, _DRY_RUN)

    def process(self, runtime: Any, params: dict[str, Any]) -> _PaimonProcess:
        return PaimonExpireSnapshots(params, runtime.config)


# --- clean-orphan-files ------------------------------------------------------------------------


class PaimonCleanOrphanFiles(_PaimonProcess):
    def __init__(self, params: dict[str, Any], config: dict[str, Any]) -> None:
        super().__init__(CLEAN_ORPHAN_FILES, params)
        merged = {**PaimonCleanOrphanFilesFactory.default_properties, **config}
        self.older_than_seconds = int(params.get("older-than-seconds", merged["older-than-seconds"]))
        if self.older_than_seconds < 3600:
            raise ProcessInputError(
                "older-than-seconds must be at least 3600: a writer's files are unreferenced until it commits"
            )

    def plan(self, table: Any) -> dict[str, int]:
        older_than_ms = _cleanup.now_ms() - self.older_than_seconds * 1000
        return _cleanup.plan_orphans(table.store, table.files, older_than_ms)

    def preview(self, table: Any) -> Preview:
        orphans = self.plan(table)
        return Preview(
            objects_to_delete=len(orphans),
            bytes_to_delete=sum(orphans.values()),
            details={"files": sorted(orphans)[:LIST_LIMIT], "older_than_seconds": self.older_than_seconds},
            notes=[] if orphans else ["nothing to do: every file is referenced or too young"],
        )

    def run(self, context: ProcessContext) -> dict[str, Any]:
        table = _table(context)
        orphans = self.plan(table)
        dry_run = bool(self.params.get("dry-run", False))
        deleted = 0
        if not dry_run:
            context.checkpoint("before-commit")
            for path in orphans:
                context.check_cancelled()
                deleted += table.files.remove(path)
        context.report_progress(1, 1, "done")
        return {
            "dry_run": dry_run,
            "orphan_files": len(orphans),
            "deleted_files": deleted,
            "bytes": sum(orphans.values()),
            "files": sorted(orphans)[:LIST_LIMIT],
            "older_than_seconds": self.older_than_seconds,
            **kept_summary(table.files.kept),
        }


class PaimonCleanOrphanFilesFactory(_PaimonFactory):
    name = "paimon-clean-orphan-files"
    action = CLEAN_ORPHAN_FILES
    description = "Delete files under a Paimon table that no snapshot or tag references"
    default_properties = {"older-than-seconds": 3 * 86400, "interval": 86400, "parallelism": 1}
    properties_schema = _schema(_MIN_AGE, _SCHEDULING)
    params_schema = _schema(_MIN_AGE, _DRY_RUN)

    def process(self, runtime: Any, params: dict[str, Any]) -> _PaimonProcess:
        return PaimonCleanOrphanFiles(params, runtime.config)
