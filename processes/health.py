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
from django.db.models import Count, F, Max, Min, QuerySet
from django.db.models.functions import Collate
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from processes.models import PluginConfig, PluginKind, Process, ProcessStatus, ServiceHeartbeat
from processes.plugin import CHECKPOINT, EXPIRE_SNAPSHOTS, REWRITE
from processes.registry import configured_factories
from storage.health import (
    MANY_FAILURES,
    MANY_FILES,
    MANY_SNAPSHOTS,
    STALE_DAYS,
    WEIGHTS,
    Remedies,
    TableHealth,
    table_health,
)
from storage.models import Table

#: The actions that trim a format's snapshots (Delta's checkpoint drops log versions past the
#: log retention, which is what a Delta table's snapshot count counts).
_TRIMMING = (EXPIRE_SNAPSHOTS, CHECKPOINT)
_PART_ACTIONS = {"compact": (REWRITE,), "trim_snapshots": _TRIMMING}
_PART_VERBS = {"compact": "compacts the files of", "trim_snapshots": "trims the snapshots of"}


def format_remedies() -> dict[str, Remedies]:
    """Per format, the enabled actions that improve each part of the health score and, where
    none does, why (declined by a factory, disabled, or none installed). Formats no factory
    names get nothing: ``remedies_of`` answers for them."""
    enabled: dict[str, set[str]] = {}
    why: dict[tuple[str, str], str] = {}
    for configured in configured_factories(include_disabled=True):
        factory = configured.factory
        for table_format, declined in factory.declined_actions().items():
            for action, reason in declined.items():
                why.setdefault(
                    (table_format, action),
                    f"Lakewarden does not run {action} on {table_format} tables: {reason}",
                )
        for table_format, action in factory.pairs():
            if configured.enabled:
                enabled.setdefault(table_format, set()).add(action)
            else:
                why.setdefault((table_format, action), f"{action} is disabled ({configured.name})")
    formats = set(enabled) | {table_format for table_format, _ in why}
    return {
        table_format: _remedies(table_format, enabled.get(table_format, set()), why)
        for table_format in formats
    }


def _remedies(table_format: str, actions: set[str], why: dict[tuple[str, str], str]) -> Remedies:
    chosen = {
        part: next((a for a in candidates if a in actions), "") for part, candidates in _PART_ACTIONS.items()
    }
    declined = {}
    for part, candidates in _PART_ACTIONS.items():
        if not chosen[part]:
            reasons = [why[(table_format, a)] for a in candidates if (table_format, a) in why]
            declined[part] = (
                reasons[0] if reasons else f"no enabled action {_PART_VERBS[part]} {table_format} tables"
            )
    return Remedies(chosen["compact"], chosen["trim_snapshots"], tuple(sorted(actions)), declined)


def remedies_of(remedies: dict[str, Remedies], table_format: str) -> Remedies:
    """``table_format``'s entry of ``format_remedies()``: nothing counted when no factory names it."""
    found = remedies.get(table_format)
    if found is not None:
        return found
    declined = {part: f"no enabled action {verb} {table_format} tables" for part, verb in _PART_VERBS.items()}
    return Remedies(declined=declined)


#: The health score of storage/health.py in SQL, term by term in the same order and the same
#: double-precision arithmetic, so the database ranks exactly as ``table_health`` scores (Postgres
#: rounds a double half to even, as Python's ``round`` does). ``c`` is the table's compactable
#: small files; each gate (``t.format = ANY(%s)``) is the formats whose enabled actions improve
#: the part: compacting ones, trimming ones, any.
_SCORE_SQL = """
  {w[small_files]} * (CASE WHEN t.file_count = 0 THEN 0.0 ELSE {c}::float8 / t.file_count END)
                   * LEAST({c}::float8 / 20, 1.0)
                   * (CASE WHEN t.format = ANY(%s) THEN 1.0 ELSE 0.0 END)
+ {w[file_count]} * LEAST(t.file_count::float8 / {many_files}, 1.0)
                  * (CASE WHEN {c} > 0 AND t.format = ANY(%s) THEN 1.0 ELSE 0.0 END)
+ {w[snapshots]} * LEAST(t.instant_count::float8 / {many_snapshots}, 1.0)
                 * (CASE WHEN t.format = ANY(%s) THEN 1.0 ELSE 0.0 END)
+ {w[maintenance]} * (CASE WHEN t.last_maintenance_at IS NULL THEN 1.0
                      ELSE LEAST(EXTRACT(EPOCH FROM (%s - t.last_maintenance_at))::float8
                                 / 86400 / {stale_days}, 1.0) END)
                    * LEAST(t.file_count::float8 / 50, 1.0)
                    * (CASE WHEN t.format = ANY(%s) THEN 1.0 ELSE 0.0 END)
+ {w[failures]} * LEAST(COALESCE(f.n, 0)::float8 / {many_failures}, 1.0)
"""
_COMPACTABLE = "LEAST(t.compactable_file_count, t.small_file_count)"

_SCORED_SQL = """
WITH f AS (
  SELECT table_id, count(*) AS n FROM {process}
  WHERE created_at >= %s AND status = %s GROUP BY table_id
)
SELECT t.id, round({score}) AS health FROM {table} t LEFT JOIN f ON f.table_id = t.id
{where}
"""
#: The stored score's order, worst first, as ``health_ranked`` breaks ties (an index walks it:
#: storage/models.py).
WORST_FIRST = (F("health_score").desc(nulls_last=True), Collate(F("name"), "C"), "id")
#: Best first, ties broken the same way.
BEST_FIRST = (F("health_score").asc(nulls_last=True), Collate(F("name"), "C"), "id")
_RANK_ORDER = '\nORDER BY health {direction}, t.name COLLATE "C", t.id'
#: Stores the scores that changed (a row whose score is unchanged is not written).
_STORE_SQL = """
WITH s AS ({scored})
UPDATE {table} u SET health_score = s.health FROM s
WHERE u.id = s.id AND u.health_score IS DISTINCT FROM s.health
"""


def _score_params(now: dt.datetime, remedies: dict[str, Remedies]) -> list[Any]:
    """The parameters of ``_SCORE_SQL`` in the order it names them."""
    compacting = sorted(f for f, r in remedies.items() if r.compact)
    trimming = sorted(f for f, r in remedies.items() if r.trim_snapshots)
    maintained = sorted(f for f, r in remedies.items() if r.actions)
    return [compacting, compacting, trimming, now, maintained]


def _scored_sql(
    now: dt.datetime, where: tuple[str, Sequence[Any]] | None, remedies: dict[str, Remedies] | None
) -> tuple[str, list[Any]]:
    """The query answering (id, health) of the tables matching ``where`` (every table: None), and
    its parameters."""
    score = _SCORE_SQL.format(
        w=WEIGHTS,
        c=_COMPACTABLE,
        many_files=MANY_FILES,
        many_snapshots=MANY_SNAPSHOTS,
        stale_days=STALE_DAYS,
        many_failures=MANY_FAILURES,
    )
    condition, condition_params = where or ("", ())
    sql = _SCORED_SQL.format(
        process=Process._meta.db_table,
        table=Table._meta.db_table,
        score=score,
        where=f"WHERE {condition}" if condition else "",
    )
    params: list[Any] = [now - dt.timedelta(days=7), str(ProcessStatus.FAILED)]
    params += _score_params(now, format_remedies() if remedies is None else remedies)
    params += condition_params
    return sql, params


def health_ranked(
    now: dt.datetime,
    *,
    limit: int | None = None,
    offset: int = 0,
    where: tuple[str, Sequence[Any]] | None = None,
    ascending: bool = False,
    remedies: dict[str, Remedies] | None = None,
) -> list[tuple[int, int]]:
    """(table id, health score) unhealthiest first (healthiest first when ``ascending``; name,
    then id, among equal scores), ranked in the database by the score of ``table_health``.
    ``where`` is an SQL condition on the table ``t`` and its parameters (``%s``), e.g. the ids
    of a filtered queryset; ``limit`` and ``offset`` page the ranking. ``remedies``: what
    ``format_remedies()`` answers (read when not given)."""
    sql, params = _scored_sql(now, where, remedies)
    sql += _RANK_ORDER.format(direction="ASC" if ascending else "DESC")
    if limit:
        sql += " LIMIT %s"
        params.append(limit)
    if offset:
        sql += " OFFSET %s"
        params.append(offset)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(pk, int(health)) for pk, health in cursor.fetchall()]


def health_scores(now: dt.datetime, ids: Sequence[int]) -> dict[int, int]:
    """The health score of each table of ``ids`` computed now (one query), as ``health_store``
    stores it."""
    return dict(health_ranked(now, where=("t.id = ANY(%s)", [list(ids)]))) if ids else {}


#: Rows a statement of ``health_store`` of every table scores at most (each statement commits on
#: its own: the first scoring of 100,000 tables writes every row).
STORE_BATCH = 5000


def health_store(*, table_ids: Sequence[int] | None = None, now: dt.datetime | None = None) -> int:
    """Store the health score of the tables of ``table_ids`` (every table: None, ``STORE_BATCH``
    ids per statement) on their rows, as ``health_ranked`` computes it now (rows whose score is
    unchanged are not written); answers how many rows changed. Called wherever the score's inputs
    change: a table's row saved (a refresh, its overrides), a process failing or ending, a
    factory enabled, disabled or re-configured; and by the health beat for what time changes
    (staleness grows, failures leave the 7-day window), so a stored score is at most
    ``LAKEWARDEN_HEALTH_SECONDS`` old."""
    now = timezone.now() if now is None else now
    remedies = format_remedies()
    if table_ids is not None:
        return _store(now, remedies, ("t.id = ANY(%s)", [list(table_ids)])) if table_ids else 0
    bounds = Table.objects.aggregate(low=Min("id"), high=Max("id"))
    if bounds["low"] is None:
        return 0
    return sum(
        _store(now, remedies, ("t.id >= %s AND t.id < %s", [low, low + STORE_BATCH]))
        for low in range(bounds["low"], bounds["high"] + 1, STORE_BATCH)
    )


def _store(now: dt.datetime, remedies: dict[str, Remedies], where: tuple[str, Sequence[Any]]) -> int:
    scored, params = _scored_sql(now, where, remedies)
    with connection.cursor() as cursor:
        cursor.execute(_STORE_SQL.format(scored=scored, table=Table._meta.db_table), params)
        return cursor.rowcount


def tables_by_health(
    *, limit: int | None = 10, tables: QuerySet[Table] | None = None, stored: bool = False
) -> list[TableHealth]:
    """Unhealthiest first (name, then id, among equal scores); bounded queries whatever the
    number of tables or processes: the enabled factories are read once, only the tables shown
    are loaded and explained (``table_health``, with the remedies of their format). By default
    the database ranks every table by its score computed now (what the alert rules read);
    ``stored``: by the score stored on the rows (``health_store``; unscored tables last), an
    index walk, with that score (what the overview and the tables list show). ``tables``: only
    these (what a user's teams may see); default every table."""
    now = timezone.now()
    remedies = format_remedies()
    if stored:
        scope = Table.objects.all() if tables is None else tables.select_related(None)
        ordered = scope.order_by(*WORST_FIRST).values_list("id", flat=True)
        ids = list(ordered if limit is None else ordered[:limit])
    else:
        where = None if tables is None else ids_condition(tables)
        ids = [pk for pk, _ in health_ranked(now, limit=limit, remedies=remedies, where=where)]
    failures = dict(
        Process.objects.filter(
            table_id__in=ids, created_at__gte=now - dt.timedelta(days=7), status=ProcessStatus.FAILED
        )
        .order_by()
        .values_list("table_id")
        .annotate(n=Count("id"))
    )
    rows = Table.objects.defer("metrics", "properties").in_bulk(ids)
    result = []
    for pk in ids:
        table = rows[pk]
        health = table_health(
            table, table.last_maintenance_at, failures.get(pk, 0), now, remedies_of(remedies, table.format)
        )
        if stored and table.health_score is not None:  # the order's score, as the tables list shows
            health.score = table.health_score
        result.append(health)
    return result


def ids_condition(tables: QuerySet[Table]) -> tuple[str, Sequence[Any]]:
    """``health_ranked``'s ``where`` for the ids of ``tables``."""
    sql, params = tables.select_related(None).order_by().values("id").query.sql_with_params()
    return f"t.id IN ({sql})", params


def _table_saved(sender: Any, instance: Table, raw: bool = False, **kwargs: Any) -> None:
    if not raw:  # a refresh, a registration, an override: the facts the score reads changed
        health_store(table_ids=[instance.pk])


def _factories_changed(sender: Any, instance: PluginConfig, raw: bool = False, **kwargs: Any) -> None:
    if not raw and instance.kind == PluginKind.PROCESS_FACTORY:  # which actions count changed
        health_store()


def connect_health_signals() -> None:
    """Keep stored scores current where the score's inputs change through a model's save
    (processes/apps.py connects it once)."""
    post_save.connect(_table_saved, sender=Table, dispatch_uid="health-store-table")
    post_save.connect(_factories_changed, sender=PluginConfig, dispatch_uid="health-store-factory")
    post_delete.connect(_factories_changed, sender=PluginConfig, dispatch_uid="health-store-factory-gone")


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
