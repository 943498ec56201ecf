"""The query reaper against real rows and the real Redis broker: a RUNNING query whose heartbeat
stopped is failed (or CANCELED when a cancel was asked for), a cancel ends at once a query whose
worker is gone, a worker that comes back keeps the reaper's verdict, and a PENDING query whose
message no queue or worker holds is sent again (once). The processes with real workers killed,
messages dropped and database connections cut are tests/e2e/test_query_faults_e2e.py."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
import redis
from django.core.cache import cache
from django.utils import timezone

from processes import queries
from processes.models import Query, QueryStatus
from processes.query_reaper import (
    RESEND_PASS_KEY,
    queries_reap,
    queries_resend_lost,
    query_send,
)
from processes.workers import lost_before

pytestmark = pytest.mark.django_db


def _query(status: str, *, silent_for: float = 0, **fields) -> Query:
    at = timezone.now() - dt.timedelta(seconds=silent_for)
    return Query.objects.create(
        sql="select 1", status=status, started_at=at, heartbeat_at=at, worker="w1@host", **fields
    )


def _silent() -> float:
    """Seconds of silence that make a query lost (a little more than the reaper waits)."""
    return (timezone.now() - lost_before()).total_seconds() + 5


def test_a_running_query_whose_heartbeat_stopped_is_failed_naming_its_worker():
    lost = _query(QueryStatus.RUNNING, silent_for=_silent())
    alive = _query(QueryStatus.RUNNING, silent_for=1)

    report = queries_reap()

    lost.refresh_from_db()
    alive.refresh_from_db()
    assert report["failed"] == 1 and report["canceled"] == 0
    assert lost.status == QueryStatus.FAILED and lost.finished_at is not None
    assert lost.error.startswith("worker lost: no heartbeat from w1@host since ")
    assert alive.status == QueryStatus.RUNNING and alive.error == ""


def test_a_running_query_from_before_heartbeats_is_judged_by_its_start():
    old = Query.objects.create(
        sql="select 1", status=QueryStatus.RUNNING, started_at=timezone.now() - dt.timedelta(hours=1)
    )

    queries_reap()

    assert Query.objects.get(pk=old.pk).status == QueryStatus.FAILED


def test_a_lost_query_whose_cancel_was_asked_for_ends_canceled():
    lost = _query(QueryStatus.RUNNING, silent_for=_silent(), cancel_requested=True)

    report = queries_reap()

    lost.refresh_from_db()
    assert report["canceled"] == 1
    assert lost.status == QueryStatus.CANCELED and lost.error.startswith("cancelled; its worker was gone")


def test_cancel_ends_at_once_a_query_whose_worker_is_gone():
    gone = _query(QueryStatus.RUNNING, silent_for=_silent())
    busy = _query(QueryStatus.RUNNING, silent_for=1)

    gone = queries.query_cancel(query=gone)
    busy = queries.query_cancel(query=busy)

    assert gone.status == QueryStatus.CANCELED and "its worker was gone" in gone.error
    assert busy.status == QueryStatus.RUNNING and busy.cancel_requested  # its worker interrupts it


def test_a_worker_that_comes_back_keeps_the_reapers_verdict():
    lost = _query(QueryStatus.RUNNING, silent_for=_silent())
    queries_reap()

    written = queries._update_running(lost.pk, status=QueryStatus.SUCCESS, rows=[[1]])

    lost.refresh_from_db()
    assert written == 0 and lost.status == QueryStatus.FAILED and lost.rows == []


@pytest.fixture
def private_heavy_queue(settings):
    """The heavy queue as a Redis list of its own on the tests' broker, removed at the end."""
    settings.LAKEWARDEN_HEAVY_QUEUE = f"test-queries-{uuid.uuid4().hex[:10]}"
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    cache.delete(RESEND_PASS_KEY)
    yield client, settings.LAKEWARDEN_HEAVY_QUEUE
    client.delete(settings.LAKEWARDEN_HEAVY_QUEUE)
    cache.delete(RESEND_PASS_KEY)


def _queued_ids(client, queue: str) -> list[str]:
    return [json.loads(raw)["headers"]["id"] for raw in client.lrange(queue, 0, -1)]


def test_a_pending_query_no_queue_or_worker_holds_is_sent_again_once(private_heavy_queue):
    client, queue = private_heavy_queue
    long_ago = timezone.now() - dt.timedelta(minutes=5)
    never_sent = Query.objects.create(sql="select 1")
    Query.objects.filter(pk=never_sent.pk).update(created_at=long_ago)
    fresh = Query.objects.create(sql="select 2")

    assert queries_resend_lost() == 1
    never_sent.refresh_from_db()
    assert never_sent.sent_at is not None and _queued_ids(client, queue) == [never_sent.celery_task_id]
    assert Query.objects.get(pk=fresh.pk).sent_at is None  # within its grace period

    # Overdue again, but its message waits in the queue: nothing is sent twice.
    Query.objects.filter(pk=never_sent.pk).update(sent_at=long_ago)
    cache.delete(RESEND_PASS_KEY)
    assert queries_resend_lost() == 0 and len(_queued_ids(client, queue)) == 1

    # The message is lost (a Redis restart): sent again.
    client.delete(queue)
    cache.delete(RESEND_PASS_KEY)
    assert queries_resend_lost() == 1
    never_sent.refresh_from_db()
    assert _queued_ids(client, queue) == [never_sent.celery_task_id]


def test_a_query_whose_send_failed_stays_pending_for_the_reaper(private_heavy_queue, monkeypatch):
    from celery import current_app

    def broker_down(*args, **kwargs):
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(current_app, "send_task", broker_down)
    row = Query.objects.create(sql="select 1")

    assert query_send(query_id=row.pk) is False
    row.refresh_from_db()
    assert row.status == QueryStatus.PENDING and row.sent_at is None and row.celery_task_id == ""
