"""The cache manager's bookkeeping: planning a query over managed tables (what it reads, at which
instants, its fingerprint) and the life of its cached result in a storage backend. Running the query
on Spark is processes/queries.py.

A query's fingerprint is its normalised text plus the snapshot ids of the tables it reads, so a
result is reused exactly while its sources are unchanged. Managed tables are addressed in SQL by
their catalog identifier (``demo.orders``) or name; each becomes a Spark view of the table at its
current instant, or at the instant ``VERSION AS OF`` / ``TIMESTAMP AS OF`` names, read through the
spec API. A ``TABLESAMPLE`` stays on its view.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import sqlglot
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone
from sqlglot import exp

from storage.access import table_ids_refused
from storage.errors import Conflict, Forbidden, InvalidInput
from storage.models import CachedResult, CachedResultState, StorageBackend, Table
from storage.results.plugin import IntermediateResultStorage, WriteStats
from storage.services import (
    cached_results_evict,
    cached_results_invalidate_for_table,
    storage_open,
    table_open,
)
from storage.spec.errors import InstantNotFound

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlannedTable:
    """A table as the query reads it: at ``instant`` (the latest, ``current``, unless the query
    travels in time with ``VERSION AS OF`` / ``TIMESTAMP AS OF``), as the view ``view``."""

    table: Table
    instant: str
    view: str
    current: str = ""


@dataclass(frozen=True)
class QueryPlan:
    normalised_sql: str
    spark_sql: str
    tables: tuple[PlannedTable, ...]
    fingerprint: str


def _parse(sql: str) -> exp.Query:
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


def _names_a_cte(node: exp.Table, name: str) -> bool:
    """Whether the one-part ``name`` is a CTE in scope at ``node`` (a WITH on a query around it,
    which shadows a table of that name there and only there)."""
    parent = node.parent
    while parent is not None:
        with_ = parent.args.get("with_") or parent.args.get("with")
        if isinstance(with_, exp.With) and any(
            cte.alias_or_name.lower() == name for cte in with_.expressions
        ):
            return True
        parent = parent.parent
    return False


def query_references(
    statement: exp.Expr, lookup: dict[str, Table], known: list[str]
) -> list[tuple[exp.Table, str, Table]]:
    """Every table reference of ``statement`` (joins, sub-queries, CTE bodies, set operations,
    whatever its alias) resolved to a registered table: (node, reference as written, table). A
    CTE's name is not a reference where the CTE is in scope; an unknown name is a 400 naming it."""
    found = []
    for node in list(statement.find_all(exp.Table)):
        if node.find_ancestor(exp.Hint) is not None:
            continue  # /*+ BROADCAST(c) */ names an alias, not a table
        parts = [p for p in (node.catalog, node.db, node.name) if p]
        reference = ".".join(parts).lower()
        if not parts or (len(parts) == 1 and _names_a_cte(node, reference)):
            continue
        table = lookup.get(reference)
        if table is None:
            listed = ", ".join(known) or "none you may read"
            raise InvalidInput(f"unknown table {reference!r}; managed tables are: {listed}", field="sql")
        found.append((node, reference, table))
    return found


def _refuse_unreadable(references: list[tuple[exp.Table, str, Table]], readable) -> None:
    refused = table_ids_refused(readable, {table.pk for _, _, table in references})
    if refused:
        names = sorted({reference for _, reference, table in references if table.pk in refused})
        raise Forbidden(
            f"you may not read {', '.join(names)}: no grant of your teams covers "
            f"{'it' if len(names) == 1 else 'them'} (an admin or the table's team owner grants access)",
            field="sql",
        )


def query_plan(sql: str, *, readable: QuerySet[Table] | None = None) -> QueryPlan:
    """Parse, resolve managed tables, refuse a table outside ``readable`` (None: every table is
    readable) before anything is read, then take the tables at their current instants, rewrite to
    Spark views, fingerprint."""
    statement = _parse(sql)
    normalised = statement.sql(dialect="spark", normalize=True, pretty=False)  # before the views
    lookup = _table_lookup()
    known = sorted(lookup)
    if readable is not None:  # an unknown-table answer lists only what the user may read
        ids = set(readable.values_list("pk", flat=True))
        known = [key for key in known if lookup[key].pk in ids]
    references = query_references(statement, lookup, known)
    _refuse_unreadable(references, readable)
    planned: dict[tuple[int, str], PlannedTable] = {}
    _check_samples(statement)
    for node, reference, table in references:
        current = _current_instant(table)
        instant = _travelled_instant(table, node.args.get("version"), reference) or current
        key = (table.pk, instant)
        if key not in planned:
            same_table = sum(1 for pk, _ in planned if pk == table.pk)
            view = f"lw_table_{table.pk}" + (f"_{same_table}" if same_table else "")
            planned[key] = PlannedTable(table, instant, view, current)
        alias = node.alias or node.name
        view_node = exp.to_table(planned[key].view).as_(alias, quoted=True)
        if node.args.get("sample") is not None:
            view_node.set("sample", node.args["sample"])  # TABLESAMPLE samples the view
        node.replace(view_node)
    if not planned:
        raise InvalidInput("the query reads no managed table", field="sql")
    sources = sorted((str(p.table.pk), p.instant) for p in planned.values())
    fingerprint = hashlib.sha256(json.dumps([normalised, sources]).encode()).hexdigest()
    return QueryPlan(normalised, statement.sql(dialect="spark"), tuple(planned.values()), fingerprint)


def _check_samples(statement: exp.Expr) -> None:
    """TABLESAMPLE belongs right after a table (or subquery), before its alias, as Spark writes
    it; sqlglot keeps one written after the alias on the SELECT, where it would be lost."""
    for node in statement.find_all(exp.TableSample):
        if not isinstance(node.parent, (exp.Table, exp.Subquery)):
            raise InvalidInput(
                "TABLESAMPLE goes right after the table name, before its alias: "
                "FROM t TABLESAMPLE (10 PERCENT) AS x",
                field="sql",
            )
        if node.args.get("seed") is not None:
            raise InvalidInput("TABLESAMPLE ... REPEATABLE (seed) is not supported", field="sql")


def _travelled_instant(table: Table, version: exp.Expr | None, reference: str) -> str | None:
    """The instant ``VERSION AS OF <id>`` or ``TIMESTAMP AS OF '<time>'`` names (None without
    one): an instant of the table's timeline, or a 400 saying which exist."""
    if version is None:
        return None
    value = version.expression
    kind = str(version.this).upper()
    if version.text("kind").upper() != "AS OF" or not isinstance(value, exp.Literal):
        raise InvalidInput(
            f"{reference}: time travel takes a literal, as in VERSION AS OF 3 or "
            "TIMESTAMP AS OF '2024-01-01 00:00:00' (UTC)",
            field="sql",
        )
    timeline = table_open(table).timeline()
    try:
        if kind == "TIMESTAMP":
            moment = _timestamp(value.this, reference)
            return str(timeline.latest_at(moment).id)
        return str(timeline.get(value.this).id)
    except InstantNotFound as error:
        ids = [str(i.id) for i in timeline.instants()]
        shown = ", ".join(ids[:10]) + (f" ... ({len(ids)} in all)" if len(ids) > 10 else "")
        raise InvalidInput(
            f"{reference}: {error}; its versions, oldest first: {shown or 'none'}", field="sql"
        ) from None


def _timestamp(text: str, reference: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(
            f"{reference}: TIMESTAMP AS OF {text!r} is not a timestamp (yyyy-mm-dd[ hh:mm:ss], UTC)",
            field="sql",
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


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


# --- the cached result's life --------------------------------------------------------------------


def cached_result_find(
    *, plan: QueryPlan, backend: StorageBackend, readable: QuerySet[Table] | None = None
) -> tuple[CachedResult, IntermediateResultStorage] | None:
    """The READY result of ``plan`` in ``backend`` whose data is still there (its hit counted), or
    None. A result whose stored data vanished behind our back is forgotten, so it is recomputed once.
    A result with a source outside ``readable`` (None: every table) is never served."""
    result = CachedResult.objects.filter(
        fingerprint=plan.fingerprint, backend=backend, state=CachedResultState.READY
    ).first()
    if result is None:
        return None
    if table_ids_refused(readable, result.source_snapshots):
        logger.warning("cached result %s has a source its reader may not read: not served", result.pk)
        return None
    storage = storage_open(backend)
    if not storage.exists(result.properties):
        CachedResult.objects.filter(pk=result.pk).update(
            state=CachedResultState.CLEANED, state_reason="backend data missing; recomputed"
        )
        return None
    CachedResult.objects.filter(pk=result.pk).update(hits=result.hits + 1, last_used_at=timezone.now())
    return result, storage


def cached_result_begin(
    *, plan: QueryPlan, backend: StorageBackend
) -> tuple[CachedResult, IntermediateResultStorage, dict[str, Any]] | None:
    """A POPULATING result with its storage created (creation hook), or None when another run is
    populating the same fingerprint (answer from the computation then; never cache twice)."""
    name = f"result_{plan.fingerprint[:16]}_{uuid.uuid4().hex[:6]}"
    try:
        with transaction.atomic():
            result = CachedResult.objects.create(
                fingerprint=plan.fingerprint,
                backend=backend,
                name=name,
                sql=plan.normalised_sql,
                # what invalidation compares with the table's latest instant (a result read at an
                # older one by time travel stays valid until the table moves on)
                source_snapshots={str(p.table.pk): p.current or p.instant for p in plan.tables},
            )
    except IntegrityError:
        return None
    storage = storage_open(backend)
    properties: dict[str, Any] = {}
    try:
        properties = storage.create(name, {})
    except Exception:
        cached_result_failed(result=result, storage=storage, properties=properties)
        raise
    CachedResult.objects.filter(pk=result.pk).update(properties=properties)
    return result, storage, properties


def cached_result_ready(*, result: CachedResult, stats: WriteStats) -> CachedResult:
    """The data is written: READY, then least recently used results go if the storage is over quota."""
    CachedResult.objects.filter(pk=result.pk).update(
        state=CachedResultState.READY,
        size_bytes=stats.size_bytes,
        row_count=stats.rows,
        last_used_at=timezone.now(),
    )
    result.refresh_from_db()
    cached_results_evict(backend=result.backend)
    return result


def cached_result_failed(
    *, result: CachedResult, storage: IntermediateResultStorage, properties: dict[str, Any]
) -> None:
    """Writing failed: the cleanup hook removes what was written, and the row says why."""
    try:
        storage.clean([result.name], {result.name: properties})
    finally:
        CachedResult.objects.filter(pk=result.pk).update(
            state=CachedResultState.CLEANED, state_reason="write failed"
        )
