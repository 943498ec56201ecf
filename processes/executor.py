"""Running one process on a worker: claim, per-table lock, heartbeat, run, terminal state."""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from processes.health import health_store
from processes.models import STARTED_STATUSES, Process, ProcessStatus, statuses_leading_to
from processes.plugin import ProcessCancelled, ProcessContext, ProcessInputError, ProcessRecord
from processes.registry import configured_factories
from processes.runtime import TableRuntime
from processes.services import clean_staging, clean_stale_staging, process_fail, staging_dir, transition
from processes.spark.session import interrupt_jobs, spark_session, tag_jobs, untag_jobs
from processes.watch import Watch
from processes.workers import TABLE_LOCK_NAMESPACE, process_lock_holder
from storage.errors import Conflict
from storage.io import is_local
from storage.models import Table
from storage.refresh import refresh_facts
from storage.selectors import jsonable

logger = logging.getLogger(__name__)


class TableLockBusy(Exception):
    pass


class TableLock:
    """A Postgres session advisory lock on a connection of its own, so it is held exactly as long
    as this process lives: a killed worker's connection closes and the lock goes with it."""

    def __init__(self, table_id: int, holder: str = "lakewarden") -> None:
        self.table_id = table_id
        #: The connection's ``application_name``: who holds the lock (``process_lock_holder``).
        self.holder = holder[:63]
        self._connection: psycopg.Connection | None = None

    def acquire(self) -> None:
        db = connection.settings_dict
        self._connection = psycopg.connect(
            host=db.get("HOST") or "127.0.0.1",
            port=db.get("PORT") or 5432,
            dbname=db["NAME"],
            user=db.get("USER") or None,
            password=db.get("PASSWORD") or None,
            autocommit=True,
            application_name=self.holder,
        )
        row = self._connection.execute(
            "select pg_try_advisory_lock(%s, %s)", (TABLE_LOCK_NAMESPACE, self.table_id)
        ).fetchone()
        assert row is not None  # a select of one value answers one row
        got = row[0]
        if not got:
            self.release()
            raise TableLockBusy(f"another maintenance process holds table {self.table_id}")

    def release(self) -> None:
        if self._connection is not None:
            self._connection.close()  # closing the session releases its advisory locks
            self._connection = None


class WorkerContext(ProcessContext):
    """The context a process runs with on a Celery worker."""

    def __init__(self, process: Process, runtime: TableRuntime) -> None:
        self.process_id = process.pk
        self.runtime = runtime
        self.staging_dir = staging_dir(process)
        self.spark_tag = f"lakewarden-process-{process.pk}"
        self.cancelled = threading.Event()
        self.progress: tuple[int, int, str] | None = None
        self._spark = None
        #: Run by ``run_process`` on a claimed row: each checkpoint checks the row is still its own.
        self.claimed = False

    @property
    def spark(self):
        if self._spark is None:
            self._spark = spark_session()
            tag_jobs(self._spark, self.spark_tag)
        return self._spark

    def check_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise ProcessCancelled(f"process {self.process_id} was cancelled")

    def report_progress(self, done: int, total: int, message: str = "") -> None:
        self.progress = (int(done), int(total), message[:255])

    def checkpoint(self, name: str) -> None:
        self.check_cancelled()
        failpoint = failpoints().get(name)
        if failpoint is not None:
            kind, _, argument = failpoint.partition(":")
            logger.warning("process %s: failpoint %s=%s", self.process_id, name, failpoint)
            if kind == "sleep":
                deadline = time.monotonic() + float(argument or 1)
                while time.monotonic() < deadline:
                    self.check_cancelled()
                    time.sleep(0.1)
            elif kind == "hang":  # ignores cancel, like a step stuck in I/O: only a kill ends it
                time.sleep(float(argument or 3600))
            elif kind == "raise":
                raise RuntimeError(f"failpoint {name}: {argument or 'injected failure'}")
        self.check_cancelled()
        if self.claimed:
            self._check_still_running(name)

    def _check_still_running(self, name: str) -> None:
        """A process whose row was ended while it ran (the reaper took its worker for lost, an
        operator's kill) stops here: it must not go on to commit or delete what its row no longer
        answers for. Every factory passes a checkpoint before each commit."""
        status = Process.objects.filter(pk=self.process_id).values_list("status", flat=True).first()
        if status not in STARTED_STATUSES:
            raise ProcessCancelled(
                f"process {self.process_id} is {status or 'deleted'} while it ran: stopped at {name}"
            )

    def interrupt_spark(self) -> None:
        if self._spark is None:
            return
        try:
            interrupt_jobs(self._spark, self.spark_tag)
        except Exception:
            logger.warning("could not interrupt the Spark jobs of process %s", self.process_id, exc_info=True)

    def release_spark(self) -> None:
        """Stop tagging this thread's Spark jobs (the worker thread runs other processes next)."""
        if self._spark is None:
            return
        try:
            untag_jobs(self._spark, self.spark_tag)
        except Exception:
            logger.debug("could not untag the Spark jobs of process %s", self.process_id, exc_info=True)


def _heartbeat(context: WorkerContext, interval: float) -> Watch:
    """Every heartbeat: record liveness and progress; notice a cancel request and interrupt Spark."""

    def beat() -> None:
        fields: dict[str, Any] = {"heartbeat_at": timezone.now()}
        if context.progress is not None:
            done, total, message = context.progress
            fields.update(progress_done=done, progress_total=total, progress_message=message)
        Process.objects.filter(pk=context.process_id, status__in=STARTED_STATUSES).update(**fields)

    def cancel_requested() -> bool:
        return bool(
            Process.objects.filter(pk=context.process_id).values_list("cancel_requested", flat=True).first()
        )

    return Watch(
        name=f"heartbeat-{context.process_id}",
        interval=interval,
        cancel_requested=cancel_requested,
        interrupt=context.interrupt_spark,
        beat=beat,
    )


def run_process(process_id: int, *, worker: str = "", task_id: str = "") -> str:
    """Claim and run one process; returns the status it ended in (or why it did not run)."""
    close_old_connections()
    process = _claim(process_id, worker=worker, task_id=task_id)
    if process is None:
        status = Process.objects.filter(pk=process_id).values_list("status", flat=True).first()
        return f"not claimed ({status or 'missing'})"
    lock = _lock(process)
    try:
        return _execute(process)
    finally:
        clean_staging(process)
        lock.release()


def _claim(process_id: int, *, worker: str, task_id: str) -> Process | None:
    """PENDING -> RUNNING by a conditional update: a redelivered task finds nothing to do."""
    now = timezone.now()
    claimed = Process.objects.filter(
        pk=process_id, status__in=statuses_leading_to(ProcessStatus.RUNNING)
    ).update(
        status=ProcessStatus.RUNNING,
        started_at=now,
        heartbeat_at=now,
        worker=worker[:255],
        **({"celery_task_id": task_id} if task_id else {}),
    )
    return Process.objects.select_related("table").get(pk=process_id) if claimed else None


def _lock(process: Process) -> TableLock:
    """The table's advisory lock; when another process holds it the row goes back to PENDING and
    ``TableLockBusy`` is raised (the task retries shortly)."""
    lock = TableLock(process.table_id, holder=process_lock_holder(process.pk))
    try:
        lock.acquire()
    except TableLockBusy as busy:
        Process.objects.filter(pk=process.pk, status=ProcessStatus.RUNNING).update(
            status=ProcessStatus.PENDING, started_at=None, heartbeat_at=None, progress_message=str(busy)[:255]
        )
        raise
    for folder in clean_stale_staging(process.table):
        logger.warning("process %s: removed staging left by an earlier process: %s", process.pk, folder)
    return lock


def _check_staging(context: WorkerContext) -> None:
    """A local table's staging folder must be one the path guard allows (not a link that would
    take the process's writes elsewhere): ``ProcessInputError`` otherwise, nothing written."""
    if not is_local(context.runtime.location):
        return
    reason = context.guard.refusal(str(context.staging_dir))
    if reason:
        raise ProcessInputError(
            f"will not stage files in {context.staging_dir}: {reason}; nothing was changed"
        )


def _execute(process: Process) -> str:
    """Run the factory's process under a heartbeat and reach a terminal state on every path."""
    heartbeat = None
    context = None
    started = time.monotonic()
    before: dict[str, Any] = {}
    try:
        configured = {c.name: c for c in configured_factories(include_disabled=True)}.get(process.factory)
        if configured is None:
            raise RuntimeError(f"process factory {process.factory!r} is not installed on this worker")
        runtime = TableRuntime(process.table, configured.factory.properties)
        context = WorkerContext(process, runtime)
        context.claimed = True
        heartbeat = _heartbeat(context, settings.LAKEWARDEN_HEARTBEAT_SECONDS)
        context.cancelled = heartbeat.cancelled
        heartbeat.start()
        before = _facts(process.table_id)
        record = ProcessRecord(
            id=process.pk,
            action=process.action,
            params=process.params,
            attempt=process.attempt,
            trigger=process.trigger,
        )
        table_process = configured.factory.recover(runtime, record)
        _check_staging(context)
        context.check_cancelled()
        summary = table_process.run(context) or {}
        heartbeat.stop()
        heartbeat.tick()  # last progress in the row
        return _finish_success(process, summary, before=before, started=started)
    except ProcessCancelled:
        status = _finish_cancelled(process, CANCELLED)
        _record_unfinished(process, before, started)
        return status
    except BaseException as error:  # SoftTimeLimitExceeded and SystemExit too: never stay RUNNING
        status = _finish_failed(process, error)
        _record_unfinished(process, before, started)
        if not isinstance(error, Exception):
            raise
        return status
    finally:
        if heartbeat is not None:
            heartbeat.stop()
        if context is not None:
            context.release_spark()


def _finish_success(
    process: Process, summary: dict[str, Any], *, before: dict[str, Any], started: float
) -> str:
    """SUCCESS, with the table's facts re-read in this task (the figures every page shows are the
    ones after the commit) and what the run measurably did and cost kept on the row."""
    summary = jsonable(summary)
    Table.objects.filter(pk=process.table_id).update(last_maintenance_at=timezone.now())
    after = _facts(process.table_id)
    measured = {"before": before, "after": after, "cost": _cost(summary, started)}
    transition(
        process, ProcessStatus.SUCCESS, summary=summary, measured=measured, heartbeat_at=timezone.now()
    )
    return ProcessStatus.SUCCESS


def _facts(table_id: int) -> dict[str, Any]:
    """The table's facts re-read from its metadata now, with its health score; {} when they could
    not be read (the refresh error is in the facts when the metadata could not)."""
    try:
        facts = refresh_facts(table_id) or {}
    except Exception:  # noqa: BLE001 - a process's outcome never depends on the figures
        logger.warning("could not refresh the facts of table %s", table_id, exc_info=True)
        return {}
    health_store(table_ids=[table_id])  # the score stored is the one recorded
    facts["health"] = Table.objects.filter(pk=table_id).values_list("health_score", flat=True).first()
    return facts


def _cost(summary: dict[str, Any], started: float) -> dict[str, Any]:
    """Worker-seconds (the worker slot's time on the process, refreshes included) and the bytes
    the summary says were read and written (0 when it does not say)."""

    def count(key: str) -> int:
        value = summary.get(key)
        return int(value) if isinstance(value, int | float) else 0

    return {
        "worker_seconds": round(time.monotonic() - started, 3),
        "bytes_read": count("bytes_in"),
        "bytes_written": count("bytes_out"),
    }


def _record_unfinished(process: Process, before: dict[str, Any], started: float) -> None:
    """A failed or cancelled run's cost and the facts it started from (nothing was committed)."""
    measured = {"before": before, "after": {}, "cost": _cost({}, started)}
    Process.objects.filter(pk=process.pk).update(measured=measured)


#: The reason a cancelled process shows: one line, whatever the cancel interrupted (a Spark job's
#: Java stack trace goes to the worker's log); a kill's cancel that took effect says so.
CANCELLED = "cancelled by an operator"
KILL_TOOK_EFFECT = (
    "killed by an operator: the kill's cancel took effect within the grace period (no task terminated)"
)


def _finish_cancelled(process: Process, failure: str) -> str:
    clean_staging(process)
    if Process.objects.filter(pk=process.pk, kill_deadline__gt=timezone.now()).exists():
        failure = KILL_TOOK_EFFECT  # (past the deadline the kill task is terminating it: KILLED)
    try:
        transition(process, ProcessStatus.CANCELED, current=STARTED_STATUSES, failure=failure)
    except Conflict:
        pass  # killed meanwhile: KILLED stands
    return ProcessStatus.CANCELED


def _finish_failed(process: Process, error: BaseException) -> str:
    reason = f"{type(error).__name__}: {error}"
    logger.warning("process %s failed: %s\n%s", process.pk, reason, traceback.format_exc())
    if Process.objects.filter(pk=process.pk, cancel_requested=True).exists():
        return _finish_cancelled(process, CANCELLED)  # what the cancel interrupted stays in the log
    retry = not isinstance(error, ProcessInputError)  # bad parameters or properties: no retry mends them
    no_space = no_space_left(error, process.table.location)
    if no_space:  # a retry would fill the same disk again
        reason, retry = f"{no_space} (not retried: free space there, then run it again)", False
    elif not retry:
        reason += " (not retried: the parameters or properties do not fit the table)"
    try:
        process_fail(process=process, reason=reason, retry=retry)
    except Conflict:
        pass
    return ProcessStatus.FAILED


# How a full disk reads in the text of an error raised elsewhere (a Spark task's Python or Java error).
_NO_SPACE_TEXT = re.compile(r"No space left on device(?::\s*'(?P<path>[^']+)')?")


def no_space_left(error: BaseException, location: str) -> str | None:
    """``no space left on <where>`` when ``error``, one of its causes, or the text of a Spark task's
    error is ENOSPC: the file being written when it names one, else ``location``; None otherwise."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno == errno.ENOSPC:
            return f"no space left on {current.filename or location}"
        current = current.__cause__ or current.__context__
    match = _NO_SPACE_TEXT.search(str(error))
    return f"no space left on {match['path'] or location}" if match else None


def local_context(process: Process, runtime: TableRuntime, staging: Path | None = None) -> WorkerContext:
    """A worker context outside Celery (tests, notebooks)."""
    context = WorkerContext(process, runtime)
    if staging is not None:
        context.staging_dir = staging
    return context


def failpoints() -> dict[str, str]:
    """``LAKEWARDEN_FAILPOINTS=before-commit=sleep:30,after-write=raise`` as a dict (fault tests)."""
    raw = os.environ.get("LAKEWARDEN_FAILPOINTS", "")
    points = {}
    for item in raw.split(","):
        name, _, action = item.strip().partition("=")
        if name:
            points[name] = action or "raise"
    return points
