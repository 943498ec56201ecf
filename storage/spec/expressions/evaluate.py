"""Pruning: can a file or a partition hold a row matching an expression?

Every answer is conservative: ``False`` means "no row can match" and is only given when the
statistics prove it; missing, NaN or incomparable statistics answer ``True`` ("might match").
``Not`` is never evaluated by negating an answer: negation is pushed down to the leaves, and each
leaf knows which rows make it false (a null makes it neither; a NaN makes any ordering false, so
its negation true).

Column statistics as the formats write them are treated with suspicion where they may lie:

* string and binary upper bounds may be truncated prefixes of the true maximum (Delta writers
  truncate long strings), so a bound ``"abc"`` also admits ``"abcz..."``;
* timestamp upper bounds may be truncated to milliseconds (Delta JSON stats), so they are widened
  by one millisecond;
* float bounds say nothing about NaN (Iceberg keeps NaN out of bounds), so a predicate that a NaN
  satisfies cannot be pruned on a float column.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import math
from collections.abc import Mapping
from typing import Any

from storage.spec.expressions.transforms import project
from storage.spec.expressions.tree import (
    NEGATED_OP,
    AlwaysFalse,
    AlwaysTrue,
    Comparison,
    Expression,
    In,
    IsNull,
    NegationFold,
    NotIn,
    NotNull,
    Predicate,
    StartsWith,
    and_,
    or_,
)
from storage.spec.models import DataFile, FileContent, PartitionSpec

_EMPTY: Mapping[str, Any] = {}
_MILLISECOND = dt.timedelta(milliseconds=1)


def _is_nan(value: Any) -> bool:
    return (isinstance(value, float) and math.isnan(value)) or (
        isinstance(value, decimal.Decimal) and value.is_nan()
    )


def _comparable(a: Any, b: Any) -> tuple[Any, Any] | None:
    """``(a, b)`` made comparable, or None when their types do not compare meaningfully."""
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        if (a.tzinfo is None) != (b.tzinfo is None):
            # A naive value next to an aware one: both formats store UTC, so read naive as UTC.
            a = a.replace(tzinfo=dt.UTC) if a.tzinfo is None else a
            b = b.replace(tzinfo=dt.UTC) if b.tzinfo is None else b
        return a, b
    if isinstance(a, dt.datetime) != isinstance(b, dt.datetime):
        return None  # date vs datetime: Python refuses, and guessing a time would be wrong
    if isinstance(a, bool) != isinstance(b, bool):
        return None
    numeric = (int, float, decimal.Decimal)
    if isinstance(a, numeric) and isinstance(b, numeric):
        return a, b
    for family in (str, bytes, dt.date, dt.time):
        if isinstance(a, family) and isinstance(b, family):
            return a, b
    return None


def _cmp(a: Any, b: Any) -> int | None:
    """-1, 0 or 1 comparing ``a`` with ``b``; None when they cannot be compared."""
    pair = _comparable(a, b)
    if pair is None:
        return None
    x, y = pair
    try:
        return (x > y) - (x < y)
    except (TypeError, decimal.InvalidOperation):
        return None


class _StatsEvaluator(NegationFold):
    """``fold(expr)`` is True unless the statistics prove no row matches.

    ``exact`` says the bounds are the values themselves (partition values of one partition):
    no truncation, no hidden NaN.
    """

    def __init__(
        self,
        lower: Mapping[str, Any],
        upper: Mapping[str, Any],
        null_counts: Mapping[str, int | None],
        record_count: int | None,
        exact: bool,
    ) -> None:
        self.lower = lower
        self.upper = upper
        self.null_counts = null_counts
        self.record_count = record_count
        self.exact = exact

    def leaf(self, predicate: Predicate, negated: bool) -> bool:
        column = predicate.column
        nulls = self.null_counts.get(column)
        rows = self.record_count
        all_null = nulls is not None and rows is not None and nulls >= rows
        if isinstance(predicate, IsNull | NotNull):
            wants_null = isinstance(predicate, IsNull) != negated
            return (nulls is None or nulls > 0) if wants_null else not all_null
        if all_null:
            return False  # every other predicate, either way round, needs a non-null value
        lower = self._bound(self.lower, column)
        upper = self._bound(self.upper, column)
        if upper is not None and not self.exact and isinstance(upper, dt.datetime):
            upper = upper + _MILLISECOND
        nan_possible = not self.exact and any(
            isinstance(v, float) for v in (lower, upper, _value_of(predicate))
        )
        if isinstance(predicate, Comparison):
            if _is_nan(predicate.value):
                return True
            op = NEGATED_OP[predicate.op] if negated else predicate.op
            if nan_possible and (negated or op == "!="):
                return True
            return self._compare(op, predicate.value, lower, upper)
        if isinstance(predicate, In | NotIn):
            wants_in = isinstance(predicate, In) != negated
            if any(_is_nan(v) for v in predicate.values):
                return True
            if wants_in:
                return any(self._compare("=", v, lower, upper) for v in predicate.values)
            if nan_possible:
                return True
            return self._some_value_outside(predicate.values, lower, upper)
        if isinstance(predicate, StartsWith):
            if negated:
                return self._some_value_without_prefix(predicate.prefix, lower, upper)
            return self._some_value_with_prefix(predicate.prefix, lower, upper)
        return True

    @staticmethod
    def _bound(bounds: Mapping[str, Any], column: str) -> Any:
        value = bounds.get(column)
        return None if value is None or _is_nan(value) else value

    def _upper_admits(self, upper: Any, value: Any, strict: bool) -> bool:
        """Might some value <= ``upper`` (the true maximum) be > (or >=) ``value``?"""
        if (
            not self.exact
            and isinstance(upper, str | bytes)
            and type(upper) is type(value)
            and value.startswith(upper)
        ):
            return True  # upper may be a truncated prefix of a larger maximum
        order = _cmp(upper, value)
        return order is None or order > 0 or (order == 0 and not strict)

    def _compare(self, op: str, value: Any, lower: Any, upper: Any) -> bool:
        if op in ("<", "<="):
            order = None if lower is None else _cmp(lower, value)
            return order is None or order < 0 or (order == 0 and op == "<=")
        if op in (">", ">="):
            return upper is None or self._upper_admits(upper, value, strict=op == ">")
        if op == "=":
            return self._compare("<=", value, lower, upper) and self._compare(">=", value, lower, upper)
        # "!=": only a file whose every value equals ``value`` cannot match.
        if lower is None or upper is None:
            return True
        if not self.exact and isinstance(value, str | bytes):
            return True  # equal truncated bounds do not prove equal values
        return not (_cmp(lower, value) == 0 and _cmp(upper, value) == 0)

    def _some_value_outside(self, values: tuple[Any, ...], lower: Any, upper: Any) -> bool:
        if lower is None or upper is None or _cmp(lower, upper) != 0:
            return True
        if not self.exact and isinstance(lower, str | bytes):
            return True
        return not any(_cmp(lower, v) == 0 for v in values)

    def _some_value_with_prefix(self, prefix: Any, lower: Any, upper: Any) -> bool:
        n = len(prefix)
        if lower is not None and type(lower) is type(prefix) and lower[:n] > prefix:
            return False  # every value is at least lower, so its first n characters pass the prefix
        if upper is not None and type(upper) is type(prefix):
            if self.exact:
                return upper[:n] >= prefix
            # A truncated upper bound that is itself a prefix of the prefix proves nothing.
            return not (upper < prefix and not prefix.startswith(upper))
        return True

    @staticmethod
    def _some_value_without_prefix(prefix: Any, lower: Any, upper: Any) -> bool:
        # Every string between two strings that both start with p starts with p.
        if (
            lower is None
            or upper is None
            or type(lower) is not type(prefix)
            or type(upper) is not type(prefix)
        ):
            return True
        return not (lower.startswith(prefix) and upper.startswith(prefix))


def _value_of(predicate: Predicate) -> Any:
    if isinstance(predicate, Comparison):
        return predicate.value
    if isinstance(predicate, In | NotIn) and predicate.values:
        return predicate.values[0]
    return None


def might_match_stats(
    expr: Expression | None,
    *,
    lower: Mapping[str, Any] | None = None,
    upper: Mapping[str, Any] | None = None,
    null_counts: Mapping[str, int | None] | None = None,
    record_count: int | None = None,
) -> bool:
    """False only if column statistics prove no row of the file satisfies ``expr``.

    Mappings are keyed by column name (nested fields dotted); a missing key or None is unknown.
    A ``record_count`` of 0 means the file has no rows at all.
    """
    if expr is None:
        return True
    if record_count == 0:
        return False
    evaluator = _StatsEvaluator(
        lower or _EMPTY, upper or _EMPTY, null_counts or _EMPTY, record_count, exact=False
    )
    return bool(evaluator.fold(expr))


class _Projector(NegationFold):
    true = AlwaysTrue()
    false = AlwaysFalse()

    def __init__(self, spec: PartitionSpec) -> None:
        self.by_source: dict[str, list] = {}
        for field in spec.fields:
            self.by_source.setdefault(field.source_column, []).append(field)

    def leaf(self, predicate: Predicate, negated: bool) -> Expression:
        fields = self.by_source.get(predicate.column, ())
        return and_(*(project(field, predicate, negated) for field in fields))

    def all_of(self, parts: list[Expression]) -> Expression:
        return and_(*parts)

    def any_of(self, parts: list[Expression]) -> Expression:
        return or_(*parts)


def partition_projection(expr: Expression | None, spec: PartitionSpec) -> Expression:
    """Inclusive projection of ``expr`` onto the partition fields of ``spec``.

    The result is an expression over partition field names that every partition holding a
    matching row satisfies. ``Not`` is pushed to the leaves first; only identity projections keep
    a ``Not`` (they are exact). Expressions should be bound (``bind_filter``): bucket hashes depend
    on the literal's type.
    """
    if expr is None:
        return AlwaysTrue()
    try:
        return _cached_projection(expr, spec)
    except TypeError:  # an unhashable literal: project without the cache
        return _Projector(spec).fold(expr)


@functools.lru_cache(maxsize=128)
def _cached_projection(expr: Expression, spec: PartitionSpec) -> Expression:
    # Listing asks once per file with the same expression and spec; bucket hashing is not free.
    return _Projector(spec).fold(expr)


def _exact_partition_evaluator(values: Mapping[str, Any]) -> _StatsEvaluator:
    nulls = {name: 1 if value is None else 0 for name, value in values.items()}
    return _StatsEvaluator(values, values, nulls, 1, exact=True)


def might_match_partition(expr: Expression | None, spec: PartitionSpec, values: Mapping[str, Any]) -> bool:
    """False only if no row of the partition with these exact ``values`` (keyed by partition
    field name, None for a null partition value) can satisfy ``expr``."""
    if expr is None or not spec.fields:
        return True
    return bool(_exact_partition_evaluator(values).fold(partition_projection(expr, spec)))


def might_match_partition_bounds(
    expr: Expression | None,
    spec: PartitionSpec,
    lower: Mapping[str, Any] | None,
    upper: Mapping[str, Any] | None,
    contains_null: Mapping[str, bool | None] | None = None,
) -> bool:
    """False only if no partition whose values lie within these bounds can hold a matching row.

    For Iceberg manifest partition summaries: bounds and ``contains_null`` keyed by partition
    field name, None or missing when unknown.
    """
    if expr is None or not spec.fields:
        return True
    nulls = {name: (1 if has else 0) for name, has in (contains_null or {}).items() if has is not None}
    evaluator = _StatsEvaluator(lower or _EMPTY, upper or _EMPTY, nulls, None, exact=False)
    return bool(evaluator.fold(partition_projection(expr, spec)))


def might_match_file(expr: Expression | None, data_file: DataFile, spec: PartitionSpec) -> bool:
    """Partition values and column statistics of ``data_file`` together: the usual listing check.

    Column statistics are used for data files only; delete and log files carry statistics of
    other rows (deleted positions, updates) and are kept whenever their partition might match.
    """
    if expr is None:
        return True
    if spec.fields and data_file.partition and not might_match_partition(expr, spec, data_file.partition):
        return False
    if data_file.content is not FileContent.DATA:
        return True
    return might_match_stats(
        expr,
        lower=data_file.lower_bounds,
        upper=data_file.upper_bounds,
        null_counts=data_file.null_counts,
        # Some writers leave the count unknown as 0; only a positive count is evidence.
        record_count=data_file.record_count if data_file.record_count > 0 else None,
    )
