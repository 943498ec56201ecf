"""Interactive queries, the compute side of the cache: submit (validated at once), run on a worker's
Spark session (cached result when valid, else compute and cache), cancel. Planning and the cached
result's bookkeeping are storage/cache.py."""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from celery import current_app
from celery.exceptions import TimeoutError as CeleryTimeout
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection, transaction
from django.utils import timezone

from processes.duckdb_translation import duckdb_refusal
from processes.models import Query, QueryEngine, QueryStatus
from processes.query_duckdb import (
    AUTO,
    DEFAULT_MAX_SCAN_BYTES,
    DUCKDB,
    ENGINES,
    SPARK,
    DuckDbRun,
    EngineChoice,
    arrow_rows,
    choose_engine,
    refuse_duckdb_statements,
    scan_estimate,
)
from processes.query_reaper import query_end_lost, query_send
from processes.spark.session import interrupt_jobs, spark_session, tag_jobs, untag_jobs
from processes.sql_policy import SqlPolicyError, SqlUnparsable, check_query
from processes.watch import Watch
from storage.access import tables_readable
from storage.cache import (
    QueryPlan,
    cached_result_begin,
    cached_result_failed,
    cached_result_find,
    cached_result_ready,
    query_plan,
)
from storage.errors import Conflict, InvalidInput, NotFound
from storage.io import is_object_store
from storage.models import CachedResult, StorageBackend
from storage.selectors import jsonable
from storage.services import storage_backend_default, table_store_options
from storage.spec.spark.pruning import sql_over_views
from storage.spec.spark_source import read_table

logger = logging.getLogger(__name__)

# Sent by name: processes/tasks.py wraps these functions (importing it here would be a cycle).
TEST_STORAGE_TASK = "processes.tasks.test_storage_task"
CANCEL_POLL_SECONDS = 1.0


def query_submit(
    *,
    sql: str,
    cache: bool = True,
    backend: StorageBackend | None = None,
    user=None,
    row_limit: int | None = None,
    engine: str = SPARK,
) -> Query:
    """Validate now (bad SQL, unknown tables and tables ``user`` may not read answer at once; no
    user: the system's own query, every table), run later on a worker on
    ``engine``: spark; duckdb (refused at once when DuckDB would not answer as Spark does); or
    auto (DuckDB when it answers as Spark does and scans at most
    ``LAKEWARDEN_DUCKDB_MAX_SCAN_BYTES``, else Spark)."""
    if engine not in ENGINES:
        raise InvalidInput(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}", field="engine")
    limit = row_limit or settings.LAKEWARDEN_QUERY_ROW_LIMIT
    if limit > settings.LAKEWARDEN_QUERY_ROW_LIMIT:
        raise InvalidInput(
            f"row_limit is at most {settings.LAKEWARDEN_QUERY_ROW_LIMIT} rows for display; cache the result and "
            "read it in pages, or aggregate",
            field="row_limit",
        )
    _check_policy(sql)
    plan = query_plan(sql, readable=tables_readable(user))  # None: the system, every table
    if engine == DUCKDB:
        refusal = duckdb_refusal(plan.spark_sql)
        if refusal is not None:
            raise InvalidInput(
                f"DuckDB would not answer this query as Spark does: {refusal}. Run it on spark or auto.",
                field="engine",
            )
    query = Query.objects.create(
        sql=sql.strip(),
        cache=cache,
        backend=backend,
        fingerprint=plan.fingerprint,
        row_limit=limit,
        engine=engine,
        user=user if getattr(user, "is_authenticated", False) else None,
    )
    query_id = query.pk
    transaction.on_commit(lambda: query_send(query_id=query_id))
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
        query_end_lost(query_id=query.pk)  # its worker is gone: nothing else would end it
    else:
        raise Conflict(
            f"query {query.pk} is {query.status}; only PENDING or RUNNING queries can be cancelled"
        )
    query.refresh_from_db()
    return query


def query_run(*, query_id: int, spark=None, worker: str = "") -> str:
    """Run one query (on a worker): cached result when valid, else compute (and cache). The run
    writes a heartbeat on the row (``processes.query_reaper`` ends it when that stops)."""
    close_old_connections()
    now = timezone.now()
    claimed = Query.objects.filter(pk=query_id, status=QueryStatus.PENDING).update(
        status=QueryStatus.RUNNING, started_at=now, heartbeat_at=now, worker=worker[:255]
    )
    if not claimed:
        return "not claimed"
    query = Query.objects.select_related("backend", "user").get(pk=query_id)
    started = time.perf_counter()
    try:
        _check_policy(query.sql)  # again on the worker: a row written by other means is checked too
        plan = query_plan(query.sql, readable=_readable(query))  # and its tables: grants may have changed
        limit = getattr(settings, "LAKEWARDEN_DUCKDB_MAX_SCAN_BYTES", DEFAULT_MAX_SCAN_BYTES)
        choice = choose_engine(query.engine, plan, limit)
    except Exception as error:
        return _record_failure(query_id, error, started)
    _update_running(query_id, engine_used=choice.engine, engine_reason=choice.reason)
    if choice.engine == DUCKDB:
        return _run_on_duckdb(query, plan, choice, started, spark)
    return _run_on_spark(query, plan, started, spark)


def _cancel_watch(query_id: int, interrupt) -> Watch:
    """A started watch that writes the query's heartbeat (about twice per heartbeat interval) and
    calls ``interrupt`` every tick once the query's cancel is requested."""
    every = settings.LAKEWARDEN_HEARTBEAT_SECONDS / 2
    last = [time.monotonic()]

    def beat() -> None:
        if time.monotonic() - last[0] >= every:
            Query.objects.filter(pk=query_id, status=QueryStatus.RUNNING).update(heartbeat_at=timezone.now())
            last[0] = time.monotonic()

    watch = Watch(
        name=f"query-{query_id}",
        interval=min(CANCEL_POLL_SECONDS, every),
        cancel_requested=lambda: _cancel_requested(query_id),
        interrupt=interrupt,
        beat=beat,
    )
    watch.start()
    return watch


def _run_on_spark(query: Query, plan: QueryPlan, started: float, spark) -> str:
    query_id = query.pk
    spark = spark if spark is not None else spark_session()
    tag = f"lakewarden-query-{query.pk}"
    tag_jobs(spark, tag)
    watch = _cancel_watch(query_id, lambda: interrupt_jobs(spark, tag))
    try:
        return _run(spark, query, plan, started)
    except Exception as error:
        return _record_failure(query_id, error, started)
    finally:
        watch.stop()
        try:
            untag_jobs(spark, tag)
        except Exception:
            logger.debug("could not untag the Spark jobs of query %s", query_id, exc_info=True)


def _run(spark, query: Query, plan: QueryPlan, started: float) -> str:
    backend = (query.backend or storage_backend_default()) if query.cache else None
    frame, served, result = _result_frame(spark, plan, backend, _readable(query))
    rows, columns, total = _collect(frame, query.row_limit)
    return _record_success(query, plan, (rows, columns, total), served, result, started)


def _run_on_duckdb(query: Query, plan: QueryPlan, choice: EngineChoice, started: float, spark) -> str:
    """The query on an in-process DuckDB fed from the planned splits; a cancel interrupts it.
    Under ``auto`` a query DuckDB fails runs again on Spark, whose answer (or error) stands."""
    query_id = query.pk
    run = DuckDbRun()
    watch = _cancel_watch(query_id, run.interrupt)
    failed: Exception | None = None
    try:
        return _run_duckdb(run, query, plan, choice, started, spark)
    except Exception as error:
        if query.engine != AUTO or watch.cancelled.is_set() or _cancel_requested(query_id):
            return _record_failure(query_id, error, started)
        failed = error
    finally:
        watch.stop()
        run.close()
    first_line = (str(failed).strip().splitlines() or [type(failed).__name__])[0][:80]
    logger.info("query %s: DuckDB failed (%s); running it on Spark", query_id, first_line)
    _update_running(
        query_id,
        engine_used=QueryEngine.SPARK,
        engine_reason=f"auto: DuckDB failed ({first_line}); Spark ran it"[:200],
    )
    return _run_on_spark(query, plan, started, spark)


def _readable(query: Query):
    """The tables the query's user may read (None: all; a query without a user is the system's)."""
    return tables_readable(query.user)


def _cancel_requested(query_id: int) -> bool:
    return Query.objects.filter(pk=query_id, cancel_requested=True).exists()


def _run_duckdb(
    run: DuckDbRun, query: Query, plan: QueryPlan, choice: EngineChoice, started: float, spark
) -> str:
    backend = (query.backend or storage_backend_default()) if query.cache else None
    if backend is not None:
        found = cached_result_find(plan=plan, backend=backend, readable=_readable(query))
        if found is not None:  # stored results are read as the Spark engine reads them
            cached, storage = found
            frame = storage.read(spark if spark is not None else spark_session(), cached.properties)
            return _record_success(query, plan, _collect(frame, query.row_limit), True, cached, started)
    run.register(plan, choice.estimate or scan_estimate(plan), choice.sql)
    table, total = run.fetch(choice.sql, query.row_limit, whole=backend is not None)
    result = None
    if backend is not None:
        spark = spark if spark is not None else spark_session()
        _frame, _served, result = _populate(spark, plan, backend, spark.createDataFrame(table))
    rows = arrow_rows(table, query.row_limit)
    return _record_success(query, plan, (rows, list(table.column_names), total), False, result, started)


def _record_success(
    query: Query,
    plan: QueryPlan,
    collected: tuple[list[list[Any]], list[str], int],
    served: bool,
    result: CachedResult | None,
    started: float,
) -> str:
    rows, columns, total = collected
    _update_running(
        query.pk,
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


def _record_failure(query_id: int, error: Exception, started: float) -> str:
    cancelled = _with_database(lambda: _cancel_requested(query_id))
    status = QueryStatus.CANCELED if cancelled else QueryStatus.FAILED
    _update_running(
        query_id,
        status=status,
        error="cancelled" if cancelled else _error_text(error),
        finished_at=timezone.now(),
        duration_ms=int((time.perf_counter() - started) * 1000),
    )
    return status


#: How long a worker keeps trying to write a query's row while the database is away (a
#: restart): longer than the reaper's patience would be pointless.
DATABASE_RETRY_SECONDS = 30.0


def _update_running(query_id: int, **fields: Any) -> int:
    """Write ``fields`` on the query's row while it is RUNNING: a query the reaper ended (its
    worker went silent) keeps the reaper's verdict."""
    return _with_database(
        lambda: Query.objects.filter(pk=query_id, status=QueryStatus.RUNNING).update(**fields)
    )


def _with_database(work):
    """``work()``, again on a new connection while the database is away (a restart ends every
    connection; Django does not reconnect a broken one by itself), up to
    ``DATABASE_RETRY_SECONDS``."""
    deadline = time.monotonic() + DATABASE_RETRY_SECONDS
    pause = 0.2
    while True:
        try:
            return work()
        except (OperationalError, InterfaceError):
            if time.monotonic() > deadline:
                raise
            logger.warning("the database did not answer; trying again in %.1f s", pause, exc_info=True)
            connection.close()
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


def _check_policy(sql: str) -> None:
    """Only functions on the workbench's allow-list may run: no JVM reflection, no file access."""
    try:
        try:
            check_query(sql)
        except SqlUnparsable:
            refuse_duckdb_statements(sql)  # ATTACH, EXPORT...: name the statement, not the parse error
            raise
    except SqlPolicyError as error:
        raise InvalidInput(str(error), field="sql") from None


def _result_frame(spark, plan: QueryPlan, backend: StorageBackend | None, readable):
    """(frame, served_from_cache, cached result row); a cached result is served only when every
    source is in ``readable`` (None: every table)."""
    if backend is not None:
        found = cached_result_find(plan=plan, backend=backend, readable=readable)
        if found is not None:
            result, storage = found
            return storage.read(spark, result.properties), True, result
    frame = _compute(spark, plan)
    if backend is None:
        return frame, False, None
    return _populate(spark, plan, backend, frame)


def _compute(spark, plan: QueryPlan):
    """The query over one view per table; tables read through the data source read only the
    columns the query needs (``sql_over_views``)."""
    readers = {}
    for planned in plan.tables:
        table = planned.table
        # An object-store table is read with its own credentials (its catalog's, its root's or the
        # environment's), handed to the Spark tasks as the data source's redacted storage option.
        storage = table_store_options(table) if is_object_store(table.location) else None
        readers[planned.view] = functools.partial(
            read_table, spark, table.location, table.format, planned.instant or None, storage=storage
        )
    return sql_over_views(spark, plan.spark_sql, {v: _by_columns(r) for v, r in readers.items()})


def _by_columns(read):
    return lambda columns: read(columns=columns)


def _populate(
    spark, plan: QueryPlan, backend: StorageBackend, frame
) -> tuple[Any, bool, CachedResult | None]:
    begun = cached_result_begin(plan=plan, backend=backend)
    if begun is None:
        return frame, False, None
    result, storage, properties = begun
    if _ordered(plan):
        # Stored as one file: a result read back from several files comes back in Spark's file
        # order (largest first), not in the order ORDER BY gave it. coalesce(1) keeps the order.
        frame = frame.coalesce(1)
    try:
        stats = storage.write(frame, properties)
    except Exception:
        cached_result_failed(result=result, storage=storage, properties=properties)
        raise
    result = cached_result_ready(result=result, stats=stats)
    return storage.read(spark, properties), False, result


def _ordered(plan: QueryPlan) -> bool:
    """Whether the query's answer has an order of its own (a top-level ORDER BY)."""
    import sqlglot

    try:
        tree = sqlglot.parse_one(plan.spark_sql, read="spark")
    except sqlglot.errors.ParseError:
        return True  # unsure: keep whatever order there is
    return tree.args.get("order") is not None


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


def storage_backend_test_on_worker(*, backend: StorageBackend, timeout: float = 120) -> tuple[bool, str]:
    """Run the storage's round-trip test where Spark lives (a worker) and wait for its answer.
    The worker's own failure is answered by its type (its text may hold the storage's secrets)."""
    try:
        outcome = current_app.send_task(
            TEST_STORAGE_TASK, (backend.pk,), queue=settings.LAKEWARDEN_HEAVY_QUEUE
        ).get(timeout=timeout, propagate=False)
    except CeleryTimeout:
        return (
            False,
            f"no worker answered within {timeout:.0f} s: is a Celery worker running on the heavy queue?",
        )
    try:
        backend.refresh_from_db()
    except StorageBackend.DoesNotExist:
        raise NotFound(f"storage {backend.pk} was deleted while it was tested") from None
    if isinstance(outcome, BaseException):
        return False, f"the test failed on the worker ({type(outcome).__name__}); its log says why"
    return outcome["ok"], outcome["message"]
