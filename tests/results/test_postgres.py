"""What only the postgres storage has: filters as SQL, the row limit, jsonb for nested values."""

from __future__ import annotations

import datetime as dt

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from storage.results.plugin import StorageDescriptor
from storage.results.postgres import translate
from storage.results.registry import build_storage
from storage.spec.expressions import parse_filter

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("amount", pa.float64()),
        ("note", pa.string()),
        ("ts", pa.timestamp("us", "UTC")),
        ("info", pa.struct([("a", pa.int32())])),
    ]
)
PG_TYPES = {
    "id": "bigint",
    "amount": "double precision",
    "note": "text",
    "ts": "timestamptz",
    "info": "jsonb",
}


@pytest.mark.parametrize(
    "text",
    [
        "id < 3 and note is not null",
        "not (id in (1, 2)) or note starts with 'a'",
        "note not in ('x', 'y') and ts >= timestamp '2024-01-01 00:00:00+00:00'",
        "note = 'it''s'",
    ],
)
def test_filters_postgres_answers_exactly_go_entirely_to_sql(text):
    translation = translate(parse_filter(text, SCHEMA), PG_TYPES)
    assert translation.residual is None
    assert translation.where is not None
    # literals travel as parameters, never inside the SQL text
    rendered = translation.where.as_string(None)
    assert "'" not in rendered.replace('"C"', "")


def test_float_and_nested_conjuncts_are_left_for_spark_and_the_rest_still_goes_to_sql():
    expr = parse_filter("id < 3 and amount > 1.5 and info.a = 2", SCHEMA)
    translation = translate(expr, PG_TYPES)
    assert translation.where.as_string(None) == '"id" < %s::bigint'
    assert translation.params == [3]
    assert translation.residual == parse_filter("amount > 1.5 and info.a = 2", SCHEMA)


def test_a_disjunction_with_an_untranslatable_side_goes_to_spark_whole():
    expr = parse_filter("id < 3 or amount > 1.5", SCHEMA)
    translation = translate(expr, PG_TYPES)
    assert translation.where is None
    assert translation.residual == expr


@pytest.fixture(scope="module")
def storage(throwaway_database):
    return build_storage(
        StorageDescriptor()
        .with_type("postgres")
        .with_config("dsn", throwaway_database("pg"))
        .with_config("max_rows", 10)
    )


def test_a_result_beyond_max_rows_is_refused_and_the_previous_result_stays(storage, spark):
    properties = storage.create("limited", {})
    storage.write(spark.range(5), properties)
    with pytest.raises(ValueError, match="more than 10 rows, the postgres storage's max_rows"):
        storage.write(spark.range(11), properties)
    assert sorted(r.id for r in storage.read(spark, properties).collect()) == list(range(5))


def test_an_unsupported_column_type_is_refused_before_anything_is_written(storage, spark):
    properties = storage.create("intervals", {})
    frame = spark.sql("select interval '1' day as gap")
    with pytest.raises(ValueError, match="cannot store interval day columns"):
        storage.write(frame, properties)
    assert not storage.exists(properties)


def test_arrays_maps_and_nested_dates_round_trip_through_jsonb(storage, spark):
    schema = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("tags", T.ArrayType(T.StringType())),
            T.StructField("counts", T.MapType(T.IntegerType(), T.DoubleType())),
            T.StructField(
                "when",
                T.StructType([T.StructField("day", T.DateType()), T.StructField("raw", T.BinaryType())]),
            ),
        ]
    )
    rows = [
        (1, ["a", None], {1: 0.5, 2: float("nan")}, (dt.date(2024, 2, 29), b"\x00\xff")),
        (2, [], {}, None),
        (3, None, None, (None, None)),
    ]
    frame = spark.createDataFrame(rows, schema)
    properties = storage.create("nested", {})
    storage.write(frame, properties)
    back = storage.read(spark, properties)
    assert back.schema == frame.schema

    def normal(df):
        return sorted(repr(sorted(r.asDict(recursive=True).items())) for r in df.collect())

    assert normal(back) == normal(frame)


def test_odd_table_names_are_quoted_not_interpreted(storage, spark):
    name = 'Result "x"; drop table y'
    properties = storage.create(name, {})
    storage.write(spark.range(3), properties)
    with psycopg.connect(storage.dsn) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", [storage.schema]
            )
        ]
    assert name in tables
    storage.clean([name], {name: properties})
    assert not storage.exists(properties)


def test_a_load_that_fails_midway_keeps_the_previous_result(storage, spark):
    properties = storage.create("atomic", {})
    storage.write(spark.range(3), properties)
    # Postgres text cannot hold NUL: COPY fails on the second row, inside the transaction
    bad = spark.createDataFrame([(1, "fine"), (2, "nul\x00inside")], "id long, s string")
    with pytest.raises(psycopg.Error):
        storage.write(bad, properties)
    assert sorted(r.id for r in storage.read(spark, properties).collect()) == [0, 1, 2]
