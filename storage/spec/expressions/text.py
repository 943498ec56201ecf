"""Filter text, the words of its syntax and literals and column names written in it.

Expressions are written as text by ``tree.to_sql``; ``parser.parse_filter`` reads the text back.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from typing import Any

# Words that cannot be bare column names (quote them: "in").
RESERVED = frozenset({"and", "or", "not", "in", "is", "null", "true", "false", "like", "between"})
# Words that start a typed literal when a string follows; otherwise they may name a column.
TYPED_LITERALS = frozenset({"date", "timestamp", "time", "double"})
OPERATOR_WORDS = frozenset({"starts", "with"})

_BARE_NAME = re.compile(r"[^\W\d]\w*")
_QUOTED_WORDS = RESERVED | TYPED_LITERALS | OPERATOR_WORDS


def sql_column(name: str) -> str:
    parts = name.split(".")
    return ".".join(
        part
        if _BARE_NAME.fullmatch(part) and part.lower() not in _QUOTED_WORDS
        else '"' + part.replace('"', '""') + '"'
        for part in parts
    )


def sql_literal(value: Any) -> str:
    """``value`` as filter text (the parser's literal syntax)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "double 'nan'"
        if math.isinf(value):
            return "double 'inf'" if value > 0 else "double '-inf'"
        return repr(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise ValueError(f"decimal {value} has no filter syntax")
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return f"x'{value.hex()}'"
    if isinstance(value, dt.datetime):
        return f"timestamp '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"date '{value.isoformat()}'"
    if isinstance(value, dt.time):
        return f"time '{value.isoformat()}'"
    raise TypeError(f"no filter syntax for {type(value).__name__} value {value!r}")
