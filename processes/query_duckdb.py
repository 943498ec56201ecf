"""The in-process query engine: a workbench query run by DuckDB inside the worker.

Each managed table the query names is read through the spec API exactly as the Spark engine reads
it (the planned splits at the plan's instant, deletes, deletion vectors and logs applied by the
format's reader) and registered in a private in-memory DuckDB connection as an Arrow table under
the plan's view name. DuckDB's own format extensions are never used. The query text is the
workbench's Spark SQL, checked by ``processes.sql_policy`` and transpiled by sqlglot to DuckDB's
dialect; the DuckDB text is checked again (only the registered views and a few generator table
functions may be read), and the connection runs with external access disabled and its
configuration locked, so no file, URL, extension or database can be reached from the SQL.

The translation is ``processes.duckdb_translation``: DuckDB runs only what is on its allow-list
of constructs and functions that answer as Spark's do (each held by the parity corpus).

``choose_engine`` decides: ``engine=auto`` runs DuckDB when the translation allows the query and
the plan's scanned bytes (the planned splits' sizes) are at most
``LAKEWARDEN_DUCKDB_MAX_SCAN_BYTES``, Spark otherwise; ``engine=duckdb`` refuses, with the reason,
what the translation does not allow.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from processes.duckdb_translation import NotOnAllowList, duckdb_refusal, duckdb_translate
from processes.sql_policy import SqlNotAllowed, SqlUnparsable
from storage.cache import PlannedTable, QueryPlan
from storage.selectors import jsonable
from storage.services import table_open
from storage.spec.spark_source import conform_batch

DEFAULT_MAX_SCAN_BYTES = 256 * 1024 * 1024
SPARK, DUCKDB, AUTO = "spark", "duckdb", "auto"
ENGINES = (AUTO, SPARK, DUCKDB)

# DuckDB statements sqlglot's Spark dialect cannot parse (they would only say "does not parse").
DUCKDB_STATEMENTS = frozenset(
    {"attach", "detach", "install", "load", "copy", "pragma", "set", "reset", "export", "import", "call"}
)
# Table functions that only generate rows (no file, URL or catalog behind them).
GENERATOR_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})


def refuse_duckdb_statements(sql: str) -> None:
    """SqlNotAllowed naming the statement when ``sql`` starts with a DuckDB-only statement keyword."""
    try:
        tokens = sqlglot.tokenize((sql or "").strip()[:200], read="duckdb")
    except SqlglotError:
        return  # the policy's own parse says why
    if tokens and tokens[0].text.lower() in DUCKDB_STATEMENTS:
        raise SqlNotAllowed(tokens[0].text.lower(), kind="statement")


@dataclass
class ScanEstimate:
    """The planned splits of every table of a plan (by view: one table read at two instants is two
    views) and their total size."""

    splits: dict[str, list[Any]] = field(default_factory=dict)
    tables: dict[str, Any] = field(default_factory=dict)
    bytes: int = 0

    def schemas(self, plan: QueryPlan) -> dict[str, pa.Schema]:
        """Each view's Arrow schema at the plan's instant (what DuckDB's translation types by)."""
        return {p.view: _schema_at(self.tables[p.view], p.instant) for p in plan.tables}


def _schema_at(spec: Any, instant_id: str) -> pa.Schema:
    return spec.schema_at(spec.timeline().get(instant_id)) if instant_id else spec.schema


def scan_estimate(plan: QueryPlan) -> ScanEstimate:
    """Plan the splits of every table at its planned instant (what a run reads, before filters)."""
    estimate = ScanEstimate()
    for planned in plan.tables:
        spec = table_open(planned.table)
        instant = spec.timeline().get(planned.instant) if planned.instant else None
        splits = [] if not planned.instant else list(spec.plan_splits(instant))
        estimate.tables[planned.view] = spec
        estimate.splits[planned.view] = splits
        estimate.bytes += sum(split.size_bytes for split in splits)
    return estimate


@dataclass(frozen=True)
class EngineChoice:
    """The engine that runs a plan, why, and for DuckDB its scan and its translated SQL."""

    engine: str
    reason: str
    estimate: ScanEstimate | None = None
    sql: str = ""


class DuckDbRefused(Exception):
    """``engine=duckdb`` asked for a query DuckDB would not answer as Spark does."""


def choose_engine(requested: str, plan: QueryPlan, max_scan_bytes: int) -> EngineChoice:
    """The engine that runs ``plan`` and why: DuckDB only for what its translation allows
    (``DuckDbRefused`` when it was asked for anything else), and under ``auto`` only up to
    ``max_scan_bytes`` scanned."""
    if requested == SPARK:
        return EngineChoice(SPARK, "requested")
    refusal = duckdb_refusal(plan.spark_sql)
    estimate = None
    sql = ""
    if refusal is None:
        estimate = scan_estimate(plan)
        try:
            sql = duckdb_sql(plan, estimate)
        except NotOnAllowList as error:
            refusal = str(error)
    if requested == DUCKDB:
        if refusal is not None:
            raise DuckDbRefused(
                f"DuckDB would not answer this query as Spark does: {refusal}. Run it on spark or auto."
            )
        assert estimate is not None  # estimated whenever nothing refused DuckDB
        return EngineChoice(DUCKDB, f"requested; scans {_mib(estimate.bytes)}", estimate, sql)
    if refusal is not None:
        return EngineChoice(SPARK, f"auto: {refusal}"[:200])
    assert estimate is not None  # as above
    scanned = _mib(estimate.bytes)
    if estimate.bytes <= max_scan_bytes:
        reason = f"auto: scans {scanned}, at most the DuckDB limit of {_mib(max_scan_bytes)}"
        return EngineChoice(DUCKDB, reason, estimate, sql)
    return EngineChoice(SPARK, f"auto: scans {scanned}, above the DuckDB limit of {_mib(max_scan_bytes)}")


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def duckdb_sql(plan: QueryPlan, estimate: ScanEstimate) -> str:
    """The plan's Spark SQL in DuckDB's dialect with Spark's answers (``NotOnAllowList`` when it
    cannot be), checked to read only the plan's views."""
    text = duckdb_translate(plan.spark_sql, estimate.schemas(plan))
    try:
        rendered = sqlglot.parse_one(text, read="duckdb")
    except SqlglotError as error:
        raise SqlUnparsable(f"the query cannot be translated for DuckDB: {error}") from None
    views = {p.view.lower() for p in plan.tables}
    ctes = {cte.alias_or_name.lower() for cte in rendered.find_all(exp.CTE)}
    for node in rendered.walk():
        if isinstance(node, exp.Table):
            _check_duckdb_table(node, views | ctes)
    return text


def _check_duckdb_table(node: exp.Table, allowed: set[str]) -> None:
    if isinstance(node.this, exp.Func):
        name = (node.this.sql_name() if not isinstance(node.this, exp.Anonymous) else node.this.name).lower()
        if name not in GENERATOR_TABLE_FUNCTIONS:
            raise SqlNotAllowed(name, "DuckDB table functions other than range/generate_series/unnest")
        return
    parts = [p for p in (node.catalog, node.db, node.name) if p]
    if not parts:
        return
    if len(parts) != 1 or parts[0].lower() not in allowed:
        raise SqlNotAllowed(".".join(parts), "only the query's managed tables can be read", kind="table")


def referenced_names(sql: str) -> frozenset[str] | None:
    """Every identifier in ``sql`` (lower case): a superset of the columns it reads; None when it
    reads columns it does not name (``*`` other than in ``count(*)``, a NATURAL join)."""
    statement = sqlglot.parse_one(sql, read="duckdb")
    for star in statement.find_all(exp.Star):
        if not isinstance(star.parent, exp.Count):
            return None
    if any(join.args.get("method") for join in statement.find_all(exp.Join)):
        return None  # NATURAL (or another join method reading implied columns)
    return frozenset(node.name.lower() for node in statement.find_all(exp.Identifier))


def table_arrow(
    planned: PlannedTable, estimate: ScanEstimate, names: frozenset[str] | None = None
) -> pa.Table:
    """The table at the plan's instant, read split by split through the spec API; only the
    columns in ``names`` (all when None; at least one, so the rows are still counted)."""
    spec = estimate.tables[planned.view]
    schema = _schema_at(spec, planned.instant)
    columns = None
    if names is not None:
        columns = [n for n in schema.names if n.lower() in names] or schema.names[:1]
        schema = pa.schema([schema.field(n) for n in columns])
    batches = [
        conform_batch(batch, schema)
        for split in estimate.splits[planned.view]
        for batch in spec.read(split, columns=columns)
        if batch.num_rows
    ]
    return pa.Table.from_batches(batches, schema=schema)


class DuckDbRun:
    """One query's DuckDB connection; ``interrupt`` (from the cancel watch) stops what it runs."""

    def __init__(self) -> None:
        import duckdb

        self.connection = duckdb.connect(":memory:")
        self._lock = threading.Lock()
        self.closed = False

    def register(self, plan: QueryPlan, estimate: ScanEstimate, sql: str | None = None) -> None:
        """Each table of ``plan`` as an Arrow table (only the columns ``sql`` may read), then
        external access off and the configuration locked."""
        names = referenced_names(sql) if sql is not None else None
        self.register_arrow({p.view: table_arrow(p, estimate, names) for p in plan.tables})

    def register_arrow(self, tables: dict[str, pa.Table]) -> None:
        """Each Arrow table under its view name, then Spark's session zone (UTC), external access
        off and the configuration locked."""
        for view, table in tables.items():
            self.connection.register(view, table)
        self.connection.execute("SET TimeZone = 'UTC'")
        self.connection.execute("SET enable_external_access = false")
        self.connection.execute("SET autoload_known_extensions = false")
        self.connection.execute("SET autoinstall_known_extensions = false")
        self.connection.execute("SET lock_configuration = true")

    def fetch(self, sql: str, row_limit: int, whole: bool) -> tuple[pa.Table, int]:
        """(rows, total): every row when ``whole`` (the result is cached), else ``row_limit + 1``
        rows and, when there are more, the count of all of them."""
        relation = self.connection.sql(sql)
        if whole:
            table = _spark_types(relation.to_arrow_table(), relation.types)
            return table, table.num_rows
        table = _spark_types(relation.limit(row_limit + 1).to_arrow_table(), relation.types)
        if table.num_rows <= row_limit:
            return table, table.num_rows
        # A relation has no fetchone() since DuckDB 2 (it would be read as a column's name).
        counted = self.connection.sql(f"SELECT count(*) FROM ({sql}) AS lw_counted").fetchall()
        return table, int(counted[0][0]) if counted else table.num_rows

    def interrupt(self) -> None:
        with self._lock:
            if not self.closed:
                self.connection.interrupt()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self.connection.close()


def _spark_types(table: pa.Table, types: list[Any]) -> pa.Table:
    """DuckDB's 128-bit integers (``sum`` of integers) as the 64-bit ``bigint`` Spark answers with;
    a value that does not fit raises rather than wrapping (Spark's ANSI mode fails it too)."""
    for index, type_ in enumerate(types):
        if str(type_).upper() in {"HUGEINT", "UHUGEINT"}:
            column = table.column(index).cast(pa.int64())
            table = table.set_column(index, table.field(index).with_type(pa.int64()), column)
    return table


def arrow_rows(table: pa.Table, row_limit: int) -> list[list[Any]]:
    """The first ``row_limit`` rows as the Spark engine stores them: zoned timestamps as the naive
    local time Spark's ``collect`` gives, everything else through ``jsonable``."""
    head = table.slice(0, row_limit)
    columns = [column.to_pylist() for column in head.columns]  # by position: names may repeat
    return [[jsonable(_spark_value(column[i])) for column in columns] for i in range(head.num_rows)]


def _spark_value(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone().replace(tzinfo=None)
    if isinstance(value, list):
        return [_spark_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _spark_value(v) for k, v in value.items()}
    return value


__all__ = [
    "AUTO",
    "DEFAULT_MAX_SCAN_BYTES",
    "DUCKDB",
    "ENGINES",
    "SPARK",
    "DuckDbRefused",
    "DuckDbRun",
    "EngineChoice",
    "ScanEstimate",
    "arrow_rows",
    "choose_engine",
    "duckdb_sql",
    "referenced_names",
    "refuse_duckdb_statements",
    "scan_estimate",
    "table_arrow",
]
