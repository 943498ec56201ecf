"""A group's budgets: how much of each it uses now, and admitting one more process under a row lock.

Concurrency: processes of the group that are active (PENDING, RUNNING, CANCELING), so work waiting
in the queue counts as it will run. Compute: worker-seconds the group's processes spent within the
rolling hour (finished ones, and running ones up to now), each run counted for the part of it
inside the hour. A new process is admitted while a slot is free and the seconds spent plus what
the action is expected to cost (the mean of its last runs in the group) fit the budget.

``admit`` locks the group's row (``SELECT ... FOR UPDATE``) for the rest of the caller's
transaction, in which the caller creates the process: two beat ticks, or a tick and a manual run,
admitting into one group at once take turns, so neither budget is ever exceeded.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import connection
from django.db.models import Avg, Count, F, QuerySet
from django.utils import timezone

from processes.groups.models import ResourceGroup
from processes.models import ACTIVE_STATUSES, STARTED_STATUSES, Process, ProcessStatus, ProcessTrigger
from storage.errors import Conflict

WINDOW = dt.timedelta(hours=1)
#: Runs of an action whose mean duration is its expected cost.
COST_SAMPLE = 20


class BudgetExhausted(Conflict):
    """The group has no free slot or no compute left: nothing was created (a 409 on a surface)."""

    def __init__(self, message: str, *, group: ResourceGroup, kind: str) -> None:
        super().__init__(message)
        self.group = group
        self.kind = kind  # "slot" or "compute"


@dataclass
class Usage:
    active: int
    seconds: float
    by_action: dict[str, int]
    #: Admitted, not started yet: their expected cost is reserved (``reserved``).
    pending_by_action: dict[str, int] = field(default_factory=dict)

    def reserved(self, group: ResourceGroup, cost_of: Callable[[ResourceGroup, str], float]) -> float:
        return sum(n * cost_of(group, action) for action, n in self.pending_by_action.items())

    def slots_left(self, group: ResourceGroup) -> int:
        return max(0, group.max_concurrency - self.active)

    def seconds_left(self, group: ResourceGroup) -> float:
        return max(0.0, group.compute_budget_seconds - self.seconds)


_SECONDS_SQL = """
SELECT resource_group_id,
       COALESCE(SUM(EXTRACT(EPOCH FROM (LEAST(COALESCE(finished_at, %(now)s), %(now)s)
                                        - GREATEST(started_at, %(since)s)))), 0)
FROM {process}
WHERE resource_group_id = ANY(%(groups)s) AND started_at IS NOT NULL AND started_at < %(now)s
  AND ((finished_at IS NULL AND status = ANY(%(started)s)) OR finished_at > %(since)s)
  {tables}
GROUP BY resource_group_id
"""


def usage(
    group_ids: list[int], *, now: dt.datetime | None = None, tables: QuerySet | None = None
) -> dict[int, Usage]:
    """Each group's active processes (by action) and worker-seconds in the rolling hour: two
    queries for any number of groups. ``tables`` given (a queryset of tables): counted over those
    tables' processes only, a share of the group's use (what a team may see of a shared group;
    admitting a process always counts the whole group)."""
    now = now or timezone.now()
    answer = {pk: Usage(0, 0.0, {}) for pk in group_ids}
    active = Process.objects.filter(resource_group_id__in=group_ids, status__in=ACTIVE_STATUSES)
    table_ids = None
    if tables is not None:
        table_ids = list(tables.order_by().values_list("pk", flat=True))
        active = active.filter(table_id__in=table_ids)
    for group_id, action, status, n in (
        active.order_by().values_list("resource_group_id", "action", "status").annotate(n=Count("id"))
    ):
        used = answer[group_id]
        used.active += n
        used.by_action[action] = used.by_action.get(action, 0) + n
        if status == ProcessStatus.PENDING:
            used.pending_by_action[action] = used.pending_by_action.get(action, 0) + n
    with connection.cursor() as cursor:
        cursor.execute(
            _SECONDS_SQL.format(
                process=Process._meta.db_table,
                tables="" if table_ids is None else "AND table_id = ANY(%(tables)s)",
            ),
            {
                "now": now,
                "since": now - WINDOW,
                "groups": list(group_ids),
                "started": [str(s) for s in STARTED_STATUSES],
                "tables": table_ids,
            },
        )
        for group_id, seconds in cursor.fetchall():
            answer[group_id].seconds = max(0.0, float(seconds))
    return answer


def expected_seconds(group: ResourceGroup, action: str) -> float:
    """What one more run of ``action`` in ``group`` is expected to cost: the mean worker-seconds of
    its last ``COST_SAMPLE`` finished runs there (0 before the first)."""
    recent = (
        Process.objects.filter(
            resource_group=group,
            action=action,
            status=ProcessStatus.SUCCESS,
            started_at__isnull=False,
            finished_at__isnull=False,
        )
        .order_by("-finished_at")
        .values_list("pk", flat=True)[:COST_SAMPLE]
    )
    mean = (
        Process.objects.filter(pk__in=list(recent))
        .annotate(took=F("finished_at") - F("started_at"))
        .aggregate(mean=Avg("took"))["mean"]
    )
    return mean.total_seconds() if mean else 0.0


def refusal(group: ResourceGroup, used: Usage, cost: float, reserved: float = 0.0) -> BudgetExhausted | None:
    """Why ``group`` cannot take one more process costing ``cost`` seconds (with ``reserved``
    seconds expected of the processes it admitted that have not started), or None."""
    if used.active >= group.max_concurrency:
        return BudgetExhausted(
            f"resource group {group.name} is at its concurrency budget ({used.active} of "
            f"{group.max_concurrency} processes active); it takes more as they finish",
            group=group,
            kind="slot",
        )
    if used.seconds + reserved + cost > group.compute_budget_seconds:
        return BudgetExhausted(
            f"resource group {group.name} used {used.seconds:,.0f} of its {group.compute_budget_seconds:,} "
            f"worker-seconds in the last hour"
            + (f", {reserved:,.0f} are expected of its waiting processes" if reserved else "")
            + (f" and the next run is expected to take {cost:,.0f}" if cost else "")
            + "; it takes more as older runs leave the rolling hour",
            group=group,
            kind="compute",
        )
    return None


def admit(
    group: ResourceGroup, *, action: str, trigger: str, now: dt.datetime | None = None
) -> ResourceGroup:
    """Lock the group's row for the caller's transaction and check one more ``action`` fits;
    raises ``BudgetExhausted`` saying which budget is spent. An automatic retry replaces the run
    that just failed in the same transaction (the slot it frees) and is always admitted."""
    if not connection.in_atomic_block:
        raise RuntimeError("admit() must run inside the transaction that creates the process")
    locked = ResourceGroup.objects.select_for_update().get(pk=group.pk)
    if trigger == ProcessTrigger.AUTO_RETRY:
        return locked
    used = usage([locked.pk], now=now)[locked.pk]
    problem = refusal(locked, used, expected_seconds(locked, action), used.reserved(locked, expected_seconds))
    if problem is not None:
        raise problem
    return locked
