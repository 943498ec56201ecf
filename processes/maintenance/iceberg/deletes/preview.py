"""Submission checks and plan previews of the delete-file actions (``IcebergDeletesFactory.
validate`` and ``preview``).

``validate`` refuses what the run would refuse before reading a file: a parameter of another
action, a writing action on a v3 table (position delete files must not be added there), v3
metadata the commit cannot carry. A table registered without a catalog is left to the run.

``preview`` plans exactly as the run plans, at the current snapshot, and writes nothing: the
delete files in (how many of each kind, their bytes and entries; for a deletion vector its blob's
size), the delete files expected out (``rewrite-position-deletes``: one per partition compacted,
on a v3 table at most one deletion vector per data file the entries may name;
``convert-equality-deletes``: at most one per partition of the data files the equality deletes
apply to, none where they match no row, on a v3 table at most one deletion vector per such data
file; ``remove-dangling-deletes``: none). Like the run,
``remove-dangling-deletes`` reads the contents of position delete files whose metadata cannot
tell which data files they name. Nothing is deleted from storage by these actions: the replaced
delete files stay until snapshot expiry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from processes.maintenance.errors import InputError
from processes.maintenance.iceberg.deletes.state import VECTOR, LiveDelete, removed_summary
from processes.maintenance.targets import iceberg_commit_target
from processes.plugin import CONVERT_EQUALITY_DELETES, REWRITE_POSITION_DELETES, Preview
from storage.formats.iceberg.commit import CONTENT_SIZE

if TYPE_CHECKING:
    from processes.runtime import TableRuntime

NOTHING_TO_DO = {
    "remove-dangling-deletes": "nothing to do: every delete file can still delete a row",
    REWRITE_POSITION_DELETES: "nothing to do: no partition holds {min_files} position delete files",
    CONVERT_EQUALITY_DELETES: "nothing to do: the table has no live equality delete file",
}


def delete_validate(
    process_class: Any, runtime: TableRuntime, params: dict[str, Any], *, strict: bool = False
) -> Any:
    """The process for ``params`` (``InputError`` for a parameter of another action) checked
    against the table when it has a catalog; returns (process, catalog table or None: without a
    catalog the run says why; ``strict``: ``InputError`` saying so)."""
    try:
        process = process_class(dict(params), runtime.config)
    except ValueError as error:
        raise InputError(str(error)) from None
    try:
        table = iceberg_commit_target(runtime.load())
    except ValueError as error:
        if strict:
            raise InputError(str(error)) from None
        return process, None
    try:
        process.check_table(table)
    except ValueError as error:
        raise InputError(str(error)) from None
    return process, table


def delete_preview(process_class: Any, runtime: TableRuntime, params: dict[str, Any]) -> Preview:
    """What the action would do now (module docstring); ``InputError`` for what the run refuses."""
    process, table = delete_validate(process_class, runtime, params, strict=True)
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return Preview(notes=["nothing to do: the table has no snapshot"])
    plan = process.plan(table, snapshot)
    groups, files_out = _outputs(process.action_name, plan, vectors=table.metadata.format_version >= 3)
    preview = Preview(
        groups=groups,
        files_in=len(plan.removed),
        bytes_in=sum(_size(live) for live in plan.removed),
        files_out=files_out,
        details={
            **removed_summary(plan.removed),
            **plan.summary,
            "planned_snapshot_id": plan.snapshot_id,
            "entries_in": sum(int(live.data_file.record_count) for live in plan.removed),
            "delete_files_removed": len(plan.removed),
            "delete_files_added": files_out,
            "snapshots_added": int(bool(plan.removed)),
        },
    )
    if plan.removed:
        preview.notes.append("the replaced delete files stay on storage until snapshot expiry deletes them")
    else:
        preview.notes.append(NOTHING_TO_DO[process.action_name].format(min_files=process.min_files))
    return preview


def _outputs(action: str, plan: Any, *, vectors: bool) -> tuple[int, int]:
    """(groups, delete files expected out) of a plan (``vectors``: a v3 table's)."""
    if not plan.removed:
        return 0, 0
    if action == REWRITE_POSITION_DELETES:
        if vectors:  # a vector per data file the entries may name, one Puffin file per partition
            named = {path for group in plan.work for live in group.deletes for path in live.applies_to}
            return len(plan.work), len(named)
        return len(plan.work), len(plan.work)
    if action == CONVERT_EQUALITY_DELETES:
        state = plan.work[0]
        if vectors:  # one vector per data file (its old one merged in), in one Puffin file
            return 1, len(state.equality_targets)
        scopes = {
            (t.base_file.extra.get("spec_id"), t.partition.path if t.partition is not None else "")
            for t in state.equality_targets
        }
        return len(scopes), len(scopes)
    return 0, 0


def _size(live: LiveDelete) -> int:
    """A delete file's bytes; a deletion vector's are its blob's (its Puffin file holds others)."""
    if live.kind == VECTOR and live.data_file[CONTENT_SIZE] is not None:
        return int(live.data_file[CONTENT_SIZE])
    return int(live.data_file.file_size_in_bytes)
