"""Workbench queries through the faults that left them stuck (issue 29 item 13), with real worker
and beat processes on the real Redis broker and the test database:

- the heavy worker killed (kill -9, pool and all) under a running query: the beat's reaper fails
  it, or ends it CANCELED when a cancel was asked for after the worker died;
- queued messages lost, as a Redis restart without persistence loses them (the test's own queue
  deleted from Redis): the reaper sends them again and a worker started later answers them;
- every database connection of the workers cut under a running query, as a Postgres restart cuts
  them (``pg_terminate_backend`` on the test's own database: nothing else on the server is
  touched): the query still answers, and a cancel asked for meanwhile still ends it.

Postgres and Redis themselves are not restarted: other test runs on this machine share them."""

from __future__ import annotations

import time

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.db.models import F

from processes import queries
from processes.models import Query, QueryStatus
from storage import services
from tests.console.tables import write_delta_table
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e

#: About a minute of DuckDB work on 30 rows (30^7 rows): long enough to be caught running.
ENDLESS = (
    "select sum(a.id * b.id + c.id - d.id) as s "
    "from orders a, orders b, orders c, orders d, orders e, orders f, orders g"
)


@pytest.fixture
def orders(warehouse, transactional_db):
    return services.table_register(location=str(write_delta_table(warehouse / "orders", commits=3)))


def _workers(celery_processes, *, heavy: bool = True):
    """A light worker (the reaper's), beat, and (``heavy``) the heavy worker, all answering."""
    celery_processes.start_worker(name="light", queues="light", concurrency=1)
    doomed = celery_processes.start_worker(name="heavy", queues="heavy", concurrency=1) if heavy else None
    celery_processes.start_beat()
    celery_processes.wait_for_workers(count=2 if heavy else 1)
    return doomed


def _running(query: Query) -> Query:
    """The query once it runs and its watch has written a heartbeat (so the watch's own database
    connection is open: a cut closes it too)."""
    return wait_for(
        lambda: Query.objects.filter(
            pk=query.pk, status=QueryStatus.RUNNING, heartbeat_at__gt=F("started_at")
        ).first(),
        timeout=120,
        message=f"query {query.pk} running",
    )


def _ended(query: Query, timeout: float = 90) -> Query:
    return wait_for(
        lambda: Query.objects.filter(pk=query.pk, status__in=("SUCCESS", "FAILED", "CANCELED")).first(),
        timeout=timeout,
        message=f"query {query.pk} ended",
    )


def test_a_query_whose_worker_is_killed_is_failed_by_the_reaper(celery_processes, orders):
    doomed = _workers(celery_processes)
    query = queries.query_submit(sql=ENDLESS, engine="duckdb", cache=False)
    running = _running(query)

    celery_processes.kill_hard(doomed)
    killed_at = time.monotonic()
    ended = _ended(query, timeout=60)

    assert ended.status == QueryStatus.FAILED, celery_processes.logs()
    assert ended.error.startswith(f"worker lost: no heartbeat from {running.worker} since ")
    assert running.worker.startswith("heavy-")
    assert time.monotonic() - killed_at < 40  # silent 10 s, reaped within a beat or two


def test_a_cancel_after_the_worker_died_ends_the_query_canceled(celery_processes, orders):
    doomed = _workers(celery_processes)
    query = queries.query_submit(sql=ENDLESS, engine="duckdb", cache=False)
    _running(query)

    celery_processes.kill_hard(doomed)
    asked = queries.query_cancel(query=Query.objects.get(pk=query.pk))  # its heartbeat is still fresh
    ended = _ended(query, timeout=60)

    assert asked.status == QueryStatus.RUNNING and asked.cancel_requested
    assert ended.status == QueryStatus.CANCELED, celery_processes.logs()
    assert ended.error.startswith("cancelled; its worker was gone")


def test_queued_queries_whose_messages_were_lost_are_sent_again(celery_processes, orders):
    _workers(celery_processes, heavy=False)  # nobody takes the heavy queue yet
    submitted = [
        queries.query_submit(sql=f"select count(*) + {n} as n from orders", engine="duckdb", cache=False)
        for n in range(3)
    ]
    sent = wait_for(
        lambda: (
            dict(Query.objects.filter(sent_at__isnull=False).values_list("pk", "celery_task_id"))
            if Query.objects.filter(sent_at__isnull=False).count() == 3
            else None
        ),
        timeout=30,
        message="3 sent",
    )
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.delete(settings.LAKEWARDEN_HEAVY_QUEUE)  # what a Redis restart without persistence does
    celery_processes.start_worker(name="heavy", queues="heavy", concurrency=1)
    ended = [_ended(q, timeout=120) for q in submitted]

    assert [q.status for q in ended] == [QueryStatus.SUCCESS] * 3, celery_processes.logs()
    assert [q.rows for q in ended] == [[[30]], [[31]], [[32]]]
    assert all(q.celery_task_id != sent[q.pk] for q in ended)  # each ran from a new message


def _cut_database_connections() -> int:
    """Terminate every other session on the test database (the workers', the beat's): what a
    Postgres restart does to them. The test's own connection stays."""
    with connection.cursor() as cursor:
        cursor.execute(
            "select count(pg_terminate_backend(pid)) from pg_stat_activity "
            "where datname = current_database() and pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def test_a_query_answers_after_its_database_connections_are_cut(
    celery_processes, warehouse, transactional_db
):
    services.table_register(location=str(write_delta_table(warehouse / "orders", commits=4)))  # ids 0..39
    _workers(celery_processes)
    # 40^6 rows: seconds of work, so the cut comes while it runs
    sql = "select sum(a.id * b.id + c.id - d.id) as s from orders a, orders b, orders c, orders d, orders e, orders f"
    query = queries.query_submit(sql=sql, engine="duckdb", cache=False)
    _running(query)

    cut = _cut_database_connections()
    ended = _ended(query, timeout=180)

    assert cut >= 2  # at least the running query's two (its run and its heartbeat)
    assert ended.status == QueryStatus.SUCCESS, (ended.error, celery_processes.logs())
    assert ended.rows == [[40**4 * sum(range(40)) ** 2]]


def test_a_cancel_ends_a_query_whose_database_connections_were_cut(celery_processes, orders):
    _workers(celery_processes)
    query = queries.query_submit(sql=ENDLESS, engine="duckdb", cache=False)
    _running(query)

    _cut_database_connections()
    queries.query_cancel(query=Query.objects.get(pk=query.pk))
    ended = _ended(query, timeout=60)

    assert ended.status == QueryStatus.CANCELED, celery_processes.logs()
    assert ended.error == "cancelled"  # its own worker stopped it, not the reaper
