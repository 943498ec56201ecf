"""Processes end to end: real `celery worker` and `celery beat` processes on Redis, a third-party
factory from a plugin package, and workers that die mid-run."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone

from processes import services
from processes.models import PluginConfig, Process, ProcessStatus, ProcessTrigger, ServiceHeartbeat
from processes.registry import configured_factories
from storage import services as console_services
from tests.console.tables import write_delta_table
from tests.e2e.conftest import wait_for

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


def test_a_worker_killed_mid_run_is_noticed_within_two_heartbeats_and_the_retry_succeeds(
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
        timeout=10,
        message="the lost worker's process to be failed",
    )

    assert "worker lost" in failed.failure
    assert (failed.finished_at - failed.heartbeat_at).total_seconds() <= 2.5  # within two heartbeats of 1 s
    assert not staging.exists()
    retry = wait_for(lambda: Process.objects.filter(retry_of=failed).first(), message="the automatic retry")
    Process.objects.filter(pk=retry.pk).update(params={"seconds": 0.5})
    celery_processes.start_worker(name="rescuer", queues="heavy", concurrency=1)
    finished = wait_for(
        lambda: (p := _process(retry.pk)).status in ("SUCCESS", "FAILED") and p, message="the retry to finish"
    )
    assert finished.status == ProcessStatus.SUCCESS, finished.failure


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
