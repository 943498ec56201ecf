"""A busy worker takes no more work than it has free slots: with two real Celery workers of one
slot each, a third and fourth process wait in the broker's queue (where the first worker to free
a slot takes them), never in the buffer of a worker that is running one already."""

from __future__ import annotations

import time

import pytest
from celery import current_app
from django.conf import settings

from processes import services
from processes.models import PluginConfig, Process, ProcessStatus, ProcessTrigger
from processes.registry import configured_factories
from storage import services as console_services
from tests.console.tables import write_delta_table
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e


def _reserved_beyond_active() -> dict[str, list[str]]:
    """Per worker, the tasks it holds without running them (``inspect().reserved()``)."""
    replies = current_app.control.inspect(timeout=5.0).reserved() or {}
    return {worker: [task["id"] for task in tasks] for worker, tasks in replies.items()}


def _queued(client, queue: str) -> int:
    """Messages waiting in ``queue`` on Redis."""
    return sum(client.llen(key) for key in services.redis_queue_keys(queue))


def test_a_busy_worker_leaves_waiting_processes_in_the_queue_for_an_idle_one(
    celery_processes, warehouse, test_plugin
):
    tables = [
        console_services.table_register(location=str(write_delta_table(warehouse / f"t{i}", commits=1)))
        for i in range(4)
    ]
    configured_factories()
    PluginConfig.objects.exclude(name="test-touch").update(enabled=False)
    PluginConfig.objects.filter(name="test-touch").update(properties={"interval": 3600, "parallelism": 4})
    slow = {"LAKEWARDEN_FAILPOINTS": "before-commit=sleep:10"}
    celery_processes.start_worker(name="one", concurrency=1, extra_env=slow)
    celery_processes.start_worker(name="two", concurrency=1, extra_env=slow)
    celery_processes.wait_for_workers(count=2)

    processes = [
        services.process_create(table=table, action="touch", params={}, trigger=ProcessTrigger.MANUAL)
        for table in tables
    ]
    ids = [p.pk for p in processes]
    wait_for(
        lambda: Process.objects.filter(pk__in=ids, status=ProcessStatus.RUNNING).count() == 2,
        timeout=120,
        message="two processes to run\n" + celery_processes.logs(),
    )
    # While both slots are busy, neither worker holds a waiting task: both wait in the queue.
    running = lambda: Process.objects.filter(pk__in=ids, status=ProcessStatus.RUNNING).count()  # noqa: E731
    samples = 0
    with current_app.connection_for_read() as connection:
        client = connection.default_channel.client
        while running() == 2 and samples < 3:
            held = _reserved_beyond_active()
            queued = _queued(client, settings.LAKEWARDEN_HEAVY_QUEUE)
            if len(held) == 2 and running() == 2:  # both answered, and nothing freed meanwhile
                assert held == {name: [] for name in held}, held
                waiting = Process.objects.filter(pk__in=ids, status=ProcessStatus.PENDING).count()
                assert queued == waiting, (
                    f"{queued} task(s) in the queue for {waiting} waiting, workers hold {held}"
                )
                samples += 1
            time.sleep(0.5)
    assert samples >= 1, "the two first processes ended before both workers answered"

    finished = wait_for(
        lambda: (
            (
                rows := list(
                    Process.objects.filter(
                        pk__in=ids, status__in=[ProcessStatus.SUCCESS, ProcessStatus.FAILED]
                    )
                )
            )
            and len(rows) == 4
            and rows
        ),
        timeout=180,
        message="the four processes to finish\n" + celery_processes.logs(),
    )
    assert {p.status for p in finished} == {ProcessStatus.SUCCESS}, [p.failure for p in finished]
    # Each worker took one at once and another as its slot freed.
    workers = {p.worker.split("@")[0].split("-test-")[0] for p in finished}
    assert workers == {"one", "two"}, workers
