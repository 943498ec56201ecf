"""Fast, conservative pre-checks of a filter against raw manifest entries.

``might_match_file`` (storage.spec.expressions) is the authority on pruning, but it works on a
built ``DataFile`` and re-derives the partition projection for every call; run on every entry of
a 200k-file table it costs more than decoding the manifests. These checks are compiled once per
listing, read the raw ``{field id: bytes}`` bounds and the partition values directly, and only
*reject* entries that provably cannot match (anything they do not understand answers "might
match"). Entries that survive still go through ``might_match_file``, so the result is the same
as without them, just cheaper: typically 99% of the entries of a selective filter stop here.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from typing import Any

from storage.formats.iceberg._values import ColumnDecoder

Check = Callable[[Any, Any], bool]
_ALWAYS: Check = lambda lower, upper: True  # noqa: E731


def _compare(op: str, value: Any) -> Callable[[Any, Any], bool] | None:
    """Test on (min, max) of a column: False when no value in [min, max] can satisfy ``op value``."""
    if op == "=":
        return lambda low, high: (low is None or low <= value) and (high is None or value <= high)
    if op == "<":
        return lambda low, high: low is None or low < value
    if op == "<=":
        return lambda low, high: low is None or low <= value
    if op == ">":
        return lambda low, high: high is None or high > value
    if op == ">=":
        return lambda low, high: high is None or high >= value
    return None  # != cannot be decided from bounds


def _compile(expr: Any, leaf: Callable[[str, Callable[[Any, Any], bool]], Check]) -> Check:
    from storage.spec.expressions import AlwaysFalse, And, Comparison, In, Or

    if isinstance(expr, And):
        parts = [_compile(c, leaf) for c in expr.children]
        parts = [p for p in parts if p is not _ALWAYS]
        if not parts:
            return _ALWAYS
        return lambda lower, upper: all(p(lower, upper) for p in parts)
    if isinstance(expr, Or):
        parts = [_compile(c, leaf) for c in expr.children]
        if any(p is _ALWAYS for p in parts):
            return _ALWAYS
        return lambda lower, upper: any(p(lower, upper) for p in parts)
    if isinstance(expr, AlwaysFalse):
        return lambda lower, upper: False
    if isinstance(expr, Comparison) and _usable(expr.value):
        test = _compare(expr.op, expr.value)
        return leaf(expr.column, test) if test is not None else _ALWAYS
    if isinstance(expr, In) and expr.values and all(_usable(v) for v in expr.values):
        values = tuple(expr.values)

        def any_in(low: Any, high: Any) -> bool:
            return any((low is None or low <= v) and (high is None or v <= high) for v in values)

        return leaf(expr.column, any_in)
    # Not, NotIn, IsNull, NotNull, StartsWith...: left to might_match_file
    return _ALWAYS


def _usable(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _guarded(test: Callable[[Any, Any], bool], low: Any, high: Any) -> bool:
    try:
        return bool(test(low, high))
    except TypeError:  # a literal the bound cannot be compared with: unknown
        return True


def stats_check(expr: Any, decoder: ColumnDecoder) -> Check | None:
    """Check over an entry's raw (lower_bounds, upper_bounds) maps, or None when it cannot help."""
    if expr is None:
        return None
    from pyiceberg.types import DoubleType, FloatType

    def leaf(column: str, test: Callable[[Any, Any], bool]) -> Check:
        field_id = decoder.ids.get(column)
        if field_id is None:
            return _ALWAYS
        convert = decoder.bound_converters.get(field_id)
        if convert is None or isinstance(decoder.types.get(field_id), (FloatType, DoubleType)):
            return _ALWAYS  # NaN makes float bounds subtle: leave them to the authority

        def check(lower: Mapping[int, bytes] | None, upper: Mapping[int, bytes] | None) -> bool:
            try:
                raw_low = lower.get(field_id) if lower else None
                raw_high = upper.get(field_id) if upper else None
                low = convert(raw_low) if raw_low is not None else None
                high = convert(raw_high) if raw_high is not None else None
            except (ValueError, UnicodeDecodeError, struct.error, IndexError, TypeError, OverflowError):
                return True  # an unreadable bound is unknown: keep the file
            return _guarded(test, low, high)

        return check

    check = _compile(expr, leaf)
    return None if check is _ALWAYS else check


def partition_check(projected: Any, names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], bool] | None:
    """Check over an entry's partition values of an expression already projected onto the
    partition fields (``partition_projection``), or None when it cannot help."""
    if projected is None:
        return None

    def leaf(column: str, test: Callable[[Any, Any], bool]) -> Check:
        if column not in names:
            return _ALWAYS

        def check(values: Mapping[str, Any], _: Any) -> bool:
            value = values.get(column)
            # a null partition value fails every comparison, but nulls are left to the authority
            return True if value is None else _guarded(test, value, value)

        return check

    check = _compile(projected, leaf)
    if check is _ALWAYS:
        return None
    return lambda values: check(values, None)


# -- the compiled pre-check ------------------------------------------------------------------

_OPS = {"=": 0, "<": 1, "<=": 2, ">": 3, ">=": 4}
_KIND_INT, _KIND_BYTES, _KIND_STRING = 0, 1, 2
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _native_literal(iceberg_type: Any, value: Any) -> tuple[int, Any] | None:
    """(kind, literal) for ``_avro.reject_bounds`` of a comparison of a column of ``iceberg_type``
    with ``value``, or None when the compiled check cannot decide it exactly as ``stats_check``
    would (such comparisons stay with the Python check)."""
    import datetime as dt

    from pyiceberg.types import (
        BinaryType,
        DateType,
        FixedType,
        IntegerType,
        LongType,
        StringType,
        TimestampType,
        TimestamptzType,
    )

    number: int | None = None
    if isinstance(iceberg_type, (IntegerType, LongType)) and type(value) is int:
        number = value
    elif isinstance(iceberg_type, DateType) and type(value) is dt.date:
        number = (value - dt.date(1970, 1, 1)).days
    elif isinstance(iceberg_type, (TimestampType, TimestamptzType)) and type(value) is dt.datetime:
        aware = isinstance(iceberg_type, TimestamptzType)
        if (value.tzinfo is not None) != aware:
            return None  # naive against aware: the Python check keeps the file (TypeError)
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC if aware else None)
        number = (value - epoch) // dt.timedelta(microseconds=1)
    elif isinstance(iceberg_type, StringType) and type(value) is str:
        try:
            return _KIND_STRING, value.encode("utf-8")  # UTF-8 byte order is code point order
        except UnicodeEncodeError:
            return None
    elif isinstance(iceberg_type, (BinaryType, FixedType)) and type(value) is bytes:
        return _KIND_BYTES, value
    if number is None or not _INT64[0] <= number <= _INT64[1]:
        return None
    return _KIND_INT, number


def native_clauses(expr: Any, decoder: ColumnDecoder) -> tuple[tuple[tuple[int, int, int, Any], ...], Any]:
    """Split ``expr`` for the compiled pre-check: (clauses for ``_avro.reject_bounds``, the rest
    of the expression or None). The clauses are the comparisons of its top-level conjunction on
    integer-like, date, timestamp, string and binary columns; the rest (disjunctions, IN, floats,
    other types and literals) keeps the Python ``stats_check``. An entry that either rejects
    cannot match, as both parts are conjoined."""
    from storage.spec.expressions import And, Comparison

    parts = list(expr.children) if isinstance(expr, And) else [expr]
    clauses: list[tuple[int, int, int, Any]] = []
    rest = []
    while parts:
        part = parts.pop(0)
        if isinstance(part, And):
            parts[:0] = part.children
            continue
        found = None
        if isinstance(part, Comparison) and part.op in _OPS and _usable(part.value):
            field_id = decoder.ids.get(part.column)
            if field_id is not None and len(clauses) < 16:
                literal = _native_literal(decoder.types.get(field_id), part.value)
                if literal is not None:
                    found = (field_id, literal[0], _OPS[part.op], literal[1])
        if found is not None:
            clauses.append(found)
        else:
            rest.append(part)
    remainder = None if not rest else rest[0] if len(rest) == 1 else And(*rest)
    return tuple(clauses), remainder
