"""Binding an expression to a table schema: resolve column names, coerce literals to column types.

Both the parser (which knows where each token sits, for error positions) and ``bind_filter`` (for
expressions built in code) go through ``Columns.resolve`` and ``coerce_literal``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from storage.spec.errors import FilterError
from storage.spec.expressions.text import sql_literal

UTC = dt.UTC


@dataclass(frozen=True, slots=True)
class Column:
    name: str  # as the schema spells it; nested fields dotted
    type: pa.DataType


class Columns:
    """The filterable (primitive) columns of a schema, nested struct fields by dotted path."""

    def __init__(self, schema: pa.Schema) -> None:
        self.by_name: dict[str, Column] = {}
        self.containers: dict[str, pa.DataType] = {}
        for field in schema:
            self._add(field.name, field.type)
        self._by_lower: dict[str, list[Column]] = {}
        for column in self.by_name.values():
            self._by_lower.setdefault(column.name.lower(), []).append(column)

    def _add(self, name: str, type_: pa.DataType) -> None:
        if pa.types.is_struct(type_):
            self.containers[name] = type_
            for i in range(type_.num_fields):
                child = type_.field(i)
                self._add(f"{name}.{child.name}", child.type)
        elif pa.types.is_dictionary(type_):
            self.by_name[name] = Column(name, type_.value_type)
        elif _is_nested(type_):
            self.containers[name] = type_
        else:
            self.by_name[name] = Column(name, type_)

    def resolve(self, name: str, *, position: int | None = None, token: str | None = None) -> Column:
        """The column called ``name``; an exact match first, then a unique case-insensitive one
        (Spark and the console treat names case-insensitively, Iceberg by default does not)."""
        column = self.by_name.get(name)
        if column is not None:
            return column
        candidates = self._by_lower.get(name.lower(), [])
        if len(candidates) == 1:
            return candidates[0]
        shown = token if token is not None else name
        if name in self.containers:
            kind = type_name(self.containers[name])
            raise FilterError(
                f"column {name!r} is {kind}; filters compare primitive columns"
                + (f" such as {', '.join(self._children_of(name)[:5])}" if self._children_of(name) else ""),
                position=position,
                token=shown,
            )
        names = list(self.by_name)
        message = f"unknown column {name!r}"
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6) or difflib.get_close_matches(
            name.lower(), [n.lower() for n in names], n=3, cutoff=0.6
        )
        if close:
            message += f"; did you mean {' or '.join(repr(c) for c in close)}?"
        listed = ", ".join(names[:30]) + (f", … ({len(names) - 30} more)" if len(names) > 30 else "")
        message += f"; columns are: {listed}"
        raise FilterError(message, position=position, token=shown)

    def _children_of(self, name: str) -> list[str]:
        return [n for n in self.by_name if n.startswith(name + ".")]


def _is_nested(type_: pa.DataType) -> bool:
    return (
        pa.types.is_list(type_)
        or pa.types.is_large_list(type_)
        or pa.types.is_fixed_size_list(type_)
        or pa.types.is_map(type_)
        or pa.types.is_union(type_)
        or (hasattr(pa.types, "is_list_view") and pa.types.is_list_view(type_))
    )


def type_name(type_: pa.DataType) -> str:
    """The name people know the type by (Iceberg/Spark words, not Arrow's)."""
    simple = {
        pa.int8(): "byte",
        pa.int16(): "short",
        pa.int32(): "int",
        pa.int64(): "long",
        pa.uint8(): "unsigned byte",
        pa.uint16(): "unsigned short",
        pa.uint32(): "unsigned int",
        pa.uint64(): "unsigned long",
        pa.float16(): "half float",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.bool_(): "boolean",
        pa.date32(): "date",
        pa.date64(): "date",
    }
    if type_ in simple:
        return simple[type_]
    if is_string(type_):
        return "string"
    if is_binary(type_):
        return "binary"
    if pa.types.is_timestamp(type_):
        return "timestamptz" if type_.tz is not None else "timestamp"
    if pa.types.is_decimal(type_):
        return f"decimal({type_.precision},{type_.scale})"
    if pa.types.is_time(type_):
        return "time"
    if pa.types.is_struct(type_):
        return "a struct"
    if _is_nested(type_):
        return f"a {str(type_).split('<', 1)[0]}"
    return str(type_)


def literal_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a floating-point number"
    if isinstance(value, decimal.Decimal):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bytes):
        return "binary"
    if isinstance(value, dt.datetime):
        return "a timestamp"
    if isinstance(value, dt.date):
        return "a date"
    if isinstance(value, dt.time):
        return "a time"
    if value is None:
        return "null"
    return type(value).__name__


def is_string(type_: pa.DataType) -> bool:
    return pa.types.is_string(type_) or pa.types.is_large_string(type_) or _is(type_, "is_string_view")


def is_binary(type_: pa.DataType) -> bool:
    return (
        pa.types.is_binary(type_)
        or pa.types.is_large_binary(type_)
        or pa.types.is_fixed_size_binary(type_)
        or _is(type_, "is_binary_view")
    )


def _is(type_: pa.DataType, predicate: str) -> bool:
    check = getattr(pa.types, predicate, None)
    return bool(check and check(type_))


class _Mismatch(Exception):
    pass


def coerce_literal(
    column: Column, value: Any, *, position: int | None = None, token: str | None = None
) -> Any:
    """``value`` converted to ``column``'s type, or FilterError naming both types.

    Widening that loses nothing is accepted: an integer for a float or decimal column, a date or an
    ISO string for a date/timestamp column. A naive timestamp for a timestamptz column is taken as
    UTC; an aware one for a plain timestamp column is converted to UTC and made naive.
    """
    try:
        return _coerce(column.type, value)
    except _Mismatch as exc:
        if token and isinstance(value, int | float | decimal.Decimal) and not isinstance(value, bool):
            shown = token  # as the user wrote it: 1e100, not 1E+100
        else:
            shown = (
                sql_literal(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
            )
        detail = f": {exc}" if str(exc) else ""
        raise FilterError(
            f"column {column.name} is {type_name(column.type)}; {shown} is {literal_kind(value)}{detail}",
            position=position,
            token=token,
        ) from None


def _coerce(type_: pa.DataType, value: Any) -> Any:
    if value is None:
        raise _Mismatch("compare with null using 'is null' or 'is not null'")
    for matches, coerce in _COERCIONS:
        if matches(type_):
            return coerce(type_, value)
    raise _Mismatch(f"columns of type {type_} cannot be filtered")


def _to_bool(type_: pa.DataType, value: Any) -> Any:
    if isinstance(value, bool):
        return value
    raise _Mismatch()


def _to_int(type_: pa.DataType, value: Any) -> Any:
    if isinstance(value, bool):
        raise _Mismatch()
    if isinstance(value, int):
        return value
    if isinstance(value, decimal.Decimal) and value.is_finite() and value.adjusted() > 40:
        raise _Mismatch("out of range")  # 1e999999999 would build a billion-digit integer
    if isinstance(value, decimal.Decimal | float) and _finite(value) and value == int(value):
        return int(value)
    raise _Mismatch()


def _to_float(type_: pa.DataType, value: Any) -> Any:
    if isinstance(value, bool):
        raise _Mismatch()
    if isinstance(value, int | float | decimal.Decimal):
        return float(value)
    raise _Mismatch()


def _to_decimal(type_: pa.DataType, value: Any) -> Any:
    if isinstance(value, bool):
        raise _Mismatch()
    if isinstance(value, int | decimal.Decimal) or (isinstance(value, float) and math.isfinite(value)):
        number = decimal.Decimal(value) if not isinstance(value, float) else decimal.Decimal(repr(value))
        if not number.is_finite():
            raise _Mismatch()
        # The column's scale exactly: Iceberg refuses other scales, and bucket hashes depend on it.
        try:
            scaled = number.quantize(
                decimal.Decimal(1).scaleb(-type_.scale), context=decimal.Context(prec=80)
            )
        except decimal.InvalidOperation:
            raise _Mismatch(f"out of range for {type_}") from None
        if scaled != number:
            raise _Mismatch(f"more than {type_.scale} decimal places")
        return scaled
    raise _Mismatch()


def _to_string(type_: pa.DataType, value: Any) -> Any:
    if isinstance(value, str):
        return value
    raise _Mismatch()


def _to_binary(type_: pa.DataType, value: Any) -> Any:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise _Mismatch()


def _to_date(type_: pa.DataType, value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.time() == dt.time(0) and value.tzinfo is None:
            return value.date()
        raise _Mismatch("only a date or a timestamp at midnight")
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            raise _Mismatch("not an ISO date (YYYY-MM-DD)") from None
    raise _Mismatch()


def _to_timestamp(type_: pa.DataType, value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = parse_timestamp(value)
        except ValueError:
            raise _Mismatch("not an ISO timestamp (YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM])") from None
    elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        raise _Mismatch()
    if type_.tz is not None:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value if value.tzinfo is None else value.astimezone(UTC).replace(tzinfo=None)


def _to_time(type_: pa.DataType, value: Any) -> Any:
    if isinstance(value, dt.time):
        return value
    if isinstance(value, str):
        try:
            return dt.time.fromisoformat(value)
        except ValueError:
            raise _Mismatch("not an ISO time (HH:MM:SS)") from None
    raise _Mismatch()


#: (type family test, coercion of a literal to that family), tried in order.
_COERCIONS: tuple[tuple[Callable[[pa.DataType], bool], Callable[[pa.DataType, Any], Any]], ...] = (
    (pa.types.is_boolean, _to_bool),
    (pa.types.is_integer, _to_int),
    (pa.types.is_floating, _to_float),
    (pa.types.is_decimal, _to_decimal),
    (is_string, _to_string),
    (is_binary, _to_binary),
    (pa.types.is_date, _to_date),
    (pa.types.is_timestamp, _to_timestamp),
    (pa.types.is_time, _to_time),
)


def _finite(value: float | decimal.Decimal) -> bool:
    return value.is_finite() if isinstance(value, decimal.Decimal) else math.isfinite(value)


def parse_timestamp(text: str) -> dt.datetime:
    """An ISO-8601 timestamp; with an offset it becomes aware UTC, without it stays naive."""
    value = dt.datetime.fromisoformat(text.strip())
    return value.astimezone(UTC) if value.tzinfo is not None else value


def coerce_prefix(
    column: Column, value: Any, *, position: int | None = None, token: str | None = None
) -> Any:
    """The prefix of a ``starts with``: only string and binary columns have one."""
    if is_string(column.type) and isinstance(value, str):
        return value
    if is_binary(column.type) and isinstance(value, str | bytes):
        return value.encode("utf-8") if isinstance(value, str) else value
    raise FilterError(
        f"column {column.name} is {type_name(column.type)}; 'starts with' needs a string column and a string prefix,"
        f" got {sql_literal(value) if value is not None else 'null'}",
        position=position,
        token=token,
    )
