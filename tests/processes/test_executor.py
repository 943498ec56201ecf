"""Running processes on a worker: claim once, per-table lock, progress, cancel, failure, reaper."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.utils import timezone

from processes import services
from processes.executor import TableLock, TableLockBusy, run_process
from processes.models import Process, ProcessStatus
from processes.workers import lost_after_seconds
from storage import services as console_services
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def delta_table(warehouse):
    return console_services.table_register(location=str(write_delta_table(warehouse / "orders", commits=3)))


def _reload(process: Process) -> Process:
    process.refresh_from_db()
    return process


def test_a_process_runs_to_success_with_its_summary_and_progress(test_plugin, delta_table):
    process = services.process_create(table=delta_table, action="touch", params={"seconds": 0.3})

    assert run_process(process.pk, worker="w1") == ProcessStatus.SUCCESS

    process = _reload(process)
    assert process.status == ProcessStatus.SUCCESS
    assert process.summary == {"steps": 3, "table_files": 3}
    assert (process.progress_done, process.progress_total) == (3, 3)
    assert process.worker == "w1" and process.finished_at >= process.started_at
    assert not services.staging_dir(process).exists()


def test_a_process_is_claimed_only_once(test_plugin, delta_table):
    process = services.process_create(table=delta_table, action="touch")
    run_process(process.pk)

    assert run_process(process.pk).startswith("not claimed (SUCCESS)")


def test_a_failing_process_is_failed_with_its_reason_and_retried_later(test_plugin, delta_table, settings):
    settings.LAKEWARDEN_RETRY_BACKOFF_SECONDS = 60
    process = services.process_create(table=delta_table, action="touch", params={"fail": True})

    assert run_process(process.pk) == ProcessStatus.FAILED

    process = _reload(process)
    assert "asked to fail" in process.failure
    assert not services.staging_dir(process).exists()
    retry = Process.objects.get(retry_of=process)
    assert retry.status == ProcessStatus.PENDING and retry.not_before > timezone.now() + dt.timedelta(
        seconds=50
    )


def test_a_process_that_fills_the_disk_says_where_and_is_not_retried(test_plugin, delta_table, settings):
    """Issue 29, item 12: ENOSPC was retried three times, a raw traceback as the reason. The test
    plugin writes to /dev/full: the kernel's own ENOSPC, as on a full disk."""
    settings.LAKEWARDEN_RETRY_BACKOFF_SECONDS = 60
    process = services.process_create(table=delta_table, action="touch", params={"disk-full": True})

    assert run_process(process.pk) == ProcessStatus.FAILED

    process = _reload(process)
    assert process.failure == (
        f"no space left on {delta_table.location} (not retried: free space there, then run it again)"
    )
    assert not Process.objects.filter(retry_of=process).exists()
    assert not services.staging_dir(process).exists()


def test_a_cancel_stops_a_running_process_at_its_next_check_and_cleans_staging(
    test_plugin, delta_table, settings
):
    settings.LAKEWARDEN_HEARTBEAT_SECONDS = 1
    process = services.process_create(table=delta_table, action="touch", params={"seconds": 30})
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.update(status=run_process(process.pk)))
    runner.start()
    _wait_for(lambda: _reload(process).status == ProcessStatus.RUNNING and process.progress_done > 0)

    services.process_cancel(process=_reload(process))
    runner.join(timeout=15)

    assert outcome["status"] == ProcessStatus.CANCELED
    process = _reload(process)
    assert process.status == ProcessStatus.CANCELED
    assert not services.staging_dir(process).exists()
    assert not Process.objects.filter(retry_of=process).exists()  # a cancel is not retried


def test_two_maintenance_processes_never_hold_one_table_at_once(test_plugin, delta_table):
    process = services.process_create(table=delta_table, action="touch")
    held = TableLock(delta_table.pk)
    held.acquire()
    try:
        with pytest.raises(TableLockBusy):
            run_process(process.pk)
        assert _reload(process).status == ProcessStatus.PENDING  # given back, to be retried
    finally:
        held.release()

    assert run_process(process.pk) == ProcessStatus.SUCCESS


def test_the_reaper_fails_a_process_whose_worker_stopped_heart_beating(test_plugin, delta_table, settings):
    settings.LAKEWARDEN_HEARTBEAT_SECONDS = 2
    process = services.process_create(table=delta_table, action="touch")
    stale = timezone.now() - dt.timedelta(seconds=lost_after_seconds() + 1)
    Process.objects.filter(pk=process.pk).update(
        status=ProcessStatus.RUNNING, started_at=stale, heartbeat_at=stale
    )
    fresh = services.process_create(
        table=console_services.table_register(
            location=str(write_delta_table(settings.LAKEWARDEN_WAREHOUSE / "fresh", commits=1))
        ),
        action="touch",
    )
    Process.objects.filter(pk=fresh.pk).update(
        status=ProcessStatus.RUNNING, started_at=timezone.now(), heartbeat_at=timezone.now()
    )

    report = services.processes_reap()

    assert report["failed"] == 1
    assert _reload(process).status == ProcessStatus.FAILED and "worker lost" in process.failure
    assert _reload(fresh).status == ProcessStatus.RUNNING
    assert Process.objects.get(retry_of=process).status == ProcessStatus.PENDING


def test_a_process_still_running_when_the_kill_deadline_passes_is_recorded_killed(test_plugin, delta_table):
    process = services.process_create(table=delta_table, action="touch")
    past = timezone.now() - dt.timedelta(seconds=60)
    Process.objects.filter(pk=process.pk).update(
        status=ProcessStatus.CANCELING, cancel_requested=True, kill_deadline=past, heartbeat_at=timezone.now()
    )

    services.processes_reap()

    assert _reload(process).status == ProcessStatus.KILLED


def _wait_for(condition, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


@pytest.mark.spark
def test_a_spark_task_that_fills_the_disk_is_read_as_no_space_left(spark):
    """A full disk inside a Spark task reaches the worker as Spark's error text (a Python worker
    traceback, no OSError to look at): it is still a full disk, on the process's location."""
    from processes.executor import no_space_left

    def fill(_):
        with open("/dev/full", "w") as full:
            full.write("x")
        return 0

    with pytest.raises(Exception) as raised:
        spark.sparkContext.parallelize([1], 1).map(fill).collect()

    assert "Traceback" in str(raised.value)  # what used to be the process's reason
    assert no_space_left(raised.value, "/wh/t") == "no space left on /wh/t"
    assert no_space_left(OSError(28, "No space left on device", "/wh/t/part-0.parquet"), "/wh/t") == (
        "no space left on /wh/t/part-0.parquet"
    )
    assert no_space_left(RuntimeError("asked to fail"), "/wh/t") is None
