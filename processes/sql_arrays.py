"""Large array parameters as one text literal each: psycopg quotes a Python list of 100,000 ids
element by element in Python (about a second on a loaded machine); ``",".join`` does it in C.
Use with a cast in the SQL (``%s::bigint[]``); text goes as a JSON array (any character is safe
there) read with ``jsonb_array_elements_text``."""

from __future__ import annotations

import json
from collections.abc import Iterable


def int_array(values: Iterable[int]) -> str:
    """``{1,2,3}``: a ``bigint[]`` literal (the values must be ints)."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


def float_array(values: Iterable[float]) -> str:
    """A ``float8[]`` literal (``repr`` keeps every digit)."""
    return "{" + ",".join(map(repr, map(float, values))) + "}"


def json_array(values: Iterable[object]) -> str:
    """A JSON array (for ``jsonb_array_elements_text(%s::jsonb)`` or ``jsonb_to_recordset``)."""
    return json.dumps(list(values), default=str)


__all__ = ["float_array", "int_array", "json_array"]
