"""Workbench SQL on DuckDB only where DuckDB answers as Spark does.

The workbench speaks Spark SQL (ANSI mode, session time zone UTC). sqlglot turns most of it into
DuckDB SQL that runs, but running is not answering alike: sqlglot writes Spark's ``CAST`` as
``TRY_CAST`` (Spark fails a bad cast, DuckDB answered NULL), ``a / b`` as ``a / NULLIF(b, 0)``,
``date_add`` as a timestamp, ``LATERAL VIEW OUTER`` as an inner join, and leaves functions DuckDB
lacks. So DuckDB runs a query only when every construct and function in it is on the allow-list
below, and each entry of the list is held by the parity corpus (``tests/processes/
test_duckdb_parity.py``), which runs its queries on both engines and compares values, types and
nulls, or that both fail. A few entries are rewritten to Spark's meaning (a division by zero
fails, ``floor`` answers a ``bigint``, ``dayofweek`` counts from Sunday = 1...).

``duckdb_refusal(sql)`` is the check without types (at submission); ``duckdb_translate(sql,
schemas)`` types every expression from the tables' schemas (sqlglot's optimizer), checks what
depends on types (a cast's source, a division's operands, a comparison's sides) and writes DuckDB's
SQL. Either raises or returns ``NotOnAllowList`` naming what is not on the list.

Plain Python (sqlglot, pyarrow): no Django.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from processes.duckdb_translation.rules import TYPED_RULES
from processes.duckdb_translation.typed import (
    NotOnAllowList,
    Typed,
    annotate,
    construct_name,
    spark_type_text,
)

# --- the allow-list: constructs ----------------------------------------------------------------


def _classes(names: str) -> frozenset[type[exp.Expr]]:
    """sqlglot's expression classes named in ``names`` (comments after ``#`` left out)."""
    words = " ".join(line.split("#")[0] for line in names.splitlines()).split()
    return frozenset(getattr(exp, word) for word in words)


#: The query's shape: selects, joins, filters, grouping (with ROLLUP / CUBE / GROUPING SETS),
#: ordering, windows, subqueries, CTEs and set operations, and the operators that read alike.
CONSTRUCTS: frozenset[type[exp.Expr]] = _classes(
    """
    Select From Join Where Group Having Order Ordered Limit Offset Distinct Column Identifier Literal
    Alias TableAlias Table Subquery CTE With Union Intersect Except Star Paren Null Boolean DataType
    DataTypeParam Tuple Rollup Cube GroupingSets Window WindowSpec Var EQ NEQ GT GTE LT LTE NullSafeEQ
    NullSafeNEQ And Or Not Is In Between Exists Case If Neg Add Sub Mul Div Mod IntDiv Cast TryCast
    Like ILike DPipe
    """
)

#: Functions, by sqlglot class. Aggregates and window functions included; the typed rules are in
#: ``TYPED_RULES``. Left out on purpose (Spark runs them): anything non-deterministic or
#: approximate (rand, uuid, first/last, collect_*, approx_*), regular expressions (Java's and
#: RE2's differ), formats and parsing with patterns, time-zone and current-time functions, arrays
#: indexed or exploded, maps, and every function sqlglot does not know (substring_index, conv...).
FUNCTIONS: frozenset[type[exp.Expr]] = _classes(
    """
    # aggregates
    Count Sum Avg Min Max CountIf LogicalAnd LogicalOr Stddev StddevSamp StddevPop Variance VariancePop
    Corr CovarSamp CovarPop Median
    # windows
    RowNumber Rank DenseRank PercentRank CumeDist Ntile Lag Lead FirstValue LastValue NthValue
    # numbers
    Abs Round Floor Ceil Sqrt Pow Exp Ln Log Greatest Least Sign
    # strings
    Upper Lower Length Trim Replace Pad StrPosition Reverse Repeat Substring Left Right Concat ConcatWs
    StartsWith EndsWith Contains Ascii Translate SplitPart MD5 SHA2
    # nulls and conditions
    Coalesce Nullif Nvl2
    # dates and timestamps
    Year Month Day DayOfMonth DayOfWeek DayOfYear Quarter WeekOfYear Hour Minute TimestampTrunc
    DateTrunc LastDay DateDiff AddMonths TsOrDsAdd TsOrDsToDate Extract
    # arrays and structs (read, not indexed)
    ArraySize ArrayContains Array
    """
)

#: Functions sqlglot does not know by class (``Anonymous``) that DuckDB has under the same name
#: and answers alike (checked by the corpus).
ANONYMOUS_FUNCTIONS = frozenset({"make_date"})


def duckdb_refusal(spark_sql: str) -> str | None:
    """Why DuckDB would not answer ``spark_sql`` as Spark does, judged without types (a
    construct or function off the list); None when only the typed check can tell."""
    try:
        _check_constructs(_parse(spark_sql))
    except NotOnAllowList as refusal:
        return str(refusal)
    return None


def duckdb_translate(spark_sql: str, schemas: Mapping[str, pa.Schema]) -> str:
    """``spark_sql`` (over the views named in ``schemas``) as DuckDB SQL that answers as Spark
    does, or ``NotOnAllowList`` saying why it cannot."""
    statement = _parse(spark_sql)
    _check_constructs(statement)
    _check_unit_spellings(spark_sql, statement)
    typed = Typed(annotate(statement, schemas))
    for node in reversed(list(statement.dfs())):  # children before their parents
        rule = TYPED_RULES.get(type(node))
        if rule is None:
            continue
        parent, key, index = node.parent, node.arg_key, node.index
        replacement = rule(node, typed)  # may hold ``node`` itself (which then has a new parent)
        if replacement is None or replacement is node:
            continue
        typed.same_as(replacement, node)
        if parent is None:
            statement = replacement
        else:
            assert key is not None  # a node with a parent is held under one of its keys
            parent.set(key, replacement, index)
    return statement.sql(dialect="duckdb")


def _parse(spark_sql: str) -> exp.Expr:
    try:
        return sqlglot.parse_one(spark_sql, read="spark")
    except SqlglotError as error:
        raise NotOnAllowList(f"the query does not parse for translation: {error}") from None


def _check_constructs(statement: exp.Expr) -> None:
    for node in statement.walk():
        kind = type(node)
        if kind in CONSTRUCTS or kind in FUNCTIONS:
            _check_shape(node)
            continue
        if isinstance(node, exp.Anonymous) and node.name.lower() in ANONYMOUS_FUNCTIONS:
            continue
        raise NotOnAllowList(
            f"{construct_name(node)} is not on DuckDB's list of what it answers as Spark does"
        )


def _check_shape(node: exp.Expr) -> None:
    """Forms of an allowed construct that are not allowed."""
    if isinstance(node, exp.Table) and (node.args.get("sample") or node.args.get("version")):
        raise NotOnAllowList("TABLESAMPLE and time travel run on Spark")
    if isinstance(node, exp.Select) and node.args.get("sample"):
        raise NotOnAllowList("TABLESAMPLE runs on Spark")
    if isinstance(node, exp.Subquery) and node.args.get("sample"):
        raise NotOnAllowList("TABLESAMPLE runs on Spark")
    if isinstance(node, exp.Join) and node.args.get("method"):
        raise NotOnAllowList(f"{node.args['method']} JOIN is not on DuckDB's list")
    if isinstance(node, exp.Join) and node.args.get("kind") not in (
        None,
        "",
        "INNER",
        "OUTER",
        "SEMI",
        "ANTI",
        "CROSS",
    ):
        raise NotOnAllowList(f"{node.args['kind']} JOIN is not on DuckDB's list")
    if isinstance(node, (exp.Like, exp.ILike)):
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string) or "\\" in pattern.this:
            raise NotOnAllowList("LIKE runs on DuckDB only with a literal pattern without escapes")
        if node.args.get("escape") is not None:
            raise NotOnAllowList("LIKE ... ESCAPE is not on DuckDB's list")
    if isinstance(node, exp.Window) and node.args.get("alias"):
        raise NotOnAllowList("named windows (WINDOW w AS ...) are not on DuckDB's list")


def _check_unit_spellings(spark_sql: str, statement: exp.Expr) -> None:
    """sqlglot reads the unit 'Q' as QUARTER (and 'D', 'W', 'Y'... likewise); Spark's trunc and
    date_trunc do not know those letters and answer NULL. A query that spells a unit with one of
    them runs on Spark."""
    if not any(isinstance(n, (exp.DateTrunc, exp.TimestampTrunc)) for n in statement.walk()):
        return
    letters = set(exp.TimeUnit.UNABBREVIATED_UNIT_NAME)
    for token in sqlglot.tokenize(spark_sql, read="spark"):
        if token.token_type == TokenType.STRING and token.text.upper() in letters:
            raise NotOnAllowList(
                f"the unit {token.text!r} of trunc/date_trunc is not Spark's; it runs on Spark"
            )


__all__ = [
    "ANONYMOUS_FUNCTIONS",
    "CONSTRUCTS",
    "FUNCTIONS",
    "NotOnAllowList",
    "duckdb_refusal",
    "duckdb_translate",
    "spark_type_text",
]
