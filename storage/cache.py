"""The cache manager: interactive SQL over managed tables, with results cached in a storage backend.

A query's fingerprint is its normalised text plus the snapshot ids of the tables it reads, so a
result is reused exactly while its sources are unchanged. Managed tables are addressed in SQL by
their catalog identifier (``demo.orders``) or name; each becomes a Spark view of the table at its
current instant, read through the spec API.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import sqlglot
from django.conf import settings
from django.db import IntegrityError, close_old_connections, transaction
from django.utils import timezone
from sqlglot import exp

from console.errors import Conflict, InvalidInput
from console.models import Table
from console.services import table_open
from console.table_selectors import jsonable
from storage.models import CachedResult, CachedResultState, Query, QueryStatus, StorageBackend
from storage.services import cached_results_evict, cached_results_invalidate_for_table, storage_open

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlannedTable:
    table: Table
    instant: str
    view: str


@dataclass(frozen=True)
class QueryPlan:
    normalised_sql: str
    spark_sql: str
    tables: tuple[PlannedTable, ...]
    fingerprint: str


def _parse(sql: str) -> exp.Expression:
    text = (sql or "").strip().rstrip(";").strip()
    if not text:
        raise InvalidInput("the query is empty", field="sql")
    try:
        statements = [s for s in sqlglot.parse(text, read="spark") if s is not None]
    except sqlglot.errors.ParseError as error:
        detail = error.errors[0] if error.errors else {}
        where = f" at line {detail.get('line')}, column {detail.get('col')}" if detail.get("line") else ""
        raise InvalidInput(
            f"the query does not parse{where}: {detail.get('description') or error}", field="sql"
        ) from None
    except (sqlglot.errors.SqlglotError, IndexError, ValueError) as error:
        # The tokenizer's own errors (an unclosed quote...) say less; they are still bad input.
        raise InvalidInput(f"the query does not parse: {error}", field="sql") from None
    if len(statements) != 1:
        raise InvalidInput("run one statement at a time", field="sql")
    statement = statements[0]
    if not isinstance(statement, exp.Query):
        raise InvalidInput("only queries (SELECT, WITH … SELECT, UNION) can run here", field="sql")
    return statement


def _table_lookup() -> dict[str, Table]:
    lookup: dict[str, Table] = {}
    for table in Table.objects.all():
        for key in {table.name, table.identifier} - {""}:
            lookup.setdefault(key.lower(), table)
    return lookup


def query_plan(sql: str) -> QueryPlan:
    """Parse, resolve managed tables at their current instants, rewrite to Spark views, fingerprint."""
    statement = _parse(sql)
    cte_names = {cte.alias_or_name.lower() for cte in statement.find_all(exp.CTE)}
    lookup = _table_lookup()
    planned: dict[int, PlannedTable] = {}
    for node in list(statement.find_all(exp.Table)):
        parts = [p for p in (node.catalog, node.db, node.name) if p]
        reference = ".".join(parts).lower()
        if not parts or (len(parts) == 1 and reference in cte_names):
            continue
        table = lookup.get(reference)
        if table is None:
            known = ", ".join(sorted(lookup)) or "none registered"
            raise InvalidInput(f"unknown table {reference!r}; managed tables are: {known}", field="sql")
        if table.pk not in planned:
            planned[table.pk] = PlannedTable(table, _current_instant(table), f"lw_table_{table.pk}")
        alias = node.alias or node.name
        node.replace(exp.to_table(planned[table.pk].view).as_(alias, quoted=True))
    if not planned:
        raise InvalidInput("the query reads no managed table", field="sql")
    normalised = _parse(sql).sql(dialect="spark", normalize=True, pretty=False)
    sources = sorted((str(p.table.pk), p.instant) for p in planned.values())
    fingerprint = hashlib.sha256(json.dumps([normalised, sources]).encode()).hexdigest()
    return QueryPlan(normalised, statement.sql(dialect="spark"), tuple(planned.values()), fingerprint)


def _current_instant(table: Table) -> str:
    """The table's latest instant, read now; a change found here invalidates dependent results."""
    try:
        latest = table_open(table).timeline().latest()
    except Exception as error:
        raise Conflict(f"{table.name} cannot be read: {error}") from error
    instant = "" if latest is None else str(latest.id)
    if instant != table.current_instant:
        Table.objects.filter(pk=table.pk).update(current_instant=instant)
        cached_results_invalidate_for_table(table_id=table.pk, current_instant=instant)
    return instant


# --- submitting and running ---------------------------------------------------------------------


def query_submit(
    *,
    sql: str,
    cache: bool = True,
    backend: StorageBackend | None = None,
    user=None,
    row_limit: int | None = None,
) -> Query:
    """Validate now (bad SQL and unknown tables answer at once), run later on a worker."""
    limit = row_limit or settings.LAKEWARDEN_QUERY_ROW_LIMIT
    if limit > settings.LAKEWARDEN_QUERY_ROW_LIMIT:
        raise InvalidInput(
            f"row_limit is at most {settings.LAKEWARDEN_QUERY_ROW_LIMIT} rows for display; cache the result and "
            "read it in pages, or aggregate",
            field="row_limit",
        )
    plan = query_plan(sql)
    query = Query.objects.create(
        sql=sql.strip(),
        cache=cache,
        backend=backend,
        fingerprint=plan.fingerprint,
        row_limit=limit,
        user=user if getattr(user, "is_authenticated", False) else None,
    )
    query_id = query.pk

    def send() -> None:
        from storage.tasks import run_query_task

        result = run_query_task.apply_async((query_id,), queue=settings.LAKEWARDEN_HEAVY_QUEUE)
        Query.objects.filter(pk=query_id, celery_task_id="").update(celery_task_id=result.id)

    transaction.on_commit(send)
    return query


def query_cancel(*, query: Query) -> Query:
    if query.status == QueryStatus.PENDING:
        Query.objects.filter(pk=query.pk, status=QueryStatus.PENDING).update(
            status=QueryStatus.CANCELED,
            cancel_requested=True,
            finished_at=timezone.now(),
            error="cancelled before it ran",
        )
    elif query.status == QueryStatus.RUNNING:
        Query.objects.filter(pk=query.pk).update(cancel_requested=True)
    else:
        raise Conflict(
            f"query {query.pk} is {query.status}; only PENDING or RUNNING queries can be cancelled"
        )
    query.refresh_from_db()
    return query


def query_run(*, query_id: int, spark=None) -> str:
    """Run one query (on a worker): cached result when valid, else compute (and cache)."""
    close_old_connections()
    claimed = Query.objects.filter(pk=query_id, status=QueryStatus.PENDING).update(
        status=QueryStatus.RUNNING, started_at=timezone.now()
    )
    if not claimed:
        return "not claimed"
    query = Query.objects.select_related("backend").get(pk=query_id)
    started = time.perf_counter()
    watcher = None
    try:
        if spark is None:
            from processes.spark.session import spark_session

            spark = spark_session()
        from processes.spark.session import tag_jobs

        tag = f"lakewarden-query-{query.pk}"
        tag_jobs(spark, tag)
        watcher = _CancelWatcher(query.pk, spark, tag)
        watcher.start()
        plan = query_plan(query.sql)
        backend = (query.backend or _default_backend()) if query.cache else None
        frame, served, result = _result_frame(spark, plan, backend)
        rows, columns, total = _collect(frame, query.row_limit)
        Query.objects.filter(pk=query.pk).update(
            status=QueryStatus.SUCCESS,
            served_from_cache=served,
            cached_result=result,
            fingerprint=plan.fingerprint,
            columns=columns,
            rows=rows,
            total_rows=total,
            truncated=total > query.row_limit,
            finished_at=timezone.now(),
            duration_ms=int((time.perf_counter() - started) * 1000),
        )
        return QueryStatus.SUCCESS
    except Exception as error:
        cancelled = Query.objects.filter(pk=query_id, cancel_requested=True).exists()
        status = QueryStatus.CANCELED if cancelled else QueryStatus.FAILED
        message = "cancelled" if cancelled else _error_text(error)
        Query.objects.filter(pk=query_id).update(
            status=status,
            error=message,
            finished_at=timezone.now(),
            duration_ms=int((time.perf_counter() - started) * 1000),
        )
        return status
    finally:
        if watcher is not None:
            watcher.stop()
        if spark is not None:
            from processes.spark.session import untag_jobs

            try:
                untag_jobs(spark, f"lakewarden-query-{query_id}")
            except Exception:
                pass


def _default_backend() -> StorageBackend:
    from storage.services import storage_backend_default

    return storage_backend_default()


def _result_frame(spark, plan: QueryPlan, backend: StorageBackend | None):
    """(frame, served_from_cache, cached result row)."""
    if backend is not None:
        result = CachedResult.objects.filter(
            fingerprint=plan.fingerprint, backend=backend, state=CachedResultState.READY
        ).first()
        if result is not None:
            storage = storage_open(backend)
            if storage.exists(result.properties):
                CachedResult.objects.filter(pk=result.pk).update(
                    hits=result.hits + 1, last_used_at=timezone.now()
                )
                return storage.read(spark, result.properties), True, result
            # The stored data vanished behind our back: forget it and recompute, once.
            CachedResult.objects.filter(pk=result.pk).update(
                state=CachedResultState.CLEANED, state_reason="backend data missing; recomputed"
            )
    frame = _compute(spark, plan)
    if backend is None:
        return frame, False, None
    return _populate(spark, plan, backend, frame)


def _compute(spark, plan: QueryPlan):
    from storage.spec.spark_source import read_table

    for planned in plan.tables:
        table = planned.table
        frame = read_table(spark, table.location, format=table.format, instant=planned.instant or None)
        frame.createOrReplaceTempView(planned.view)
    return spark.sql(plan.spark_sql)


def _populate(spark, plan: QueryPlan, backend: StorageBackend, frame):
    name = f"result_{plan.fingerprint[:16]}_{uuid.uuid4().hex[:6]}"
    try:
        with transaction.atomic():
            result = CachedResult.objects.create(
                fingerprint=plan.fingerprint,
                backend=backend,
                name=name,
                sql=plan.normalised_sql,
                source_snapshots={str(p.table.pk): p.instant for p in plan.tables},
            )
    except IntegrityError:
        # Another run is populating the same fingerprint: answer from the computation, don't cache twice.
        return frame, False, None
    storage = storage_open(backend)
    properties: dict[str, Any] = {}
    try:
        properties = storage.create(name, {})
        CachedResult.objects.filter(pk=result.pk).update(properties=properties)
        stats = storage.write(frame, properties)
    except Exception:
        try:
            storage.clean([name], {name: properties})
        finally:
            CachedResult.objects.filter(pk=result.pk).update(
                state=CachedResultState.CLEANED, state_reason="write failed"
            )
        raise
    CachedResult.objects.filter(pk=result.pk).update(
        state=CachedResultState.READY,
        size_bytes=stats.size_bytes,
        row_count=stats.rows,
        last_used_at=timezone.now(),
    )
    result.refresh_from_db()
    cached_results_evict(backend=backend)
    return storage.read(spark, properties), False, result


def _collect(frame, row_limit: int) -> tuple[list[list[Any]], list[str], int]:
    columns = list(frame.columns)
    taken = frame.limit(row_limit + 1).collect()
    total = len(taken) if len(taken) <= row_limit else frame.count()
    return [[jsonable(v) for v in row] for row in taken[:row_limit]], columns, total


def _error_text(error: Exception) -> str:
    text = str(error)
    # Spark's analysis errors carry a JVM stack after the first lines; the first lines say it all.
    lines = [line for line in text.splitlines() if line.strip()][:6]
    return f"{type(error).__name__}: " + "\n".join(lines)[:4000]


class _CancelWatcher(threading.Thread):
    """Polls the cancel flag and interrupts the query's Spark jobs when it is set (from this
    thread: ``interrupt_jobs`` reaches jobs tagged by another thread, locally, on a standalone
    cluster and through Spark Connect alike)."""

    def __init__(self, query_id: int, spark, tag: str) -> None:
        super().__init__(daemon=True, name=f"query-cancel-{query_id}")
        self.query_id, self.spark, self.tag = query_id, spark, tag
        self.stopped = threading.Event()

    def run(self) -> None:
        from django.db import connection

        from processes.spark.session import interrupt_jobs

        cancelled = False
        try:
            while not self.stopped.wait(1.0):
                cancelled = (
                    cancelled or Query.objects.filter(pk=self.query_id, cancel_requested=True).exists()
                )
                if cancelled:
                    # Again every second until the query ends: a job submitted after an interrupt
                    # (the cancel came while the query was still planning) is interrupted too.
                    try:
                        interrupt_jobs(self.spark, self.tag)
                    except Exception:
                        logger.warning("could not interrupt query %s", self.query_id, exc_info=True)
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopped.set()
