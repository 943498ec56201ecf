"""What each resource group spent and what it gained (issue 31 item 6), per day and per action,
from the finished processes' own record (``Process.measured``: the table's facts before and after
the run, its worker-seconds and bytes read and written, processes/executor.py).

- **Cost**: worker-seconds, bytes read, bytes written, of every finished run (a failed or cancelled
  run spent its time too); runs and failed runs counted.
- **Benefit**, of successful runs only: small files removed, delete files removed, snapshots
  removed, bytes reclaimed (the table's bytes before minus after) and health gain (the health score
  before minus after: lower is healthier). Each is the run's difference, never below 0: a run during
  which a writer added more than it removed gained nothing, it did not lose.

One aggregate query whatever the number of processes or tables (``report_rows``); a team user's
report counts only the tables they may see (``tables``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from processes.groups.models import ResourceGroup
from processes.models import TERMINAL_STATUSES, Process, ProcessStatus
from storage.models import Table

#: The longest report the API and the console give (days).
MAX_DAYS = 366
DEFAULT_DAYS = 14

#: (key, what) of the costs, summed over every finished run.
COSTS = (
    ("worker_seconds", "worker-seconds"),
    ("bytes_read", "bytes read"),
    ("bytes_written", "bytes written"),
)
#: (key, what, the fact it is the drop of) of the benefits, summed over the successful runs.
BENEFITS = (
    ("small_files_removed", "small files removed", "small_files"),
    ("delete_files_removed", "delete files removed", "delete_files"),
    ("snapshots_removed", "snapshots removed", "snapshots"),
    ("bytes_reclaimed", "bytes reclaimed", "bytes"),
    ("health_gain", "health gain (score points)", "health"),
)
FIELDS = ("runs", "failed", *(key for key, _ in COSTS), *(key for key, _, _ in BENEFITS))


def _number(path: str) -> str:
    """The JSON number at ``path`` of ``p.measured`` as float8 (NULL when missing or not a number)."""
    return (
        f"(CASE WHEN jsonb_typeof(p.measured #> '{{{path}}}') = 'number'"
        f" THEN (p.measured #>> '{{{path}}}')::float8 END)"
    )


def _drop(fact: str) -> str:
    return f"GREATEST(0, COALESCE({_number('before,' + fact)} - {_number('after,' + fact)}, 0))"


def _sql(scoped: str) -> str:
    # The statuses are the model's constants, not input: written into the text.
    success = f"p.status = '{ProcessStatus.SUCCESS!s}'"
    terminal = ", ".join(f"'{status}'" for status in TERMINAL_STATUSES)
    costs = ", ".join(f"COALESCE(SUM({_number('cost,' + key)}), 0)" for key, _ in COSTS)
    benefits = ", ".join(
        f"COALESCE(SUM({_drop(fact)}) FILTER (WHERE {success}), 0)" for _, _, fact in BENEFITS
    )
    return f"""
        SELECT p.resource_group_id, p.action,
               (COALESCE(p.finished_at, p.created_at) AT TIME ZONE 'UTC')::date AS day,
               COUNT(*), COUNT(*) FILTER (WHERE NOT {success}), {costs}, {benefits}
        FROM {Process._meta.db_table} p
        WHERE p.status IN ({terminal}) AND p.resource_group_id IS NOT NULL
          AND COALESCE(p.finished_at, p.created_at) >= %s
          AND (%s::bigint[] IS NULL OR p.resource_group_id = ANY(%s::bigint[]))
          {scoped}
        GROUP BY 1, 2, 3
    """


def report_rows(
    *,
    since: dt.datetime | None = None,
    groups: Iterable[int] | None = None,
    tables: QuerySet[Table] | None = None,
) -> list[tuple[int, str, dt.date, dict[str, float]]]:
    """(group id, action, day in UTC, {field: sum}) of the finished runs since ``since`` (all
    when None) of ``groups`` (all when None) on ``tables`` (every table when None): one query."""
    ids = None if groups is None else [int(pk) for pk in groups]
    params: list[Any] = [since or dt.datetime(1970, 1, 1, tzinfo=dt.UTC), ids, ids]
    scoped = ""
    if tables is not None:
        inner, inner_params = tables.order_by().values("pk").query.sql_with_params()
        scoped = f"AND p.table_id IN ({inner})"
        params.extend(inner_params)
    with connection.cursor() as cursor:
        cursor.execute(_sql(scoped), params)
        rows = cursor.fetchall()
    return [
        (group_id, action, day, dict(zip(FIELDS, (float(v) for v in values), strict=True)))
        for group_id, action, day, *values in rows
    ]


def _zero() -> dict[str, float]:
    return dict.fromkeys(FIELDS, 0.0)


def _add(into: dict[str, float], values: dict[str, float]) -> None:
    for key, value in values.items():
        into[key] += value


def _rounded(values: dict[str, float]) -> dict[str, float | int]:
    return {
        key: round(value, 1) if key == "worker_seconds" else int(round(value))
        for key, value in values.items()
    }


def check_days(raw: object) -> int:
    """The ``days`` a report covers, from a request's text; ``ValueError`` saying what is allowed."""
    text = str(raw).strip() if raw not in (None, "") else str(DEFAULT_DAYS)
    try:
        days = int(text)
    except ValueError:
        raise ValueError(f"days must be a whole number from 1 to {MAX_DAYS} (got {text!r})") from None
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be from 1 to {MAX_DAYS} (got {days})")
    return days


def group_reports(
    groups: list[ResourceGroup],
    *,
    days: int = DEFAULT_DAYS,
    tables: QuerySet[Table] | None = None,
    now: dt.datetime | None = None,
) -> dict[int, dict[str, Any]]:
    """group id -> its report over the last ``days`` days (today, in UTC, is the last): every day
    (oldest first, a day with no run holds zeros), every action with its totals, and the totals."""
    now = now or timezone.now()
    today = now.astimezone(dt.UTC).date()
    first = today - dt.timedelta(days=days - 1)
    since = dt.datetime.combine(first, dt.time(), tzinfo=dt.UTC)
    per_day: dict[int, dict[dt.date, dict[str, float]]] = {g.pk: {} for g in groups}
    per_action: dict[int, dict[str, dict[str, float]]] = {g.pk: {} for g in groups}
    found = report_rows(since=since, groups=[g.pk for g in groups], tables=tables) if groups else []
    for group_id, action, day, values in found:
        _add(per_day[group_id].setdefault(day, _zero()), values)
        _add(per_action[group_id].setdefault(action, _zero()), values)
    answer = {}
    for group in groups:
        totals = _zero()
        for values in per_action[group.pk].values():
            _add(totals, values)
        dates = [first + dt.timedelta(days=i) for i in range(days)]
        answer[group.pk] = {
            "group": group.name,
            "days": days,
            "since": first.isoformat(),
            "until": today.isoformat(),
            "totals": _rounded(totals),
            "by_action": [
                {"action": action, **_rounded(values)}
                for action, values in sorted(per_action[group.pk].items())
            ],
            "by_day": [{"day": d.isoformat(), **_rounded(per_day[group.pk].get(d, _zero()))} for d in dates],
        }
    return answer


def group_report(
    group: ResourceGroup, *, days: int = DEFAULT_DAYS, tables: QuerySet[Table] | None = None
) -> dict[str, Any]:
    """One group's report (``group_reports``)."""
    return group_reports([group], days=days, tables=tables)[group.pk]


def totals_by_group_action(
    *, tables: QuerySet[Table] | None = None
) -> dict[tuple[int, str], dict[str, float]]:
    """(group id, action) -> every finished run's sums since the history began (what ``/metrics``
    exports as counters): one query."""
    totals: dict[tuple[int, str], dict[str, float]] = {}
    for group_id, action, _, values in report_rows(tables=tables):
        _add(totals.setdefault((group_id, action), _zero()), values)
    return totals
