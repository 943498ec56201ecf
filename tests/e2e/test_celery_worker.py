"""A real Celery worker process, consuming from the real Redis broker, runs Lakewarden tasks."""

from __future__ import annotations

import pytest

from storage import services
from storage.tasks import refresh_table_task
from tests.console.tables import write_delta_table
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e


def test_a_worker_process_refreshes_a_table_that_gained_commits(celery_processes, warehouse):
    path = write_delta_table(warehouse / "orders", commits=1)
    table = services.table_register(location=str(path))
    write_delta_table(path, commits=2)  # two more commits after registration: versions 1 and 2
    celery_processes.start_worker()
    celery_processes.wait_for_workers()

    result = refresh_table_task.delay(table.pk).get(timeout=60)

    table.refresh_from_db()
    assert result["refreshed"] is True, celery_processes.logs()
    assert table.current_instant == "2"
    assert table.file_count == 3


def test_healthz_reports_the_worker_once_one_answers(celery_processes, client):
    celery_processes.start_worker()
    celery_processes.wait_for_workers()

    body = client.get("/healthz").json()

    assert body["checks"]["worker"]["ok"] is True
    assert any(celery_processes.queue in name for name in body["checks"]["worker"]["workers"])


def test_the_overview_liveness_shares_one_ping_and_a_later_poll_sees_a_killed_worker(
    celery_processes, client_as, viewer
):
    """The polled fragment answers from the last ping any console process made (the cache) and
    refreshes it behind the poll: a worker that dies is gone from a later poll's answer."""
    from django.core.cache import cache

    from console.health import WORKERS_CACHE_KEY, recent_workers

    cache.delete(WORKERS_CACHE_KEY)
    worker = celery_processes.start_worker(name="alive")
    celery_processes.wait_for_workers()

    def ours(answer: dict) -> list[str]:
        return [name for name in answer["workers"] if celery_processes.queue in name]

    first = recent_workers()  # nothing cached: a real ping
    assert len(ours(first)) == 1
    # A second look within the refresh age is the same answer, taken at the same moment.
    again = recent_workers()
    assert again["checked_at"] == first["checked_at"] and ours(again) == ours(first)
    html = client_as(viewer).get("/liveness/").content.decode()
    assert "dot-ok" in html and "pinged" in html

    celery_processes.kill_hard(worker)
    # Older than refresh_after: served as it is while a refresh runs behind it; a later poll
    # shows what that refresh found.
    wait_for(
        lambda: not ours(recent_workers(refresh_after=0.0)),
        timeout=60,
        message="a poll without the killed worker",
    )
    cached_at, cached = cache.get(WORKERS_CACHE_KEY)
    assert not [n for n in cached["workers"] if celery_processes.queue in n]
    assert cached_at > first["checked_at"]


def test_the_liveness_answer_is_asked_again_once_it_is_older_than_its_max_age(celery_processes):
    from django.core.cache import cache

    from console.health import WORKERS_CACHE_KEY, recent_workers

    celery_processes.start_worker(name="fresh")
    celery_processes.wait_for_workers()
    # An answer from long ago (no worker then) is not shown: the caller waits for a new ping.
    cache.set(WORKERS_CACHE_KEY, (1.0, {"ok": False, "detail": "old", "workers": []}))
    answer = recent_workers(max_age=60)
    assert answer["checked_at"] > 1.0
    assert [n for n in answer["workers"] if celery_processes.queue in n]
