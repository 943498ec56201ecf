"""Property tests: filter text round-trips, and pruning never drops a file or partition holding a
row that the exact row filter (``to_arrow``) selects."""

from __future__ import annotations

import datetime as dt
import math

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.spec.expressions import (
    And,
    Comparison,
    Expression,
    In,
    IsNull,
    Not,
    NotIn,
    NotNull,
    Or,
    StartsWith,
    apply_transform,
    might_match_partition,
    might_match_partition_bounds,
    might_match_stats,
    parse_filter,
    to_arrow,
    to_sql,
)
from storage.spec.models import PartitionField, PartitionSpec

BOUNDED = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
START = dt.date(2023, 12, 28)

ints = st.integers(-6, 6)
names = st.text(alphabet="abc", max_size=4)
scores = st.sampled_from([-1.5, 0.0, 0.5, 1.0, 2.25, float("nan")])
days = st.integers(0, 8).map(lambda n: START + dt.timedelta(days=n))
timestamps = st.integers(0, 6 * 24).map(
    lambda h: dt.datetime(2023, 12, 30, tzinfo=dt.UTC) + dt.timedelta(hours=h, microseconds=h % 3)
)
VALUES = {"id": ints, "name": names, "score": scores, "day": days, "ts": timestamps}
# Literals avoid NaN: a NaN literal is legal but never prunes, so it would only dilute the search.
LITERALS = {**VALUES, "score": st.sampled_from([-1.5, 0.0, 0.5, 1.0, 2.25, 3.0])}


@st.composite
def leaves(draw: st.DrawFn) -> Expression:
    column = draw(st.sampled_from(list(VALUES)))
    literal = LITERALS[column]
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "not in", "is null", "not null", "starts"]))
    if kind == "cmp":
        return Comparison(draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="])), column, draw(literal))
    if kind in ("in", "not in"):
        values = tuple(draw(st.lists(literal, max_size=3)))
        return In(column, values) if kind == "in" else NotIn(column, values)
    if kind == "is null":
        return IsNull(column)
    if kind == "not null":
        return NotNull(column)
    return StartsWith("name", draw(names))


expressions = st.recursive(
    leaves(),
    lambda children: st.one_of(
        st.lists(children, min_size=2, max_size=3).map(lambda c: And(*c)),
        st.lists(children, min_size=2, max_size=3).map(lambda c: Or(*c)),
        children.map(Not),
    ),
    max_leaves=6,
)


def _maybe_null(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.none(), values, values)


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    rows = draw(st.integers(1, 6))
    columns = {
        name: draw(st.lists(_maybe_null(values), min_size=rows, max_size=rows))
        for name, values in VALUES.items()
    }
    return pa.table(columns, schema=SCHEMA)


def _matches(table: pa.Table, expr: Expression) -> int:
    return table.filter(to_arrow(expr)).num_rows


def _stats(table: pa.Table, truncate_strings_to: int | None) -> dict:
    """Per-column min/max/null count as a writer records them (NaN left out of float bounds,
    as Iceberg does; pyarrow's min_max skips NaN unless every value is NaN)."""
    lower, upper, nulls = {}, {}, {}
    for name in table.column_names:
        column = table[name]
        nulls[name] = column.null_count
        low, high = (s.as_py() for s in pc.min_max(column).values())
        if isinstance(low, str) and truncate_strings_to is not None:
            # Delta writers keep only a prefix of long strings, for the maximum too.
            low, high = low[:truncate_strings_to], high[:truncate_strings_to]
        if low is not None:
            lower[name], upper[name] = low, high
    return {"lower": lower, "upper": upper, "null_counts": nulls, "record_count": table.num_rows}


@BOUNDED
@given(expr=expressions)
def test_filter_text_reads_back_to_the_same_expression(expr):
    assert parse_filter(to_sql(expr), SCHEMA) == expr


@BOUNDED
@given(
    name=st.text(min_size=1, max_size=8),
    value=st.one_of(st.text(max_size=8), st.integers(), st.floats(allow_nan=False), st.dates()),
)
def test_any_column_name_and_literal_survive_the_round_trip(name, value):
    type_ = {str: pa.string(), int: pa.int64(), float: pa.float64(), dt.date: pa.date32()}[type(value)]
    schema = pa.schema([(name, type_)])
    expr = Or(Comparison("=", name, value), Not(In(name, (value,))))
    assert parse_filter(to_sql(expr), schema) == expr


@BOUNDED
@given(table=tables(), expr=expressions, truncate=st.sampled_from([None, 1, 2]))
def test_stats_pruning_never_drops_a_file_with_a_matching_row(table, expr, truncate):
    if _matches(table, expr):
        assert might_match_stats(expr, **_stats(table, truncate))


SPECS = [
    PartitionSpec((PartitionField("name", "name"), PartitionField("day", "day"))),
    PartitionSpec((PartitionField("day_day", "day", "day"), PartitionField("ts_day", "ts", "day"))),
    PartitionSpec((PartitionField("ts_hour", "ts", "hour"), PartitionField("ts_month", "ts", "month"))),
    PartitionSpec(
        (PartitionField("name_trunc", "name", "truncate[2]"), PartitionField("id_trunc", "id", "truncate[4]"))
    ),
    PartitionSpec(
        (PartitionField("id_bucket", "id", "bucket[3]"), PartitionField("day_year", "day", "year"))
    ),
    PartitionSpec((PartitionField("score", "score"), PartitionField("id", "id"))),
]


def _partition_values(spec: PartitionSpec, row: dict) -> dict:
    return {f.name: apply_transform(f.transform, row[f.source_column]) for f in spec.fields}


@BOUNDED
@given(table=tables(), expr=expressions, spec=st.sampled_from(SPECS))
def test_partition_pruning_never_drops_a_partition_with_a_matching_row(table, expr, spec):
    matching = table.filter(to_arrow(expr)).to_pylist()
    for row in matching:
        assert might_match_partition(expr, spec, _partition_values(spec, row)), row
    if matching:
        # The manifest view: bounds of the partition values over all rows of the table.
        values = [_partition_values(spec, row) for row in table.to_pylist()]
        lower, upper, contains_null = {}, {}, {}
        for field in spec.names:
            present = [v[field] for v in values if v[field] is not None and not _is_nan(v[field])]
            contains_null[field] = any(v[field] is None for v in values)
            if present:
                lower[field], upper[field] = min(present), max(present)
        assert might_match_partition_bounds(expr, spec, lower, upper, contains_null)


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)
