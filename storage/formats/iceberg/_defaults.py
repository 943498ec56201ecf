"""Iceberg column defaults (spec v3 "Default values") as Arrow values.

A column's ``initial-default`` is the value of the column in every row written before the column
existed: a data file that lacks the field id reads it (``missing_column``), for top-level columns
and for struct children alike, and null only when the field has no default. ``write-default`` is
what writers put in when they omit the column; a reader never needs it, but it is kept on the
field for display.

Defaults travel with the table schema: ``with_defaults`` stores each field's default, in the
JSON single-value serialisation of the spec appendix, in the Arrow field metadata under
``iceberg.initial-default`` / ``iceberg.write-default``, and ``missing_column`` converts it to
the column's Arrow type exactly (a value the type cannot hold is a ``CorruptTable``).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, cast

import pyarrow as pa

from storage.spec.errors import CorruptTable

INITIAL_DEFAULT_KEY = b"iceberg.initial-default"
WRITE_DEFAULT_KEY = b"iceberg.write-default"
FIELD_ID_KEY = b"PARQUET:field_id"

_FRACTION = re.compile(r"^(?P<base>[^.]+?)(?:\.(?P<fraction>\d{1,9}))?(?P<zone>Z|[+-]\d{2}:\d{2})?$")


def _field_id(field: pa.Field) -> int | None:
    metadata = field.metadata
    if metadata and FIELD_ID_KEY in metadata:
        return int(metadata[FIELD_ID_KEY])
    return None


def _split_fraction(text: str) -> tuple[str, int, str | None]:
    """(text without fraction and zone, fraction in nanoseconds, zone) of an ISO time/timestamp."""
    match = _FRACTION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not an ISO-8601 value")
    fraction = match.group("fraction") or ""
    return match.group("base"), int(fraction.ljust(9, "0")) if fraction else 0, match.group("zone")


def _timestamp_nanos(text: str, with_zone: bool) -> int:
    base, nanos, zone = _split_fraction(text)
    moment = dt.datetime.fromisoformat(base)
    if zone is not None:
        moment = moment.replace(
            tzinfo=dt.UTC if zone == "Z" else dt.datetime.fromisoformat(f"{base}{zone}").tzinfo
        )
    elif with_zone:
        raise ValueError(f"timestamptz default {text!r} has no zone offset")
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    delta = moment - dt.datetime(1970, 1, 1)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + nanos


def json_to_arrow(value: Any, arrow_type: pa.DataType) -> pa.Scalar:
    """A default in the JSON single-value serialisation as a scalar of ``arrow_type``, exactly."""
    if value is None:
        return pa.scalar(None, type=arrow_type)
    if isinstance(arrow_type, pa.BaseExtensionType):  # arrow.uuid over fixed_size_binary(16)
        raw = uuid.UUID(value).bytes if isinstance(value, str) else value
        return pa.ExtensionScalar.from_storage(arrow_type, pa.scalar(raw, type=arrow_type.storage_type))
    if pa.types.is_null(arrow_type):
        return pa.scalar(None, type=arrow_type)
    if pa.types.is_boolean(arrow_type):
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not a boolean")
        return pa.scalar(value, type=arrow_type)
    if pa.types.is_integer(arrow_type):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{value!r} is not an integer")
        return pa.scalar(value, type=arrow_type)
    if pa.types.is_floating(arrow_type):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{value!r} is not a number")
        return pa.scalar(float(value), type=arrow_type)
    if pa.types.is_decimal(arrow_type):
        number = Decimal(str(value))
        exact = number.quantize(Decimal(1).scaleb(-arrow_type.scale))
        if exact != number:
            raise ValueError(f"{value!r} does not fit scale {arrow_type.scale}")
        return pa.scalar(exact, type=arrow_type)
    if pa.types.is_date(arrow_type):
        return pa.scalar(dt.date.fromisoformat(value), type=arrow_type)
    if pa.types.is_time(arrow_type):
        base, nanos, _ = _split_fraction(value)
        clock = dt.time.fromisoformat(base)
        total = ((clock.hour * 60 + clock.minute) * 60 + clock.second) * 1_000_000_000 + nanos
        return pa.scalar(_in_unit(total, arrow_type.unit, value), type=arrow_type)
    if pa.types.is_timestamp(arrow_type):
        total = _timestamp_nanos(value, arrow_type.tz is not None)
        return pa.scalar(_in_unit(total, arrow_type.unit, value), type=arrow_type)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a string")
        return pa.scalar(value, type=arrow_type)
    if (
        pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
        or pa.types.is_fixed_size_binary(arrow_type)
    ):
        return pa.scalar(bytes.fromhex(value), type=arrow_type)
    if pa.types.is_struct(arrow_type):
        if not isinstance(value, Mapping):
            raise ValueError(f"{value!r} is not a struct default")
        # the spec: a struct's default is an object; its fields' values are their own defaults
        children = {f.name: _child_default(f, value) for f in arrow_type}
        return pa.scalar(children, type=arrow_type)
    raise ValueError(f"defaults of type {arrow_type} are not supported")


def _child_default(field: pa.Field, parent: Mapping[str, Any]) -> Any:
    wanted = _field_id(field)
    if wanted is not None and str(wanted) in parent:
        return json_to_arrow(parent[str(wanted)], field.type).as_py()
    own = default_of(field)
    return None if own is None else json_to_arrow(own, field.type).as_py()


def _in_unit(nanos: int, unit: str, text: str) -> int:
    divisor = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}[unit]
    if nanos % divisor:
        raise ValueError(f"{text!r} is finer than the column's unit ({unit})")
    return nanos // divisor


def default_of(field: pa.Field) -> Any:
    """The field's initial default (JSON value) or None."""
    metadata = field.metadata
    if not metadata or INITIAL_DEFAULT_KEY not in metadata:
        return None
    return json.loads(metadata[INITIAL_DEFAULT_KEY])


def missing_column(target: pa.Field, count: int) -> pa.Array:
    """``count`` rows of a column a data file lacks: its initial default, else nulls."""
    value = default_of(target)
    if value is None:
        return pa.nulls(count, target.type)
    try:
        scalar = json_to_arrow(value, target.type)
    except (TypeError, ValueError, ArithmeticError, InvalidOperation, pa.ArrowException) as exc:
        raise CorruptTable(
            f"column {target.name} has an initial-default {value!r} that is not a {target.type}: {exc}"
        ) from None
    return pa.repeat(scalar, count)


def has_defaults(schema: pa.Schema | pa.StructType) -> bool:
    """Whether any field (struct children included) has an initial default."""
    for field in schema:
        if field.metadata and INITIAL_DEFAULT_KEY in field.metadata:
            return True
        if pa.types.is_struct(field.type) and has_defaults(field.type):
            return True
    return False


def with_defaults(
    arrow_schema: pa.Schema, iceberg_schema: Any, raw: Mapping[int, dict[str, Any]]
) -> pa.Schema:
    """``arrow_schema`` with the defaults of ``iceberg_schema``'s fields in the field metadata.

    ``raw`` holds the defaults read from the metadata JSON (field id -> {"initial-default": ..});
    fields not in it use pyiceberg's parsed ``initial_default``/``write_default``."""
    from pyiceberg.schema import index_by_id

    fields_by_id = index_by_id(iceberg_schema)

    def defaults(field_id: int) -> dict[bytes, bytes]:
        found: dict[bytes, bytes] = {}
        if field_id in raw:
            for key, meta_key in (
                ("initial-default", INITIAL_DEFAULT_KEY),
                ("write-default", WRITE_DEFAULT_KEY),
            ):
                if raw[field_id].get(key) is not None:
                    found[meta_key] = json.dumps(raw[field_id][key]).encode()
            return found
        nested = fields_by_id.get(field_id)
        if nested is None:
            return found
        from pyiceberg.conversions import to_json

        for value, meta_key in (
            (getattr(nested, "initial_default", None), INITIAL_DEFAULT_KEY),
            (getattr(nested, "write_default", None), WRITE_DEFAULT_KEY),
        ):
            if value is not None:
                try:
                    found[meta_key] = json.dumps(to_json(cast(Any, nested.field_type), value)).encode()
                except (TypeError, ValueError):
                    continue
        return found

    def convert(field: pa.Field) -> pa.Field:
        field_type = field.type
        changed = False
        if pa.types.is_struct(field_type):
            children = [convert(child) for child in field_type]
            # (struct type equality ignores the children's metadata: compare them one by one)
            changed = any(c is not o for c, o in zip(children, field_type, strict=True))
            field_type = pa.struct(children)
        wanted = _field_id(field)
        extra = defaults(wanted) if wanted is not None else {}
        if not changed and not extra:
            return field
        return pa.field(field.name, field_type, field.nullable, {**(field.metadata or {}), **extra})

    return pa.schema([convert(f) for f in arrow_schema], metadata=arrow_schema.metadata)
