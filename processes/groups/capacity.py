"""What the capacity page shows, read in the domain so the page and the API share it: each resource
group with its budgets (used and left), its workers (alive, slots busy and free, from the workers'
own answer to ``inspect``), its queue's depth in the broker, its backlog per action (waiting in the
queue, and held back by the scheduler at its last tick), its warnings (no worker consumes its
queue, a namespace pattern matches no table), what it spent and gained over the last days
(``processes.groups.report``), and the Spark the workers use with its executors
(``processes.groups.executors``).

Scoped by ``tables`` (a team user's visible tables; None: every table): only the groups holding one
of them are shown, and the budget use, the waiting counts and the report count only those tables
(the teams' share of a group other teams may share); what tells of the whole group's activity
(slots and seconds left, the broker queue's depth, busy worker slots, what the scheduler held
back) is shown only unscoped.

Asking the workers waits the inspect timeout; the answer is shared through the cache for
``WORKERS_MAX_AGE`` seconds, so the page and the alert tick ask at most that often.
"""

from __future__ import annotations

import datetime as dt
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery import current_app
from django.conf import settings
from django.db.models import Count, QuerySet
from django.utils import timezone

from processes.groups.budget import usage
from processes.groups.cached import shared_answer
from processes.groups.executors import recent_executors
from processes.groups.membership import group_warnings as rule_warnings
from processes.groups.membership import groups_for_tables
from processes.groups.models import ResourceGroup
from processes.groups.report import DEFAULT_DAYS, group_reports
from processes.models import Process, ProcessStatus
from storage.models import Table

logger = logging.getLogger(__name__)

WORKERS_CACHE_KEY = "lakewarden:groups:workers"
WORKERS_MAX_AGE = 10.0


def _inspect(method: str, timeout: float) -> dict[str, Any]:
    with current_app.connection_for_write(url=settings.CELERY_BROKER_URL) as conn:
        inspect = current_app.control.inspect(timeout=timeout, connection=conn)
        return getattr(inspect, method)() or {}


def ask_workers(timeout: float = 1.0) -> dict[str, dict[str, Any]] | None:
    """node name -> {"queues": [...], "slots": n, "busy": n} of every worker answering, asked in
    parallel (one inspect timeout in all); None when the broker cannot be asked."""
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            queues, stats, active = pool.map(
                lambda m: _inspect(m, timeout), ("active_queues", "stats", "active")
            )
    except Exception:
        logger.warning("could not ask the workers which queues they consume", exc_info=True)
        return None
    workers = {}
    for node, consumed in queues.items():
        pool_stats = (stats.get(node) or {}).get("pool") or {}
        slots = pool_stats.get("max-concurrency") or len(pool_stats.get("processes") or []) or 0
        workers[node] = {
            "queues": sorted(q.get("name", "") for q in consumed or []),
            "slots": int(slots),
            "busy": len(active.get(node) or []),
        }
    return workers


def recent_workers(*, max_age: float = WORKERS_MAX_AGE, timeout: float = 1.0) -> dict[str, Any]:
    """``ask_workers``'s answer, shared through the cache: {"ok", "checked_at", "workers"}."""

    def ask() -> dict[str, Any]:
        workers = ask_workers(timeout)
        return {"ok": workers is not None, "workers": workers or {}}

    return shared_answer(WORKERS_CACHE_KEY, max_age, ask)


def queue_depths(queues: list[str]) -> dict[str, int | None]:
    """Messages waiting in each queue on a Redis broker (None: not known, another broker)."""
    depths: dict[str, int | None] = dict.fromkeys(queues)
    try:
        with current_app.connection_for_read() as connection:
            if connection.transport.driver_type != "redis":
                return depths
            client = connection.default_channel.client
            for queue in queues:
                keys = [queue, *(f"{queue}\x06\x16{step}" for step in range(1, 10))]
                depths[queue] = sum(int(client.llen(key)) for key in keys)
    except Exception:
        logger.warning("could not read the queue depths", exc_info=True)
    return depths


def group_budget(
    group: ResourceGroup, *, now: dt.datetime | None = None, used=None, tables: QuerySet[Table] | None = None
) -> dict[str, Any]:
    """Budget used and left now (``queued``: its processes waiting to start), and what the
    scheduler held back at its last tick. ``tables`` given (a team user's visible tables): only
    their share (``scope`` "teams"): what those tables' processes use, without what is left or
    held back, which tell of the other teams' work in a shared group (``used`` counted so)."""
    used = used or usage([group.pk], now=now, tables=tables)[group.pk]
    if tables is not None:
        return {
            "scope": "teams",
            "active": used.active,
            "queued": sum(used.pending_by_action.values()),
            "slots_left": None,
            "seconds_used": round(used.seconds, 1),
            "seconds_left": None,
            "held": {},
        }
    return {
        "scope": "group",
        "active": used.active,
        "queued": sum(used.pending_by_action.values()),
        "slots_left": used.slots_left(group),
        "seconds_used": round(used.seconds, 1),
        "seconds_left": round(used.seconds_left(group), 1),
        "held": group.held or {},
    }


def group_warnings(group: ResourceGroup, workers: dict[str, Any] | None = None) -> list[str]:
    warnings = rule_warnings(group)
    if workers is not None and workers.get("ok"):
        queue = group.effective_queue
        if not any(queue in worker["queues"] for worker in workers["workers"].values()):
            warnings.insert(
                0, f"no live worker consumes its queue {queue}: its processes wait until one does"
            )
    return warnings


def groups_without_workers(workers: dict[str, Any]) -> dict[str, str]:
    """Group name -> message, for groups no answering worker consumes the queue of (only when
    some worker answered: with none at all the workers' own alert says so)."""
    if not workers.get("ok") or not workers["workers"]:
        return {}
    consumed = {queue for worker in workers["workers"].values() for queue in worker["queues"]}
    return {
        group.name: f"no live worker consumes queue {group.effective_queue} of resource group {group.name}"
        for group in ResourceGroup.objects.all()
        if group.effective_queue not in consumed
    }


def visible_groups(tables: QuerySet[Table] | None = None) -> list[ResourceGroup]:
    """The groups, by name: every one when ``tables`` is None, else those holding one of ``tables``
    (a team user's: their visible tables; two queries besides the groups' own)."""
    groups = list(ResourceGroup.objects.prefetch_related("catalogs").order_by("name"))
    if tables is None:
        return groups
    holding = {group.pk for group in groups_for_tables(tables.values_list("pk", flat=True)).values()}
    return [group for group in groups if group.pk in holding]


def _waiting(groups: list[ResourceGroup], tables: QuerySet[Table] | None) -> dict[int, dict[str, int]]:
    """group id -> action -> processes waiting (PENDING) on ``tables`` (every table when None)."""
    pending = Process.objects.filter(resource_group__in=groups, status=ProcessStatus.PENDING)
    if tables is not None:
        pending = pending.filter(table__in=tables.order_by().values("pk"))
    waiting: dict[int, dict[str, int]] = {}
    for group_id, action, n in (
        pending.order_by().values_list("resource_group_id", "action").annotate(n=Count("id"))
    ):
        waiting.setdefault(group_id, {})[action] = n
    return waiting


def _row(group, *, used, workers, depths, waiting, report, tables) -> dict[str, Any]:
    queue = group.effective_queue
    scoped = tables is not None
    mine = [
        {"name": node, **info, "free": max(0, info["slots"] - info["busy"])}
        for node, info in sorted(workers["workers"].items())
        if queue in info["queues"]
    ]
    if scoped:  # busy slots, like the queue's depth, count the other teams' work too
        mine = [{**worker, "busy": None, "free": None} for worker in mine]
    held = {} if scoped else (group.held or {}).get("by_action", {})
    budget = group_budget(group, used=used, tables=tables)
    backlog = [
        {"action": action, "waiting": waiting.get(action, 0), "held": None if scoped else held.get(action, 0)}
        for action in sorted(set(waiting) | set(held))
    ]
    return {
        "group": group,
        "queue": queue,
        "budget": budget,
        "workers": mine,
        "slots": sum(w["slots"] for w in mine),
        "busy": None if scoped else sum(w["busy"] for w in mine),
        "depth": budget["queued"] if scoped else depths.get(queue),
        "backlog": backlog,
        "warnings": group_warnings(group, workers),
        "report": report,
    }


def capacity(
    *, now: dt.datetime | None = None, tables: QuerySet[Table] | None = None, days: int = DEFAULT_DAYS
) -> dict[str, Any]:
    """Everything the capacity page shows, in a handful of queries whatever the number of tables;
    scoped to ``tables`` when given (see the module's docstring)."""
    now = now or timezone.now()
    groups = visible_groups(tables)
    used = usage([g.pk for g in groups], now=now, tables=tables)
    workers = recent_workers()
    depths = {} if tables is not None else queue_depths([g.effective_queue for g in groups])
    waiting = _waiting(groups, tables)
    reports = group_reports(groups, days=days, tables=tables, now=now)
    rows = [
        _row(
            group,
            used=used[group.pk],
            workers=workers,
            depths=depths,
            waiting=waiting.get(group.pk, {}),
            report=reports[group.pk],
            tables=tables,
        )
        for group in groups
    ]
    return {
        "groups": rows,
        "workers_ok": workers["ok"],
        "checked_at": workers["checked_at"],
        "scoped": tables is not None,
        "days": days,
        "spark": recent_executors(),
    }
