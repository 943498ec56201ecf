"""Why a due run waits for its resource group's budget, and until when when the rolling hour says
so: a compute budget frees as past runs leave the hour, so the first moment the group's
worker-seconds (running processes still counting) plus what it reserved and the next run's expected
cost fit the budget is computed from the group's runs in the hour (one query per group and tick)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django.db.models import Q

from processes.groups.budget import WINDOW, BudgetExhausted
from processes.groups.models import ResourceGroup
from processes.models import STARTED_STATUSES, Process

if TYPE_CHECKING:
    from processes.groups.tick import TickGroups


def budget_wait(
    groups: TickGroups, group: ResourceGroup, action: str, problem: BudgetExhausted
) -> tuple[str, dict[str, Any]]:
    """The decision's reason and numbers for a run of ``action`` held back by ``problem``."""
    cache: dict[tuple[int, str, str], tuple[str, dict[str, Any]]] = groups.__dict__.setdefault(
        "decision_waits", {}
    )
    key = (group.pk, action, problem.message)  # the message carries the figures it was refused with
    if key not in cache:
        cache[key] = _explain(groups, group, action, problem)
    return cache[key]


def _explain(
    groups: TickGroups, group: ResourceGroup, action: str, problem: BudgetExhausted
) -> tuple[str, dict[str, Any]]:
    used = groups.usage[group.pk]
    if problem.kind == "slot":
        numbers: dict[str, Any] = {
            "budget": "concurrency",
            "active": used.active,
            "max_concurrency": group.max_concurrency,
        }
        return problem.message, numbers
    cost = groups.cost(group, action)
    reserved = used.reserved(group, groups.cost)
    numbers = {
        "budget": "compute",
        "used_seconds": round(used.seconds, 1),
        "budget_seconds": group.compute_budget_seconds,
        "reserved_seconds": round(reserved, 1),
        "expected_seconds": round(cost, 1),
    }
    until = compute_frees_at(group, groups.now, group.compute_budget_seconds - reserved - cost)
    if until is None:
        return problem.message + " (its running processes keep using it: no time can be given)", numbers
    numbers["until"] = until.isoformat()
    return f"{problem.message}; room again at {until:%Y-%m-%d %H:%M:%S} UTC at the latest", numbers


def compute_frees_at(group: ResourceGroup, now: dt.datetime, allowed: float) -> dt.datetime | None:
    """The first moment (from the candidates where a run leaves the rolling hour) at which the
    group's worker-seconds in the hour are at most ``allowed``; running processes count on as they
    run. None when no such moment comes (``allowed`` below what running processes will use)."""
    since = now - WINDOW
    runs = list(
        Process.objects.filter(resource_group=group, started_at__isnull=False, started_at__lt=now)
        .filter(Q(finished_at__gt=since) | Q(finished_at__isnull=True, status__in=STARTED_STATUSES))
        .values_list("started_at", "finished_at")
    )
    if allowed < 0:
        return None

    def used_at(moment: dt.datetime) -> float:
        start = moment - WINDOW
        total = 0.0
        for started, finished in runs:
            end = min(finished or moment, moment)
            total += max(0.0, (end - max(started, start)).total_seconds())
        return total

    candidates = {now} | {finished + WINDOW for _, finished in runs if finished}
    candidates |= {started + WINDOW for started, _ in runs}
    for moment in sorted(candidates):
        if moment >= now and used_at(moment) <= allowed:
            return moment
    return None
