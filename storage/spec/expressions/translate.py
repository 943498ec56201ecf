"""Translations of an expression for the engines that read the tables (filter text is ``tree.to_sql``).

* ``to_arrow``: a ``pyarrow.compute.Expression``, the exact row filter applied after reading;
* ``to_pyiceberg``: a pyiceberg ``BooleanExpression`` for ``scan(row_filter=...)``;
* ``to_delta_predicate``: a predicate string deltalake accepts (DataFusion SQL: ``delete``,
  ``update``, ``QueryBuilder``, ``file_uris(file_pruning_predicate=...)``);
* ``to_delta_partition_filters``: the same as DNF tuples, when it can be said that way;
* ``to_spark``: a PySpark ``Column``.

``to_arrow`` and ``to_pyiceberg`` keep the tree's semantics exactly: SQL nulls (a row whose
comparison is null is not selected, under ``not`` too) and IEEE NaN. Spark and DataFusion order
NaN above every number, so on float columns holding NaN their ``>``/``>=`` also select NaN rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import math
import operator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from storage.spec.expressions.tree import (
    NEGATED_OP,
    AlwaysFalse,
    AlwaysTrue,
    And,
    Comparison,
    Expression,
    In,
    IsNull,
    NegationFold,
    Not,
    NotIn,
    NotNull,
    Or,
    Predicate,
    StartsWith,
)


# -- pyarrow ----------------------------------------------------------------------------------------
def _arrow_field(name: str, schema: pa.Schema | None) -> pc.Expression:
    if "." in name and (schema is None or schema.get_field_index(name) < 0):
        return pc.field(*name.split("."))
    return pc.field(name)


_NULL_BOOL = pa.scalar(None, pa.bool_())


def to_arrow(expr: Expression, schema: pa.Schema | None = None) -> pc.Expression:
    """The exact row filter: ``table.filter(to_arrow(e))`` or ``dataset.to_table(filter=...)``.

    ``schema`` only disambiguates a top-level column whose name contains a dot from a nested field.
    """
    if isinstance(expr, AlwaysTrue):
        return pc.scalar(True)
    if isinstance(expr, AlwaysFalse):
        return pc.scalar(False)
    if isinstance(expr, And | Or):
        if not expr.children:
            return pc.scalar(isinstance(expr, And))
        parts = [to_arrow(c, schema) for c in expr.children]
        # & and | on expressions are and_kleene / or_kleene: SQL's three-valued logic.
        return (
            functools.reduce(lambda a, b: a & b, parts)
            if isinstance(expr, And)
            else functools.reduce(lambda a, b: a | b, parts)
        )
    if isinstance(expr, Not):
        return ~to_arrow(expr.child, schema)  # null stays null: not (null) selects nothing
    if not isinstance(expr, Predicate):
        raise TypeError(f"not an expression: {expr!r}")
    field = _arrow_field(expr.column, schema)
    if isinstance(expr, Comparison):
        value = pa.scalar(expr.value)
        return {
            "=": field == value,
            "!=": field != value,
            "<": field < value,
            "<=": field <= value,
            ">": field > value,
            ">=": field >= value,
        }[expr.op]
    if isinstance(expr, In | NotIn):
        # is_in answers false for a null input; SQL says null, which matters under not.
        membership = pc.if_else(field.is_null(), _NULL_BOOL, _isin(field, expr.values))
        return membership if isinstance(expr, In) else ~membership
    if isinstance(expr, IsNull):
        return field.is_null(nan_is_null=False)
    if isinstance(expr, NotNull):
        return field.is_valid()
    if isinstance(expr, StartsWith):
        if isinstance(expr.prefix, bytes):
            return pc.binary_slice(field, 0, len(expr.prefix)) == pa.scalar(expr.prefix)
        return pc.starts_with(field, pattern=expr.prefix)
    raise TypeError(f"not an expression: {expr!r}")


def _isin(field: pc.Expression, values: tuple[Any, ...]) -> pc.Expression:
    if not values:
        return pc.scalar(False)
    if any(isinstance(v, float) for v in values):
        # ``isin`` casts its values to the column's type: a float32 column would match 0.1 as
        # float32(0.1), where ``=`` (and Spark, and the pruning by statistics) compares in double
        # and does not. Equalities keep ``in`` meaning what ``=`` means.
        return functools.reduce(operator.or_, (field == pc.scalar(v) for v in values))
    return field.isin(pa.array(list(values)))


# -- pyiceberg --------------------------------------------------------------------------------------
class _ToPyIceberg(NegationFold):
    def __init__(self) -> None:
        from pyiceberg import expressions as ie

        self.ie = ie
        self.true = ie.AlwaysTrue()
        self.false = ie.AlwaysFalse()

    def all_of(self, parts: list[Any]) -> Any:
        return functools.reduce(self.ie.And, parts) if parts else self.true

    def any_of(self, parts: list[Any]) -> Any:
        return functools.reduce(self.ie.Or, parts) if parts else self.false

    def leaf(self, predicate: Predicate, negated: bool) -> Any:
        ie = self.ie
        name = predicate.column
        if isinstance(predicate, IsNull | NotNull):
            return ie.IsNull(name) if isinstance(predicate, IsNull) != negated else ie.NotNull(name)
        if isinstance(predicate, Comparison):
            return self._comparison(predicate, negated)
        if isinstance(predicate, In | NotIn):
            values = {v for v in predicate.values if not _is_float_nan(v)}
            if isinstance(predicate, In) != negated:
                return ie.In(name, values) if values else self.false
            # Iceberg's not-in keeps null rows; SQL's does not.
            return ie.And(ie.NotIn(name, values), ie.NotNull(name)) if values else ie.NotNull(name)
        if isinstance(predicate, StartsWith):
            if not negated:
                return ie.StartsWith(name, predicate.prefix)
            return ie.And(ie.NotStartsWith(name, predicate.prefix), ie.NotNull(name))
        raise TypeError(f"not a predicate: {predicate!r}")

    def _comparison(self, predicate: Comparison, negated: bool) -> Any:
        ie = self.ie
        name, value = predicate.column, predicate.value
        op = NEGATED_OP[predicate.op] if negated else predicate.op
        if _is_float_nan(value):
            # IEEE: only "!=" holds for NaN, and it holds for every non-null value.
            return ie.NotNull(name) if op == "!=" else self.false
        build = {
            "=": ie.EqualTo,
            "!=": ie.NotEqualTo,
            "<": ie.LessThan,
            "<=": ie.LessThanOrEqual,
            ">": ie.GreaterThan,
            ">=": ie.GreaterThanOrEqual,
        }[op]
        result = build(name, value)
        if op == "!=":
            result = ie.And(result, ie.NotNull(name))  # Iceberg's not-equal keeps null rows
        if negated and predicate.op != "!=" and isinstance(value, float):
            result = ie.Or(result, ie.IsNaN(name))  # not (NaN < 1) is true
        return result


def _is_float_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def to_pyiceberg(expr: Expression) -> Any:
    """A pyiceberg ``BooleanExpression`` with the same rows as ``to_arrow(expr)``."""
    return _ToPyIceberg().fold(expr)


# -- deltalake --------------------------------------------------------------------------------------
def _delta_column(name: str) -> str:
    # DataFusion folds unquoted names to lower case, so every part is quoted.
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def delta_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return repr(value)
        text = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return f"arrow_cast('{text}', 'Float64')"
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    if isinstance(value, dt.datetime):
        # Delta timestamps are microseconds; a bare TIMESTAMP literal is nanoseconds and
        # deltalake's delete/update refuse to compare the two.
        if value.tzinfo is not None:
            text = value.astimezone(dt.UTC).isoformat()
            return f"arrow_cast('{text}', 'Timestamp(Microsecond, Some(\"UTC\"))')"
        return f"arrow_cast('{value.isoformat()}', 'Timestamp(Microsecond, None)')"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    raise TypeError(f"no Delta predicate syntax for {type(value).__name__} value {value!r}")


def to_delta_predicate(expr: Expression) -> str:
    """A SQL predicate for deltalake (``DeltaTable.delete(predicate)``, ``QueryBuilder``)."""
    if isinstance(expr, AlwaysTrue):
        return "TRUE"
    if isinstance(expr, AlwaysFalse):
        return "FALSE"
    if isinstance(expr, And | Or):
        if not expr.children:
            return "TRUE" if isinstance(expr, And) else "FALSE"
        joiner = " AND " if isinstance(expr, And) else " OR "
        return joiner.join(f"({to_delta_predicate(c)})" for c in expr.children)
    if isinstance(expr, Not):
        return f"NOT ({to_delta_predicate(expr.child)})"
    if not isinstance(expr, Predicate):
        raise TypeError(f"not an expression: {expr!r}")
    column = _delta_column(expr.column)
    if isinstance(expr, Comparison):
        return f"{column} {expr.op} {delta_literal(expr.value)}"
    if isinstance(expr, In):
        return f"{column} IN ({', '.join(delta_literal(v) for v in expr.values)})" if expr.values else "FALSE"
    if isinstance(expr, NotIn):
        if not expr.values:
            return f"{column} IS NOT NULL"
        return f"{column} NOT IN ({', '.join(delta_literal(v) for v in expr.values)})"
    if isinstance(expr, IsNull):
        return f"{column} IS NULL"
    if isinstance(expr, NotNull):
        return f"{column} IS NOT NULL"
    if isinstance(expr, StartsWith):
        return f"starts_with({column}, {delta_literal(expr.prefix)})"
    raise TypeError(f"not an expression: {expr!r}")


_MAX_CONJUNCTIONS = 64
Dnf = list[list[tuple[str, str, Any]]]


class _ToDnf(NegationFold):
    """DNF as deltalake's tuple filters; None where a leaf has no tuple form."""

    true: Any = [[]]
    false: Any = []

    def leaf(self, predicate: Predicate, negated: bool) -> Dnf | None:
        if isinstance(predicate, Comparison):
            if _is_float_nan(predicate.value) or (negated and isinstance(predicate.value, float)):
                return None  # NaN rows satisfy a negated comparison; tuples cannot say so
            op = NEGATED_OP[predicate.op] if negated else predicate.op
            return [[(predicate.column, op, predicate.value)]]
        if isinstance(predicate, In | NotIn):
            if any(_is_float_nan(v) for v in predicate.values):
                return None
            op = "in" if isinstance(predicate, In) != negated else "not in"
            return [[(predicate.column, op, list(predicate.values))]]
        return None  # is null, starts with: no tuple form

    def all_of(self, parts: list[Dnf | None]) -> Dnf | None:
        if any(p is None for p in parts):
            return None
        result: Dnf = [[]]
        for part in parts:
            result = [left + right for left in result for right in part]  # type: ignore[union-attr]
            if len(result) > _MAX_CONJUNCTIONS:
                return None
        return result

    def any_of(self, parts: list[Dnf | None]) -> Dnf | None:
        if any(p is None for p in parts):
            return None
        result = [conjunction for part in parts for conjunction in part]  # type: ignore[union-attr]
        return result if len(result) <= _MAX_CONJUNCTIONS else None


def to_delta_partition_filters(expr: Expression) -> list[list[tuple[str, str, Any]]] | None:
    """``expr`` as deltalake tuple filters in disjunctive normal form (a list of and-ed lists of
    ``(column, op, value)``, or-ed together), or None when it cannot be said that way (is null,
    starts with, a constant, or more than 64 conjunctions)."""
    dnf = _ToDnf().fold(expr)
    if not dnf or any(not conjunction for conjunction in dnf):
        return None  # always false / always true: no tuple form, and [] reads as "no filter"
    return dnf


# -- Spark ------------------------------------------------------------------------------------------
def _spark_column(name: str) -> str:
    return ".".join("`" + part.replace("`", "``") + "`" for part in name.split("."))


def to_spark(expr: Expression) -> Any:
    """A PySpark ``Column`` (needs an active SparkSession, as every Column does)."""
    from pyspark.sql import functions as F

    if isinstance(expr, AlwaysTrue | AlwaysFalse):
        return F.lit(isinstance(expr, AlwaysTrue))
    if isinstance(expr, And | Or):
        if not expr.children:
            return F.lit(isinstance(expr, And))
        parts = [to_spark(c) for c in expr.children]
        return (
            functools.reduce(lambda a, b: a & b, parts)
            if isinstance(expr, And)
            else functools.reduce(lambda a, b: a | b, parts)
        )
    if isinstance(expr, Not):
        return ~to_spark(expr.child)
    if not isinstance(expr, Predicate):
        raise TypeError(f"not an expression: {expr!r}")
    column = F.col(_spark_column(expr.column))
    if isinstance(expr, Comparison):
        value = F.lit(expr.value)
        return {
            "=": column == value,
            "!=": column != value,
            "<": column < value,
            "<=": column <= value,
            ">": column > value,
            ">=": column >= value,
        }[expr.op]
    if isinstance(expr, In | NotIn):
        membership = (
            column.isin(list(expr.values)) if expr.values else F.when(column.isNotNull(), F.lit(False))
        )
        return membership if isinstance(expr, In) else ~membership
    if isinstance(expr, IsNull):
        return column.isNull()
    if isinstance(expr, NotNull):
        return column.isNotNull()
    if isinstance(expr, StartsWith):
        return column.startswith(expr.prefix)  # type: ignore[arg-type]  # pyspark's stub omits bytes literals
    raise TypeError(f"not an expression: {expr!r}")
