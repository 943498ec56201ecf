"""The commit of a delete-file maintenance: one ``replace`` snapshot through the catalog, validated
at the head and tried again at a new head when another writer commits first (the same loop as the
data rewrite's ``iceberg_rewrite.commit_rewrite``, for delete files)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from processes.maintenance.iceberg.deletes.state import VECTOR, LiveDelete, validate_at_head
from processes.maintenance.iceberg.validation import (
    COMMIT_ATTEMPTS,
    delete_refused_metadata,
    landed,
    snapshot_ids,
)
from processes.maintenance.outputs import RewriteOutputs
from storage.formats.iceberg.commit import NewDeleteFile, RewriteFiles, v3_metadata_writes
from storage.spec.errors import RewriteConflict

if TYPE_CHECKING:
    from pyiceberg.table import Table

logger = logging.getLogger(__name__)


def commit_deletes(
    table: Table,
    planned_snapshot_id: int,
    removed: list[LiveDelete],
    added: list[NewDeleteFile],
    process_id: int,
    operation: str,
    outputs: RewriteOutputs | None,
) -> tuple[int, int]:
    """Commit the removal of ``removed`` and the addition of ``added``: (snapshot id, commits
    tried). ``RewriteConflict`` when the plan no longer holds at the head (``validate_at_head``)
    or the catalog refused every attempt. ``outputs.keep`` is set when the commit landed despite
    an error or its outcome is unknown (the caller discards the new files otherwise)."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    table.refresh()
    known = snapshot_ids(table)
    properties = {"lakewarden.process-id": str(process_id), "lakewarden.operation": operation}
    state: dict[str, Any] = {}
    for commit in range(1, COMMIT_ATTEMPTS + 1):
        try:
            if commit > 1:
                table.refresh()
            validate_at_head(table, planned_snapshot_id, removed)
            _commit_once(table, removed, added, properties, state)
            return _head_id(table), commit
        except (CommitFailedException, ValidationException) as error:
            if landed(table, known, process_id):
                _keep(outputs)
                return _head_id(table), commit
            if "producer" in state:
                state["producer"]._clean_all_uncommitted()
            delete_refused_metadata(table.io, state.get("transaction"))
            if commit == COMMIT_ATTEMPTS:
                raise RewriteConflict(f"the catalog refused the commit {commit} times: {error}") from error
            logger.info(
                "%s of %s: commit %s was refused (%s); committing again",
                operation,
                table.name(),
                commit,
                error,
            )
        except RewriteConflict:
            raise
        except BaseException:
            if landed(table, known, process_id):
                _keep(outputs)
            raise
    raise AssertionError("unreachable")


def _head_id(table: Table) -> int:
    """The id of the table's current snapshot (there is one: a commit landed)."""
    head = table.metadata.current_snapshot()
    assert head is not None
    return head.snapshot_id


def _keep(outputs: RewriteOutputs | None) -> None:
    if outputs is not None:
        outputs.keep = True


def _commit_once(
    table: Table,
    removed: list[LiveDelete],
    added: list[NewDeleteFile],
    properties: dict[str, str],
    state: dict[str, Any],
) -> None:
    """One catalog commit (``state`` keeps its transaction and producer, for the cleanup of a
    refused one)."""
    state["transaction"] = transaction = table.transaction()
    state["producer"] = producer = RewriteFiles(
        transaction,
        removed=[],
        removed_dvs={live.key for live in removed if live.kind == VECTOR},
        added=[],
        spec_id=table.metadata.default_spec_id,
        snapshot_properties=properties,
        removed_deletes=[live.data_file for live in removed if live.kind != VECTOR],
        added_deletes=added,
    )
    producer.commit()
    with v3_metadata_writes(table):
        transaction.commit_transaction()
