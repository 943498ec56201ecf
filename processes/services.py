"""Process life: create, transition, cancel, kill, retry, reap. Every transition is a conditional
update; a transition the current status does not allow raises ``Conflict`` saying why."""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from processes.groups.budget import admit
from processes.groups.membership import group_of
from processes.groups.models import ResourceGroup
from processes.health import health_store
from processes.models import (
    ACTIVE_STATUSES,
    STARTED_STATUSES,
    TERMINAL_STATUSES,
    Process,
    ProcessStatus,
    ProcessTrigger,
    statuses_leading_to,
)
from processes.plugin import ProcessInputError
from processes.previews import preview_record
from processes.registry import ConfiguredFactory, coordinators, factory_classes, validate_params
from processes.runtime import TableRuntime
from processes.workers import (
    ask_workers,
    lost_before,
    process_lock_held,
    still_running,
    task_ids,
    workers_alive,
)
from storage.errors import Conflict, InvalidInput, ServiceError
from storage.io import is_local
from storage.models import Table
from storage.paths import table_guard

logger = logging.getLogger(__name__)

STAGING_FOLDER = ".lakewarden-staging"


def staging_dir(process: Process) -> Path:
    """Staging lives under the table location, so a commit never copies across filesystems.
    Tables on object stores stage no table file (their rewrites write in place, see
    factories.outputs); a process that wants scratch space gets a local folder of its own under
    the var folder (before, the URI was taken as a relative path: ``./s3:/bucket/...`` appeared in
    the worker's working folder)."""
    if not is_local(process.table.location):
        return Path(settings.LAKEWARDEN_VAR_DIR) / "staging" / f"process-{process.pk}"
    return Path(process.table.location) / STAGING_FOLDER / f"process-{process.pk}"


def process_create(
    *,
    table: Table,
    action: str,
    params: dict[str, Any] | None = None,
    user=None,
    trigger: str = ProcessTrigger.MANUAL,
    retry_of: Process | None = None,
    not_before: dt.datetime | None = None,
) -> Process:
    """A PENDING process for (table, action), enqueued once the transaction commits.

    Parameters are checked against the factory's schema, then (except for the scheduler's, whose
    trigger just planned them) against the table by the factory's ``validate``: a
    ``ProcessInputError`` is an ``InvalidInput`` and nothing is created. The factory's preview
    is kept on the row (best effort: a preview that fails leaves it empty)."""
    coordinator = _coordinator(table, action)
    params = validate_params(type(coordinator.factory), params if params is not None else {})
    runtime = TableRuntime(table, coordinator.factory.properties)
    if trigger != ProcessTrigger.SCHEDULE:
        _validate_for_table(coordinator, runtime, action, params)
    process = Process(
        table=table,
        action=action,
        factory=coordinator.name,
        params=params,
        preview=_creation_preview(coordinator, runtime, action, params),
        trigger=trigger,
        requested_by=user if getattr(user, "is_authenticated", False) else None,
        retry_of=retry_of,
        attempt=(retry_of.attempt + 1) if retry_of else 1,
        max_retries=retry_of.max_retries if retry_of else settings.LAKEWARDEN_MAX_RETRIES,
        not_before=not_before,
    )
    try:
        with transaction.atomic():
            # Resource groups (issue 31): the group's row lock makes its budgets hold under races.
            process.resource_group = admit(group_of(table), action=action, trigger=trigger)
            process.save()
    except IntegrityError:
        active = Process.objects.filter(table=table, action=action, status__in=ACTIVE_STATUSES).first()
        where = f" (#{active.pk} is {active.status})" if active else ""
        raise Conflict(f"a {action} process is already active on {table.name}{where}") from None
    process_enqueue(process)
    return process


def process_preview(*, table: Table, action: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a process for (table, action, params) would do, without doing it: the factory's
    ``Preview`` with the health score before and the predicted one after (``previews``). Bad
    input is refused as ``process_create`` refuses it; nothing is written."""
    coordinator = _coordinator(table, action)
    params = validate_params(type(coordinator.factory), params if params is not None else {})
    runtime = TableRuntime(table, coordinator.factory.properties)
    _validate_for_table(coordinator, runtime, action, params)
    try:
        preview = coordinator.factory.preview(runtime, action, params)
    except ProcessInputError as error:
        raise InvalidInput(str(error), field="params") from None
    except ServiceError:
        raise
    except Exception as error:  # a factory's bug or an unreadable table: said, never a 500
        logger.warning("%s could not preview %s on %s", coordinator.name, action, table, exc_info=True)
        answer = preview_record(table, None)
        answer["notes"] = [f"the preview failed: {type(error).__name__}: {error}"]
        return {"action": action, "factory": coordinator.name, **answer}
    return {"action": action, "factory": coordinator.name, **preview_record(table, preview)}


def _coordinator(table: Table, action: str) -> ConfiguredFactory:
    pairs = coordinators()
    coordinator = pairs.get((table.format, action))
    if coordinator is None:
        offered = sorted(a for (fmt, a) in pairs if fmt == table.format)
        raise InvalidInput(
            f"no enabled process factory offers {action!r} for {table.format} tables"
            f" (available: {', '.join(offered) or 'none'})",
            field="action",
        )
    return coordinator


def _validate_for_table(
    coordinator: ConfiguredFactory, runtime: TableRuntime, action: str, params: dict[str, Any]
) -> None:
    """The factory's check of ``params`` against the table: ``InvalidInput`` with its reason. A
    check that breaks otherwise is logged and lets the process through (its run says why)."""
    try:
        coordinator.factory.validate(runtime, action, params)
    except ProcessInputError as error:
        raise InvalidInput(str(error), field="params") from None
    except ServiceError:
        raise
    except Exception:
        logger.warning(
            "%s could not check %s on %s", coordinator.name, action, runtime.identifier, exc_info=True
        )


def _creation_preview(
    coordinator: ConfiguredFactory, runtime: TableRuntime, action: str, params: dict[str, Any]
) -> dict[str, Any] | None:
    try:
        preview = coordinator.factory.preview(runtime, action, params)
    except Exception:
        logger.warning(
            "%s could not preview %s on %s", coordinator.name, action, runtime.identifier, exc_info=True
        )
        return None
    if preview is None:
        return None
    record = preview_record(runtime.table, preview)
    record["predicted_worker_seconds"] = _predicted_seconds(action, record)
    return record


def _predicted_seconds(action: str, record: dict[str, Any]) -> float | None:
    """The worker-seconds the run is predicted to cost: the bytes its plan reads and writes at the
    throughput the action's past runs measured (the scheduler ranks work by the same model:
    ``processes.ranking``); None when the plan names no bytes."""
    from processes.plugin import Estimate
    from processes.ranking import measured_throughput

    bytes_in, bytes_out = record.get("bytes_in"), record.get("bytes_out")
    if not isinstance(bytes_in, int | float) or not isinstance(bytes_out, int | float):
        return None
    throughput = measured_throughput(action)
    return round(throughput.seconds(Estimate(bytes_read=int(bytes_in), bytes_written=int(bytes_out))), 3)


#: A PENDING process is re-sent once it is overdue by a scheduler tick, and never sooner than this.
RESEND_GRACE_SECONDS = 10.0
RESEND_PASS_KEY = "lakewarden:processes:resend-pass"

# Tasks are sent by name: processes/tasks.py wraps these services, so importing it here would
# make the two modules import each other.
RUN_PROCESS_TASK = "processes.tasks.run_process_task"
KILL_PROCESS_TASK = "processes.tasks.kill_process_task"


def process_enqueue(process: Process) -> None:
    countdown = 0.0
    if process.not_before is not None:
        countdown = max(0.0, (process.not_before - timezone.now()).total_seconds())
    process_id = process.pk

    def send() -> None:
        result = current_app.send_task(
            RUN_PROCESS_TASK, (process_id,), queue=process_queue(process), countdown=countdown
        )
        Process.objects.filter(pk=process_id).update(sent_at=timezone.now())
        Process.objects.filter(pk=process_id, celery_task_id="").update(celery_task_id=result.id)

    transaction.on_commit(send)


def process_queue(process: Process) -> str:
    """The queue of the process's resource group (the heavy queue for a process admitted before
    groups existed, or whose group was deleted)."""
    group: ResourceGroup | None = process.resource_group if process.resource_group_id else None
    return group.effective_queue if group is not None else settings.LAKEWARDEN_HEAVY_QUEUE


def transition(
    process: Process, to: str, *, current: str | tuple[str, ...] | None = None, **fields
) -> Process:
    """Move ``process`` to ``to`` by a conditional update, if ``TRANSITIONS`` allows it from the
    status the row has in the database (narrowed to ``current`` when given: the status the caller
    saw). Anything else raises ``Conflict`` naming the status and what was allowed."""
    allowed = statuses_leading_to(to)
    if current is not None:
        seen = (current,) if isinstance(current, str) else tuple(current)
        allowed = tuple(status for status in allowed if status in seen)
    if to in TERMINAL_STATUSES:
        fields.setdefault("finished_at", timezone.now())
    updated = (
        Process.objects.filter(pk=process.pk, status__in=allowed).update(status=to, **fields)
        if allowed
        else 0
    )
    if not updated:
        status = Process.objects.filter(pk=process.pk).values_list("status", flat=True).first()
        raise Conflict(
            f"process {process.pk} is {status}; only {' or '.join(allowed) or 'nothing'} can become {to}"
        )
    process.refresh_from_db()
    if to == ProcessStatus.FAILED:  # a failure counts in the table's health score for 7 days
        health_store(table_ids=[process.table_id])
    return process


def process_cancel(*, process: Process) -> Process:
    """PENDING stops at once; RUNNING is asked to stop at its next check (and cleans its staging)."""
    if process.status == ProcessStatus.PENDING:
        process = transition(
            process,
            ProcessStatus.CANCELED,
            current=ProcessStatus.PENDING,
            cancel_requested=True,
            failure="cancelled before it started",
        )
        _revoke(process, terminate=False)
        return process
    if process.status != ProcessStatus.RUNNING:
        raise Conflict(f"process {process.pk} is {process.status}; only RUNNING or PENDING can be cancelled")
    return transition(process, ProcessStatus.CANCELING, current=ProcessStatus.RUNNING, cancel_requested=True)


def process_kill(*, process: Process, grace_seconds: int | None = None) -> Process:
    """Cancel, then after a grace period terminate the worker task; the kill task records KILLED."""
    grace = settings.LAKEWARDEN_KILL_GRACE_SECONDS if grace_seconds is None else grace_seconds
    if process.status == ProcessStatus.PENDING:
        process = transition(
            process,
            ProcessStatus.KILLED,
            current=ProcessStatus.PENDING,
            cancel_requested=True,
            failure="killed before it started",
        )
        _revoke(process, terminate=False)
        return process
    if process.status not in (ProcessStatus.RUNNING, ProcessStatus.CANCELING):
        raise Conflict(
            f"process {process.pk} is {process.status}; only PENDING, RUNNING or CANCELING can be killed"
        )
    deadline = timezone.now() + dt.timedelta(seconds=grace)
    process = transition(
        process,
        ProcessStatus.CANCELING,
        current=(ProcessStatus.RUNNING, ProcessStatus.CANCELING),
        cancel_requested=True,
        kill_deadline=deadline,
    )
    process_id = process.pk
    transaction.on_commit(lambda: current_app.send_task(KILL_PROCESS_TASK, (process_id,), countdown=grace))
    return process


def process_enforce_kill(*, process_id: int) -> Process | None:
    """After the grace period: terminate the task if it still runs, record KILLED, clean staging."""
    process = Process.objects.select_related("table").filter(pk=process_id).first()
    if process is None or process.status in TERMINAL_STATUSES:
        return process
    _revoke(process, terminate=True)
    try:
        # One transaction: KILLED becomes visible only once the staging folder is gone, so whoever
        # sees the terminal status (an operator, a retry, a test) never sees the killed run's files.
        with transaction.atomic():
            process = transition(
                process, ProcessStatus.KILLED, failure="killed by an operator after the grace period"
            )
            clean_staging(process)
    except Conflict:
        process.refresh_from_db()
        return process  # it finished on its own in the meantime
    clean_staging(process)  # again: whatever the terminated task still wrote meanwhile (as process_fail)
    return process


def process_retry(*, process: Process, user=None) -> Process:
    """A new attempt linked to a failed, cancelled or killed one (an operator's retry)."""
    if process.status not in (ProcessStatus.FAILED, ProcessStatus.CANCELED, ProcessStatus.KILLED):
        raise Conflict(
            f"process {process.pk} is {process.status}; only FAILED, CANCELED or KILLED processes can be retried"
        )
    if process.retries.exists():
        newer = process.retries.order_by("-pk").first()
        raise Conflict(f"process {process.pk} was already retried as #{newer.pk}")
    return process_create(
        table=process.table,
        action=process.action,
        params=process.params,
        user=user,
        trigger=ProcessTrigger.RETRY,
        retry_of=process,
    )


def process_fail(*, process: Process, reason: str, retry: bool = True) -> Process:
    """FAILED with ``reason``; staging cleaned; an automatic retry while the budget lasts (none
    when ``retry`` is False: a ``ProcessInputError`` no retry can mend).

    The failure and its retry commit together: nobody ever sees a failed process whose retry is
    still to come. Staging is cleaned before the row says FAILED (so a FAILED row has no staged
    files behind it) and again after (whatever a dying worker still wrote in between); a later
    process on the table sweeps anything left (``clean_stale_staging``)."""
    clean_staging(process)
    with transaction.atomic():
        process = transition(process, ProcessStatus.FAILED, failure=reason[:10_000])
        if retry:
            _schedule_retry(process)
    clean_staging(process)
    return process


def _schedule_retry(process: Process) -> None:
    retries_used = process.attempt - 1
    if process.cancel_requested or retries_used >= process.max_retries:
        return
    if factory_classes().get(process.factory) is None:
        return
    backoff = settings.LAKEWARDEN_RETRY_BACKOFF_SECONDS * (2**retries_used)
    try:
        with transaction.atomic():
            process_create(
                table=process.table,
                action=process.action,
                params=process.params,
                trigger=ProcessTrigger.AUTO_RETRY,
                retry_of=process,
                not_before=timezone.now() + dt.timedelta(seconds=backoff),
            )
    except (Conflict, InvalidInput) as error:
        logger.warning("no automatic retry of process %s: %s", process.pk, error.message)


def processes_reap(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Fail processes whose worker is lost (processes/workers.py: silent for three heartbeats and
    ``LAKEWARDEN_WORKER_LOST_SECONDS``, their worker does not say it still runs them, and their own
    connection no longer holds their table's lock: a worker whose connection does is alive, and
    failing its process would let it commit under a FAILED row); enforce kill deadlines that
    passed."""
    now = now or timezone.now()
    stale_before = lost_before(now)
    silent = list(
        Process.objects.select_related("table")
        .filter(status__in=STARTED_STATUSES)
        .filter(Q(heartbeat_at__lt=stale_before) | Q(heartbeat_at__isnull=True, started_at__lt=stale_before))
    )
    running = still_running(
        {
            p.pk: (p.worker, p.celery_task_id)
            for p in silent
            if p.kill_deadline is None or p.kill_deadline > now
        }
    )
    failed = 0
    for process in silent:
        if process.kill_deadline is not None and process.kill_deadline <= now:
            process_enforce_kill(process_id=process.pk)
            continue
        if process.pk in running:
            logger.info(
                "process %s: no heartbeat since %s, but %s still runs it",
                process.pk,
                (process.heartbeat_at or process.started_at).isoformat(),
                process.worker,
            )
            continue
        if process_lock_held(process.pk, process.table_id):  # its worker's connection is still open
            logger.warning(
                "process %s: no heartbeat since %s, but the lock on its table is still held: not failed",
                process.pk,
                (process.heartbeat_at or process.started_at).isoformat(),
            )
            continue
        try:
            process_fail(
                process=process,
                reason="worker lost: no heartbeat since "
                f"{(process.heartbeat_at or process.started_at).isoformat()}",
            )
            failed += 1
        except Conflict:
            pass  # it finished in the meantime
    overdue_kills = Process.objects.filter(
        status__in=ACTIVE_STATUSES, kill_deadline__lt=now - dt.timedelta(seconds=5)
    )
    killed = 0
    for process_id in overdue_kills.values_list("pk", flat=True):
        process_enforce_kill(process_id=process_id)
        killed += 1
    return {"failed": failed, "killed": killed, "resent": processes_resend_lost(now=now)}


def processes_resend_lost(*, now: dt.datetime | None = None) -> int:
    """Send again the task of every PENDING process overdue by a scheduler tick (at least
    ``RESEND_GRACE_SECONDS``: its ``not_before`` and its last send both that far behind) whose task
    is neither waiting in the broker's queue nor held by a live worker: a worker killed while it
    held a delayed retry, or prefetched work, takes those tasks down with it, and Redis gives them
    back only after its visibility timeout. A second delivery is harmless (only a PENDING row is
    claimed). One pass per tick, whatever the number of reapers. RabbitMQ requeues a dead
    consumer's messages itself: nothing is re-sent there."""
    now = now or timezone.now()
    grace = max(float(settings.LAKEWARDEN_SCHEDULER_SECONDS), RESEND_GRACE_SECONDS)
    overdue_before = now - dt.timedelta(seconds=grace)
    overdue = list(
        Process.objects.filter(status=ProcessStatus.PENDING)
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=overdue_before))
        .filter(Q(sent_at__isnull=True, created_at__lte=overdue_before) | Q(sent_at__lte=overdue_before))
        .values_list("pk", "celery_task_id")[:500]
    )
    if not overdue or not cache.add(RESEND_PASS_KEY, now.isoformat(), timeout=grace):
        return 0
    queues = {
        process_queue(p)
        for p in Process.objects.select_related("resource_group").filter(pk__in=[pk for pk, _ in overdue])
    }
    held = tasks_held(*sorted(queues))
    if held is None:
        cache.delete(RESEND_PASS_KEY)  # not known now: asked again at the next pass, not a tick later
        return 0
    # Asking the workers takes a moment: a task that ran meanwhile has left the PENDING rows.
    still_pending = Process.objects.select_related("resource_group").filter(
        pk__in=[pk for pk, _ in overdue], status=ProcessStatus.PENDING
    )
    resent = 0
    for process in still_pending:
        process_id = process.pk
        if process.celery_task_id in held:
            continue
        result = current_app.send_task(RUN_PROCESS_TASK, (process_id,), queue=process_queue(process))
        Process.objects.filter(pk=process_id, status=ProcessStatus.PENDING).update(
            sent_at=now, celery_task_id=result.id
        )
        logger.warning("process %s: its task was lost (no worker holds it); sent again", process_id)
        resent += 1
    return resent


def redis_queue_keys(queue: str) -> list[str]:
    """The Redis lists kombu keeps for ``queue``: one per priority step, the queue's name first,
    then name + "\x06\x16" + step."""
    return [queue, *(f"{queue}\x06\x16{step}" for step in range(1, 10))]


def tasks_held(*queues: str) -> set[str] | None:
    """Ids of the tasks waiting in ``queues`` on a Redis broker or run, reserved or held for later
    (eta) by a live worker; None when that cannot be known (another broker, no answer, a live
    worker that did not answer in time): then nothing is re-sent rather than guessed. A worker
    that does not answer is not taken for one that holds nothing: the workers whose own record
    is fresh (processes/workers.py) must all answer; one whose record went stale is dead."""
    try:
        held: set[str] = set()
        # The queue first, the workers after: a task moves from the queue to a worker, never back,
        # so one of the two looks sees it; one that finished meanwhile is no longer PENDING.
        with current_app.connection_for_read() as connection:
            if connection.transport.driver_type != "redis":
                return None
            client = connection.default_channel.client
            for queue in queues:
                for key in redis_queue_keys(queue):
                    for raw in client.lrange(key, 0, 10_000):
                        held.add(_message_id(raw))
        alive = workers_alive()  # None: no records to go by, every worker is asked
        for method in ("active", "reserved", "scheduled"):
            answers = ask_workers(method, alive)
            silent = sorted((alive or set()) - set(answers))
            if silent:
                logger.warning("%s did not answer %s: what they hold is unknown", ", ".join(silent), method)
                return None
            held |= task_ids(answers)
        return held
    except Exception:
        logger.warning("could not tell which tasks the broker and the workers hold", exc_info=True)
        return None


def _message_id(raw: bytes | str) -> str:
    try:
        return str(json.loads(raw)["headers"]["id"])
    except (ValueError, KeyError, TypeError):
        return ""


def clean_staging(process: Process) -> None:
    folder = staging_dir(process)
    if not is_local(process.table.location):  # Lakewarden's own scratch folder, outside any table
        shutil.rmtree(folder, ignore_errors=True)
        return
    if not _may_remove(process.table, folder):
        return
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
    _remove_if_empty(folder.parent)


def _may_remove(table: Table, folder: Path) -> bool:
    """Staging is removed only where the table's path guard allows: never through a link that a
    writer of the table folder put in its place, never inside another registered table."""
    if not is_local(table.location):
        return False
    reason = table_guard(table).refusal(str(folder))
    if reason:
        logger.warning("will not remove the staging folder %s: %s", folder, reason)
    return reason is None


def clean_stale_staging(table: Table) -> list[str]:
    """Remove the staging folders of the table's finished processes (a worker that died while its
    JVM still wrote can leave files after the reaper's cleanup). A folder of an active process, or
    of a process this database does not know (another installation's?), is left alone. Called with
    the table's lock held; returns the folders removed."""
    root = Path(table.location) / STAGING_FOLDER
    if not root.is_dir() or not _may_remove(table, root):
        return []
    folders = {}
    for folder in root.iterdir():
        number = folder.name.removeprefix("process-")
        if folder.name.startswith("process-") and number.isdigit():
            folders[int(number)] = folder
    finished = Process.objects.filter(
        table=table, pk__in=list(folders), status__in=TERMINAL_STATUSES
    ).values_list("pk", flat=True)
    removed = []
    for pk in finished:
        shutil.rmtree(folders[pk], ignore_errors=True)
        removed.append(str(folders[pk]))
    _remove_if_empty(root)
    return removed


def _remove_if_empty(folder: Path) -> None:
    try:
        if folder.exists() and not any(folder.iterdir()):
            folder.rmdir()
    except OSError:
        pass  # another process staged into it meanwhile


def _revoke(process: Process, *, terminate: bool) -> None:
    if not process.celery_task_id:
        return
    try:
        current_app.control.revoke(
            process.celery_task_id, terminate=terminate, signal="SIGKILL" if terminate else "SIGTERM"
        )
    except Exception:
        logger.warning(
            "could not revoke task %s of process %s", process.celery_task_id, process.pk, exc_info=True
        )
