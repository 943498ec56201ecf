"""Validation at the head and the bookkeeping around one catalog commit of a ``replace``.

``validate_rewrite`` checks a data rewrite's plan against the table's (refreshed) head;
``iceberg_data_file`` builds the DataFile of a new file from its footer; ``snapshot_ids`` and
``landed`` tell whether a commit of a process reached the table despite an error (each commit of a
partial-progress rewrite is told apart from the earlier ones by the snapshots known before it);
``delete_refused_metadata`` takes back what a refused commit wrote; ``planned_twice`` runs a
process's plan-write-commit attempt at most twice (a plan that did not hold at the head is planned
again once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from processes.maintenance.iceberg.lineage import statistics_inputs
from processes.maintenance.planning import CompactionPlan
from storage.spec.errors import RewriteConflict

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

logger = logging.getLogger(__name__)

#: Catalog commits tried per written plan when another writer commits in between.
COMMIT_ATTEMPTS = 4


def planned_twice(attempt: Callable[[int], dict[str, Any] | None], swept: list[str]) -> dict[str, Any]:
    """The summary of ``attempt(1)``, or of ``attempt(2)`` when the first answered None (plan
    again at the new head; the second always answers), with ``swept_leftover_objects`` when the
    run first swept the objects of ended processes."""
    for number in (1, 2):
        summary = attempt(number)
        if summary is not None:
            if swept:
                summary["swept_leftover_objects"] = len(swept)
            return summary
    raise AssertionError("a second attempt answers a summary")


DELETE_FILE_SUMMARY_KEYS = (
    "added-delete-files",
    "added-position-delete-files",
    "added-equality-delete-files",
    "added-dvs",
)


def validate_rewrite(table: Table, plan: CompactionPlan) -> dict[str, Any]:
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


def _snapshots_since(metadata: TableMetadata, head: Any, instant: Any) -> set[int]:
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


def iceberg_data_file(table: Table, path: str, partition: Any, spec_id: int, size: int) -> Any:
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


def snapshot_ids(table: Table) -> set[int]:
    """The ids of the table's snapshots as its loaded metadata has them."""
    return {snapshot.snapshot_id for snapshot in table.metadata.snapshots}


def landed(table: Table, known: set[int], process_id: int) -> bool:
    """Whether a commit of this process reached the table despite an error (unknown outcome): a
    snapshot of the process that is not among ``known`` (the snapshots before the commit)."""
    try:
        table.refresh()
    except Exception:
        return True  # cannot tell: keep the files (an orphan is safer than a missing file)
    wanted = str(process_id)
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if summary.get("lakewarden.process-id") == wanted and snapshot.snapshot_id not in known:
            return True
    return False


def delete_refused_metadata(io: FileIO, transaction: Any) -> None:
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
