"""Arrow types and batches as Spark sees them: the Spark type of every Arrow type, and batches
conformed to the exact Arrow form of a Spark schema."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from pyspark.sql import types as T

from storage.spec.errors import UnsupportedFeature
from storage.spec.parquet import cast_column


def arrow_type_to_spark(type_: pa.DataType) -> T.DataType:
    """The Spark type that holds values of an Arrow type (large and view variants map to the plain
    Spark type; unsigned integers widen; a timezone-aware timestamp is TIMESTAMP, a naive one
    TIMESTAMP_NTZ)."""
    if pa.types.is_dictionary(type_):
        return arrow_type_to_spark(type_.value_type)
    found = _scalar_to_spark(type_)
    if found is None:
        found = _nested_to_spark(type_)
    if found is None:
        raise UnsupportedFeature(f"the Arrow type {type_} has no Spark equivalent")
    return found


def _scalar_to_spark(type_: pa.DataType) -> T.DataType | None:  # noqa: C901 - one branch per type family
    types = pa.types
    if types.is_boolean(type_):
        return T.BooleanType()
    if types.is_int8(type_):
        return T.ByteType()
    if types.is_int16(type_) or types.is_uint8(type_):
        return T.ShortType()
    if types.is_int32(type_) or types.is_uint16(type_):
        return T.IntegerType()
    if types.is_int64(type_) or types.is_uint32(type_):
        return T.LongType()
    if types.is_uint64(type_):
        return T.DecimalType(20, 0)
    if types.is_float16(type_) or types.is_float32(type_):
        return T.FloatType()
    if types.is_float64(type_):
        return T.DoubleType()
    if types.is_decimal(type_):
        if type_.precision > 38:
            raise UnsupportedFeature(
                f"decimal({type_.precision}, {type_.scale}) exceeds Spark's precision 38"
            )
        return T.DecimalType(type_.precision, type_.scale)
    if types.is_string(type_) or types.is_large_string(type_) or _is(type_, "is_string_view"):
        return T.StringType()
    if (
        types.is_binary(type_)
        or types.is_large_binary(type_)
        or types.is_fixed_size_binary(type_)
        or _is(type_, "is_binary_view")
    ):
        return T.BinaryType()
    return _temporal_to_spark(type_)


def _temporal_to_spark(type_: pa.DataType) -> T.DataType | None:
    types = pa.types
    if types.is_date(type_):
        return T.DateType()
    if types.is_timestamp(type_):
        return T.TimestampType() if type_.tz is not None else T.TimestampNTZType()
    if types.is_time(type_):
        return T.TimeType(6)
    if types.is_duration(type_):
        return T.DayTimeIntervalType()
    if types.is_null(type_):
        return T.NullType()
    return None


def _nested_to_spark(type_: pa.DataType) -> T.DataType | None:
    types = pa.types
    if types.is_list(type_) or types.is_large_list(type_) or types.is_fixed_size_list(type_):
        return T.ArrayType(arrow_type_to_spark(type_.value_type), containsNull=True)
    if _is(type_, "is_list_view") or _is(type_, "is_large_list_view"):
        return T.ArrayType(arrow_type_to_spark(type_.value_type), containsNull=True)
    if types.is_map(type_):
        return T.MapType(
            arrow_type_to_spark(type_.key_type), arrow_type_to_spark(type_.item_type), valueContainsNull=True
        )
    if types.is_struct(type_):
        return T.StructType(
            [T.StructField(f.name, arrow_type_to_spark(f.type), nullable=True) for f in type_]
        )
    return None


def arrow_schema_to_spark(schema: pa.Schema) -> T.StructType:
    """A Spark schema for a table schema. Every field is nullable: a column added by schema
    evolution reads as null from older files whatever the table says, and Spark only trusts
    nullability for optimisations, never checks it."""
    return T.StructType([T.StructField(f.name, arrow_type_to_spark(f.type), nullable=True) for f in schema])


def _is(type_: pa.DataType, predicate: str) -> bool:
    check = getattr(pa.types, predicate, None)
    return bool(check and check(type_))


def has_spark_type(type_: T.DataType, kinds: tuple[type, ...]) -> bool:
    """Whether ``type_`` is, or nests, a Spark type of one of ``kinds``."""
    if isinstance(type_, kinds):
        return True
    if isinstance(type_, T.ArrayType):
        return has_spark_type(type_.elementType, kinds)
    if isinstance(type_, T.MapType):
        return has_spark_type(type_.keyType, kinds) or has_spark_type(type_.valueType, kinds)
    if isinstance(type_, T.StructType):
        return any(has_spark_type(f.dataType, kinds) for f in type_.fields)
    return False


def has_arrow_type(type_: pa.DataType, check: Callable[[pa.DataType], bool]) -> bool:
    """Whether ``type_`` is, or nests, an Arrow type for which ``check`` is true."""
    if check(type_):
        return True
    if pa.types.is_struct(type_):
        return any(has_arrow_type(f.type, check) for f in type_)
    if pa.types.is_map(type_):
        return has_arrow_type(type_.key_type, check) or has_arrow_type(type_.item_type, check)
    if hasattr(type_, "value_type") and not pa.types.is_dictionary(type_):
        return has_arrow_type(type_.value_type, check)
    return False


def _conform_array(array: pa.Array | pa.ChunkedArray, target: pa.DataType, name: str) -> pa.Array:
    # nanosecond timestamps or times that Spark holds to the microsecond: truncated as Spark
    # would; a value out of range is CorruptTable, never a wrapped value
    return cast_column(array, target, what=f"column {name!r}")


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``'s columns and types (Spark checks the first batch's
    schema for equality with its own Arrow form of the output schema)."""
    arrays = [_conform_array(batch.column(field.name), field.type, field.name) for field in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


__all__ = [
    "arrow_schema_to_spark",
    "arrow_type_to_spark",
    "conform_batch",
    "has_arrow_type",
    "has_spark_type",
]
