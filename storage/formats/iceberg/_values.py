"""Iceberg values to plain Python values, as the spec models want them.

Two encodings reach us: manifest partition tuples as raw Avro values (ints for dates and
timestamps, bytes for decimals; fastavro-decoded ones may already be dates) and the single-value
binary serialisation of column bounds (``lower_bounds``/``upper_bounds``). Both are turned into the convention of
``storage.spec.models``: ``date`` for dates and day partitions, naive ``datetime`` for
``timestamp``, UTC-aware ``datetime`` for ``timestamptz``, ``Decimal`` for decimals.

Converters are built once per type and reused for every manifest entry, because listing
decodes hundreds of thousands of entries and per-entry type dispatch would dominate.
"""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import Any, cast

from pyiceberg.conversions import from_bytes
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from storage.formats.iceberg._avro import int_bytes_map, int_long_map
from storage.spec.errors import CorruptTable

EPOCH_DATE = dt.date(1970, 1, 1)
EPOCH = dt.datetime(1970, 1, 1)
EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")

Converter = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _days(value: int) -> dt.date:
    return EPOCH_DATE + dt.timedelta(days=value)


def _micros(value: int) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=value)


def _micros_utc(value: int) -> dt.datetime:
    return EPOCH_UTC + dt.timedelta(microseconds=value)


def _nanos(value: int) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=value // 1000)


def _nanos_utc(value: int) -> dt.datetime:
    return EPOCH_UTC + dt.timedelta(microseconds=value // 1000)


def _time(value: int) -> dt.time:
    return (EPOCH + dt.timedelta(microseconds=value)).time()


def internal_to_python(iceberg_type: IcebergType) -> Converter:
    """Converter from pyiceberg's internal value (days, micros...) to the spec's Python value."""
    if isinstance(iceberg_type, DateType):
        return _days
    if isinstance(iceberg_type, TimestamptzType):
        return _micros_utc
    if isinstance(iceberg_type, TimestampType):
        return _micros
    if isinstance(iceberg_type, TimestamptzNanoType):
        return _nanos_utc
    if isinstance(iceberg_type, TimestampNanoType):
        return _nanos
    if isinstance(iceberg_type, TimeType):
        return _time
    return _identity


def avro_to_python(iceberg_type: IcebergType) -> Converter:
    """Converter from a fastavro-decoded partition value to the spec's Python value.

    fastavro applies the writer's logical types when the writer declared them (dates, UTC
    timestamps, decimals) and leaves raw ints or bytes otherwise, so both forms are accepted.
    """
    if isinstance(iceberg_type, DecimalType):
        scale = iceberg_type.scale

        def decimal(value: Any) -> Decimal | None:
            if value is None or isinstance(value, Decimal):
                return value
            # exact at any precision (``scaleb`` would round to the context's 28 digits)
            sign, digits, _ = Decimal(int.from_bytes(value, "big", signed=True)).as_tuple()
            return Decimal((sign, digits, -scale))

        return decimal
    if isinstance(iceberg_type, UUIDType):

        def to_uuid(value: Any) -> uuid.UUID | None:
            if value is None or isinstance(value, uuid.UUID):
                return value
            return uuid.UUID(value) if isinstance(value, str) else uuid.UUID(bytes=bytes(value))

        return to_uuid
    convert = internal_to_python(iceberg_type)
    if convert is _identity:
        return _identity
    aware = isinstance(iceberg_type, (TimestamptzType, TimestamptzNanoType))

    def temporal(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, int):
            return convert(value)
        if isinstance(value, dt.datetime):
            if value.tzinfo is not None:
                value = value.astimezone(dt.UTC)
                return value if aware else value.replace(tzinfo=None)
            return value.replace(tzinfo=dt.UTC) if aware else value
        return value

    return temporal


_EXACT_TYPES = (
    BooleanType,
    IntegerType,
    LongType,
    DateType,
    TimeType,
    TimestampType,
    TimestamptzType,
    TimestampNanoType,
    TimestamptzNanoType,
    StringType,
    BinaryType,
    FixedType,
    DecimalType,
    UUIDType,
)


def exact_equality(iceberg_type: IcebergType) -> bool:
    """Whether raw manifest values of this type that compare equal (and hash alike) always
    convert to the same Python value, so conversions may be cached by raw value. Not floats:
    -0.0 equals 0.0 and NaN equals nothing."""
    return isinstance(iceberg_type, _EXACT_TYPES)


def bytes_to_python(iceberg_type: IcebergType) -> Converter:
    """Converter from Iceberg's single-value serialisation (manifest bounds) to a Python value.

    The common types are unpacked directly; the rest go through ``pyiceberg.conversions``.
    Promoted columns (int to long, float to double) keep their old 4-byte bounds in old files,
    which ``int.from_bytes`` and the length check below both handle.
    """
    if isinstance(iceberg_type, (IntegerType, LongType)):
        return lambda b: int.from_bytes(b, "little", signed=True)
    if isinstance(iceberg_type, StringType):
        return lambda b: bytes(b).decode("utf-8")
    if isinstance(iceberg_type, (FloatType, DoubleType)):
        return lambda b: (_DOUBLE if len(b) == 8 else _FLOAT).unpack(b)[0]
    if isinstance(iceberg_type, DateType):
        return lambda b: _days(int.from_bytes(b, "little", signed=True))
    if isinstance(iceberg_type, (BinaryType, FixedType)):
        return bytes
    if isinstance(iceberg_type, BooleanType):
        return lambda b: b[0] != 0
    if isinstance(iceberg_type, UUIDType):
        return lambda b: uuid.UUID(bytes=bytes(b))
    convert = internal_to_python(iceberg_type)
    primitive = cast(PrimitiveType, iceberg_type)  # only primitive columns have bounds
    return lambda b: convert(from_bytes(primitive, b))


class ColumnDecoder:
    """Per-schema lookup tables: field id -> column name and field id -> bound converter."""

    __slots__ = ("names", "ids", "types", "bound_converters")

    def __init__(self, schema: Any) -> None:
        from pyiceberg.types import PrimitiveType

        self.names: dict[int, str] = {}
        self.types: dict[int, Any] = {}
        self.bound_converters: dict[int, Converter] = {}
        for field_id, field in schema._lazy_id_to_field.items():
            name = schema.find_column_name(field_id)
            if name is None:
                continue
            self.names[field_id] = name
            self.types[field_id] = field.field_type
            if isinstance(field.field_type, PrimitiveType):
                self.bound_converters[field_id] = bytes_to_python(field.field_type)
        self.ids: dict[str, int] = {name: field_id for field_id, name in self.names.items()}


class LazyStats(Mapping):
    """Column statistics keyed by column name, decoded on first access.

    A manifest entry carries bounds for every column but a filter looks at one or two of them;
    decoding all of them for every listed file would cost more than reading the manifest.
    The raw form is the manifest's ``{field_id: value}`` map, or that map still encoded (kept
    ``"raw"`` by the manifest decoder: parsed on first access, see ``stats_map``), which may hold
    ids of dropped columns (ignored). Pickling (Spark executors) materialises a plain dict.
    """

    __slots__ = ("_raw", "_decoder", "_bounds", "_by_id")

    def __init__(self, raw: dict[int, Any] | bytes, decoder: ColumnDecoder, bounds: bool) -> None:
        self._raw = raw
        self._decoder = decoder
        self._bounds = bounds
        self._by_id: dict[int, Any] | None = None

    def _index(self) -> dict[int, Any]:
        if self._by_id is None:
            names = self._decoder.names
            raw = stats_map(self._raw, self._bounds)
            # ids of dropped columns are left out; usually there are none (no copy then)
            self._by_id = raw if names.keys() >= raw.keys() else {k: v for k, v in raw.items() if k in names}
        return self._by_id

    def __getitem__(self, name: str) -> Any:
        field_id = self._decoder.ids.get(name)
        if field_id is None:
            raise KeyError(name)
        raw = self._index()[field_id]  # KeyError when the file has no stat for the column
        if not self._bounds:
            return raw
        convert = self._decoder.bound_converters.get(field_id)
        if convert is None:
            raise KeyError(name)
        try:
            return convert(raw)
        except (ValueError, struct.error, UnicodeDecodeError, IndexError, TypeError, OverflowError):
            # a truncated or foreign bound is "unknown", which keeps pruning conservative
            raise KeyError(name) from None

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        return self.get(name, _MISSING) is not _MISSING  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[str]:
        names = self._decoder.names
        for field_id in self._index():
            yield names[field_id]

    def __len__(self) -> int:
        return len(self._index())

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self.items()),))


_MISSING = object()


def stats_map(raw: Any, bounds: bool = True) -> dict[int, Any]:
    """A manifest entry's statistics map as a dict: ``raw`` itself when decoded, else parsed from
    the encoded blocks the decoder kept ``"raw"`` (``bounds``: field id -> bytes, else field
    id -> count); ``CorruptTable`` when those blocks are malformed."""
    if type(raw) is dict:
        return raw
    try:
        return int_bytes_map(raw) if bounds else int_long_map(raw)
    except ValueError as exc:
        raise malformed_stats(exc) from None


def malformed_stats(error: ValueError) -> CorruptTable:
    """The error of an entry whose raw statistics map the parsers refused (``stats_map``, and the
    compiled pre-check on the same bytes)."""
    return CorruptTable(f"a manifest entry's column statistics are malformed: {error}")
