"""Processes end to end: real `celery worker` and `celery beat` processes on Redis, a third-party
factory from a plugin package, and workers that die mid-run."""

from __future__ import annotations

import datetime as dt
import os
import re
import signal

import pytest
from django.test import Client
from django.utils import timezone

from processes import services
from processes.models import PluginConfig, Process, ProcessStatus, ProcessTrigger, ServiceHeartbeat
from processes.registry import configured_factories
from processes.workers import lost_after_seconds, lost_noticed_within
from storage import services as console_services
from tests.console.tables import write_delta_table
from tests.e2e.conftest import assert_lost_in_time, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def table(warehouse, test_plugin):
    return console_services.table_register(location=str(write_delta_table(warehouse / "orders", commits=2)))


def _configure_touch(**properties) -> None:
    """Only the test factory runs: the built-in ones would maintain the table meanwhile."""
    configured_factories()
    PluginConfig.objects.exclude(name="test-touch").update(enabled=False)
    PluginConfig.objects.filter(name="test-touch").update(
        properties={"interval": 1, "parallelism": 2, **properties}
    )


def _process(pk: int) -> Process:
    return Process.objects.get(pk=pk)


def test_beat_triggers_the_third_party_factory_and_a_worker_runs_it_until_disabled_in_the_admin(
    celery_processes, table, admin_user
):
    _configure_touch()
    celery_processes.start_worker()
    celery_processes.start_beat()
    celery_processes.wait_for_workers()

    first = wait_for(
        lambda: Process.objects.filter(table=table, status=ProcessStatus.SUCCESS).first(),
        message="a scheduled touch process to succeed\n" + celery_processes.logs(),
    )
    assert first.trigger == ProcessTrigger.SCHEDULE and first.factory == "test-touch"
    assert first.summary["table_files"] == 2

    admin = Client()
    admin.force_login(admin_user)
    config = PluginConfig.objects.get(name="test-touch")
    response = admin.post(
        f"/admin/processes/pluginconfig/{config.pk}/change/",
        {"name": "test-touch", "priority": 100, "properties": '{"interval": 1, "parallelism": 2}'},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert PluginConfig.objects.get(pk=config.pk).enabled is False
    wait_for(
        lambda: not Process.objects.filter(status__in=["PENDING", "RUNNING"]).exists(),
        message="queue drained",
    )
    count = Process.objects.count()

    ticks: set = set()  # the beat's scheduler stamps each tick

    def three_more_ticks() -> bool:
        ticks.update(ServiceHeartbeat.objects.filter(name="beat").values_list("last_seen", flat=True))
        return len(ticks) > 3

    wait_for(three_more_ticks, timeout=60, message="three more scheduler ticks")
    assert Process.objects.count() == count


def test_the_admin_refuses_enabling_a_factory_that_conflicts_and_a_bad_property(test_plugin, admin_user, db):
    configured_factories()
    admin = Client()
    admin.force_login(admin_user)
    twin = PluginConfig.objects.get(name="test-touch-twin")

    conflict = admin.post(
        f"/admin/processes/pluginconfig/{twin.pk}/change/",
        {"name": "test-touch-twin", "enabled": "on", "priority": 100, "properties": "{}"},
    )
    touch = PluginConfig.objects.get(name="test-touch")
    bad = admin.post(
        f"/admin/processes/pluginconfig/{touch.pk}/change/",
        {"name": "test-touch", "enabled": "on", "priority": 100, "properties": '{"min-files": -1}'},
    )

    assert conflict.status_code == 200 and "both claim" in conflict.content.decode()
    assert bad.status_code == 200 and "min-files" in bad.content.decode()
    assert PluginConfig.objects.get(pk=twin.pk).enabled is False
    assert PluginConfig.objects.get(pk=touch.pk).properties.get("min-files") != -1


def test_a_worker_killed_mid_run_is_noticed_within_the_lost_tolerance_and_the_retry_succeeds(
    celery_processes, table
):
    _configure_touch(interval=3600)
    # The reaper runs on the light queue, as in a deployment: its worker outlives the heavy one.
    celery_processes.start_worker(name="light", queues="light", concurrency=1)
    worker = celery_processes.start_worker(name="doomed", queues="heavy", concurrency=1)
    celery_processes.wait_for_workers(count=2)
    process = services.process_create(table=table, action="touch", params={"seconds": 60})
    # Beat after the process exists: its scheduler would otherwise trigger a touch of its own on
    # this never-maintained table first. Beat runs the reaper.
    celery_processes.start_beat()
    # The reaper must be running before the kill, or the loss is noticed only once the beat is up.
    wait_for(lambda: ServiceHeartbeat.objects.filter(name="beat").exists(), message="the beat's first tick")
    wait_for(lambda: _process(process.pk).progress_done > 2, message="the process to make progress")
    staging = services.staging_dir(process)
    assert staging.exists()

    celery_processes.kill_hard(worker)
    failed = wait_for(
        lambda: (p := _process(process.pk)).status == ProcessStatus.FAILED and p,
        timeout=2 * lost_noticed_within(),
        message="the lost worker's process to be failed\n" + celery_processes.logs(),
    )

    assert_lost_in_time(failed)
    assert not staging.exists()
    retry = wait_for(lambda: Process.objects.filter(retry_of=failed).first(), message="the automatic retry")
    Process.objects.filter(pk=retry.pk).update(params={"seconds": 0.5})
    celery_processes.start_worker(name="rescuer", queues="heavy", concurrency=1)
    finished = wait_for(
        lambda: (p := _process(retry.pk)).status in ("SUCCESS", "FAILED") and p, message="the retry to finish"
    )
    assert finished.status == ProcessStatus.SUCCESS, finished.failure


def _running_on_a_heavy_worker(celery_processes, table):
    """A touch process (30 s of work) running on a heavy worker of its own (returned with it),
    the beat's reaper running on a light worker beside it."""
    _configure_touch(interval=3600)
    celery_processes.start_worker(name="light", queues="light", concurrency=1)
    worker = celery_processes.start_worker(name="heavy", queues="heavy", concurrency=1)
    celery_processes.wait_for_workers(count=2)
    process = services.process_create(table=table, action="touch", params={"seconds": 30})
    celery_processes.start_beat()  # after the process: the scheduler would trigger one of its own
    wait_for(lambda: _reaper_passes(celery_processes) > 0, message="the reaper's first pass")
    running = _process(process.pk)
    assert running.status == ProcessStatus.RUNNING and running.progress_done > 0, running.status
    return worker, process


def _reaper_passes(celery_processes) -> int:
    """Reaper passes the light worker has finished so far."""
    log = celery_processes.tmp_path / "worker-light.log"
    return sum(
        "reap_processes_task[" in line and " succeeded " in line for line in log.read_text().splitlines()
    )


def _finishes_with_success_and_no_retry(celery_processes, process) -> None:
    finished = wait_for(
        lambda: (p := _process(process.pk)).status in ("SUCCESS", "FAILED") and p,
        message="the process to finish\n" + celery_processes.logs(),
    )
    assert finished.status == ProcessStatus.SUCCESS, finished.failure
    assert finished.failure == "" and finished.attempt == 1
    assert not Process.objects.filter(retry_of=process).exists()


def test_a_worker_stopped_for_two_heartbeats_keeps_its_process_running_and_it_succeeds(
    celery_processes, table, settings
):
    """SIGSTOP of the whole worker (as a starved machine does to it) for two heartbeats, while
    the reaper keeps running: its process is late, not lost (the old rule failed it after 1.5)."""
    worker, process = _running_on_a_heavy_worker(celery_processes, table)
    beats = 2 * settings.LAKEWARDEN_HEARTBEAT_SECONDS

    os.killpg(worker.pid, signal.SIGSTOP)
    try:
        silent_since = _process(process.pk).heartbeat_at
        wait_for(lambda: (timezone.now() - silent_since).total_seconds() >= beats, message="two heartbeats")
        passes = _reaper_passes(celery_processes)
        # Two more reaper passes: the second started after two heartbeats of silence.
        wait_for(lambda: _reaper_passes(celery_processes) >= passes + 2, message="two reaper passes")
        during = _process(process.pk)
    finally:
        os.killpg(worker.pid, signal.SIGCONT)

    assert during.heartbeat_at == silent_since  # it was silent all along
    assert during.status == ProcessStatus.RUNNING, during.failure
    _finishes_with_success_and_no_retry(celery_processes, process)


def test_a_process_silent_past_the_tolerance_stays_running_while_its_worker_says_it_runs_it(
    celery_processes, table
):
    """SIGSTOP of the worker's pool process only, past the tolerance: its heartbeat stops, but
    the worker's main process answers the reaper that it runs the task."""
    worker, process = _running_on_a_heavy_worker(celery_processes, table)
    pool = celery_processes.pool_processes(worker)
    assert pool, "the worker has no pool process"
    kept = re.compile(rf"process {process.pk}: no heartbeat since \S+, but heavy-\S+ still runs it")

    for pid in pool:
        os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: kept.search(celery_processes.full_logs()) or _process(process.pk).status != "RUNNING",
            timeout=2 * lost_noticed_within(),
            message="the reaper to find the process silent",
        )
        during = _process(process.pk)
    finally:
        for pid in pool:
            os.kill(pid, signal.SIGCONT)

    assert during.status == ProcessStatus.RUNNING, during.failure
    assert (timezone.now() - during.heartbeat_at).total_seconds() >= lost_after_seconds()
    _finishes_with_success_and_no_retry(celery_processes, process)


def test_kill_from_the_api_terminates_a_process_that_ignores_cancel(celery_processes, table, operator):
    from rest_framework.test import APIClient

    _configure_touch(interval=3600)
    # The failpoint hangs right before the commit without looking at the cancel flag, like a step
    # stuck in I/O: only the kill can end it.
    celery_processes.start_worker(extra_env={"LAKEWARDEN_FAILPOINTS": "before-commit=hang:300"})
    celery_processes.wait_for_workers()
    api = APIClient()
    api.force_authenticate(operator)
    created = api.post(
        "/api/v1/processes/", {"table": table.pk, "action": "touch", "params": {}}, format="json"
    ).json()
    wait_for(lambda: _process(created["id"]).progress_done > 0, message="the process to reach its commit")

    response = api.post(f"/api/v1/processes/{created['id']}/kill/", {"grace_seconds": 1}, format="json")

    assert response.status_code == 200 and response.json()["status"] == "CANCELING"
    killed = wait_for(
        lambda: (p := _process(created["id"])).status == ProcessStatus.KILLED and p,
        timeout=30,
        message="the kill to take effect\n" + celery_processes.logs(),
    )
    assert "killed by an operator" in killed.failure
    assert not services.staging_dir(killed).exists()
    assert not Process.objects.filter(retry_of=killed).exists()  # a kill is not retried
    # The worker replaced its killed pool process and still answers.
    assert celery_processes.wait_for_workers()


def test_a_delayed_task_held_by_a_killed_worker_runs_within_two_ticks_of_its_due_time(
    celery_processes, table
):
    """kill -9 of a worker that held a process's delayed task (a retry's countdown): Redis would give
    the message back only after its visibility timeout; the reaper sends it again instead."""
    tick = 10  # the light worker's scheduler tick, seconds: the promise is "within two ticks"
    _configure_touch(interval=3600)
    celery_processes.start_worker(
        name="light", queues="light", concurrency=1, extra_env={"LAKEWARDEN_SCHEDULER_SECONDS": str(tick)}
    )
    doomed = celery_processes.start_worker(name="doomed", queues="heavy", concurrency=1)
    celery_processes.wait_for_workers(count=2)
    # Due well after the kill below (the doomed worker holds the task within seconds of its send),
    # and late enough that the rescuer is up by then.
    due = timezone.now() + dt.timedelta(seconds=20)
    process = services.process_create(table=table, action="touch", params={"seconds": 0.2}, not_before=due)
    celery_processes.start_beat()  # after the process: the scheduler would trigger one of its own
    task_id = wait_for(lambda: _process(process.pk).celery_task_id, message="the task to be sent")
    wait_for(
        lambda: any(
            task["request"]["id"] == task_id
            for tasks in (celery_processes.app.control.inspect(timeout=1).scheduled() or {}).values()
            for task in tasks
        ),
        message="the doomed worker to hold the delayed task\n" + celery_processes.logs(),
    )

    celery_processes.kill_hard(doomed)
    assert timezone.now() < due, "the doomed worker was killed only after the task's due time"
    celery_processes.start_worker(name="rescuer", queues="heavy", concurrency=1)
    finished = wait_for(
        lambda: (p := _process(process.pk)).status in ("SUCCESS", "FAILED") and p,
        timeout=(due - timezone.now()).total_seconds() + 4 * tick + 60,
        message="the lost delayed task to run\n" + celery_processes.logs(),
    )

    assert finished.status == ProcessStatus.SUCCESS, finished.failure
    assert finished.started_at >= due
    assert (finished.started_at - due).total_seconds() <= 2 * tick, celery_processes.logs()
    assert "sent again" in celery_processes.full_logs()
