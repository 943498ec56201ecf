"""Paimon's cast rules for a file written before a column's type changed.

pypaimon reads such a file by id and casts its column with pyarrow's unsafe cast, which is not
Paimon's rule for strings: Paimon (``BinaryStringUtils``) reads ``t``, ``true``, ``y``, ``yes``,
``1`` (any case) as true and ``f``, ``false``, ``n``, ``no``, ``0`` as false, and an integer from
an optional sign, digits and a fraction it truncates (``+7`` is 7, ``12.9`` is 12), refusing
anything else (spaces included) and values out of the type's range. pyarrow refuses ``Yes`` and
``12.9`` with a raw ``ArrowInvalid``. ``install`` puts these rules in front of pypaimon's cast (the
one function its readers call for a changed type); every other cast is pypaimon's own. A value
Paimon refuses is refused here as ``CorruptTable`` naming it, as Paimon's reader fails on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from storage.spec.errors import CorruptTable

_TRUE = ("t", "true", "y", "yes", "1")
_FALSE = ("f", "false", "n", "no", "0")
_INTEGER = re.compile(r"[+-]?[0-9]*(\.[0-9]*)?")
_PAIMON_NAMES = {8: "TINYINT", 16: "SMALLINT", 32: "INT", 64: "BIGINT"}


def _is_string(data_type: pa.DataType) -> bool:
    return pa.types.is_string(data_type) or pa.types.is_large_string(data_type)


def _refuse(value: str, target: str) -> CorruptTable:
    return CorruptTable(
        f"cannot cast {value!r} as {target}: a Paimon data file written before the column's type"
        " changed holds it, and Paimon's cast rules refuse it (Paimon's own reader fails on it too)"
    )


def string_to_boolean(array: pa.Array) -> pa.Array:
    lowered = pc.utf8_lower(array)
    true, false = pc.is_in(lowered, pa.array(_TRUE)), pc.is_in(lowered, pa.array(_FALSE))
    bad = pc.and_(pc.is_valid(array), pc.invert(pc.or_(true, false)))
    if pc.any(bad).as_py():
        raise _refuse(array.filter(bad)[0].as_py(), "BOOLEAN")
    return pc.if_else(pc.is_valid(array), true, pa.scalar(None, pa.bool_()))


def _integer(value: str, target: pa.DataType) -> int:
    name = _PAIMON_NAMES[target.bit_width]
    if value in ("", "+", "-") or not _INTEGER.fullmatch(value):
        raise _refuse(value, name)
    whole = value.split(".", 1)[0].lstrip("+")
    number = int(whole) if whole not in ("", "-") else 0
    limit = 1 << (target.bit_width - 1)
    if not -limit <= number < limit:
        raise _refuse(value, name)
    return number


def string_to_integer(array: pa.Array, target: pa.DataType) -> pa.Array:
    values = [None if v is None else _integer(v, target) for v in array.to_pylist()]
    return pa.array(values, type=target)


def paimon_cast(array: pa.Array, target: pa.DataType, fallback: Callable[[Any, Any], Any]) -> pa.Array:
    """``array`` cast to ``target`` by Paimon's rule where it differs from pyarrow's, else ``fallback``."""
    if _is_string(array.type) and pa.types.is_boolean(target):
        return string_to_boolean(array)
    if _is_string(array.type) and pa.types.is_signed_integer(target):
        return string_to_integer(array, target)
    return fallback(array, target)


def install() -> None:
    """Route pypaimon's schema-evolution cast through ``paimon_cast`` (once; idempotent)."""
    from pypaimon.read.reader import data_file_batch_reader, nested_leaf_batch_reader

    for module in (data_file_batch_reader, nested_leaf_batch_reader):
        original = module.cast_array_for_schema_evolution
        if getattr(original, "lakewarden", False):
            continue

        def cast(array: Any, target_type: Any, original: Callable[[Any, Any], Any] = original) -> Any:
            return paimon_cast(array, target_type, original)

        cast.lakewarden = True  # type: ignore[attr-defined]
        module.cast_array_for_schema_evolution = cast
