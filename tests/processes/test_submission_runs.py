"""Runs against what was validated and previewed: parameters that stopped fitting the table end
FAILED without an automatic retry, and a rewrite does what its preview said (Iceberg and Delta),
shown side by side on the process page."""

from __future__ import annotations

import pytest

from processes.models import Process, ProcessStatus
from storage.models import Table
from tests.processes.conftest import delta_files, iceberg_files
from tests.processes.test_delta_deletion_vectors import dv_table  # noqa: F401 (a fixture)
from tests.processes.test_submission import tree


@pytest.fixture
def submit(transactional_db, monkeypatch):
    """``submit(table, action, params)`` -> a PENDING Process (nothing sent to Celery)."""
    from processes import services

    monkeypatch.setattr(services, "process_enqueue", lambda process: None)

    def create(table, action: str, params: dict) -> Process:
        return services.process_create(table=table, action=action, params=params)

    return create


def run(process: Process) -> Process:
    from processes import executor

    executor.run_process(process.pk)
    process.refresh_from_db()
    return process


def test_parameters_that_stopped_fitting_the_table_fail_without_a_retry(make_iceberg, submit, settings):
    settings.LAKEWARDEN_MAX_RETRIES = 3
    console_table, table = make_iceberg(files=4, rows_per_file=5)
    process = submit(console_table, "rewrite", {"strategy": "zorder", "zorder-columns": ["id", "name"]})
    with table.update_schema() as update:  # another writer drops the column meanwhile
        update.delete_column("name")
    table.refresh()
    snapshot, files = table.current_snapshot().snapshot_id, iceberg_files(table)

    process = run(process)

    assert process.status == ProcessStatus.FAILED
    assert "zorder-columns: unknown column(s) name" in process.failure
    assert "not retried" in process.failure
    assert process.attempt == 1 and not Process.objects.filter(retry_of=process).exists()
    assert Process.objects.count() == 1
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot and iceberg_files(table) == files


def test_table_properties_that_stopped_fitting_fail_without_a_retry(make_delta, submit, settings):
    settings.LAKEWARDEN_MAX_RETRIES = 3
    console_table, path = make_delta(files=3)
    process = submit(console_table, "rewrite", {})
    Table.objects.filter(pk=console_table.pk).update(properties={"strategy": "sort", "sort-order": ["gone"]})
    files = delta_files(path)

    process = run(process)

    assert process.status == ProcessStatus.FAILED
    assert "sort-order: unknown column(s) gone" in process.failure
    assert process.attempt == 1 and not Process.objects.filter(retry_of=process).exists()
    assert delta_files(path) == files


def check_prediction(process: Process, preview: dict) -> None:
    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    for key in ("groups", "files_in", "bytes_in", "files_out"):
        assert preview[key] == process.preview[key] == summary[key], key
    assert preview["details"]["partitions"] == summary["partitions"]


def check_page(client, process: Process) -> None:
    page = client.get(process.get_absolute_url()).content.decode()
    assert "Predicted and done" in page
    files_in = process.summary["files_in"]
    assert f"<tr><th>files in</th><td>{files_in}</td><td>{files_in}</td></tr>" in page


def test_an_iceberg_rewrite_does_what_its_preview_said(make_iceberg, run_now, client_as, operator):
    from processes import services

    console_table, table = make_iceberg(files=6, rows_per_file=5, partitioned=True)
    location = table.location().removeprefix("file://")
    before, metadata, folder = iceberg_files(table), table.metadata_location, tree(location)

    preview = services.process_preview(table=console_table, action="rewrite", params={"min-input-files": 2})

    table.refresh()
    assert table.metadata_location == metadata and tree(location) == folder  # the preview wrote nothing
    assert preview["groups"] == 2 and preview["files_in"] == 6 and preview["files_out"] == 2
    assert sorted(g["partition"] for g in preview["details"]["group_list"]) == ["region=eu", "region=us"]
    process = run_now(console_table, "rewrite", {"min-input-files": 2})
    check_prediction(process, preview)
    assert not before & iceberg_files(table)  # every planned file was replaced
    check_page(client_as(operator), process)


def test_a_delta_rewrite_does_what_its_preview_said(make_delta, run_now, client_as, operator):
    from processes import services

    console_table, path = make_delta(files=6, partitioned=True)
    before, folder = delta_files(path), tree(path)

    preview = services.process_preview(table=console_table, action="rewrite", params={"min-input-files": 2})

    assert tree(path) == folder  # the preview wrote nothing
    assert preview["groups"] == 2 and preview["files_in"] == 6 and preview["files_out"] == 2
    assert preview["details"]["version"] == 5
    process = run_now(console_table, "rewrite", {"min-input-files": 2})
    check_prediction(process, preview)
    assert not before & delta_files(path)
    check_page(client_as(operator), process)


def test_a_purge_does_what_its_preview_said(dv_table, run_now):  # noqa: F811 (the fixture)
    from processes import services

    # file 0: 5 of 10 rows deleted, file 1: 1 of 10, file 3: every row (it leaves no file)
    console_table, path, _ = dv_table(files=6, deleted={0, 2, 4, 6, 8, 15, *range(30, 40)})

    params = {"deleted-ratio-threshold": 0.3}
    folder = tree(path)

    preview = services.process_preview(table=console_table, action="purge-deletion-vectors", params=params)

    assert tree(path) == folder
    assert preview["files_in"] == 2 and preview["files_out"] == 1
    assert preview["details"]["deleted_rows_purged"] == 15 and preview["details"]["delete_files_applied"] == 2
    process = run_now(console_table, "purge-deletion-vectors", params)
    check_prediction(process, preview)
