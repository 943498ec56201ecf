"""Submission checks and plan previews of the rewrite factories (Iceberg and Delta ``rewrite``,
Delta ``purge-deletion-vectors``), shared by both formats.

``validate`` resolves what a run resolves before it reads a file: the output partition spec
(Iceberg ``output-spec-id``) and the ordering of a ``sort``/``zorder`` rewrite
(``compaction.resolve_ordering``: unknown or unorderable columns, a z-order over a partition
column, a sort-order of partition columns only), with the table's properties laid under the
parameters as the run lays them. A table the rewrite cannot take at all (registered without a
catalog, a protocol it cannot write) is left to the run, which fails saying why.

``preview`` plans exactly as the run plans (same settings, same snapshot or version) and counts
the plan: groups, files and bytes in, files and bytes expected out (each group split at the target
file size: ``ceil(bytes / target)`` files; an Iceberg group of an older partition spec may come
out in more files, one set per output partition; a group whose deletion vectors delete every row
writes none). Nothing is deleted by a rewrite: the replaced
files stay until snapshot expiry (Iceberg) or vacuum (Delta) removes them. The ``details`` keys
``data_files_removed``, ``data_files_added``, ``small_files_removed``, ``small_files_added`` and
``snapshots_added`` feed the predicted health score (``processes.services.process_preview``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from processes.maintenance.errors import InputError
from processes.maintenance.iceberg.plan import OUTPUT_SPEC_ID, output_spec, plan_rewrite, spec_view
from processes.maintenance.planning import (
    CompactionPlan,
    CompactionSettings,
    Ordering,
    RewriteGroup,
    delta_ordering,
    iceberg_strategy,
)
from processes.maintenance.targets import iceberg_catalog_table, store_options
from processes.plugin import PURGE_DELETION_VECTORS, Preview
from storage.formats.delta.commit import CommitRefused, open_version
from storage.io import is_local
from storage.spec.models import FileContent

if TYPE_CHECKING:
    from processes.runtime import TableRuntime

#: Groups listed one by one in a preview's details (the counts cover them all).
LISTED_GROUPS = 50


def expected_outputs(size: int, target: int, small: int) -> tuple[int, int]:
    """(files, small files) a group of ``size`` bytes is expected to be written as: files of the
    target size and one file of the remainder."""
    files = max(1, math.ceil(size / target))
    remainder = size - (files - 1) * target
    return files, int(remainder < small)


def live_rows(group: RewriteGroup) -> int | None:
    """Rows the group still holds once its deletion vectors (which name rows of one file) are
    applied; None when that is not known: no vector, other delete files (whose counts are not per
    data file), or a file without its row count."""
    deleted = 0
    for file_slice in group.slices:
        if file_slice.base_file is None or not file_slice.base_file.extra.get("record_count_known", True):
            return None
        for delete_file in file_slice.delete_files:
            if delete_file.content is not FileContent.DELETION_VECTOR:
                return None
            deleted += delete_file.record_count
    return group.record_count - deleted if deleted else None


def preview_of(
    plan: CompactionPlan, settings: CompactionSettings, *, small_file_bytes: int, **details: Any
) -> Preview:
    """The preview of a compaction plan (see the module docstring for what is counted)."""
    outputs = [
        expected_outputs(g.size_bytes, settings.target_file_size, small_file_bytes)
        if live_rows(g) != 0
        else (0, 0)
        for g in plan.groups
    ]
    slices = [s for g in plan.groups for s in g.slices]
    files_out = sum(files for files, _ in outputs)
    preview = Preview(
        groups=len(plan.groups),
        files_in=plan.files_in,
        bytes_in=plan.bytes_in,
        files_out=files_out,
        bytes_out=sum(g.size_bytes for g, (files, _) in zip(plan.groups, outputs, strict=True) if files),
        details={
            "strategy": plan.ordering.signature if plan.ordering is not None else "binpack",
            "partitions": plan.partitions,
            "rows_in": sum(g.record_count for g in plan.groups),
            "delete_files_applied": sum(len(s.delete_files) for s in slices),
            "target_file_size": settings.target_file_size,
            "data_files_removed": plan.files_in,
            "data_files_added": files_out,
            "small_files_removed": sum(1 for s in slices if s.base.size_bytes < small_file_bytes),
            "small_files_added": sum(small for _, small in outputs),
            "snapshots_added": int(not plan.empty),
            "group_list": [
                {
                    "partition": g.partition.path,
                    "files": len(g.slices),
                    "bytes": g.size_bytes,
                    "rows": g.record_count,
                }
                for g in plan.groups[:LISTED_GROUPS]
            ],
            **details,
        },
    )
    if plan.empty:
        preview.notes.append(rewrite_idle_note(settings, plan.ordering))
    else:
        preview.notes.append(
            "the replaced files stay on storage (time travel) until snapshot expiry or vacuum deletes them"
        )
    return preview


def rewrite_idle_note(settings: CompactionSettings, ordering: Ordering | None) -> str:
    """Why a compaction plan is empty (the preview's note and the scheduler's decision)."""
    if ordering is not None:
        return f"nothing to do: every partition is already clustered by {ordering.signature}"
    return (
        f"nothing to do: no partition has {settings.min_input_files} files under"
        f" {settings.small_file_size} bytes (or enough to fill a {settings.target_file_size}-byte file)"
    )


# --- Iceberg -------------------------------------------------------------------------------------


@dataclass
class IcebergRewriteInputs:
    table: Any
    spec_id: int
    settings: CompactionSettings
    ordering: Ordering | None


def iceberg_inputs(
    runtime: TableRuntime, params: dict[str, Any], *, strict: bool = False
) -> IcebergRewriteInputs | None:
    """What an Iceberg rewrite with ``params`` resolves before reading a file; ``InputError`` for
    parameters the table cannot take; None for a table without a catalog (``strict``: an
    ``InputError``)."""
    settings = CompactionSettings.from_config({**runtime.config, **params})
    table = iceberg_catalog_table(runtime, strict=strict)
    if table is None:
        return None
    try:
        spec_id = output_spec(table, params.get(OUTPUT_SPEC_ID))
    except ValueError as error:
        raise InputError(str(error)) from None
    ordering = iceberg_strategy(table.metadata, spec_id, settings, spec_view(table).schema)
    return IcebergRewriteInputs(table, spec_id, settings, ordering)


def iceberg_preview(runtime: TableRuntime, params: dict[str, Any]) -> Preview:
    inputs = iceberg_inputs(runtime, params, strict=True)
    assert inputs is not None
    spec = spec_view(inputs.table)
    plan = plan_rewrite(spec, inputs.settings, output_spec_id=inputs.spec_id, ordering=inputs.ordering)
    preview = preview_of(
        plan,
        inputs.settings,
        small_file_bytes=spec.file_index().small_file_bytes(),
        snapshot_id=plan.instant,
        output_spec_id=inputs.spec_id,
    )
    if any(g.slices[0].base.extra.get("spec_id", inputs.spec_id) != inputs.spec_id for g in plan.groups):
        preview.notes.append(
            "files of older partition specs are split by the output spec's partitions: they may come out"
            " in more files than expected"
        )
    return preview


# --- Delta ---------------------------------------------------------------------------------------


def delta_validate(process: Any, runtime: TableRuntime) -> None:
    """``InputError`` for parameters a Delta rewrite of this table cannot take (a purge takes none
    the table could refuse)."""
    if process.action == PURGE_DELETION_VECTORS:
        return
    delta_ordering(open_version(runtime.location, storage=store_options(runtime)), process.settings)


def delta_preview(process: Any, runtime: TableRuntime, layout: Callable[[Any], Any]) -> Preview:
    """The preview of a Delta rewrite or purge ``process``; ``layout`` is the writer's check of
    the table (``CommitRefused`` for a table the rewrite cannot write: an ``InputError`` here)."""
    delta_validate(process, runtime)
    spec = open_version(runtime.location, storage=store_options(runtime))
    try:
        layout(spec)
    except CommitRefused as refused:
        raise InputError(str(refused)) from None
    plan, notes = process.plan(spec, in_place=not is_local(runtime.location))
    preview = preview_of(
        plan, process.settings, small_file_bytes=spec.file_index().small_file_bytes(), version=spec.version
    )
    preview.details.update({k: v for k, v in notes.items() if k != "note"})
    if notes.get("note"):
        preview.notes.append(str(notes["note"]))
    return preview
