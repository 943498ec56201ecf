"""Whether every row of a partition satisfies a filter, from the partition's values alone.

When it does (the filter's residual on that partition is true, in Iceberg's words), a listing
keeps the partition's files without reading their column statistics: they can only agree. Only
what the values prove is proved: comparisons on a column a partition field keeps whole
(identity) or by time range (year, month, day, hour), and ``and``/``or`` of them. Anything else,
a null partition value, a NaN, or values that do not compare, proves nothing (the statistics
decide, as before).

A time field's value stands for a half-open range of its source column, ``[start, end)``; the
bounds are compared against the literal without assuming the column's precision, so ``<=`` is
proved only when the whole range lies below the literal (``end <= literal``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from storage.spec.expressions.evaluate import comparable, is_nan
from storage.spec.expressions.transforms import parse_transform, utc_naive
from storage.spec.expressions.tree import AlwaysTrue, And, Comparison, Expression, Or
from storage.spec.models import PartitionField, PartitionSpec

_EPOCH = dt.datetime(1970, 1, 1)
_RANGE_OPS = {
    ">=": lambda start, end, literal: start >= literal,
    ">": lambda start, end, literal: start > literal,
    "<": lambda start, end, literal: end <= literal,
    "<=": lambda start, end, literal: end <= literal,
    "!=": lambda start, end, literal: literal < start or literal >= end,
}
_POINT_OPS = {
    "=": lambda value, literal: value == literal,
    "!=": lambda value, literal: value != literal,
    "<": lambda value, literal: value < literal,
    "<=": lambda value, literal: value <= literal,
    ">": lambda value, literal: value > literal,
    ">=": lambda value, literal: value >= literal,
}


def always_matches_partition(expr: Expression | None, spec: PartitionSpec, values: Mapping[str, Any]) -> bool:
    """True only if every row of the partition with these exact ``values`` (keyed by partition
    field name) satisfies ``expr`` (a bound filter); False whenever that is not proved."""
    if expr is None:
        return True
    return _holds(expr, spec, values)


def _holds(expr: Expression, spec: PartitionSpec, values: Mapping[str, Any]) -> bool:
    if isinstance(expr, AlwaysTrue):
        return True
    if isinstance(expr, And):
        return all(_holds(child, spec, values) for child in expr.children)
    if isinstance(expr, Or):
        return any(_holds(child, spec, values) for child in expr.children)
    if isinstance(expr, Comparison):
        return any(
            _comparison_holds(expr, field, values.get(field.name))
            for field in spec.fields
            if field.source_column == expr.column
        )
    return False


def _comparison_holds(predicate: Comparison, field: PartitionField, value: Any) -> bool:
    literal = predicate.value
    if value is None or literal is None or is_nan(value) or is_nan(literal):
        return False
    name, _ = parse_transform(field.transform)
    try:
        if name == "identity":
            return _identity_holds(predicate.op, value, literal)
        found = _time_range(name, value, literal)
        if found is None or predicate.op not in _RANGE_OPS:
            return False
        start, end, against = found
        return bool(_RANGE_OPS[predicate.op](start, end, against))
    except (TypeError, ValueError, OverflowError):  # values that do not compare: nothing proved
        return False


def _identity_holds(op: str, value: Any, literal: Any) -> bool:
    """An identity field's value against the literal, when both are of one kind. A timestamp is
    the microsecond it was read as: a nanosecond column's value lies anywhere in it, so it is
    compared as the range ``[value, value + 1 µs)``."""
    if not _same_kind(value, literal):
        return False
    if isinstance(value, dt.datetime):
        if op not in _RANGE_OPS:
            return False
        return bool(_RANGE_OPS[op](value, value + dt.timedelta(microseconds=1), literal))
    return bool(_POINT_OPS[op](value, literal))


def _same_kind(value: Any, literal: Any) -> bool:
    """Whether the two compare as the column's values do (``evaluate.comparable``), less a naive
    timestamp beside an aware one, which that reads as UTC: no proof rests on that reading."""
    if isinstance(value, dt.datetime) and isinstance(literal, dt.datetime):
        return (value.tzinfo is None) == (literal.tzinfo is None)
    return comparable(value, literal) is not None


def _time_range(name: str, value: Any, literal: Any) -> tuple[Any, Any, Any] | None:
    """(start, end, literal) of the source values a year/month/day/hour partition ``value`` holds,
    as datetimes (UTC, naive) for a datetime literal, as dates for a date literal; None when the
    transform is not a time one or the types do not fit."""
    if isinstance(literal, dt.datetime):
        against = utc_naive(literal)
        if name == "hour" and isinstance(value, int) and not isinstance(value, bool):
            start = _EPOCH + dt.timedelta(hours=value)
            return start, start + dt.timedelta(hours=1), against
        days = _date_range(name, value)
        if days is None:
            return None
        return dt.datetime.combine(days[0], dt.time()), dt.datetime.combine(days[1], dt.time()), against
    if isinstance(literal, dt.date):
        days = _date_range(name, value)
        return None if days is None else (days[0], days[1], literal)
    return None


def _date_range(name: str, value: Any) -> tuple[dt.date, dt.date] | None:
    """[first day, day after the last) of a day, month or year partition value."""
    if name == "day" and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value, value + dt.timedelta(days=1)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if name == "month":
        year, month = divmod(value, 12)
        first = dt.date(1970 + year, month + 1, 1)
        return first, dt.date(first.year + (month == 11), (month + 1) % 12 + 1, 1)
    if name == "year":
        return dt.date(1970 + value, 1, 1), dt.date(1971 + value, 1, 1)
    return None
