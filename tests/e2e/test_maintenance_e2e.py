"""Maintenance on Spark with real `celery worker` and `celery beat` processes: compaction by the
trigger alone, workers killed mid-rewrite and just before the commit, Delta processes that must
never overlap."""

from __future__ import annotations

import pytest

from processes.models import PluginConfig, Process, ProcessStatus, ProcessTrigger
from processes.registry import configured_factories
from processes.services import STAGING_FOLDER
from processes.workers import lost_noticed_within
from tests.e2e.conftest import assert_lost_in_time, only_factory, process_status, wait_for
from tests.processes.conftest import (  # noqa: F401  (fixtures)
    iceberg_catalog,
    iceberg_files,
    iceberg_rows,
    make_delta,
    make_iceberg,
    multiset,
)

pytestmark = pytest.mark.e2e


def test_a_table_of_two_hundred_small_files_is_compacted_by_the_trigger_alone(celery_processes, make_iceberg):
    table, iceberg = make_iceberg(files=200, rows_per_file=5, partitioned=True)
    before_rows, before_files = multiset(iceberg_rows(iceberg)), iceberg_files(iceberg)
    only_factory("iceberg-rewrite")
    celery_processes.start_worker(name="light", queues="light", concurrency=1)
    celery_processes.start_worker(name="heavy", queues="heavy", concurrency=1)
    celery_processes.start_beat()
    celery_processes.wait_for_workers(count=2)

    done = wait_for(
        lambda: Process.objects.filter(
            table=table, action="rewrite", status__in=["SUCCESS", "FAILED"]
        ).first(),
        timeout=180,
        message="the scheduled compaction to finish\n" + celery_processes.logs(),
    )

    assert done.status == ProcessStatus.SUCCESS, done.failure
    assert done.trigger == ProcessTrigger.SCHEDULE
    after_files = iceberg_files(iceberg)
    assert multiset(iceberg_rows(iceberg)) == before_rows
    assert len(before_files) == 200 and len(after_files) == 2  # one file per region partition
    assert done.summary["files_in"] == 200 and done.summary["files_out"] == 2
    from pathlib import Path

    staging = Path(iceberg.location().removeprefix("file://")) / STAGING_FOLDER
    assert not staging.exists() or not any(staging.iterdir())


def test_workers_killed_mid_rewrite_and_before_the_commit_leave_the_table_as_it_was_and_a_retry_succeeds(
    celery_processes, make_iceberg
):
    """Two heavy workers die in turn on one table: the first after writing its files, the second,
    running the automatic retry, just before the commit. Each time the table stays as it was and
    the staging is removed; the next automatic retry succeeds on a third worker. (One table, light
    worker and beat for both kills.)"""
    table, iceberg = make_iceberg(files=40, rows_per_file=5, partitioned=False)
    snapshot_before = iceberg.current_snapshot().snapshot_id
    rows_before = multiset(iceberg_rows(iceberg))
    only_factory("iceberg-rewrite", interval=3600)
    celery_processes.start_worker(name="light", queues="light", concurrency=1)
    process = None
    for step in ("after-write", "before-commit"):
        doomed = celery_processes.start_worker(
            name=f"doomed-{step}",
            queues="heavy",
            concurrency=1,
            extra_env={"LAKEWARDEN_FAILPOINTS": f"{step}=hang:600"},
        )
        if process is None:
            celery_processes.start_beat()
            celery_processes.wait_for_workers(count=2)
            process = wait_for(
                lambda: Process.objects.filter(table=table, action="rewrite").first(),
                message="the scheduler to trigger the rewrite",
            )
        failed = _kill_the_worker_at(step, doomed, process, celery_processes)
        iceberg.refresh()
        assert iceberg.current_snapshot().snapshot_id == snapshot_before
        assert multiset(iceberg_rows(iceberg)) == rows_before
        process = wait_for(
            lambda f=failed: Process.objects.filter(retry_of=f).first(), message="an automatic retry"
        )

    celery_processes.start_worker(name="rescuer", queues="heavy", concurrency=1)
    finished = wait_for(
        lambda: (p := process_status(process.pk)).status in ("SUCCESS", "FAILED") and p,
        timeout=180,
        message="the retry to finish\n" + celery_processes.logs(),
    )
    assert finished.status == ProcessStatus.SUCCESS, finished.failure
    assert finished.attempt == 3
    assert multiset(iceberg_rows(iceberg)) == rows_before
    assert len(iceberg_files(iceberg)) == 1


def _kill_the_worker_at(step: str, doomed, process, celery_processes):
    """Waits until ``process`` (run by ``doomed``, held by the failpoint) has staged its files (and
    reached the commit step, for before-commit), kills the worker; returns the failed row once the
    reaper failed it and removed its staging."""
    from processes.services import staging_dir

    staged = staging_dir(process)
    # Staged files exist once the groups are written; the failpoint then holds the worker there.
    wait_for(
        lambda: staged.exists() and any(staged.rglob("*.parquet")),
        timeout=120,
        message=f"the rewrite to stage its files ({step})\n" + celery_processes.logs(),
    )
    if step == "before-commit":
        wait_for(
            lambda: process_status(process.pk).progress_message == "committing", message="the commit step"
        )

    celery_processes.kill_hard(doomed)
    failed = wait_for(
        lambda: (p := process_status(process.pk)).status == ProcessStatus.FAILED and p,
        timeout=2 * lost_noticed_within(),
        message=f"the lost worker's process to be failed ({step})\n" + celery_processes.logs(),
    )

    assert_lost_in_time(failed)
    # The reaper cleans before it fails the row and again after; the test waits for the condition
    # rather than assuming the order of the reaper's steps.
    wait_for(lambda: not staged.exists(), timeout=30, message="the lost worker's staging to be removed")
    return failed


def test_two_maintenance_processes_on_one_delta_table_never_overlap(celery_processes, make_delta):
    from processes.services import process_create
    from tests.processes.conftest import delta_files, delta_read

    table, path = make_delta(files=60, rows_per_file=5)
    rows_before = multiset(delta_read(path))
    configured_factories()
    PluginConfig.objects.update(enabled=False)  # nothing scheduled: the two processes below only
    PluginConfig.objects.filter(name__in=["delta-rewrite", "delta-vacuum"]).update(enabled=True)
    # One heavy worker with two slots: the vacuum goes to the free slot while the rewrite runs, and
    # races it for the table lock. (Two one-slot workers did not make that certain: the busy one may
    # prefetch the vacuum and run it after the rewrite, and the lock is never met.)
    celery_processes.start_worker(name="light", queues="light", concurrency=1)
    # The rewrite holds the table a few seconds after writing, so the vacuum surely meets the lock.
    slow = {"LAKEWARDEN_FAILPOINTS": "after-write=sleep:6"}
    celery_processes.start_worker(name="heavy", queues="heavy", concurrency=2, extra_env=slow)
    celery_processes.wait_for_workers(count=2)

    rewrite = process_create(table=table, action="rewrite", params={})
    wait_for(
        lambda: process_status(rewrite.pk).status == ProcessStatus.RUNNING, message="the rewrite to start"
    )
    vacuum = process_create(table=table, action="vacuum", params={"dry-run": True})
    finished = wait_for(
        lambda: (
            (ps := [process_status(rewrite.pk), process_status(vacuum.pk)])
            and all(p.status in ("SUCCESS", "FAILED") for p in ps)
            and ps
        ),
        timeout=240,
        message="both processes to finish\n" + celery_processes.logs(),
    )

    assert [p.status for p in finished] == [ProcessStatus.SUCCESS, ProcessStatus.SUCCESS], [
        p.failure for p in finished
    ]
    first, second = sorted(finished, key=lambda p: p.started_at)
    assert second.started_at >= first.finished_at, "the per-table lock let two processes overlap"
    assert "another maintenance process holds table" in celery_processes.full_logs()  # it did meet the lock
    assert multiset(delta_read(path)) == rows_before  # no row duplicated or lost
    assert len(delta_files(path)) < 60
