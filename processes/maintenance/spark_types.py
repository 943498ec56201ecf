"""Spark SQL types for Arrow schemas, for the ``spark-sql`` rewrite engine (Spark's own parquet
reader and writer; Iceberg field ids carried in struct field metadata)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

FIELD_ID_KEY = b"PARQUET:field_id"


def spark_type(arrow_type: pa.DataType, *, field_ids: bool) -> Any:
    """The Spark type for an Arrow type, or None when the fast path cannot write it faithfully
    (Spark carries Iceberg field ids only on struct fields, so lists and maps need the Arrow path
    when field ids matter)."""
    from pyspark.sql import types as T

    if pa.types.is_boolean(arrow_type):
        return T.BooleanType()
    if pa.types.is_int32(arrow_type):
        return T.IntegerType()
    if pa.types.is_int64(arrow_type):
        return T.LongType()
    if pa.types.is_float32(arrow_type):
        return T.FloatType()
    if pa.types.is_float64(arrow_type):
        return T.DoubleType()
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return T.StringType()
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return T.BinaryType()
    if pa.types.is_date32(arrow_type):
        return T.DateType()
    if pa.types.is_timestamp(arrow_type) and arrow_type.unit == "us":
        return T.TimestampType() if arrow_type.tz else T.TimestampNTZType()
    if pa.types.is_decimal128(arrow_type):
        return T.DecimalType(arrow_type.precision, arrow_type.scale)
    if pa.types.is_struct(arrow_type):
        return spark_schema(pa.schema(list(arrow_type)), field_ids=field_ids)
    if not field_ids and (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
        element = spark_type(arrow_type.value_type, field_ids=False)
        return None if element is None else T.ArrayType(element, arrow_type.value_field.nullable)
    if not field_ids and pa.types.is_map(arrow_type):
        key = spark_type(arrow_type.key_type, field_ids=False)
        value = spark_type(arrow_type.item_type, field_ids=False)
        if key is None or value is None:
            return None
        return T.MapType(key, value, arrow_type.item_field.nullable)
    return None


def spark_schema(schema: pa.Schema, *, field_ids: bool, exclude: Iterable[str] = ()) -> Any:
    from pyspark.sql import types as T

    excluded = set(exclude)
    fields = []
    for arrow_field in schema:
        if arrow_field.name in excluded:
            continue
        data_type = spark_type(arrow_field.type, field_ids=field_ids)
        if data_type is None:
            return None
        metadata = {}
        if field_ids:
            if not arrow_field.metadata or FIELD_ID_KEY not in arrow_field.metadata:
                return None
            metadata["parquet.field.id"] = int(arrow_field.metadata[FIELD_ID_KEY])
        fields.append(T.StructField(arrow_field.name, data_type, True, metadata))
    return T.StructType(fields)
