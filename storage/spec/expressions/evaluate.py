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
import math
from collections.abc import Callable, Mapping
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


def is_nan(value: Any) -> bool:
    return (isinstance(value, float) and math.isnan(value)) or (
        isinstance(value, decimal.Decimal) and value.is_nan()
    )


def comparable(a: Any, b: Any) -> tuple[Any, Any] | None:
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


_SIMPLE_TYPES = frozenset({int, float, str, bytes, dt.date, decimal.Decimal})


def compare(a: Any, b: Any) -> int | None:
    """-1, 0 or 1 comparing ``a`` with ``b``; None when they cannot be compared."""
    kind = type(a)
    if kind is type(b) and kind in _SIMPLE_TYPES:
        return (a > b) - (a < b)  # the common case, kept cheap: listing asks per file
    pair = comparable(a, b)
    if pair is None:
        return None
    x, y = pair
    try:
        return (x > y) - (x < y)
    except (TypeError, decimal.InvalidOperation):
        return None


# A compiled check takes (lower, upper, null_counts, record_count) and answers "might match".
Check = Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any], "int | None"], bool]


def _always(lower: Any, upper: Any, nulls: Any, rows: Any) -> bool:
    return True


def _never(lower: Any, upper: Any, nulls: Any, rows: Any) -> bool:
    return False


class _Compiler(NegationFold):
    """Compiles an expression once into nested closures over the statistics mappings.

    ``exact`` says the bounds are the values themselves (the partition values of one partition):
    no truncation, no hidden NaN.
    """

    true = staticmethod(_always)
    false = staticmethod(_never)

    def __init__(self, exact: bool) -> None:
        self.exact = exact

    def all_of(self, parts: list[Check]) -> Check:
        if len(parts) == 1:
            return parts[0]

        def every(lower: Any, upper: Any, nulls: Any, rows: Any) -> bool:
            for part in parts:
                if not part(lower, upper, nulls, rows):
                    return False
            return True

        return every

    def any_of(self, parts: list[Check]) -> Check:
        if len(parts) == 1:
            return parts[0]

        def some(lower: Any, upper: Any, nulls: Any, rows: Any) -> bool:
            for part in parts:
                if part(lower, upper, nulls, rows):
                    return True
            return False

        return some

    def leaf(self, predicate: Predicate, negated: bool) -> Check:
        column = predicate.column
        if isinstance(predicate, IsNull | NotNull):
            if isinstance(predicate, IsNull) != negated:

                def has_null(lower: Any, upper: Any, nulls: Any, rows: Any) -> bool:
                    count = nulls.get(column)
                    return count is None or count > 0

                return has_null

            def has_value(lower: Any, upper: Any, nulls: Any, rows: Any) -> bool:
                count = nulls.get(column)
                return count is None or rows is None or count < rows

            return has_value
        test = self._value_test(predicate, negated)
        if test is None:
            return _always
        exact = self.exact

        def check(lower: Any, upper: Any, nulls: Any, rows: Any) -> bool:
            count = nulls.get(column)
            if count is not None and rows is not None and count >= rows:
                return False  # only nulls: every predicate but the null tests needs a value
            low = lower.get(column)
            high = upper.get(column)
            if low is not None and low != low:  # NaN bound: says nothing
                low = None
            if high is not None and high != high:
                high = None
            if high is not None and not exact and type(high) is dt.datetime:
                try:
                    high = high + _MILLISECOND
                except OverflowError:  # the largest datetime (an open-ended validity range)
                    high = None  # no upper bound: says nothing
            return test(low, high)

        return check

    def _value_test(self, predicate: Predicate, negated: bool) -> Callable[[Any, Any], bool] | None:
        """(lower, upper) -> might some non-null value within the bounds make the leaf true
        (or false, when negated)? None when the answer is always yes."""
        exact = self.exact
        if isinstance(predicate, Comparison):
            value = predicate.value
            if is_nan(value):
                return None
            op = NEGATED_OP[predicate.op] if negated else predicate.op
            nan_satisfies = negated or op == "!="
            float_literal = isinstance(value, float)
            if nan_satisfies and not exact and float_literal:
                return None

            def compare(low: Any, high: Any) -> bool:
                if nan_satisfies and not exact and (isinstance(low, float) or isinstance(high, float)):
                    return True
                return _compare(op, value, low, high, exact)

            return compare
        if isinstance(predicate, In | NotIn):
            values = predicate.values
            if any(is_nan(v) for v in values):
                return None
            if isinstance(predicate, In) != negated:
                return lambda low, high: any(_compare("=", v, low, high, exact) for v in values)
            if not exact and any(isinstance(v, float) for v in values):
                return None

            def outside(low: Any, high: Any) -> bool:
                if not exact and (isinstance(low, float) or isinstance(high, float)):
                    return True
                return _some_value_outside(values, low, high, exact)

            return outside
        if isinstance(predicate, StartsWith):
            prefix = predicate.prefix
            if negated:
                return lambda low, high: _some_value_without_prefix(prefix, low, high)
            return lambda low, high: _some_value_with_prefix(prefix, low, high, exact)
        return None


def _upper_admits(upper: Any, value: Any, strict: bool, exact: bool) -> bool:
    """Might some value <= ``upper`` (the true maximum) be > (or >=) ``value``?"""
    if not exact and _starts_with(value, upper):
        return True  # upper may be a truncated prefix of a larger maximum
    order = compare(upper, value)
    return order is None or order > 0 or (order == 0 and not strict)


def _starts_with(value: Any, prefix: Any) -> bool:
    """Whether ``value`` extends ``prefix``, both str or both bytes."""
    if type(prefix) is not type(value) or not isinstance(prefix, str | bytes):
        return False
    return bool(value.startswith(prefix))


def _compare(op: str, value: Any, lower: Any, upper: Any, exact: bool) -> bool:
    if op in ("<", "<="):
        order = None if lower is None else compare(lower, value)
        return order is None or order < 0 or (order == 0 and op == "<=")
    if op in (">", ">="):
        return upper is None or _upper_admits(upper, value, op == ">", exact)
    if op == "=":
        return _compare("<=", value, lower, upper, exact) and _compare(">=", value, lower, upper, exact)
    # "!=": only a file whose every value equals ``value`` cannot match.
    if lower is None or upper is None:
        return True
    if not exact and isinstance(value, str | bytes):
        return True  # equal truncated bounds do not prove equal values
    return not (compare(lower, value) == 0 and compare(upper, value) == 0)


def _some_value_outside(values: tuple[Any, ...], lower: Any, upper: Any, exact: bool) -> bool:
    if lower is None or upper is None or compare(lower, upper) != 0:
        return True
    if not exact and isinstance(lower, str | bytes):
        return True
    return not any(compare(lower, v) == 0 for v in values)


def _some_value_with_prefix(prefix: Any, lower: Any, upper: Any, exact: bool) -> bool:
    n = len(prefix)
    if lower is not None and type(lower) is type(prefix) and lower[:n] > prefix:
        return False  # every value is at least lower, so its first n characters pass the prefix
    if upper is not None and type(upper) is type(prefix):
        if exact:
            return upper[:n] >= prefix
        # A truncated upper bound that is itself a prefix of the prefix proves nothing.
        return not (upper < prefix and not prefix.startswith(upper))
    return True


def _some_value_without_prefix(prefix: Any, lower: Any, upper: Any) -> bool:
    # Every string between two strings that both start with p starts with p.
    if lower is None or upper is None or type(lower) is not type(prefix) or type(upper) is not type(prefix):
        return True
    return not (lower.startswith(prefix) and upper.startswith(prefix))


class _Memo:
    """Remembers the last few results by the identity of their inputs.

    Listing evaluates one expression against thousands of files; hashing a frozen dataclass tree
    on every call would cost more than the evaluation itself.
    """

    def __init__(self, build: Callable[..., Any], size: int = 8) -> None:
        self.build = build
        self.size = size
        self.entries: list[tuple[tuple[Any, ...], Any]] = []

    def __call__(self, *key: Any) -> Any:
        for cached_key, value in self.entries:
            if all(a is b for a, b in zip(cached_key, key, strict=True)):
                return value
        value = self.build(*key)
        self.entries.insert(0, (key, value))  # the key holds references, so ids stay valid
        del self.entries[self.size :]
        return value


_compiled = _Memo(lambda expr, exact: _Compiler(exact).fold(expr))


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
    check = _compiled(expr, False)
    return check(lower or _EMPTY, upper or _EMPTY, null_counts or _EMPTY, record_count)


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
    return _projection(expr, spec)


_projection = _Memo(lambda expr, spec: _Projector(spec).fold(expr))


def _null_flags(values: Mapping[str, Any]) -> dict[str, int]:
    return {name: 1 if value is None else 0 for name, value in values.items()}


def might_match_partition(expr: Expression | None, spec: PartitionSpec, values: Mapping[str, Any]) -> bool:
    """False only if no row of the partition with these exact ``values`` (keyed by partition
    field name, None for a null partition value) can satisfy ``expr``."""
    if expr is None or not spec.fields:
        return True
    check = _compiled(partition_projection(expr, spec), True)
    return check(values, values, _null_flags(values), 1)


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
    check = _compiled(partition_projection(expr, spec), False)
    return check(lower or _EMPTY, upper or _EMPTY, nulls, None)


def might_match_file(expr: Expression | None, data_file: DataFile, spec: PartitionSpec) -> bool:
    """Partition values and column statistics of ``data_file`` together: the usual listing check.

    Column statistics are used for data files only; delete and log files carry statistics of
    other rows (deleted positions, updates) and are kept whenever their partition might match.
    """
    if expr is None:
        return True
    if spec.fields and data_file.partition and not might_match_partition(expr, spec, data_file.partition):
        return False
    return might_match_file_stats(expr, data_file)


def might_match_file_stats(expr: Expression | None, data_file: DataFile) -> bool:
    """The column statistics half of ``might_match_file`` (for a caller that judged the partition
    already): True for delete and log files, whose statistics describe other rows."""
    if expr is None or data_file.content is not FileContent.DATA:
        return True
    return might_match_stats(
        expr,
        lower=data_file.lower_bounds,
        upper=data_file.upper_bounds,
        null_counts=data_file.null_counts,
        # Some writers leave the count unknown as 0; only a positive count is evidence.
        record_count=data_file.record_count if data_file.record_count > 0 else None,
    )
