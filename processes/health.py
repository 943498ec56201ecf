"""The service's health as the domain sees it: tables ranked by health score in the database, the
Celery workers answering a ping and beat's last tick. Read by the alert rules (processes/alerts) and
by the console's overview, metrics and health check, so it lives below the console."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import connection
from django.db.models import Count, QuerySet
from django.utils import timezone

from processes.models import Process, ProcessStatus, ServiceHeartbeat
from storage.health import (
    MANY_FAILURES,
    MANY_FILES,
    MANY_SNAPSHOTS,
    STALE_DAYS,
    WEIGHTS,
    TableHealth,
    table_health,
)
from storage.models import Table

#: The health score of storage/health.py in SQL, term by term in the same order and the same
#: double-precision arithmetic, so the database ranks exactly as ``table_health`` scores (Postgres
#: rounds a double half to even, as Python's ``round`` does).
_SCORE_SQL = """
  {w[small_files]} * (CASE WHEN t.file_count = 0 THEN 0.0
                      ELSE t.small_file_count::float8 / t.file_count END)
                   * LEAST(t.small_file_count::float8 / 20, 1.0)
+ {w[file_count]} * LEAST(t.file_count::float8 / {many_files}, 1.0)
+ {w[snapshots]} * LEAST(t.instant_count::float8 / {many_snapshots}, 1.0)
+ {w[maintenance]} * (CASE WHEN t.last_maintenance_at IS NULL THEN 1.0
                      ELSE LEAST(EXTRACT(EPOCH FROM (%s - t.last_maintenance_at))::float8
                                 / 86400 / {stale_days}, 1.0) END)
                    * LEAST(t.file_count::float8 / 50, 1.0)
+ {w[failures]} * LEAST(COALESCE(f.n, 0)::float8 / {many_failures}, 1.0)
"""

_RANK_SQL = """
WITH f AS (
  SELECT table_id, count(*) AS n FROM {process}
  WHERE created_at >= %s AND status = %s GROUP BY table_id
)
SELECT t.id, round({score}) AS health FROM {table} t LEFT JOIN f ON f.table_id = t.id
{where}
ORDER BY health {direction}, t.name COLLATE "C", t.id
"""


def health_ranked(
    now: dt.datetime,
    *,
    limit: int | None = None,
    offset: int = 0,
    where: tuple[str, Sequence[Any]] | None = None,
    ascending: bool = False,
) -> list[tuple[int, int]]:
    """(table id, health score) unhealthiest first (healthiest first when ``ascending``; name,
    then id, among equal scores), ranked in the database by the score of ``table_health``.
    ``where`` is an SQL condition on the table ``t`` and its parameters (``%s``), e.g. the ids
    of a filtered queryset; ``limit`` and ``offset`` page the ranking."""
    score = _SCORE_SQL.format(
        w=WEIGHTS,
        many_files=MANY_FILES,
        many_snapshots=MANY_SNAPSHOTS,
        stale_days=STALE_DAYS,
        many_failures=MANY_FAILURES,
    )
    condition, condition_params = where or ("", ())
    sql = _RANK_SQL.format(
        process=Process._meta.db_table,
        table=Table._meta.db_table,
        score=score,
        where=f"WHERE {condition}" if condition else "",
        direction="ASC" if ascending else "DESC",
    )
    params: list[Any] = [now - dt.timedelta(days=7), str(ProcessStatus.FAILED), now, *condition_params]
    if limit:
        sql += " LIMIT %s"
        params.append(limit)
    if offset:
        sql += " OFFSET %s"
        params.append(offset)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(pk, int(health)) for pk, health in cursor.fetchall()]


def ids_condition(tables: QuerySet[Table] | None) -> tuple[str, Sequence[Any]] | None:
    """``health_ranked``'s ``where`` for the ids of ``tables`` (None: every table)."""
    if tables is None:
        return None
    sql, params = tables.select_related(None).order_by().values("id").query.sql_with_params()
    return f"t.id IN ({sql})", params


def health_scores(now: dt.datetime, ids: Sequence[int]) -> dict[int, int]:
    """The health score of each table of ``ids`` (one query), as ``health_ranked`` ranks it."""
    return dict(health_ranked(now, where=("t.id = ANY(%s)", [list(ids)]))) if ids else {}


def tables_by_health(*, limit: int | None = 10, tables: QuerySet[Table] | None = None) -> list[TableHealth]:
    """Unhealthiest first; three queries whatever the number of tables or processes (the last
    successful maintenance is kept on the table row by the executor): the database ranks every
    table, only the tables shown are loaded and explained (``table_health``). ``tables``: rank
    only these (what a user's teams may see); default every table."""
    now = timezone.now()
    ids = [pk for pk, _ in health_ranked(now, limit=limit, where=ids_condition(tables))]
    failures = dict(
        Process.objects.filter(
            table_id__in=ids, created_at__gte=now - dt.timedelta(days=7), status=ProcessStatus.FAILED
        )
        .order_by()
        .values_list("table_id")
        .annotate(n=Count("id"))
    )
    tables = Table.objects.defer("metrics", "properties").in_bulk(ids)
    result = []
    for pk in ids:
        table = tables[pk]
        health = table_health(table, table.last_maintenance_at, failures.get(pk, 0), now)
        result.append(health)
    return result


def check_workers(timeout: float = 1.0) -> dict[str, Any]:
    """The workers answering a ping within ``timeout`` seconds. Celery's current app is the
    project's (console/celery.py: on import Celery's Django fix-up makes it the default app of
    every thread, and workers and beat set it as theirs), and the ping goes over an explicit
    connection to the configured broker (not the app's cached pool)."""
    try:
        with current_app.connection_for_write(url=settings.CELERY_BROKER_URL) as conn:
            replies = current_app.control.ping(timeout=timeout, connection=conn) or []
    except Exception as error:
        return {"ok": False, "detail": f"cannot ping workers: {error}", "workers": []}
    names = sorted(name for reply in replies for name in reply)
    detail = f"{len(names)} worker(s) answering" if names else "no Celery worker answered a ping"
    return {"ok": bool(names), "detail": detail, "workers": names}


def beat_liveness() -> dict[str, Any]:
    """Beat's last heartbeat row and whether it is recent enough (three scheduler ticks, 90 s at least)."""
    beat = ServiceHeartbeat.objects.filter(name="beat").first()
    fresh_within = dt.timedelta(seconds=max(3 * settings.LAKEWARDEN_SCHEDULER_SECONDS, 90))
    beat_alive = beat is not None and timezone.now() - beat.last_seen < fresh_within
    return {"beat": beat, "beat_alive": beat_alive}


def liveness(
    *, ping_timeout: float = 0.8, ping: Callable[..., dict[str, Any]] = check_workers
) -> dict[str, Any]:
    """Workers answering a ping (``ping(timeout=ping_timeout)``: ``check_workers`` unless the
    caller has a cheaper answer, as the console's shared one) and beat's last tick."""
    return {"workers": ping(timeout=ping_timeout), **beat_liveness()}
