"""Workbench queries that lost their worker or their message, as processes have it
(processes/services.py ``processes_reap``): a running query writes a heartbeat on its row
(processes/queries.py); the beat task ``reap_queries_task`` fails a RUNNING query whose worker is
lost by the rule processes follow too (processes/workers.py: silent long enough, and its worker
does not say it still runs it; CANCELED when a cancel was asked for) and sends again the task of a
PENDING query that no broker queue or live worker holds (a Redis restart or a killed worker takes
them away). A cancel of a query whose heartbeat stopped ends it at once (``query_worker_lost``)."""

from __future__ import annotations

import datetime as dt
import logging

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from processes.models import Query, QueryStatus
from processes.services import RESEND_GRACE_SECONDS, tasks_held
from processes.workers import lost_before, still_running

logger = logging.getLogger(__name__)

RUN_QUERY_TASK = "processes.tasks.run_query_task"
RESEND_PASS_KEY = "lakewarden:queries:resend-pass"


def _lost(before: dt.datetime) -> Q:
    return Q(heartbeat_at__lt=before) | Q(heartbeat_at__isnull=True, started_at__lt=before)


def query_worker_lost(query: Query) -> bool:
    """Whether ``query`` is RUNNING on a worker that stopped heart-beating."""
    return Query.objects.filter(_lost(lost_before()), pk=query.pk, status=QueryStatus.RUNNING).exists()


def query_end_lost(*, query_id: int, now: dt.datetime | None = None) -> str | None:
    """End a RUNNING query whose worker is gone: CANCELED when a cancel was asked for, else
    FAILED saying since when it was silent. None when it is not (or no longer) such a query."""
    now = now or timezone.now()
    row = (
        Query.objects.filter(_lost(lost_before(now)), pk=query_id, status=QueryStatus.RUNNING)
        .values("cancel_requested", "heartbeat_at", "started_at", "worker")
        .first()
    )
    if row is None:
        return None
    last = row["heartbeat_at"] or row["started_at"]
    silent = f"no heartbeat from {row['worker'] or 'its worker'} since {last.isoformat()}"
    status = QueryStatus.CANCELED if row["cancel_requested"] else QueryStatus.FAILED
    error = (
        f"cancelled; its worker was gone ({silent})" if row["cancel_requested"] else f"worker lost: {silent}"
    )
    ended = Query.objects.filter(pk=query_id, status=QueryStatus.RUNNING).update(
        status=status, error=error, finished_at=now
    )
    if not ended:
        return None
    logger.warning("query %s: %s", query_id, error)
    return status


def queries_reap(*, now: dt.datetime | None = None) -> dict[str, int]:
    """End RUNNING queries whose worker is lost; send again lost PENDING ones."""
    now = now or timezone.now()
    silent = Query.objects.filter(_lost(lost_before(now)), status=QueryStatus.RUNNING)
    rows = {
        pk: (worker, task_id)
        for pk, worker, task_id in silent.values_list("pk", "worker", "celery_task_id")[:500]
    }
    running = still_running(rows)
    counts = {"failed": 0, "canceled": 0}
    for query_id in sorted(set(rows) - running):
        status = query_end_lost(query_id=query_id, now=now)
        if status is not None:
            counts["canceled" if status == QueryStatus.CANCELED else "failed"] += 1
    return {**counts, "resent": queries_resend_lost(now=now)}


def queries_resend_lost(*, now: dt.datetime | None = None) -> int:
    """Send again the task of every PENDING query sent (or created, when its send failed) at
    least a grace period ago whose task is neither waiting in the broker's queue nor held by a
    live worker. A second delivery is harmless: only a PENDING row is claimed. One pass per
    grace period, whatever the number of reapers; nothing is re-sent when the broker and the
    workers cannot be asked (not Redis, no answer)."""
    now = now or timezone.now()
    grace = max(float(settings.LAKEWARDEN_SCHEDULER_SECONDS), RESEND_GRACE_SECONDS)
    overdue_before = now - dt.timedelta(seconds=grace)
    overdue = list(
        Query.objects.filter(status=QueryStatus.PENDING)
        .filter(Q(sent_at__isnull=True, created_at__lte=overdue_before) | Q(sent_at__lte=overdue_before))
        .values_list("pk", flat=True)[:500]
    )
    if not overdue or not cache.add(RESEND_PASS_KEY, now.isoformat(), timeout=grace):
        return 0
    held = tasks_held(settings.LAKEWARDEN_HEAVY_QUEUE)
    if held is None:
        cache.delete(RESEND_PASS_KEY)  # not known now: asked again at the next pass, not a tick later
        return 0
    # Asking the workers takes a moment: a task that ran meanwhile has left the PENDING rows.
    still_pending = Query.objects.filter(pk__in=overdue, status=QueryStatus.PENDING).values_list(
        "pk", "celery_task_id"
    )
    resent = 0
    for query_id, task_id in still_pending:
        if task_id and task_id in held:
            continue
        query_send(query_id=query_id)
        logger.warning("query %s: its task was lost (no queue or worker holds it); sent again", query_id)
        resent += 1
    return resent


def query_send(*, query_id: int) -> bool:
    """Send the query's task to the heavy queue and note it on the row; False when the broker
    did not take it (the reaper sends it again later)."""
    try:
        result = current_app.send_task(RUN_QUERY_TASK, (query_id,), queue=settings.LAKEWARDEN_HEAVY_QUEUE)
    except Exception:
        logger.warning(
            "query %s: the broker did not take its task; it is sent again later", query_id, exc_info=True
        )
        return False
    Query.objects.filter(pk=query_id).update(celery_task_id=result.id, sent_at=timezone.now())
    return True
