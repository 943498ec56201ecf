"""always_matches_partition: a partition's values prove that every row matches a filter only
where that is true (checked against every source value the partition can hold), and prove
nothing they cannot (other transforms, nulls, NaN, predicates other than comparisons)."""

from __future__ import annotations

import datetime as dt
import math
import random
from decimal import Decimal

import pytest

from storage.spec.expressions import (
    AlwaysTrue,
    And,
    Comparison,
    In,
    IsNull,
    Not,
    Or,
    always_matches_partition,
    apply_transform,
)
from storage.spec.models import PartitionField, PartitionSpec

UTC = dt.UTC
DAY = PartitionSpec((PartitionField("ts_day", "ts", "day"),))
MIDNIGHT = dt.datetime(2024, 3, 5, tzinfo=UTC)


def _between(low, high):
    return And(Comparison(">=", "ts", low), Comparison("<", "ts", high))


@pytest.mark.parametrize(
    ("expr", "proved"),
    [
        (_between(MIDNIGHT, MIDNIGHT + dt.timedelta(days=1)), True),  # the bench's day filter
        (_between(MIDNIGHT - dt.timedelta(days=3), MIDNIGHT + dt.timedelta(days=2)), True),
        (_between(MIDNIGHT + dt.timedelta(microseconds=1), MIDNIGHT + dt.timedelta(days=1)), False),
        (_between(MIDNIGHT, MIDNIGHT + dt.timedelta(days=1) - dt.timedelta(microseconds=1)), False),
        (Comparison(">", "ts", MIDNIGHT), False),  # midnight itself is in the partition
        (Comparison(">", "ts", MIDNIGHT - dt.timedelta(microseconds=1)), True),
        # <= is proved only when the whole day lies below: precision beyond microseconds
        (Comparison("<=", "ts", MIDNIGHT + dt.timedelta(days=1) - dt.timedelta(microseconds=1)), False),
        (Comparison("<=", "ts", MIDNIGHT + dt.timedelta(days=1)), True),
        (Comparison("=", "ts", MIDNIGHT), False),
        (Comparison("!=", "ts", MIDNIGHT), False),
        (Comparison("!=", "ts", MIDNIGHT + dt.timedelta(days=1)), True),
        (Comparison("!=", "ts", MIDNIGHT - dt.timedelta(microseconds=1)), True),
        # the same instant written in another zone
        (Comparison(">=", "ts", dt.datetime(2024, 3, 5, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))), True),
        (Comparison(">=", "other", MIDNIGHT - dt.timedelta(days=9)), False),  # no partition field
        (Or(Comparison(">=", "other", 1), Comparison(">=", "ts", MIDNIGHT)), True),
        (And(Comparison(">=", "other", 1), Comparison(">=", "ts", MIDNIGHT)), False),
        (In("ts", (MIDNIGHT,)), False),
        (Not(Comparison("<", "ts", MIDNIGHT)), False),  # only what it proves directly
        (IsNull("ts"), False),
        (AlwaysTrue(), True),
        (None, True),
    ],
)
def test_a_day_partition_proves_only_the_comparisons_its_whole_day_satisfies(expr, proved):
    assert always_matches_partition(expr, DAY, {"ts_day": dt.date(2024, 3, 5)}) is proved


def test_nothing_is_proved_for_a_null_or_missing_partition_value_or_values_that_do_not_compare():
    expr = Comparison(">=", "ts", MIDNIGHT - dt.timedelta(days=1))
    assert not always_matches_partition(expr, DAY, {"ts_day": None})
    assert not always_matches_partition(expr, DAY, {})
    assert not always_matches_partition(
        Comparison(">=", "ts", "2024-01-01"), DAY, {"ts_day": dt.date(2024, 3, 5)}
    )
    assert not always_matches_partition(Comparison(">=", "ts", 5), DAY, {"ts_day": dt.date(2024, 3, 5)})


def test_identity_partitions_prove_by_their_exact_value():
    spec = PartitionSpec(
        (PartitionField("region", "region", "identity"), PartitionField("x", "x", "identity"))
    )
    values = {"region": "eu", "x": 2.5}
    assert always_matches_partition(Comparison("=", "region", "eu"), spec, values)
    assert always_matches_partition(
        And(Comparison("=", "region", "eu"), Comparison(">", "x", 2.0)), spec, values
    )
    assert not always_matches_partition(Comparison("=", "region", "us"), spec, values)
    assert always_matches_partition(Comparison("!=", "region", "us"), spec, values)
    assert not always_matches_partition(Comparison(">", "x", math.nan), spec, values)
    assert not always_matches_partition(Comparison("!=", "x", math.nan), spec, values)
    assert not always_matches_partition(Comparison("!=", "x", 1.0), spec, {"region": "eu", "x": math.nan})
    assert not always_matches_partition(Comparison(">", "x", Decimal("1")), spec, {"x": Decimal("NaN")})
    assert not always_matches_partition(Comparison("=", "region", 5), spec, values)  # str vs int: not proved


def test_identity_timestamps_are_the_microsecond_they_were_read_as_and_kinds_must_match():
    """A nanosecond column's value is floored to the microsecond it is read as: = and <= at that
    microsecond are not proved, whole-range comparisons are; mixed kinds prove nothing."""
    spec = PartitionSpec((PartitionField("ts", "ts", "identity"), PartitionField("d", "d", "identity")))
    at = MIDNIGHT + dt.timedelta(microseconds=1)
    values = {"ts": at, "d": dt.date(2024, 3, 5)}
    assert not always_matches_partition(Comparison("=", "ts", at), spec, values)
    assert not always_matches_partition(Comparison("<=", "ts", at), spec, values)
    assert always_matches_partition(Comparison("<=", "ts", at + dt.timedelta(microseconds=1)), spec, values)
    assert always_matches_partition(Comparison(">=", "ts", at), spec, values)
    assert always_matches_partition(Comparison("!=", "ts", MIDNIGHT), spec, values)
    assert not always_matches_partition(Comparison(">=", "ts", at.replace(tzinfo=None)), spec, values)
    assert not always_matches_partition(Comparison("!=", "d", MIDNIGHT), spec, values)  # date vs datetime
    assert always_matches_partition(Comparison("=", "d", dt.date(2024, 3, 5)), spec, values)
    flags = PartitionSpec((PartitionField("flag", "flag", "identity"),))
    assert not always_matches_partition(Comparison("!=", "flag", 2), flags, {"flag": True})
    assert always_matches_partition(Comparison("=", "flag", True), flags, {"flag": True})


def test_date_literals_on_day_month_and_year_fields():
    for transform, value in (("day", dt.date(2024, 3, 5)), ("month", 650), ("year", 54)):
        spec = PartitionSpec((PartitionField("d_part", "d", transform),))
        # 650 months and 54 years after 1970: March 2024, 2024
        first = {"day": dt.date(2024, 3, 5), "month": dt.date(2024, 3, 1), "year": dt.date(2024, 1, 1)}[
            transform
        ]
        after = {"day": dt.date(2024, 3, 6), "month": dt.date(2024, 4, 1), "year": dt.date(2025, 1, 1)}[
            transform
        ]
        assert always_matches_partition(_on("d", first, after), spec, {"d_part": value}), transform
        assert not always_matches_partition(
            _on("d", first + dt.timedelta(days=1), after), spec, {"d_part": value}
        ), transform
    december = PartitionSpec((PartitionField("m", "d", "month"),))
    assert always_matches_partition(_on("d", dt.date(2023, 12, 1), dt.date(2024, 1, 1)), december, {"m": 647})
    hour = PartitionSpec((PartitionField("h", "ts", "hour"),))
    at = (MIDNIGHT.replace(tzinfo=None) - dt.datetime(1970, 1, 1)) // dt.timedelta(hours=1)
    assert always_matches_partition(_between(MIDNIGHT, MIDNIGHT + dt.timedelta(hours=1)), hour, {"h": at})
    assert not always_matches_partition(
        _between(MIDNIGHT, MIDNIGHT + dt.timedelta(minutes=59)), hour, {"h": at}
    )


def _on(column, first, after):
    return And(Comparison(">=", column, first), Comparison("<", column, after))


OPS = ("=", "!=", "<", "<=", ">", ">=")


def _holds(op: str, value, literal) -> bool:
    return {
        "=": value == literal,
        "!=": value != literal,
        "<": value < literal,
        "<=": value <= literal,
        ">": value > literal,
        ">=": value >= literal,
    }[op]


@pytest.mark.parametrize("transform", ["day", "hour", "month", "year", "identity"])
def test_whatever_is_proved_holds_for_every_value_the_partition_can_hold(transform):
    """Soundness: random timestamps and filters near partition boundaries; whenever a partition
    is proved, the filter holds for the first and last microsecond of its range and for values
    between (the values whose transform is the partition's value)."""
    rng = random.Random(transform)
    spec = PartitionSpec((PartitionField("p", "ts", transform),))
    proved = 0
    for _ in range(600):
        row = MIDNIGHT + dt.timedelta(
            seconds=rng.randint(-400 * 86400, 400 * 86400), microseconds=rng.randint(0, 999_999)
        )
        value = apply_transform(transform, row)
        # literals at and around the partition's bounds, and far off either side
        around = _same_partition(transform, row, rng)
        last = around[1] if len(around) > 1 else around[0]  # identity: the row alone
        start, end = around[0], last + dt.timedelta(microseconds=1)
        micro, far = dt.timedelta(microseconds=1), dt.timedelta(days=400)
        near = (
            start,
            end,
            start - micro,
            start + micro,
            end - micro,
            end + micro,
            row,
            start - far,
            end + far,
        )
        literals = [rng.choice(near) for _ in range(2)]
        expr = And(*(Comparison(rng.choice(OPS), "ts", literal) for literal in literals))
        if not always_matches_partition(expr, spec, {"p": value}):
            continue
        proved += 1
        for candidate in _same_partition(transform, row, rng):
            assert apply_transform(transform, candidate) == value
            assert all(_holds(c.op, candidate, c.value) for c in expr.children), (transform, expr, candidate)
    assert proved > 30  # the check above ran often enough to mean something


def _same_partition(transform: str, row: dt.datetime, rng: random.Random) -> list[dt.datetime]:
    """Values in the same partition as ``row``: its range's first and last microsecond and a few
    between (just ``row`` for identity)."""
    naive = row.astimezone(UTC).replace(tzinfo=None)
    if transform == "identity":
        return [row]
    if transform == "hour":
        start = naive.replace(minute=0, second=0, microsecond=0)
        end = start + dt.timedelta(hours=1)
    elif transform == "day":
        start = naive.replace(hour=0, minute=0, second=0, microsecond=0)
        end = start + dt.timedelta(days=1)
    elif transform == "month":
        start = naive.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = (start + dt.timedelta(days=32)).replace(day=1)
    else:
        start = naive.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start.replace(year=start.year + 1)
    last = end - dt.timedelta(microseconds=1)
    between = [start + (last - start) * rng.random() for _ in range(3)]
    return [moment.replace(tzinfo=UTC) for moment in (start, last, *between)]
