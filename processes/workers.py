"""When a worker, and the work it runs, is lost: the one rule both reapers follow
(``processes_reap`` in processes/services.py, ``queries_reap`` in processes/query_reaper.py).

A process or a query that runs writes a heartbeat on its row every
``LAKEWARDEN_HEARTBEAT_SECONDS``. On a busy machine a beat comes late, so a row is silent only
after ``lost_after_seconds()``: three heartbeats and ``LAKEWARDEN_WORKER_LOST_SECONDS`` at least.
Even then it is failed only when its worker does not say it still runs it:

- each worker keeps its own liveness record in the broker's Redis (``record_worker_alive``, on
  Celery's worker heartbeat, every 2 s from the worker's main process; removed at a clean
  shutdown): a worker without a record younger than ``lost_after_seconds()`` is dead (so a worker
  must not run with ``--without-heartbeat``);
- a worker that answers ``inspect().active()`` with the task's id runs it (its pool process is
  slow, not gone); one that answers without it lost it;
- a worker that does not answer within ``LAKEWARDEN_INSPECT_TIMEOUT_SECONDS`` but whose record
  is fresh is unknown: its work is left alone until the next pass.

The same records let the resend pass tell a worker that answered late from one that holds
nothing (``workers_alive``)."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterable
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import connection
from django.utils import timezone

logger = logging.getLogger(__name__)

#: A row is silent after this many heartbeat intervals (and ``LAKEWARDEN_WORKER_LOST_SECONDS``).
LOST_AFTER_BEATS = 3
#: Redis hash: worker node name -> epoch seconds of its last record.
WORKERS_KEY = "lakewarden:workers"
#: Celery's worker heartbeat, which writes the record (``celery worker --heartbeat-interval``).
RECORD_EVERY_SECONDS = 2.0
#: Records of workers silent this long are removed by the readers.
FORGET_AFTER_SECONDS = 24 * 3600


def lost_after_seconds() -> float:
    """Seconds of silence after which a running row's worker may be lost."""
    return float(
        max(settings.LAKEWARDEN_HEARTBEAT_SECONDS * LOST_AFTER_BEATS, settings.LAKEWARDEN_WORKER_LOST_SECONDS)
    )


def lost_before(now: dt.datetime | None = None) -> dt.datetime:
    """A running row whose last heartbeat is older than this may have lost its worker."""
    return (now or timezone.now()) - dt.timedelta(seconds=lost_after_seconds())


def lost_noticed_within() -> float:
    """Seconds after its last heartbeat by which a killed worker's row is failed: the silence,
    the worker's last record (written up to ``RECORD_EVERY_SECONDS`` before it died), a reaper
    pass (every half heartbeat) and the time given to the workers to answer."""
    return (
        lost_after_seconds()
        + RECORD_EVERY_SECONDS
        + settings.LAKEWARDEN_HEARTBEAT_SECONDS
        + settings.LAKEWARDEN_INSPECT_TIMEOUT_SECONDS
    )


def record_worker_alive(eventer: Any) -> None:
    """The worker's own liveness record (Celery's ``heartbeat_sent``: ``eventer`` is the worker's
    event dispatcher, whose broker connection writes it). Only on Redis; best effort."""
    try:
        connection = eventer.connection
        if connection is None or connection.transport.driver_type != "redis":
            return
        connection.default_channel.client.hset(WORKERS_KEY, eventer.hostname, repr(time.time()))
    except Exception:
        logger.debug("could not write the worker's liveness record", exc_info=True)


def forget_worker(hostname: str) -> None:
    """A worker that shuts down cleanly takes its record with it: it is known gone at once."""
    try:
        with current_app.connection_for_write() as connection:
            if connection.transport.driver_type == "redis":
                connection.default_channel.client.hdel(WORKERS_KEY, hostname)
    except Exception:
        logger.debug("could not remove the worker's liveness record", exc_info=True)


def worker_records() -> dict[str, float] | None:
    """node -> seconds since the worker's last record; None when records are not kept (not
    Redis) or cannot be read. Records older than ``FORGET_AFTER_SECONDS`` are removed."""
    try:
        with current_app.connection_for_read() as connection:
            if connection.transport.driver_type != "redis":
                return None
            client = connection.default_channel.client
            now = time.time()
            ages = {}
            for node, stamp in client.hgetall(WORKERS_KEY).items():
                node = node.decode() if isinstance(node, bytes) else str(node)
                ages[node] = now - float(stamp)
            old = [node for node, age in ages.items() if age > FORGET_AFTER_SECONDS]
            if old:
                client.hdel(WORKERS_KEY, *old)
            return {node: age for node, age in ages.items() if node not in old}
    except Exception:
        logger.warning("could not read the workers' liveness records", exc_info=True)
        return None


def workers_alive(records: dict[str, float] | None = None) -> set[str] | None:
    """Nodes whose record is younger than ``lost_after_seconds()``; None when not known."""
    records = worker_records() if records is None else records
    if records is None:
        return None
    return {node for node, age in records.items() if age < lost_after_seconds()}


def ask_workers(method: str, nodes: Iterable[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """node -> its answer to ``inspect().<method>()`` (active, reserved, scheduled) for the
    workers that answer within ``LAKEWARDEN_INSPECT_TIMEOUT_SECONDS``: ``nodes`` only when given
    (the call returns as soon as all of them answered), else every worker (the whole timeout)."""
    destination = sorted(set(nodes)) if nodes is not None else None
    if destination == []:
        return {}
    inspect = current_app.control.inspect(
        destination=destination,
        limit=len(destination) if destination else None,
        timeout=float(settings.LAKEWARDEN_INSPECT_TIMEOUT_SECONDS),
    )
    return getattr(inspect, method)() or {}


def task_ids(answers: dict[str, list[dict[str, Any]]]) -> set[str]:
    """The task ids in workers' answers (``scheduled`` wraps each request in ``request``)."""
    return {task.get("request", task).get("id", "") for tasks in answers.values() for task in tasks or []}


def still_running(silent: dict[Any, tuple[str, str]]) -> set[Any]:
    """Of ``silent`` (key -> (worker node, celery task id)) of rows whose heartbeat stopped, the
    keys whose worker still runs them: it answered with the task among its active ones, or its
    own record is fresh and it did not answer in time (unknown: left for the next pass). A worker
    without a fresh record is dead and is not asked; without records (not Redis) every worker is
    asked and one that does not answer is lost."""
    if not silent:
        return set()
    alive = workers_alive()
    nodes = {node for node, _ in silent.values() if node and (alive is None or node in alive)}
    try:
        answers = ask_workers("active", nodes) if nodes else {}
    except Exception:
        logger.warning("could not ask the workers what they run", exc_info=True)
        answers = {}
    kept = set()
    for key, (node, task_id) in silent.items():
        if node in answers:
            if task_id and task_id in task_ids({node: answers[node]}):
                kept.add(key)
        elif alive is not None and node in alive:
            kept.add(key)
    return kept


#: The first key of the tables' maintenance advisory locks (``processes.executor.TableLock``).
TABLE_LOCK_NAMESPACE = 0x1A4E


def process_lock_holder(process_id: int) -> str:
    """The ``application_name`` of the connection a process holds its table's lock on."""
    return f"lakewarden process {process_id}"


def process_lock_held(process_id: int, table_id: int) -> bool:
    """Whether the process's own connection still holds its table's maintenance lock
    (``processes.executor.TableLock``, two-int form: namespace, table id): the worker that took it
    is still connected to the database, so the process is not lost however silent. A lock on the
    table held for anything else (another process, a trash restore) does not count."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND l.classid = %s AND l.objid = %s AND l.objsubid = 2 AND a.application_name = %s)",
            [TABLE_LOCK_NAMESPACE, table_id, process_lock_holder(process_id)],
        )
        row = cursor.fetchone()
    return bool(row and row[0])
