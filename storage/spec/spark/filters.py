"""Filters Spark pushes to the data source, as spec expressions when they can be said exactly."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyspark.sql.datasource as ds

from storage.spec.errors import SpecError
from storage.spec.expressions import (
    Comparison,
    In,
    IsNull,
    Not,
    NotNull,
    Or,
    Predicate,
    StartsWith,
    bind_expression,
)
from storage.spec.expressions import binding as _binding

if TYPE_CHECKING:
    from storage.spec.expressions import Expression

_COMPARISONS = {
    ds.EqualTo: "=",
    ds.EqualNullSafe: "=",
    ds.GreaterThan: ">",
    ds.GreaterThanOrEqual: ">=",
    ds.LessThan: "<",
    ds.LessThanOrEqual: "<=",
}


def spark_filter_to_expression(spark_filter: Any, schema: pa.Schema) -> Expression | None:
    """The expression saying exactly what a pushed Spark filter says, bound to ``schema``; None
    when it cannot be said exactly (ends-with, contains, float columns whose NaN ordering differs
    between Spark and Arrow, nulls inside an IN list, unknown or nested-container columns)."""
    expr = _translate(spark_filter, _binding.Columns(schema))
    if expr is None:
        return None
    try:
        return bind_expression(expr, schema)
    except (SpecError, TypeError, ValueError):
        return None  # a literal our binder refuses: Spark evaluates it instead


def _translate(f: Any, columns: _binding.Columns) -> Expression | None:
    if isinstance(f, ds.Not):
        return _translate_not(f, columns)
    attribute = getattr(f, "attribute", None)
    if attribute is None:
        return None
    column = _column_of(columns, tuple(attribute))
    if column is None:
        return None
    return _translate_leaf(f, column)


def _translate_not(f: Any, columns: _binding.Columns) -> Expression | None:
    inner = _translate(f.child, columns)
    if inner is None:
        return None
    if isinstance(f.child, ds.EqualNullSafe) and isinstance(inner, Predicate):
        # ``not (a <=> v)`` is true for a null ``a``, unlike ``not (a = v)``.
        if isinstance(inner, IsNull):
            return NotNull(inner.column)
        return Or(Not(inner), IsNull(inner.column))
    return Not(inner)


def _translate_leaf(f: Any, column: _binding.Column) -> Expression | None:
    name = column.name
    if isinstance(f, ds.IsNull):
        return IsNull(name)
    if isinstance(f, ds.IsNotNull):
        return NotNull(name)
    if pa.types.is_floating(column.type):
        return None  # Spark orders NaN above every number and NaN = NaN; Arrow does neither
    op = _COMPARISONS.get(type(f))
    if op is not None:
        if f.value is None:
            return IsNull(name) if isinstance(f, ds.EqualNullSafe) else None
        return Comparison(op, name, f.value)
    if isinstance(f, ds.In):
        values = tuple(f.value)
        if any(v is None for v in values):
            return None  # ``a in (1, null)`` is null, not false, for other values
        return In(name, values)
    if isinstance(f, ds.StringStartsWith):
        return StartsWith(name, f.value)
    return None


def _column_of(columns: _binding.Columns, attribute: tuple[str, ...]) -> _binding.Column | None:
    try:
        return columns.resolve(".".join(attribute))
    except SpecError:
        return None


__all__ = ["spark_filter_to_expression"]
