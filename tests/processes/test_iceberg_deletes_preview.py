"""Plan previews of the Iceberg delete-file actions: delete files in and expected out, counted from
the plan the run makes, with nothing written; the run then does what the preview said."""

from __future__ import annotations

import pytest

from processes.maintenance.iceberg.deletes import IcebergDeletesFactory
from processes.models import Process, ProcessStatus
from processes.plugin import ProcessInputError
from processes.runtime import TableRuntime
from tests.processes.test_iceberg_deletes import (  # noqa: F401  (fixtures)
    equality_table,
    files_under,
    live_deletes,
    position_table,
    run,
)

pytestmark = pytest.mark.django_db(transaction=True)


def preview(console_table, action: str, params: dict | None = None):
    factory = IcebergDeletesFactory()
    return factory.preview(TableRuntime(console_table, factory.properties), action, params or {})


def unchanged(table, head: int, files: set[str]) -> bool:
    table.refresh()
    return table.current_snapshot().snapshot_id == head and files_under(table) == files


def test_the_position_delete_preview_counts_the_files_in_and_out_and_writes_nothing(position_table, run):
    console_table, table, _, _ = position_table
    head, files = table.current_snapshot().snapshot_id, files_under(table)
    live = [f for f, _ in live_deletes(table)]

    seen = preview(console_table, "rewrite-position-deletes")

    assert (seen.groups, seen.files_in, seen.files_out) == (2, 7, 2)
    assert seen.bytes_in == sum(f.file_size_in_bytes for f in live)
    assert seen.details["entries_in"] == 11 and seen.details["removed_position_delete_files"] == 7
    assert seen.details["snapshots_added"] == 1 and seen.objects_to_delete == 0
    assert unchanged(table, head, files) and Process.objects.count() == 0

    process = run(console_table, "rewrite-position-deletes")
    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["removed_delete_files"] == seen.files_in
    assert process.summary["added_delete_files"] == seen.files_out
    assert process.summary["entries_in"] == seen.details["entries_in"]


def test_the_dangling_delete_preview_names_the_files_the_run_removes(position_table, run):
    console_table, table, _, dangling = position_table
    head, files = table.current_snapshot().snapshot_id, files_under(table)

    seen = preview(console_table, "remove-dangling-deletes")

    assert (seen.files_in, seen.files_out, seen.groups) == (2, 0, 0)
    assert seen.details["removed_files"] == dangling and seen.details["delete_files_read"] == 4
    assert unchanged(table, head, files)
    process = run(console_table, "remove-dangling-deletes")
    assert process.summary["removed_files"] == seen.details["removed_files"]

    after = preview(console_table, "remove-dangling-deletes")
    assert after.files_in == 0 and after.notes == ["nothing to do: every delete file can still delete a row"]


def test_the_equality_conversion_preview_expects_one_file_per_partition(equality_table, run):
    from processes import services

    console_table, table = equality_table
    head, files = table.current_snapshot().snapshot_id, files_under(table)

    answer = services.process_preview(table=console_table, action="convert-equality-deletes", params={})

    assert (answer["files_in"], answer["files_out"]) == (3, 2)
    assert answer["details"]["removed_equality_delete_files"] == 3
    assert answer["details"]["data_files_to_read"] == 4
    assert unchanged(table, head, files) and Process.objects.count() == 0
    process = run(console_table, "convert-equality-deletes")
    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert (process.summary["removed_delete_files"], process.summary["added_delete_files"]) == (3, 2)


def test_a_preview_of_what_the_run_refuses_says_why(position_table):
    console_table, _, _, _ = position_table
    with pytest.raises(ProcessInputError, match="parameter of rewrite-position-deletes only"):
        preview(console_table, "remove-dangling-deletes", {"min-delete-files": 2})
