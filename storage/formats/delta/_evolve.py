"""Delta type widening and variant columns: what the reader needs to know of them.

Type widening (table features ``typeWidening-preview`` and ``typeWidening``): a column's type may
have been widened after some files were written; the field's metadata lists the changes under
``delta.typeChanges`` (``fromType``, ``toType``, a ``fieldPath`` for map keys/values and array
elements, ``tableVersion`` in the preview). The allowed changes are byte -> short -> int -> long,
float -> double, byte/short/int -> double, byte/short/int/long -> decimal with enough precision,
decimal(p, s) -> decimal(p + k1, s + k2) with k1 >= k2 >= 0, and date -> timestamp_ntz. Files
keep the type they were written with: the reader casts their values to the table's type, every
one of those casts exact (``widen``). Statistics of a file written before a change are in the
old type too: integers, decimals and dates bound the widened values as they are, but a ``float``
statistic printed in its shortest form ("3.4") is not the double the widened value reads as
(3.4000000953674316), so bounds of a double column that was a float are loosened by a float's
rounding error (``loosen_float_bounds``).

Variant (``variantType-preview``, ``variantType``): a variant column is stored in parquet as a
group of two binaries, ``value`` and ``metadata`` (the variant binary encoding); it reads as the
Arrow struct ``struct<value: binary, metadata: binary>`` holding those bytes unchanged (Spark's
``VariantVal(value, metadata)`` decodes them). A shredded variant (the ``variantShredding``
features: a ``typed_value`` beside them) cannot be rebuilt into that form here: the table still
opens, lists and plans, and reading such a column raises ``UnsupportedFeature`` naming it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from storage.spec.errors import UnsupportedFeature
from storage.spec.parquet import cast_column

TYPE_CHANGES = "delta.typeChanges"
VARIANT_FIELDS = ("value", "metadata")
SHREDDED_FIELD = "typed_value"
VARIANT_ARROW = pa.struct([pa.field(name, pa.binary(), nullable=False) for name in VARIANT_FIELDS])

# Reader features this reader implements.
TYPE_WIDENING_FEATURES = frozenset({"typeWidening-preview", "typeWidening"})
VARIANT_FEATURES = frozenset({"variantType-preview", "variantType"})
# Shredded variants: the table opens and is browsed; reading a shredded column is refused then.
READ_TIME_FEATURES = frozenset({"variantShredding-preview", "variantShredding"})

# A float holds 24 significant bits: any decimal text that rounds to it lies within this
# relative distance of the double the float widens to.
_FLOAT_RELATIVE_ERROR = 2.0**-23
_FLOAT_SMALLEST = 1.5e-45  # the smallest float subnormal


def has_type_changes(fields: Any) -> bool:
    """Whether any field (at any nesting level) of a Delta schema records a type change."""
    return any(True for _ in _fields_with_changes(fields))


def float_widened_columns(fields: Any, prefix: str = "") -> set[str]:
    """Dotted names of the struct-reachable leaf columns that were ``float`` before a change."""
    found: set[str] = set()
    for field in fields:
        name = f"{prefix}{field['name']}"
        type_ = field["type"]
        if isinstance(type_, dict) and type_.get("type") == "struct":
            found |= float_widened_columns(type_["fields"], f"{name}.")
            continue
        changes = (field.get("metadata") or {}).get(TYPE_CHANGES) or ()
        if any(c.get("fromType") == "float" and not c.get("fieldPath") for c in changes):
            found.add(name)
    return found


def _fields_with_changes(fields: Any) -> Iterator[Mapping[str, Any]]:
    for field in fields:
        if (field.get("metadata") or {}).get(TYPE_CHANGES):
            yield field
        yield from _fields_with_changes(_child_fields(field["type"]))


def _child_fields(type_: Any) -> list[Mapping[str, Any]]:
    """The struct fields nested in a Delta type (through arrays and maps)."""
    if not isinstance(type_, dict):
        return []
    kind = type_.get("type")
    if kind == "struct":
        return list(type_["fields"])
    if kind == "array":
        return _child_fields(type_["elementType"])
    if kind == "map":
        return _child_fields(type_["keyType"]) + _child_fields(type_["valueType"])
    return []


def has_variant(type_: Any) -> bool:
    """Whether a Delta type is, or nests, a variant."""
    if type_ == "variant":
        return True
    if not isinstance(type_, dict):
        return False
    kind = type_.get("type")
    if kind == "struct":
        return any(has_variant(f["type"]) for f in type_["fields"])
    if kind == "array":
        return has_variant(type_["elementType"])
    if kind == "map":
        return has_variant(type_["keyType"]) or has_variant(type_["valueType"])
    return False


def loosen_float_bounds(lower: dict[str, Any] | None, upper: dict[str, Any] | None, names: set[str]) -> None:
    """Widen the bounds of double columns that were floats, in place (see the module docstring)."""
    for name in names:
        if lower is not None and isinstance(lower.get(name), float):
            value = lower[name]
            lower[name] = value - abs(value) * _FLOAT_RELATIVE_ERROR - _FLOAT_SMALLEST
        if upper is not None and isinstance(upper.get(name), float):
            value = upper[name]
            upper[name] = value + abs(value) * _FLOAT_RELATIVE_ERROR + _FLOAT_SMALLEST


# --- reading ----------------------------------------------------------------------------------------


def check_variant_file_type(file_type: pa.DataType, delta_type: Any, column: str, where: str) -> None:
    """Refuse a file column whose variant values are shredded (or not the value/metadata pair),
    naming the column: read as the unshredded pair they would come back wrong (null)."""
    if delta_type == "variant":
        file_type = _storage(file_type)
        names = {f.name for f in file_type} if pa.types.is_struct(file_type) else set()
        if SHREDDED_FIELD in names or not set(VARIANT_FIELDS) <= names:
            what = "shredded variant values" if SHREDDED_FIELD in names else f"a {file_type} column"
            raise UnsupportedFeature(
                f"column {column!r} of {where} holds {what}, which this reader cannot read as the "
                "variant struct<value, metadata>; read the other columns"
            )
        return
    if not isinstance(delta_type, dict) or not has_variant(delta_type):
        return
    file_type = _storage(file_type)
    kind = delta_type.get("type")
    if kind == "struct" and pa.types.is_struct(file_type):
        by_name = {f.name: f.type for f in file_type}
        for field in delta_type["fields"]:
            physical = (field.get("metadata") or {}).get("delta.columnMapping.physicalName", field["name"])
            found = by_name.get(physical, by_name.get(field["name"]))
            if found is not None:
                check_variant_file_type(found, field["type"], f"{column}.{field['name']}", where)
    elif kind == "array" and hasattr(file_type, "value_type"):
        check_variant_file_type(file_type.value_type, delta_type["elementType"], f"{column}.element", where)
    elif kind == "map" and pa.types.is_map(file_type):
        check_variant_file_type(file_type.item_type, delta_type["valueType"], f"{column}.value", where)


def _storage(type_: pa.DataType) -> pa.DataType:
    return type_.storage_type if isinstance(type_, pa.BaseExtensionType) else type_


def widen(array: pa.Array, target: pa.DataType, column: str, where: str) -> pa.Array:
    """``array`` (a file's column) as the table's ``target`` type, exactly: integers, floats,
    decimals (rescaled) and dates (midnight) widen without loss; a value that would not fit is
    ``CorruptTable``, never a silently changed value. The one loss accepted is nanosecond
    timestamps cut to microseconds (``storage.spec.parquet.cast_column``; INT96 timestamps are
    read at microseconds to begin with, so 9999-12-31 stays 9999-12-31)."""
    if isinstance(array.type, pa.BaseExtensionType):
        array = array.storage
    return cast_column(array, target, what=f"column {column!r} of {where}")


__all__ = [
    "READ_TIME_FEATURES",
    "TYPE_WIDENING_FEATURES",
    "VARIANT_ARROW",
    "VARIANT_FEATURES",
    "check_variant_file_type",
    "float_widened_columns",
    "has_type_changes",
    "has_variant",
    "loosen_float_bounds",
    "widen",
]
