"""Filter expressions: parsing, binding, pruning by statistics and partitions, translations.

Translations are checked against the engines themselves: pyiceberg scans, deltalake (DataFusion)
queries and deletes, Spark; transforms against pyiceberg-core's Rust implementation.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from storage.spec.errors import FilterError
from storage.spec.expressions import (
    AlwaysTrue,
    And,
    Comparison,
    In,
    IsNull,
    Not,
    NotIn,
    NotNull,
    Or,
    StartsWith,
    apply_transform,
    bind_filter,
    bucket_hash,
    might_match_file,
    might_match_partition,
    might_match_partition_bounds,
    might_match_stats,
    parse_filter,
    partition_projection,
    to_arrow,
    to_delta_partition_filters,
    to_delta_predicate,
    to_pyiceberg,
    to_spark,
    to_sql,
)
from storage.spec.models import DataFile, FileContent, PartitionField, PartitionSpec

UTC = dt.UTC
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("region", pa.string()),
        ("amount", pa.float64()),
        ("price", pa.decimal128(10, 2)),
        ("active", pa.bool_()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("local_ts", pa.timestamp("us")),
        ("my col", pa.int32()),
        ("address", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
        ("tags", pa.list_(pa.string())),
    ]
)


# -- parsing -----------------------------------------------------------------------------------
def test_the_issue_example_parses_to_a_conjunction_of_typed_predicates():
    expr = parse_filter(
        "region = 'eu' and ts >= timestamp '2024-01-01 00:00:00' and id in (1, 2, 3)",
        SCHEMA,
    )
    assert expr == And(
        Comparison("=", "region", "eu"),
        Comparison(">=", "ts", dt.datetime(2024, 1, 1, tzinfo=UTC)),
        In("id", (1, 2, 3)),
    )


def test_keywords_are_case_insensitive_and_columns_resolve_ignoring_case():
    assert parse_filter("REGION = 'eu' AnD Id NOT IN (1) OR Amount IS NOT NULL", SCHEMA) == parse_filter(
        "region = 'eu' and id not in (1) or amount is not null", SCHEMA
    )


def test_a_doubled_quote_inside_a_string_is_one_quote():
    assert parse_filter("region = 'it''s'", SCHEMA) == Comparison("=", "region", "it's")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("amount > -1.5", Comparison(">", "amount", -1.5)),
        ("amount > 2", Comparison(">", "amount", 2.0)),
        ("amount < 1e3", Comparison("<", "amount", 1000.0)),
        ("price = 1.5", Comparison("=", "price", Decimal("1.50"))),
        ("price = -3", Comparison("=", "price", Decimal("-3.00"))),
        ("id = 2.0", Comparison("=", "id", 2)),
        ("active = true", Comparison("=", "active", True)),
        ("active != FALSE", Comparison("!=", "active", False)),
    ],
)
def test_numbers_and_booleans_take_the_type_of_their_column(text, expected):
    expr = parse_filter(text, SCHEMA)
    assert expr == expected
    assert type(expr.value) is type(expected.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("day = date '2024-02-29'", Comparison("=", "day", dt.date(2024, 2, 29))),
        ("day = '2024-02-29'", Comparison("=", "day", dt.date(2024, 2, 29))),
        (
            "ts < timestamp '2024-01-01 02:00:00+02:00'",
            Comparison("<", "ts", dt.datetime(2024, 1, 1, tzinfo=UTC)),
        ),
        ("ts < timestamp '2024-01-01T00:00:00Z'", Comparison("<", "ts", dt.datetime(2024, 1, 1, tzinfo=UTC))),
        (
            "ts < '2024-01-01 00:00:00.5'",
            Comparison("<", "ts", dt.datetime(2024, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)),
        ),
        ("ts >= date '2024-01-01'", Comparison(">=", "ts", dt.datetime(2024, 1, 1, tzinfo=UTC))),
        (
            "local_ts = timestamp '2024-01-01 01:00:00+01:00'",
            Comparison("=", "local_ts", dt.datetime(2024, 1, 1)),
        ),
    ],
)
def test_dates_and_timestamps_are_read_as_iso_and_normalised_to_utc(text, expected):
    expr = parse_filter(text, SCHEMA)
    assert expr == expected
    assert type(expr.value) is type(expected.value)
    # Aware and naive datetimes never compare equal, so equality above also checked the zone.


def test_nested_fields_are_dotted_and_odd_names_are_double_quoted():
    assert parse_filter("address.city = 'Oslo' and \"my col\" > 3", SCHEMA) == And(
        Comparison("=", "address.city", "Oslo"), Comparison(">", "my col", 3)
    )
    assert parse_filter('"address"."zip" = 1', SCHEMA) == Comparison("=", "address.zip", 1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("region is null", IsNull("region")),
        ("region IS NOT NULL", NotNull("region")),
        ("id not in (1, 2)", NotIn("id", (1, 2))),
        ("id in ()", In("id", ())),
        ("region starts with 'e'", StartsWith("region", "e")),
        ("region not starts with 'e'", Not(StartsWith("region", "e"))),
        ("region like 'eu%'", StartsWith("region", "eu")),
        ("region like 'eu'", Comparison("=", "region", "eu")),
        ("region like '100\\%%'", StartsWith("region", "100%")),
        ("region not like 'e%'", Not(StartsWith("region", "e"))),
        ("region like '%'", NotNull("region")),
        ("id between 1 and 3", And(Comparison(">=", "id", 1), Comparison("<=", "id", 3))),
        ("5 < id", Comparison(">", "id", 5)),
        ("'eu' <> region", Comparison("!=", "region", "eu")),
        ("id == 1", Comparison("=", "id", 1)),
        ("true", AlwaysTrue()),
    ],
)
def test_null_tests_membership_prefixes_and_shorthands(text, expected):
    assert parse_filter(text, SCHEMA) == expected


def test_parentheses_group_and_not_binds_tighter_than_and_which_binds_tighter_than_or():
    a, b, c = Comparison("=", "id", 1), Comparison("=", "id", 2), Comparison("=", "id", 3)
    assert parse_filter("id = 1 or id = 2 and id = 3", SCHEMA) == Or(a, And(b, c))
    assert parse_filter("(id = 1 or id = 2) and id = 3", SCHEMA) == And(Or(a, b), c)
    assert parse_filter("not id = 1 and id = 2", SCHEMA) == And(Not(a), b)
    assert parse_filter("not (id = 1 and id = 2)", SCHEMA) == Not(And(a, b))


@pytest.mark.parametrize(
    ("text", "position", "token", "message"),
    [
        ("region = 'eu' and xyz", 18, "xyz", "unknown column 'xyz'"),
        ("region = 'eu' xyz", 14, "xyz", "unexpected 'xyz' at position 14"),
        ("region = ", 9, "", "unexpected end of filter at position 9"),
        ("(id = 1", 7, "", "expected ')' to close the '(' at position 0"),
        ("id in (1, 2", 11, "", "expected ')' or ','"),
        ("id in 1", 6, "1", "expected '('"),
        ("id = 1 # 2", 7, "#", "unexpected '#' at position 7"),
        ("region = 'eu", 9, "'eu", "unterminated string starting at position 9"),
        ('"my col = 1', 0, '"my col = 1', "unterminated quoted name"),
        ("id = null", 5, "null", "is null"),
        ("in = 1", 0, "in", 'write "in" to use it as a column name'),
        ("id = region", 5, "region", "comparing two columns is not supported"),
        ("1 = 2", 4, "2", "expected a column name"),
        ("region is 'x'", 10, "'x'", "expected 'null' after 'is'"),
        ("region starts 'x'", 14, "'x'", "expected 'with' after 'starts'"),
        ("region like 'a_c%'", 12, "'a_c%'", "only prefix patterns"),
        ("day = date '2024-02-30'", 11, "'2024-02-30'", "invalid date '2024-02-30'"),
        ("ts > timestamp 'noon'", 15, "'noon'", "invalid timestamp"),
        ("id 1", 3, "1", "expected an operator after 'id'"),
        ("  ", 0, "", "empty filter"),
        ("id = 1 and", 10, "", "unexpected end of filter"),
        ("id = 1 -2", 7, "-", "unexpected '-' at position 7"),
        ("address = 1", 0, "address", "column 'address' is a struct"),
        ("tags = 'a'", 0, "tags", "column 'tags' is a list"),
    ],
)
def test_filter_errors_point_at_the_offending_token(text, position, token, message):
    with pytest.raises(FilterError) as caught:
        parse_filter(text, SCHEMA)
    assert message in str(caught.value)
    assert (caught.value.position, caught.value.token) == (position, token)


def test_unknown_column_error_suggests_close_matches_and_lists_the_columns():
    with pytest.raises(FilterError) as caught:
        parse_filter("regio = 'eu'", SCHEMA)
    message = str(caught.value)
    assert message.startswith("unknown column 'regio'; did you mean 'region'?")
    assert "columns are: id, region, amount" in message and "address.city" in message
    assert (caught.value.position, caught.value.token) == (0, "regio")


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        ("id = 'abc'", "column id is long; 'abc' is a string", 5),
        ("id in (1, 'x')", "column id is long; 'x' is a string", 10),
        ("id > 1.5", "column id is long; 1.5 is a decimal", 5),
        ("price > 1.555", "column price is decimal(10,2); 1.555 is a decimal: more than 2 decimal places", 8),
        ("region = 5", "column region is string; 5 is an integer", 9),
        ("active = 1", "column active is boolean; 1 is an integer", 9),
        ("day > 'tomorrow'", "column day is date; 'tomorrow' is a string: not an ISO date", 6),
        ("day = timestamp '2024-01-01 10:00:00'", "column day is date", 6),
        ("amount > true", "column amount is double; true is a boolean", 9),
        ("id starts with 'a'", "column id is long; 'starts with' needs a string column", 15),
        ("\"my col\" < date '2024-01-01'", "column my col is int; date '2024-01-01' is a date", 11),
    ],
)
def test_a_literal_of_the_wrong_type_is_refused_naming_both_types(text, message, position):
    with pytest.raises(FilterError) as caught:
        parse_filter(text, SCHEMA)
    assert message in str(caught.value)
    assert caught.value.position == position


def test_without_a_schema_the_parser_keeps_literals_as_written():
    assert parse_filter("x = 1.50 and y = 'a'") == And(
        Comparison("=", "x", Decimal("1.50")), Comparison("=", "y", "a")
    )


# -- binding -----------------------------------------------------------------------------------
def test_bind_filter_passes_none_and_blank_text_through():
    assert bind_filter(None, SCHEMA) is None
    assert bind_filter("   ", SCHEMA) is None
    assert bind_filter("id = 1", SCHEMA) == Comparison("=", "id", 1)


def test_bind_filter_coerces_the_literals_of_an_expression_built_in_code():
    built = And(Comparison(">", "AMOUNT", 1), In("day", ("2024-01-01",)), StartsWith("address.city", "O"))
    assert bind_filter(built, SCHEMA) == And(
        Comparison(">", "amount", 1.0), In("day", (dt.date(2024, 1, 1),)), StartsWith("address.city", "O")
    )


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (Comparison("=", "regoin", "eu"), "unknown column 'regoin'; did you mean 'region'?"),
        (Comparison("=", "id", "abc"), "column id is long; 'abc' is a string"),
        (Not(IsNull("nope")), "unknown column 'nope'"),
    ],
)
def test_bind_filter_refuses_unknown_columns_and_wrong_types_in_built_expressions(expr, message):
    with pytest.raises(FilterError, match=message):
        bind_filter(expr, SCHEMA)


# -- statistics --------------------------------------------------------------------------------
def _stats(lower, upper, nulls=0, rows=10, column="id"):
    return {
        "lower": {column: lower},
        "upper": {column: upper},
        "null_counts": {column: nulls},
        "record_count": rows,
    }


@pytest.mark.parametrize(
    ("text", "might_match"),
    [
        ("id = 5", False),
        ("id = 10", True),
        ("id = 25", False),
        ("id < 10", False),
        ("id <= 10", True),
        ("id > 20", False),
        ("id >= 20", True),
        ("id != 15", True),
        ("id in (1, 30)", False),
        ("id in (1, 15)", True),
        ("id not in (10, 20)", True),
        ("id is null", False),
        ("id is not null", True),
        ("id < 5 or id > 25", False),
        ("id > 5 and id < 12", True),
        ("id > 5 and id > 25", False),
    ],
)
def test_column_bounds_prune_what_they_rule_out(text, might_match):
    assert might_match_stats(parse_filter(text, SCHEMA), **_stats(10, 20)) is might_match


def test_a_column_holding_one_value_prunes_not_equal_and_not_in():
    stats = _stats(7, 7)
    assert not might_match_stats(parse_filter("id != 7", SCHEMA), **stats)
    assert not might_match_stats(parse_filter("id not in (6, 7)", SCHEMA), **stats)
    assert might_match_stats(parse_filter("id not in (6, 8)", SCHEMA), **stats)


def test_unknown_statistics_never_prune():
    expr = parse_filter("id = 5 and region starts with 'x' and id is null", SCHEMA)
    assert might_match_stats(expr)
    assert might_match_stats(expr, lower={}, upper={}, null_counts={}, record_count=None)
    assert might_match_stats(
        expr, lower={"id": None}, upper={"id": None}, null_counts={"id": None}, record_count=5
    )


def test_a_column_of_only_nulls_matches_is_null_and_nothing_else():
    stats = {"null_counts": {"id": 10}, "record_count": 10}
    assert might_match_stats(parse_filter("id is null", SCHEMA), **stats)
    for text in ("id = 1", "id != 1", "id not in (1)", "not id = 1", "not id is null", "id is not null"):
        assert not might_match_stats(parse_filter(text, SCHEMA), **stats), text


def test_not_is_pushed_down_rather_than_negating_the_answer():
    # Bounds 10..20: "id = 15" might match and so might "not id = 15"; inverting the
    # first answer would wrongly drop the file for the second.
    stats = _stats(10, 20)
    assert might_match_stats(parse_filter("id = 15", SCHEMA), **stats)
    assert might_match_stats(parse_filter("not id = 15", SCHEMA), **stats)
    assert not might_match_stats(parse_filter("not (id >= 10 and id <= 20)", SCHEMA), **stats)
    assert not might_match_stats(parse_filter("not (id < 30 or id is null)", SCHEMA), **stats)
    # Null rows satisfy neither a predicate nor its negation.
    assert not might_match_stats(parse_filter("not id in (1)", SCHEMA), **_stats(None, None, nulls=10))


def test_float_bounds_keep_files_that_may_hold_nan():
    stats = _stats(1.0, 2.0, column="amount")
    assert not might_match_stats(parse_filter("amount > 5", SCHEMA), **stats)
    # NaN is kept out of bounds and fails every ordering, so it satisfies these negations.
    assert might_match_stats(parse_filter("not amount < 5", SCHEMA), **stats)
    assert might_match_stats(
        parse_filter("amount not in (1.0, 2.0)", SCHEMA), **_stats(1.0, 1.0, column="amount")
    )
    nan_bounds = _stats(float("nan"), float("nan"), column="amount")
    assert might_match_stats(parse_filter("amount > 5", SCHEMA), **nan_bounds)
    nan_table = pa.table({"amount": [1.0, float("nan")]})
    assert nan_table.filter(to_arrow(parse_filter("not amount < 5", SCHEMA))).num_rows == 1


def test_string_upper_bounds_may_be_truncated_prefixes():
    # A Delta writer may record "abc" as the maximum of "abcdef".
    stats = _stats("aaa", "abc", column="region")
    assert might_match_stats(parse_filter("region > 'abcd'", SCHEMA), **stats)
    assert might_match_stats(parse_filter("region = 'abcz'", SCHEMA), **stats)
    assert might_match_stats(parse_filter("region starts with 'abcd'", SCHEMA), **stats)
    assert might_match_stats(parse_filter("region != 'abc'", SCHEMA), **_stats("abc", "abc", column="region"))
    assert not might_match_stats(parse_filter("region > 'abd'", SCHEMA), **stats)
    assert not might_match_stats(parse_filter("region starts with 'b'", SCHEMA), **stats)
    assert not might_match_stats(parse_filter("region starts with 'a0'", SCHEMA), **stats)
    assert not might_match_stats(parse_filter("not region starts with 'a'", SCHEMA), **stats)


def test_timestamp_upper_bounds_allow_for_millisecond_truncation():
    top = dt.datetime(2024, 1, 1, 12, tzinfo=UTC)
    stats = _stats(top - dt.timedelta(hours=1), top, column="ts")
    assert might_match_stats(Comparison(">", "ts", top + dt.timedelta(microseconds=500)), **stats)
    assert not might_match_stats(Comparison(">", "ts", top + dt.timedelta(milliseconds=2)), **stats)


def test_a_file_without_rows_matches_nothing():
    assert not might_match_stats(parse_filter("id is null or id is not null", SCHEMA), record_count=0)
    assert might_match_stats(None, record_count=0)


# -- partitions --------------------------------------------------------------------------------
SAMPLE_TIMESTAMPS = [
    dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    dt.datetime(1970, 1, 1, tzinfo=UTC),
    dt.datetime(2024, 2, 29, 23, 30, tzinfo=UTC),
    dt.datetime(1900, 3, 1, 1, tzinfo=UTC),
]


@pytest.mark.parametrize("transform", ["year", "month", "day", "hour"])
def test_time_transforms_agree_with_pyiceberg_core(transform):
    from pyiceberg_core import transform as rust

    timestamps = pa.array(SAMPLE_TIMESTAMPS, pa.timestamp("us", tz="UTC"))
    dates = pc.cast(pc.cast(timestamps, pa.timestamp("us")), pa.date32())
    for values in (timestamps, dates):
        if transform == "hour" and values is dates:
            continue  # Iceberg has no hour of a date
        expected = getattr(rust, transform)(values).to_pylist()
        assert [apply_transform(transform, v) for v in values.to_pylist()] == expected


def test_truncate_and_bucket_agree_with_pyiceberg_core():
    from pyiceberg_core import transform as rust

    ints = pa.array([-7, -1, 0, 3, 4, 2**40], pa.int64())
    strings = pa.array(["", "a", "iceberg", "ünïcødé"])
    assert [apply_transform("truncate[4]", v) for v in ints.to_pylist()] == rust.truncate(ints, 4).to_pylist()
    assert [apply_transform("truncate[3]", v) for v in strings.to_pylist()] == rust.truncate(
        strings, 3
    ).to_pylist()
    dates = pa.array([dt.date(2017, 11, 16), dt.date(1960, 1, 1)])
    timestamps = pa.array(SAMPLE_TIMESTAMPS, pa.timestamp("us", tz="UTC"))
    for values in (ints, strings, dates, timestamps, pa.array([b"\x00\x01", b"abc"])):
        assert [bucket_hash(16, v) for v in values.to_pylist()] == rust.bucket(values, 16).to_pylist()


def _spec(*fields: tuple[str, str, str]) -> PartitionSpec:
    return PartitionSpec(tuple(PartitionField(name, source, transform) for name, source, transform in fields))


@pytest.mark.parametrize(
    ("transform", "source", "text", "projected"),
    [
        ("identity", "region", "not region = 'eu'", Not(Comparison("=", "p", "eu"))),
        ("day", "ts", "ts < timestamp '2024-01-02 00:00:00'", Comparison("<=", "p", dt.date(2024, 1, 1))),
        ("day", "ts", "ts <= timestamp '2024-01-02 00:00:00'", Comparison("<=", "p", dt.date(2024, 1, 2))),
        (
            "day",
            "ts",
            "ts > timestamp '2024-01-01 23:59:59.999999'",
            Comparison(">=", "p", dt.date(2024, 1, 2)),
        ),
        (
            "day",
            "ts",
            "not ts >= timestamp '2024-01-02 00:00:00'",
            Comparison("<=", "p", dt.date(2024, 1, 1)),
        ),
        (
            "day",
            "ts",
            "ts in ('2024-01-01 01:00:00', '2024-01-01 02:00:00')",
            In("p", (dt.date(2024, 1, 1),)),
        ),
        ("day", "ts", "ts != timestamp '2024-01-01 00:00:00'", AlwaysTrue()),
        ("month", "ts", "ts = timestamp '2024-03-05 00:00:00'", Comparison("=", "p", 650)),
        ("year", "day", "day >= date '2024-06-01'", Comparison(">=", "p", 54)),
        ("hour", "ts", "ts > timestamp '1970-01-01 01:00:00'", Comparison(">=", "p", 1)),
        ("truncate[3]", "region", "region = 'europe'", Comparison("=", "p", "eur")),
        ("truncate[3]", "region", "region starts with 'eu'", StartsWith("p", "eu")),
        ("truncate[3]", "region", "region starts with 'europe'", Comparison("=", "p", "eur")),
        ("truncate[3]", "region", "not region starts with 'eu'", Not(StartsWith("p", "eu"))),
        ("truncate[3]", "region", "not region starts with 'euro'", AlwaysTrue()),
        ("truncate[10]", "id", "id < 20", Comparison("<=", "p", 10)),
        ("truncate[10]", "id", "id < 21", Comparison("<=", "p", 20)),
        ("bucket[16]", "id", "id = 34", Comparison("=", "p", bucket_hash(16, 34))),
        ("bucket[16]", "id", "id > 34", AlwaysTrue()),
        ("bucket[16]", "id", "not id in (1)", AlwaysTrue()),
        ("void", "id", "id = 1", AlwaysTrue()),
        ("day", "ts", "ts is null", IsNull("p")),
        ("bucket[4]", "id", "not id is null", NotNull("p")),
    ],
)
def test_predicates_project_through_each_transform(transform, source, text, projected):
    spec = _spec(("p", source, transform))
    assert partition_projection(parse_filter(text, SCHEMA), spec) == projected


def test_columns_without_a_partition_field_project_to_always_true():
    spec = _spec(("region", "region", "identity"))
    assert partition_projection(parse_filter("id = 1 or region = 'eu'", SCHEMA), spec) == AlwaysTrue()
    assert partition_projection(parse_filter("id = 1 and region = 'eu'", SCHEMA), spec) == Comparison(
        "=", "region", "eu"
    )


def test_exact_partition_values_prune_including_negations_and_nulls():
    spec = _spec(("region", "region", "identity"), ("ts_day", "ts", "day"))
    values = {"region": "eu", "ts_day": dt.date(2024, 1, 1)}
    assert might_match_partition(parse_filter("region = 'eu'", SCHEMA), spec, values)
    assert not might_match_partition(parse_filter("region != 'eu'", SCHEMA), spec, values)
    assert not might_match_partition(parse_filter("not region starts with 'e'", SCHEMA), spec, values)
    assert not might_match_partition(parse_filter("ts >= '2024-01-02 00:00:00'", SCHEMA), spec, values)
    assert might_match_partition(parse_filter("ts >= '2024-01-01 23:00:00'", SCHEMA), spec, values)
    null_region = {"region": None}
    assert might_match_partition(parse_filter("region is null", SCHEMA), spec, null_region)
    assert not might_match_partition(
        parse_filter("region = 'eu' or not region = 'eu'", SCHEMA), spec, null_region
    )
    assert might_match_partition(parse_filter("region = 'us'", SCHEMA), spec, {})  # unknown value


def test_manifest_partition_bounds_prune_whole_manifests():
    spec = _spec(("ts_day", "ts", "day"))
    lower, upper = {"ts_day": dt.date(2024, 1, 1)}, {"ts_day": dt.date(2024, 1, 31)}
    assert not might_match_partition_bounds(
        parse_filter("ts >= '2024-02-01 00:00:00'", SCHEMA), spec, lower, upper, {"ts_day": False}
    )
    assert might_match_partition_bounds(
        parse_filter("ts >= '2024-01-31 00:00:00'", SCHEMA), spec, lower, upper
    )
    assert not might_match_partition_bounds(
        parse_filter("ts is null", SCHEMA), spec, lower, upper, {"ts_day": False}
    )
    assert might_match_partition_bounds(
        parse_filter("ts is null", SCHEMA), spec, lower, upper, {"ts_day": True}
    )


def test_might_match_file_checks_partition_values_then_column_stats_of_data_files():
    spec = _spec(("region", "region", "identity"))
    data = DataFile(
        "f.parquet", 100, 10, partition={"region": "eu"}, lower_bounds={"id": 1}, upper_bounds={"id": 9}
    )
    assert might_match_file(parse_filter("region = 'eu' and id = 5", SCHEMA), data, spec)
    assert not might_match_file(parse_filter("region = 'us'", SCHEMA), data, spec)
    assert not might_match_file(parse_filter("id = 50", SCHEMA), data, spec)
    deletes = DataFile(
        "d.parquet", 10, 1, FileContent.POSITION_DELETES, partition={"region": "eu"}, lower_bounds={"id": 1}
    )
    assert might_match_file(parse_filter("id = 50", SCHEMA), deletes, spec)
    assert not might_match_file(parse_filter("region = 'us'", SCHEMA), deletes, spec)


ICEBERG_ROWS = pa.table(
    {
        "id": pa.array(range(40), pa.int64()),
        "region": pa.array([["eu", "us", "apac", None][i % 4] for i in range(40)]),
        "ts": pa.array(
            [dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=7 * i) for i in range(40)],
            pa.timestamp("us", tz="UTC"),
        ),
        "amount": pa.array([float("nan") if i % 7 == 0 else i / 4 for i in range(40)]),
    }
)


@pytest.fixture
def iceberg_table(tmp_path, sql_catalog):
    from pyiceberg.transforms import BucketTransform, DayTransform

    catalog = sql_catalog("t", f"file://{tmp_path}")
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", schema=ICEBERG_ROWS.schema)
    with table.update_spec() as update:
        update.add_identity("region")
        update.add_field("ts", DayTransform(), "ts_day")
        update.add_field("id", BucketTransform(3), "id_bucket")
    table.append(ICEBERG_ROWS)
    return table


def _our_data_file(table, task) -> DataFile:
    from pyiceberg.conversions import from_bytes

    schema = table.schema()
    names = {f.field_id: f.name for f in schema.fields}
    spec = table.spec()
    partition = {}
    for position, field in enumerate(spec.fields):
        value = task.file.partition[position]
        partition[field.name] = (
            dt.date(1970, 1, 1) + dt.timedelta(days=value) if field.name == "ts_day" else value
        )

    def bounds(raw):
        values = {}
        for field_id, data in (raw or {}).items():
            value = from_bytes(schema.find_field(field_id).field_type, data)
            if names[field_id] == "ts":
                value = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=value)
            values[names[field_id]] = value
        return values

    return DataFile(
        task.file.file_path,
        task.file.file_size_in_bytes,
        task.file.record_count,
        partition=partition,
        lower_bounds=bounds(task.file.lower_bounds),
        upper_bounds=bounds(task.file.upper_bounds),
        null_counts={names[k]: v for k, v in (task.file.null_value_counts or {}).items()},
    )


ICEBERG_FILTERS = [
    "region = 'eu'",
    "region != 'eu'",
    "region is null",
    "id = 7",
    "id in (3, 4, 30)",
    "not id = 7",
    "ts >= timestamp '2024-01-05 00:00:00' and ts < timestamp '2024-01-06 00:00:00'",
    "ts < timestamp '2024-01-02 00:00:00+00:00' or region starts with 'ap'",
    "amount > 5",
    "not amount <= 5",
    "amount != 2.5 and id < 12",
    "not (region = 'us' or id > 20)",
    "region not in ('eu', 'us') and id not in (2, 6)",
]


@pytest.mark.parametrize("text", ICEBERG_FILTERS)
def test_pyiceberg_scans_with_the_translation_select_the_rows_to_arrow_selects(iceberg_table, text):
    expr = parse_filter(text, ICEBERG_ROWS.schema)
    ours = ICEBERG_ROWS.filter(to_arrow(expr)).sort_by("id")
    theirs = iceberg_table.scan(row_filter=to_pyiceberg(expr)).to_arrow().sort_by("id")
    assert theirs["id"].to_pylist() == ours["id"].to_pylist()


@pytest.mark.parametrize("text", ICEBERG_FILTERS)
def test_files_written_by_pyiceberg_are_kept_whenever_they_hold_a_matching_row(iceberg_table, text):
    import pyarrow.parquet as pq

    expr = parse_filter(text, ICEBERG_ROWS.schema)
    ours_spec = _spec(
        ("region", "region", "identity"), ("ts_day", "ts", "day"), ("id_bucket", "id", "bucket[3]")
    )
    kept = pruned = 0
    for task in iceberg_table.scan().plan_files():
        data_file = _our_data_file(iceberg_table, task)
        rows = pq.read_table(data_file.path.removeprefix("file://")).filter(to_arrow(expr)).num_rows
        if might_match_file(expr, data_file, ours_spec):
            kept += 1
        else:
            pruned += 1
            assert rows == 0, f"{data_file.partition} holds {rows} matching rows"
    pyiceberg_kept = len(list(iceberg_table.scan(row_filter=to_pyiceberg(expr)).plan_files()))
    assert kept <= pyiceberg_kept  # never keeps more than pyiceberg's own pruning


# -- translations ------------------------------------------------------------------------------
def test_to_sql_reads_back_to_the_same_expression():
    text = (
        "region = 'it''s' and ts >= timestamp '2024-01-01 00:00:00' and id in (1, 2, 3) or "
        "not (\"my col\" < -4 or address.city starts with 'O') and day is not null and amount > 1.5e-07"
    )
    expr = parse_filter(text, SCHEMA)
    assert parse_filter(to_sql(expr), SCHEMA) == expr


DELTA_ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4, 5, 6, None], pa.int64()),
        "region": ["eu", "us", None, "eu-west", "apac", "it's", "us"],
        "amount": [1.5, None, -2.0, 10.0, 0.25, 3.0, 7.5],
        "price": pa.array(
            [Decimal("1.50"), Decimal("2.00"), None, Decimal("0.10"), None, Decimal("9.99"), None]
        ),
        "day": [dt.date(2024, 1, d) for d in (1, 2, 3, 1, 2, 3, 1)],
        "ts": pa.array(
            [dt.datetime(2024, 1, 1, h, tzinfo=UTC) for h in (0, 1, 2, 3, 4, 5, 6)],
            pa.timestamp("us", tz="UTC"),
        ),
        "local_ts": pa.array([dt.datetime(2024, 1, 1, h) for h in (0, 1, 2, 3, 4, 5, 6)], pa.timestamp("us")),
        "address": [{"city": c, "zip": z} for c, z in (("Oslo", 1), ("Rome", 2), ("Oslo", 3))] + [None] * 4,
    }
)
DELTA_FILTERS = [
    "id = 2",
    "id != 2",
    "not id = 2",
    "id not in (1, 2)",
    "not id in (1, 2)",
    "region is null",
    "not region is null or id > 5",
    "region starts with 'eu'",
    "not region starts with 'eu'",
    "region = 'it''s'",
    "amount >= -2 and amount < 5",
    "not (amount < 5 and id > 1)",
    "price > 1.5",
    "day = date '2024-01-02'",
    "ts > timestamp '2024-01-01 03:00:00'",
    "ts <= timestamp '2024-01-01 04:00:00+01:00'",
    "local_ts < timestamp '2024-01-01 02:00:00'",
    "address.city = 'Oslo'",
    "true",
    "false or id in ()",
]


@pytest.fixture
def delta_table(tmp_path):
    from deltalake import write_deltalake

    path = tmp_path / "delta"
    write_deltalake(str(path), DELTA_ROWS, partition_by=["day"])
    return path


def _sorted_rows(table: pa.Table) -> list:
    return sorted(table.to_pylist(), key=repr)


@pytest.mark.parametrize("text", DELTA_FILTERS)
def test_datafusion_selects_the_same_rows_with_the_delta_predicate_as_arrow_with_to_arrow(delta_table, text):
    from deltalake import DeltaTable, QueryBuilder

    expr = parse_filter(text, DELTA_ROWS.schema)
    query = QueryBuilder().register("t", DeltaTable(str(delta_table)))
    theirs = pa.table(query.execute(f"select * from t where {to_delta_predicate(expr)}").read_all())
    ours = DELTA_ROWS.filter(to_arrow(expr))
    assert _sorted_rows(theirs.select(ours.column_names)) == _sorted_rows(ours)


@pytest.mark.parametrize(
    "text", ["id not in (1, 2)", "ts > timestamp '2024-01-01 03:00:00'", "region starts with 'e'"]
)
def test_delta_delete_with_the_predicate_removes_exactly_the_matching_rows(delta_table, text):
    from deltalake import DeltaTable

    expr = parse_filter(text, DELTA_ROWS.schema)
    table = DeltaTable(str(delta_table))
    table.delete(to_delta_predicate(expr))
    remaining = DeltaTable(str(delta_table)).to_pyarrow_table()
    selected = ds.dataset(DELTA_ROWS).to_table(columns={"selected": to_arrow(expr)})["selected"]
    kept = DELTA_ROWS.filter(pc.invert(pc.fill_null(selected, False)))
    assert _sorted_rows(remaining.select(kept.column_names)) == _sorted_rows(kept)


@pytest.mark.parametrize(
    "text",
    [
        "day = date '2024-01-02'",
        "day != date '2024-01-02'",
        "day in ('2024-01-01', '2024-01-03') or day > '2024-01-02'",
        "not (day < '2024-01-02' or day = '2024-01-03')",
    ],
)
def test_delta_partition_filters_select_the_partitions_holding_matching_rows(delta_table, text):
    from deltalake import DeltaTable

    expr = parse_filter(text, DELTA_ROWS.schema)
    filters = to_delta_partition_filters(expr)
    assert filters is not None
    selected = DeltaTable(str(delta_table)).to_pyarrow_table(filters=filters)
    assert _sorted_rows(selected.select(DELTA_ROWS.column_names)) == _sorted_rows(
        DELTA_ROWS.filter(to_arrow(expr))
    )


@pytest.mark.parametrize("text", ["region is null", "region starts with 'e'", "not amount < 1", "true"])
def test_delta_partition_filters_are_none_when_tuples_cannot_say_it(text):
    assert to_delta_partition_filters(parse_filter(text, SCHEMA)) is None


def test_to_arrow_treats_a_dotted_top_level_name_as_that_column_when_given_the_schema():
    table = pa.table({"a.b": [1, 2], "a": [{"b": 2}, {"b": 1}]})
    expr = Comparison("=", "a.b", 1)
    assert table.filter(to_arrow(expr, table.schema))["a.b"].to_pylist() == [1]
    assert table.filter(to_arrow(expr))["a.b"].to_pylist() == [2]


@pytest.mark.spark
def test_spark_selects_the_same_rows_as_arrow(spark):
    # The run's one shared session (tests/conftest.py): never stop it here.
    rows = DELTA_ROWS.drop_columns(["local_ts"])
    ddl = "id long, region string, amount double, price decimal(10,2), day date, ts timestamp, address struct<city:string,zip:int>"
    frame = spark.createDataFrame(rows.to_pylist(), schema=ddl)
    for text in DELTA_FILTERS:
        if "local_ts" in text:
            continue
        expr = parse_filter(text, rows.schema)
        # ts is unique per row and the session time zone is UTC: a stable key to compare.
        theirs = sorted(
            r.key for r in frame.where(to_spark(expr)).selectExpr("cast(ts as string) as key").collect()
        )
        ours = sorted(v.strftime("%Y-%m-%d %H:%M:%S") for v in rows.filter(to_arrow(expr))["ts"].to_pylist())
        assert theirs == ours, text


@pytest.mark.parametrize(
    ("text", "value", "matches"),
    [
        ("x = 0.1", 0.1, False),
        ("x in (0.1)", 0.1, False),
        ("x in (7.5, 0.1)", 0.1, False),
        ("x not in (0.1)", 0.1, True),
        ("x in (0.5)", 0.5, True),
        ("x in (2, 0.5)", 0.5, True),
    ],
)
def test_in_on_a_float32_column_means_what_equality_means_for_rows_and_for_pruning(text, value, matches):
    # float32(0.1) is not the double 0.1: `=` compares in double (as Spark does), and so must
    # `in`; a file is pruned by statistics compared in double, so an `in` that matched
    # float32(0.1) would return the row from an unpruned read and lose it from a pruned one.
    schema = pa.schema([("x", pa.float32())])
    rows = pa.table({"x": pa.array([value], pa.float32())})
    stored = rows["x"][0].as_py()  # the float32 as a double, as the file's statistics hold it
    data = DataFile("f.parquet", 10, 1, lower_bounds={"x": stored}, upper_bounds={"x": stored})
    expr = parse_filter(text, schema)

    assert rows.filter(to_arrow(expr)).num_rows == (1 if matches else 0)
    if matches:
        assert might_match_file(expr, data, _spec())


@pytest.mark.parametrize(
    "shape",
    [
        lambda n: "(" * n + "x = 1" + ")" * n,
        lambda n: "not " * n + "x = 1",
        lambda n: "x = 1 and (" * n + "x = 1" + ")" * n,
    ],
    ids=["parentheses", "not", "and-parentheses"],
)
def test_a_filter_nested_past_the_limit_is_a_filter_error_naming_it(shape):
    """Issue 29, item 12: 300 levels exhausted the recursive parser's stack (RecursionError)."""
    from storage.spec.expressions.parser import MAX_DEPTH

    schema = pa.schema([("x", pa.int64())])
    rows = pa.table({"x": pa.array([1, 2], pa.int64())})

    deepest = parse_filter(shape(MAX_DEPTH), schema)
    for depth in (MAX_DEPTH + 1, 100_000):
        with pytest.raises(FilterError, match=f"more than {MAX_DEPTH} levels deep"):
            parse_filter(shape(depth), schema)

    assert rows.filter(to_arrow(deepest)).num_rows in (0, 1)  # the deepest accepted tree is usable
