"""Resource groups end to end (issue 31): two real Celery workers on two queues; a process of
group A runs only on A's worker, a default one only on the heavy worker; once A's worker dies its
work waits (never taken by the other worker), the capacity page says so and the silent-worker
alert names the group."""

from __future__ import annotations

import pytest
from django.utils import timezone

from processes.alerts.evaluation import silent_services
from processes.groups import services as groups
from processes.groups.capacity import recent_workers
from processes.models import Process, ProcessStatus
from processes.services import process_create
from storage import services as console_services
from tests.console.tables import write_delta_table
from tests.e2e.conftest import only_factory, wait_for

pytestmark = pytest.mark.e2e


def _finished(pk: int) -> Process | None:
    process = Process.objects.get(pk=pk)
    return process if process.status == ProcessStatus.SUCCESS else None


def test_a_groups_process_runs_only_on_its_groups_worker(
    celery_processes, warehouse, test_plugin, client_as, operator
):
    only_factory("test-touch")
    tables = [
        console_services.table_register(location=str(write_delta_table(warehouse / f"t{i}", commits=1)))
        for i in range(5)
    ]
    team = groups.resource_group_create(name="team-a", tables=tables[:3], max_concurrency=4)
    queue_a = team.effective_queue
    assert queue_a == f"{celery_processes.heavy_queue}.team-a"
    worker_a = celery_processes.start_worker(name="wa", queues=queue_a, concurrency=1)
    celery_processes.start_worker(name="wd", queues="heavy", concurrency=1)
    celery_processes.wait_for_workers(count=2)

    in_a = [process_create(table=t, action="touch").pk for t in tables[:2]]
    in_default = [process_create(table=t, action="touch").pk for t in tables[3:]]
    done = {
        pk: wait_for(
            lambda pk=pk: _finished(pk), timeout=90, message=f"process {pk}\n" + celery_processes.logs()
        )
        for pk in in_a + in_default
    }

    assert {pk: done[pk].worker.split("-", 1)[0] for pk in done} == {
        **dict.fromkeys(in_a, "wa"),
        **dict.fromkeys(in_default, "wd"),
    }
    assert {done[pk].resource_group.name for pk in in_a} == {"team-a"}
    assert {done[pk].resource_group.name for pk in in_default} == {"default"}

    # A's worker dies: A's work waits in A's queue, the default worker never takes it.
    celery_processes.kill_hard(worker_a)
    waiting = process_create(table=tables[2], action="touch").pk
    again = Process.objects.get(pk=in_default[0])
    later = process_create(table=again.table, action="touch").pk
    wait_for(lambda: _finished(later), timeout=90, message="the default worker to run a later process")
    assert Process.objects.get(pk=waiting).status == ProcessStatus.PENDING

    answer = wait_for(
        lambda: (
            lambda a: (
                a if a["ok"] and not any(queue_a in w["queues"] for w in a["workers"].values()) else None
            )
        )(recent_workers(max_age=0)),
        timeout=60,
        message="the workers' answer without A's worker",
    )
    assert any(celery_processes.heavy_queue in w["queues"] for w in answer["workers"].values())
    found = silent_services(None, timezone.now())
    assert found["service:group:team-a"] == (
        f"no live worker consumes queue {queue_a} of resource group team-a"
    )
    assert "service:group:default" not in found
    html = client_as(operator).get("/capacity/").content.decode()
    section = html[html.index('id="group-team-a"') :]
    assert f"no live worker consumes its queue {queue_a}" in section
    assert "<td>touch</td><td>1</td><td>0</td>" in section  # the waiting process, by action
