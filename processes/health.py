"""The service's health as the domain sees it: tables ranked by health score in the database, the
Celery workers answering a ping and beat's last tick. Read by the alert rules (processes/alerts) and
by the console's overview, metrics and health check, so it lives below the console."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import connection
from django.db.models import Count
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
                      ELSE LEAST(EXTRACT(EPOCH FROM (%(now)s - t.last_maintenance_at))::float8
                                 / 86400 / {stale_days}, 1.0) END)
                    * LEAST(t.file_count::float8 / 50, 1.0)
+ {w[failures]} * LEAST(COALESCE(f.n, 0)::float8 / {many_failures}, 1.0)
"""

_RANK_SQL = """
WITH f AS (
  SELECT table_id, count(*) AS n FROM {process}
  WHERE created_at >= %(week_ago)s AND status = %(failed)s GROUP BY table_id
)
SELECT t.id FROM {table} t LEFT JOIN f ON f.table_id = t.id
ORDER BY round({score}) DESC, t.name COLLATE "C", t.id
"""


def _ranked_ids(now: dt.datetime, limit: int | None) -> list[int]:
    """Table ids unhealthiest first (name, then id, among equal scores), ranked in the database."""
    score = _SCORE_SQL.format(
        w=WEIGHTS,
        many_files=MANY_FILES,
        many_snapshots=MANY_SNAPSHOTS,
        stale_days=STALE_DAYS,
        many_failures=MANY_FAILURES,
    )
    sql = _RANK_SQL.format(process=Process._meta.db_table, table=Table._meta.db_table, score=score)
    params: dict[str, Any] = {
        "now": now,
        "week_ago": now - dt.timedelta(days=7),
        "failed": str(ProcessStatus.FAILED),
    }
    if limit:
        sql += " LIMIT %(limit)s"
        params["limit"] = limit
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def tables_by_health(*, limit: int | None = 10) -> list[TableHealth]:
    """Unhealthiest first; three queries whatever the number of tables or processes (the last
    successful maintenance is kept on the table row by the executor): the database ranks every
    table, only the tables shown are loaded and explained (``table_health``)."""
    now = timezone.now()
    ids = _ranked_ids(now, limit)
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
