"""Planning an Iceberg rewrite: the output partition spec, the compaction plan at the current
snapshot and the deletion vectors it removes. Shared by the rewrite (``iceberg_rewrite``) and its
preview (``rewrite_preview``)."""

from __future__ import annotations

import logging
from typing import Any

from processes.maintenance import planning
from processes.maintenance.errors import InputError
from processes.maintenance.planning import CompactionPlan, CompactionSettings, Ordering, clustered_snapshots
from storage.formats.iceberg.commit import DVKey
from storage.spec.models import FileContent

logger = logging.getLogger(__name__)

OUTPUT_SPEC_ID = "output-spec-id"


def spec_view(table: Any) -> Any:
    """A spec view of the pyiceberg table as it is now (a spec table caches its listings, so
    each plan takes a new one)."""
    from storage.formats.iceberg import IcebergSpecTable

    return IcebergSpecTable(table, table.location(), ".".join(table.name()))


def output_spec(table: Any, requested: int | None) -> int:
    """The partition spec the rewritten files are written in: ``requested``, else the table's
    default spec; ``ValueError`` for a spec the table does not have."""
    specs = table.metadata.specs()
    if requested is None:
        return int(table.metadata.default_spec_id)
    if requested not in specs:
        raise InputError(
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

    return planning.plan_compaction(
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


def portable_io(io: Any) -> Any:
    """A file IO of the same kind built from ``io``'s string properties only (picklable)."""
    properties = {k: v for k, v in (io.properties or {}).items() if isinstance(v, str)}
    if len(properties) == len(io.properties or {}):
        return io
    return type(io)(properties)
