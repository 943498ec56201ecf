"""Delta schemas as Arrow schemas, column mapping, and Delta's text encodings of values.

A Delta schema is JSON (``metaData.schemaString``); a ``void`` column (Spark's NullType, which
writers leave out of the files) is Arrow's null type and reads as all nulls, as Delta Kernel
reads it. Under column mapping every field also has a physical name (and id) in its metadata;
files, partition values and statistics use the physical names, readers show the logical ones.
``ColumnMapping`` translates between the two at every nesting level.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, overload

import pyarrow as pa

from storage.formats.delta._evolve import (
    VARIANT_ARROW,
    float_widened_columns,
    has_type_changes,
    loosen_float_bounds,
)

PHYSICAL_NAME = "delta.columnMapping.physicalName"
COLUMN_ID = "delta.columnMapping.id"
FIELD_ID_KEY = b"PARQUET:field_id"
# Spark's NullType: writers leave such columns out of the files, readers give all nulls (Delta
# Kernel does); the Arrow type is null.
VOID = "void"

_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    # Delta timestamps are instants in microseconds; timestamp_ntz is wall-clock time.
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)")
# Spark's data skipping keeps the first 32 characters of strings: a maximum that long may be a
# truncated prefix, smaller than the real maximum.
_STRING_STATS_PREFIX = 32
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class SchemaError(ValueError):
    """A Delta schema this reader cannot represent in Arrow."""


def arrow_type(delta_type: Any, *, physical: bool = False) -> pa.DataType:
    """Arrow type of a Delta type (a name like ``"long"`` or a nested type object); ``physical``
    names nested fields as files do (column mapping)."""
    if isinstance(delta_type, str):
        if delta_type in _PRIMITIVES:
            return _PRIMITIVES[delta_type]
        if delta_type == "variant":
            return VARIANT_ARROW
        if delta_type == VOID:
            return pa.null()
        match = _DECIMAL.fullmatch(delta_type)
        if match:
            return pa.decimal128(int(match.group(1)), int(match.group(2)))
        raise SchemaError(f"unsupported Delta type {delta_type!r}")
    kind = delta_type.get("type")
    if kind == "struct":
        return pa.struct([arrow_field(f, physical=physical) for f in delta_type["fields"]])
    if kind == "array":
        element_type = arrow_type(delta_type["elementType"], physical=physical)
        return pa.list_(pa.field("element", element_type, delta_type.get("containsNull", True)))
    if kind == "map":
        return pa.map_(
            pa.field("key", arrow_type(delta_type["keyType"], physical=physical), nullable=False),
            pa.field(
                "value",
                arrow_type(delta_type["valueType"], physical=physical),
                delta_type.get("valueContainsNull", True),
            ),
        )
    raise SchemaError(f"unsupported Delta type {json.dumps(delta_type)[:200]}")


def arrow_field(delta_field: Mapping[str, Any], *, physical: bool = False) -> pa.Field:
    """Arrow field of a Delta field; ``physical`` names it (and its children) as files do."""
    metadata = delta_field.get("metadata") or {}
    name = metadata.get(PHYSICAL_NAME, delta_field["name"]) if physical else delta_field["name"]
    type_ = arrow_type(delta_field["type"], physical=physical)
    field_metadata = {k: str(v) for k, v in metadata.items() if k in (PHYSICAL_NAME, COLUMN_ID)}
    if COLUMN_ID in metadata:
        field_metadata[FIELD_ID_KEY.decode()] = str(metadata[COLUMN_ID])
    return pa.field(name, type_, delta_field.get("nullable", True), metadata=field_metadata or None)


def column_mapping_supported(protocol: Mapping[str, Any]) -> bool:
    """Whether the protocol supports column mapping (PROTOCOL.md "Column Mapping": reader version 2,
    or 3 naming the ``columnMapping`` feature; writer version 5 or 6, or 7 naming it); only then is
    ``delta.columnMapping.mode`` honoured."""
    reader, writer = int(protocol.get("minReaderVersion", 1)), int(protocol.get("minWriterVersion", 1))
    reads = reader == 2 or (reader >= 3 and "columnMapping" in (protocol.get("readerFeatures") or ()))
    writes = writer in (5, 6) or (writer >= 7 and "columnMapping" in (protocol.get("writerFeatures") or ()))
    return reads and writes


@dataclass(frozen=True)
class DeltaSchema:
    """One version's schema: logical Arrow schema, physical names, partition columns."""

    fields: tuple[Mapping[str, Any], ...]  # the Delta JSON fields, top level
    arrow: pa.Schema  # logical names
    partition_columns: tuple[str, ...]  # logical names
    mapping_mode: str  # none, name or id
    type_widened: bool = False  # some field records a type change (files may hold older types)
    float_widened: frozenset[str] = frozenset()  # dotted names of double columns that were floats

    @classmethod
    def from_metadata(
        cls, metadata: Mapping[str, Any], protocol: Mapping[str, Any] | None = None
    ) -> DeltaSchema:
        """The schema of a metadata action. ``delta.columnMapping.mode`` is honoured only when
        ``protocol`` supports column mapping (deltalake writes the mode on tables whose protocol
        lacks the feature, with files under logical names: mapping them would read nulls)."""
        try:
            fields = tuple(json.loads(metadata["schemaString"])["fields"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"the schemaString of the table metadata is not a Delta schema: {exc}") from exc
        arrow = pa.schema([arrow_field(f) for f in fields])
        mode = (metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none") or "none"
        if protocol is not None and not column_mapping_supported(protocol):
            mode = "none"
        return cls(
            fields,
            arrow,
            tuple(metadata.get("partitionColumns") or ()),
            mode.lower(),
            type_widened=has_type_changes(fields),
            float_widened=frozenset(float_widened_columns(fields)),
        )

    @property
    def mapped(self) -> bool:
        return self.mapping_mode in ("name", "id")

    def physical_field(self, name: str) -> pa.Field:
        """The Arrow field as a data file names it (physical names at every level)."""
        for field in self.fields:
            if field["name"] == name:
                return arrow_field(field, physical=self.mapped)
        raise KeyError(name)

    def delta_type(self, name: str) -> Any:
        """The Delta type (JSON form) of a top-level column."""
        for field in self.fields:
            if field["name"] == name:
                return field["type"]
        raise KeyError(name)

    def physical_name(self, name: str) -> str:
        for field in self.fields:
            if field["name"] == name:
                return _physical(field) if self.mapped else name
        raise KeyError(name)

    def field_id(self, name: str) -> int | None:
        for field in self.fields:
            if field["name"] == name:
                value = (field.get("metadata") or {}).get(COLUMN_ID)
                return int(value) if value is not None else None
        return None

    def logical_partition_keys(self) -> dict[str, str]:
        """Physical partition key -> logical column name."""
        if not self.mapped:
            return {name: name for name in self.partition_columns}
        return {self.physical_name(name): name for name in self.partition_columns}

    def stats_columns(self) -> Iterator[tuple[tuple[str, ...], str, pa.DataType]]:
        """Every leaf column that can carry min/max statistics: (physical path, logical dotted
        name, type). Structs are walked; arrays and maps carry none."""
        yield from _leaves(self.fields, (), "", mapped=self.mapped)


def _physical(field: Mapping[str, Any]) -> str:
    return (field.get("metadata") or {}).get(PHYSICAL_NAME, field["name"])


def _leaves(fields, path, prefix, *, mapped):
    for field in fields:
        key = _physical(field) if mapped else field["name"]
        name = f"{prefix}{field['name']}"
        type_ = field["type"]
        if isinstance(type_, dict) and type_.get("type") == "struct":
            yield from _leaves(type_["fields"], (*path, key), f"{name}.", mapped=mapped)
        elif isinstance(type_, str) and type_ not in ("variant", VOID):  # these carry no min/max
            yield (*path, key), name, arrow_type(type_)


# --- values -------------------------------------------------------------------------------------


def parse_partition_value(text: str | None, type_: pa.DataType) -> Any:
    """A partition value as Delta serialises it (a string; null or "" for null) in Python."""
    if text is None or text == "":
        return None
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return text
    if pa.types.is_integer(type_):
        return int(text)
    if pa.types.is_boolean(type_):
        return text.strip().lower() == "true"
    if pa.types.is_floating(type_):
        return float(text)
    if pa.types.is_decimal(type_):
        return decimal.Decimal(text)
    if pa.types.is_date(type_):
        return dt.date.fromisoformat(text)
    if pa.types.is_timestamp(type_):
        return _parse_timestamp(text, aware=type_.tz is not None)
    if pa.types.is_binary(type_):
        # Binary partition values are the bytes as escaped characters, one per byte.
        try:
            return text.encode("latin-1")
        except UnicodeEncodeError:
            return text.encode("utf-8")
    raise ValueError(f"unsupported partition column type {type_}")


def _parse_timestamp(text: str, *, aware: bool) -> dt.datetime:
    # Delta writes "2021-09-08 11:11:11[.ffffff]" (UTC for timestamp) or ISO 8601 with an offset.
    value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if aware:
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
    return (
        value.replace(tzinfo=None) if value.tzinfo is None else value.astimezone(dt.UTC).replace(tzinfo=None)
    )


class _Unknown(Exception):
    """A statistic this reader cannot interpret: treated as absent (might match)."""


def parse_stat(value: Any, type_: pa.DataType, *, upper: bool) -> Any:
    """A min/max statistic from the add action's stats JSON (parsed with ``Decimal`` floats), or
    from a checkpoint's ``stats_parsed`` (already typed), as a plain Python value.

    Raises ``_Unknown`` when the value cannot bound the column safely.
    """
    if value is None:
        raise _Unknown
    if pa.types.is_integer(type_):
        if isinstance(value, bool) or not isinstance(value, int | decimal.Decimal):
            raise _Unknown
        return int(value)
    if pa.types.is_floating(type_):
        if not isinstance(value, int | float | decimal.Decimal) or isinstance(value, bool):
            raise _Unknown  # "NaN" and friends arrive as strings
        number = float(value)
        if number != number:
            raise _Unknown
        return number
    if pa.types.is_decimal(type_):
        if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
            raise _Unknown
        return decimal.Decimal(str(value))
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        if not isinstance(value, str):
            raise _Unknown
        if upper and len(value) >= _STRING_STATS_PREFIX:
            raise _Unknown  # possibly a truncated prefix: no safe upper bound
        return value
    if pa.types.is_boolean(type_):
        if not isinstance(value, bool):
            raise _Unknown
        return value
    if pa.types.is_date(type_):
        if isinstance(value, dt.datetime):
            return value.date()
        if isinstance(value, dt.date):
            return value
        return dt.date.fromisoformat(str(value))
    if pa.types.is_timestamp(type_):
        if isinstance(value, dt.datetime):
            parsed = value
        elif isinstance(value, str):
            parsed = _parse_timestamp(value, aware=type_.tz is not None)
        else:
            raise _Unknown
        aware = type_.tz is not None
        if aware and parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        elif not aware and parsed.tzinfo is not None:
            parsed = parsed.astimezone(dt.UTC).replace(tzinfo=None)
        if upper and parsed.microsecond % 1000 == 0:
            # Spark and delta-rs truncate timestamp statistics to milliseconds: the true
            # maximum may lie up to 999 microseconds later.
            parsed += dt.timedelta(microseconds=999)
        return parsed
    raise _Unknown


@dataclass(frozen=True, slots=True)
class FileStats:
    record_count: int | None
    lower: dict[str, Any] | None
    upper: dict[str, Any] | None
    null_counts: dict[str, int] | None


def parse_stats(stats: str | Mapping[str, Any] | None, schema: DeltaSchema) -> FileStats:
    """Statistics of an add action keyed by logical (dotted) column names; absent or unreadable
    values are left out, meaning "might match"."""
    if stats is None:
        return FileStats(None, None, None, None)
    if isinstance(stats, str):
        try:
            stats = json.loads(stats, parse_float=decimal.Decimal)
        except ValueError:
            return FileStats(None, None, None, None)
    if not isinstance(stats, Mapping):
        return FileStats(None, None, None, None)
    records = stats.get("numRecords")
    records = (
        int(records) if isinstance(records, int | decimal.Decimal) and not isinstance(records, bool) else None
    )
    mins, maxes, nulls = stats.get("minValues"), stats.get("maxValues"), stats.get("nullCount")
    lower: dict[str, Any] = {}
    upper: dict[str, Any] = {}
    null_counts: dict[str, int] = {}
    for path, name, type_ in schema.stats_columns():
        for source, target, is_upper in ((mins, lower, False), (maxes, upper, True)):
            found = _lookup(source, path)
            if found is not _MISSING:
                try:
                    target[name] = parse_stat(found, type_, upper=is_upper)
                except (_Unknown, ValueError, TypeError, decimal.InvalidOperation):
                    pass
        count = _lookup(nulls, path)
        if isinstance(count, int | decimal.Decimal) and not isinstance(count, bool):
            null_counts[name] = int(count)
    # Top-level arrays and maps have a single null count under their own name.
    if isinstance(nulls, Mapping):
        for field in schema.fields:
            if isinstance(field["type"], dict) and field["type"].get("type") in ("array", "map"):
                key = _physical(field) if schema.mapped else field["name"]
                count = nulls.get(key)
                if isinstance(count, int | decimal.Decimal) and not isinstance(count, bool):
                    null_counts[field["name"]] = int(count)
    if schema.float_widened:
        loosen_float_bounds(lower, upper, set(schema.float_widened))
    return FileStats(
        records,
        lower if mins is not None else None,
        upper if maxes is not None else None,
        null_counts if nulls is not None else None,
    )


_MISSING = object()


def _lookup(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(tree, Mapping) or key not in tree:
            return _MISSING
        tree = tree[key]
    return tree


def partition_path(columns: tuple[str, ...], raw: Mapping[str, str | None]) -> str:
    """Hive-style partition path from the raw (serialised) values, logical names."""
    parts = []
    for name in columns:
        value = raw.get(name)
        parts.append(f"{name}={'__HIVE_DEFAULT_PARTITION__' if value is None or value == '' else value}")
    return "/".join(parts)


@overload
def millis_to_datetime(millis: int) -> dt.datetime: ...


@overload
def millis_to_datetime(millis: None) -> None: ...


def millis_to_datetime(millis: int | None) -> dt.datetime | None:
    if millis is None:
        return None
    return _EPOCH + dt.timedelta(milliseconds=int(millis))
