"""The Spark type of every expression of a workbench query, as DuckDB's translation judges it:
sqlglot's optimizer types a qualified copy of the query from the tables' Arrow schemas (read as
Spark reads them), and ``Typed`` answers by node. Plain Python (sqlglot, pyarrow)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar, cast

import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

T = exp.DataType.Type
INTEGERS = frozenset({T.TINYINT, T.SMALLINT, T.INT, T.BIGINT})
FLOATS = frozenset({T.FLOAT, T.DOUBLE})
DECIMALS = frozenset({T.DECIMAL})
NUMBERS = INTEGERS | FLOATS | DECIMALS
STRINGS = frozenset({T.TEXT, T.VARCHAR, T.CHAR})
DATES = frozenset({T.DATE})
TIMESTAMPS = frozenset({T.TIMESTAMPTZ, T.TIMESTAMPLTZ})  # Spark's TIMESTAMP (the session's zone: UTC)
LOCAL_TIMESTAMPS = frozenset({T.TIMESTAMPNTZ, T.TIMESTAMP, T.DATETIME})  # Spark's TIMESTAMP_NTZ
BOOLEANS = frozenset({T.BOOLEAN})
NULLS = frozenset({T.NULL})
ARRAYS = frozenset({T.ARRAY})
#: The kinds a comparison, a set operation, CASE or COALESCE may mix (numbers with numbers).
FAMILIES = (NUMBERS, STRINGS, DATES, TIMESTAMPS, LOCAL_TIMESTAMPS, BOOLEANS)
TIMES = DATES | TIMESTAMPS | LOCAL_TIMESTAMPS


class NotOnAllowList(Exception):
    """Why DuckDB would not answer the query as Spark does (the construct, and why)."""


def construct_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return f"the function {node.name.lower()}"
    if isinstance(node, exp.Func):
        return f"the function {node.sql_name().lower()}"
    if isinstance(node, exp.Lateral):
        return "LATERAL VIEW"
    return type(node).__name__.upper()


def annotate(statement: exp.Expr, schemas: Mapping[str, pa.Schema]) -> dict[int, exp.DataType]:
    """The Spark type of every node of ``statement`` (by ``id``), from a qualified copy: the
    statement itself keeps the names it was written with (the answer's column names)."""
    schema: dict[str, object] = {
        view: {f.name: text for f in fields if (text := spark_type_text(f.type)) is not None}
        for view, fields in schemas.items()
    }
    nodes = list(statement.walk())
    for index, node in enumerate(nodes):
        node.meta["lw"] = index
    try:
        typed = qualify(statement.copy(), schema=schema, dialect="spark", quote_identifiers=False)
        typed = annotate_types(typed, schema=schema, dialect="spark")
    except (SqlglotError, KeyError, ValueError) as error:
        raise NotOnAllowList(f"DuckDB needs every column's type, and {error}") from None
    return {id(nodes[n.meta["lw"]]): n.type for n in typed.walk() if "lw" in n.meta and n.type is not None}


def spark_type_text(type_: pa.DataType) -> str | None:
    """The Spark SQL type of an Arrow column as the spec API reads it to Spark; None for a type
    DuckDB sees otherwise (unsigned integers, half floats, dictionaries: Spark widens or decodes
    them) or Spark cannot hold: such a column is left out of the typing, so a query reading it is
    not on the list."""
    from storage.spec.spark_source import arrow_type_to_spark  # pyspark: only where it runs

    if pa.types.is_unsigned_integer(type_) or pa.types.is_float16(type_) or pa.types.is_dictionary(type_):
        return None
    try:
        return arrow_type_to_spark(type_).simpleString()
    except Exception:
        return None


class Typed:
    """The types of one query's nodes (by ``id``), and the checks the rules make with them."""

    def __init__(self, types: dict[int, exp.DataType]) -> None:
        self._types = types

    def same_as(self, replacement: exp.Expr, node: exp.Expr) -> None:
        """``replacement`` answers what ``node`` did, with its Spark type."""
        if id(node) in self._types:
            self._types[id(replacement)] = self._types[id(node)]

    def of(self, node: exp.Expr | None) -> exp.DType | None:
        """The type of ``node`` (UNKNOWN when sqlglot could not tell)."""
        if node is None:
            return None
        if isinstance(node, exp.Paren):
            return self.of(node.this)
        if isinstance(node, exp.Literal) and not node.is_string:
            text = str(node.this).lower()
            if "e" in text:
                return T.DOUBLE
            return T.DECIMAL if "." in text else T.INT if abs(int(text)) < 2**31 else T.BIGINT
        if isinstance(node, exp.Null):
            return T.NULL
        found = self._types.get(id(node))
        return found.this if found is not None else T.UNKNOWN

    def decimal(self, node: exp.Expr) -> tuple[int, int] | None:
        """(precision, scale) of a decimal or whole number as Spark's decimal arithmetic sees
        it (an int is decimal(10, 0), a bigint decimal(20, 0)); None for anything else."""
        kind = self.of(node)
        if isinstance(node, exp.Literal) and kind == T.DECIMAL:
            digits = str(node.this).lstrip("-")
            whole, _, fraction = digits.partition(".")
            return max(len(whole.lstrip("0")) + len(fraction), len(fraction), 1), len(fraction)
        if kind in (T.TINYINT, T.SMALLINT, T.INT, T.BIGINT):
            return {T.TINYINT: (3, 0), T.SMALLINT: (5, 0), T.INT: (10, 0), T.BIGINT: (20, 0)}[kind]
        found = self._types.get(id(node.this if isinstance(node, exp.Paren) else node))
        if kind != T.DECIMAL or found is None or len(found.expressions) != 2:
            return None
        precision, scale = (int(param.this.this) for param in found.expressions)
        return precision, scale

    def family(self, node: exp.Expr | None) -> frozenset[exp.DType]:
        kind = self.of(node)
        for family in (*FAMILIES, NULLS):
            if kind in family:
                return family
        raise NotOnAllowList(
            f"{node.sql(dialect='spark') if node else '?'} has a type DuckDB's list does not know"
        )

    def kind(self, node: exp.Expr) -> frozenset[exp.DType | None]:
        """The finer group a cast is judged by (integers, floats, decimals, strings...)."""
        kind = self.of(node)
        for group in (
            INTEGERS,
            FLOATS,
            DECIMALS,
            STRINGS,
            DATES,
            TIMESTAMPS,
            LOCAL_TIMESTAMPS,
            BOOLEANS,
            NULLS,
        ):
            if kind in group:
                return group
        return frozenset({kind})

    def require(self, node: exp.Expr, allowed: frozenset[exp.DType], what: str) -> None:
        if self.of(node) not in allowed | NULLS:
            raise NotOnAllowList(
                f"{what} of {node.sql(dialect='spark')} ({self.of(node)}) is not on DuckDB's list"
            )


#: A typed rule: the node's replacement, or None to keep the node.
Rule = Callable[["exp.Expr", Typed], "exp.Expr | None"]
N = TypeVar("N", bound="exp.Expr")


def rule_for(kind: type[N], rule: Callable[[N, Typed], exp.Expr | None]) -> tuple[type[exp.Expr], Rule]:
    """``kind``'s entry in a table of rules. The types of ``kind`` and of ``rule``'s node agree
    here; the table forgets them, and calls the rule only on a node of that very class (it is
    looked up by ``type(node)``)."""
    return kind, cast(Rule, rule)


def duckdb_call(name: str, *arguments: exp.Expr) -> exp.Expr:
    """DuckDB's function ``name`` by that very name (``exp.func`` would map it to a class)."""
    return exp.Anonymous(this=name, expressions=list(arguments))


def duckdb_error(message: str) -> exp.Expr:
    """DuckDB's ``error(message)``: the query fails, as Spark's does."""
    return duckdb_call("error", exp.Literal.string(message))
