"""The one rule both reapers follow (processes/workers.py) against real rows and the real Redis
broker: a late heartbeat is not a lost worker, a worker whose own record is fresh but who does
not answer is unknown (its process stays RUNNING, its tasks are not sent again), a worker whose
record went stale is dead. A real worker answering that it runs the task, and real workers
stopped and killed, are tests/e2e/test_processes_e2e.py."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid

import pytest
import redis
from django.core.cache import cache
from django.db import connection
from django.utils import timezone

from processes import services
from processes.models import Process, ProcessStatus, Query, QueryStatus
from processes.query_reaper import queries_reap
from processes.workers import WORKERS_KEY, lost_after_seconds, process_lock_holder, workers_alive
from storage import services as console_services
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db(transaction=True)

NODE = "slow@nowhere"  # no such worker: it never answers


@pytest.fixture
def records(settings):
    """The workers' liveness records on the tests' broker, empty at the start and the end; a
    worker that does not answer costs one second."""
    settings.LAKEWARDEN_INSPECT_TIMEOUT_SECONDS = 1
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(WORKERS_KEY)
    yield client
    client.delete(WORKERS_KEY)


def _record(client, node: str, age: float) -> None:
    client.hset(WORKERS_KEY, node, repr(time.time() - age))


@pytest.fixture
def running(test_plugin, warehouse, settings):
    """A RUNNING touch process on a table of its own, on ``worker``, silent for ``silent`` s."""

    def make(*, silent: float, worker: str = NODE) -> Process:
        location = write_delta_table(settings.LAKEWARDEN_WAREHOUSE / f"t{uuid.uuid4().hex[:8]}", commits=1)
        process = services.process_create(
            table=console_services.table_register(location=str(location)), action="touch"
        )
        at = timezone.now() - dt.timedelta(seconds=silent)
        Process.objects.filter(pk=process.pk).update(
            status=ProcessStatus.RUNNING, started_at=at, heartbeat_at=at, worker=worker, celery_task_id="t-1"
        )
        return process

    return make


def _status(process: Process) -> str:
    return Process.objects.get(pk=process.pk).status


def test_the_tolerance_is_three_heartbeats_and_the_setting_at_least(settings):
    settings.LAKEWARDEN_WORKER_LOST_SECONDS = 10
    settings.LAKEWARDEN_HEARTBEAT_SECONDS = 1
    assert lost_after_seconds() == 10.0
    settings.LAKEWARDEN_HEARTBEAT_SECONDS = 5
    assert lost_after_seconds() == 15.0
    settings.LAKEWARDEN_WORKER_LOST_SECONDS = 30
    assert lost_after_seconds() == 30.0


def test_a_heartbeat_late_by_two_beats_is_not_a_lost_worker(running, records, settings):
    settings.LAKEWARDEN_HEARTBEAT_SECONDS = 2
    late = running(silent=2 * 2)  # the old rule failed it after 1.5 beats
    _record(records, NODE, age=60)  # even with its worker's record stale

    report = services.processes_reap()

    assert report["failed"] == 0 and _status(late) == ProcessStatus.RUNNING


def test_a_silent_process_whose_worker_has_a_fresh_record_but_does_not_answer_stays_running(running, records):
    unknown = running(silent=lost_after_seconds() + 1)
    _record(records, NODE, age=1)

    report = services.processes_reap()

    assert report["failed"] == 0 and _status(unknown) == ProcessStatus.RUNNING


def test_a_silent_process_whose_worker_record_went_stale_is_failed_as_worker_lost(running, records):
    lost = running(silent=lost_after_seconds() + 1)
    _record(records, NODE, age=lost_after_seconds() + 1)
    unrecorded = running(silent=lost_after_seconds() + 1, worker="never-recorded@nowhere")

    report = services.processes_reap()

    assert report["failed"] == 2
    for process in (lost, unrecorded):
        failed = Process.objects.get(pk=process.pk)
        assert failed.status == ProcessStatus.FAILED and failed.failure.startswith(
            "worker lost: no heartbeat"
        )
    assert workers_alive() == set()


def test_a_silent_query_follows_the_same_rule(records):
    at = timezone.now() - dt.timedelta(seconds=lost_after_seconds() + 1)
    unknown = Query.objects.create(
        sql="select 1", status=QueryStatus.RUNNING, started_at=at, heartbeat_at=at, worker=NODE
    )
    lost = Query.objects.create(
        sql="select 2", status=QueryStatus.RUNNING, started_at=at, heartbeat_at=at, worker="gone@nowhere"
    )
    _record(records, NODE, age=1)

    report = queries_reap()

    assert report["failed"] == 1
    assert Query.objects.get(pk=unknown.pk).status == QueryStatus.RUNNING
    assert Query.objects.get(pk=lost.pk).status == QueryStatus.FAILED


@pytest.fixture
def overdue_process(test_plugin, warehouse, settings):
    """A PENDING process overdue for a resend, on a heavy queue of its own (empty)."""
    settings.LAKEWARDEN_HEAVY_QUEUE = f"test-lost-{uuid.uuid4().hex[:10]}"
    cache.delete(services.RESEND_PASS_KEY)
    location = write_delta_table(settings.LAKEWARDEN_WAREHOUSE / "overdue", commits=1)
    process = services.process_create(
        table=console_services.table_register(location=str(location)), action="touch"
    )
    long_ago = timezone.now() - dt.timedelta(minutes=5)
    Process.objects.filter(pk=process.pk).update(created_at=long_ago, sent_at=long_ago, celery_task_id="old")
    yield process
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(
        *services.redis_queue_keys(settings.LAKEWARDEN_HEAVY_QUEUE)
    )
    cache.delete(services.RESEND_PASS_KEY)


def _queued(settings, process: Process) -> list[str]:
    """Ids of the tasks waiting in the process's queue."""
    queue = services.process_queue(Process.objects.select_related("resource_group").get(pk=process.pk))
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    return [json.loads(raw)["headers"]["id"] for raw in client.lrange(queue, 0, -1)]


def test_a_live_worker_that_does_not_answer_is_unknown_and_nothing_is_sent_again(
    overdue_process, records, settings
):
    queue = services.process_queue(
        Process.objects.select_related("resource_group").get(pk=overdue_process.pk)
    )
    assert queue == settings.LAKEWARDEN_HEAVY_QUEUE
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(queue)  # its first message was lost
    _record(records, NODE, age=1)

    assert services.tasks_held(queue) is None
    assert services.processes_resend_lost() == 0
    assert _queued(settings, overdue_process) == []
    # Unknown now: the next pass asks again (it does not wait a scheduler tick).
    assert cache.get(services.RESEND_PASS_KEY) is None

    # Once its record is stale the worker is dead: what it held is sent again.
    _record(records, NODE, age=lost_after_seconds() + 1)
    assert services.processes_resend_lost() == 1
    resent = Process.objects.get(pk=overdue_process.pk)
    assert _queued(settings, overdue_process) == [resent.celery_task_id] and resent.celery_task_id != "old"


def test_a_silent_process_whose_own_table_lock_is_still_held_is_not_failed(running, records):
    from processes.executor import TableLock

    silent = running(silent=lost_after_seconds() + 1)
    other = running(silent=lost_after_seconds() + 1)
    _record(records, NODE, age=lost_after_seconds() + 1)  # by heartbeats and records: both lost
    own = TableLock(silent.table_id, holder=process_lock_holder(silent.pk))
    own.acquire()  # as its worker did: a connection of its own, still open
    restore = TableLock(other.table_id, holder=f"lakewarden trash restore {other.pk}")
    restore.acquire()  # the other table is held, but not by its process
    try:
        report = services.processes_reap()
        assert report["failed"] == 1
        assert (_status(silent), _status(other)) == (ProcessStatus.RUNNING, ProcessStatus.FAILED)
    finally:
        own.release()  # the worker's connection closes: its process is lost now
        restore.release()

    report = services.processes_reap()

    assert report["failed"] == 1 and _status(silent) == ProcessStatus.FAILED


def test_a_process_failed_while_it_ran_stops_before_its_commit_and_leaves_the_table(
    make_delta, run_now, monkeypatch
):
    import threading

    from processes import executor
    from tests.storage.test_active_refresh import spec_facts

    table, path = make_delta(files=8)
    before = spec_facts(table)
    log_files = sorted(p.name for p in (path / "_delta_log").iterdir())
    monkeypatch.setenv("LAKEWARDEN_FAILPOINTS", "before-commit=sleep:4")
    process = services.process_create(table=table, action="rewrite", params={})

    def reaper() -> None:  # takes it for lost while it waits before its commit
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                row = Process.objects.get(pk=process.pk)
                if row.status == ProcessStatus.RUNNING and row.started_at is not None:
                    services.process_fail(
                        process=row, reason="worker lost: taken for lost in a test", retry=False
                    )
                    return
                time.sleep(0.05)
        finally:
            connection.close()  # this thread's own

    thread = threading.Thread(target=reaper)
    thread.start()
    executor.run_process(process.pk)
    thread.join()

    row = Process.objects.get(pk=process.pk)
    assert row.status == ProcessStatus.FAILED and row.failure == "worker lost: taken for lost in a test"
    assert sorted(p.name for p in (path / "_delta_log").iterdir()) == log_files  # no commit
    assert spec_facts(table) == before
    assert not executor.staging_dir(row).exists()
