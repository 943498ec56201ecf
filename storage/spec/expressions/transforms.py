"""Partition transforms and the inclusive projection of one predicate through one of them.

Transform results follow the convention of ``storage.spec.models``: identity keeps the value;
year, month and hour are ints counted from 1970 (UTC for timestamptz); day is a ``datetime.date``;
bucket[N] an int (Iceberg's 32-bit murmur3 hash); truncate[W] keeps the source type.

An inclusive projection of ``p(col)`` onto partition field ``t(col)`` is a predicate ``q`` on the
partition value such that every row satisfying ``p`` lives in a partition satisfying ``q``. When
no useful ``q`` exists the answer is ``AlwaysTrue`` (prunes nothing, never wrong).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
import uuid
from collections.abc import Callable
from typing import Any

from storage.spec.expressions.tree import (
    NEGATED_OP,
    AlwaysTrue,
    Comparison,
    Expression,
    In,
    IsNull,
    Not,
    NotIn,
    NotNull,
    Predicate,
    StartsWith,
)
from storage.spec.models import PartitionField

UTC = dt.UTC
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=UTC)
_TRANSFORM = re.compile(r"^\s*(?P<name>[a-z_]+)\s*(?:\[\s*(?P<param>\d+)\s*\])?\s*$", re.IGNORECASE)
_TIME_TRANSFORMS = ("year", "month", "day", "hour")
_ALIASES = {"years": "year", "months": "month", "days": "day", "hours": "hour", "date": "day"}


@functools.lru_cache(maxsize=256)
def parse_transform(transform: str) -> tuple[str, int | None]:
    """``"bucket[16]"`` -> ``("bucket", 16)``; unknown text gives ``(text, None)``."""
    match = _TRANSFORM.match(transform or "identity")
    if match is None:
        return transform, None
    name = match["name"].lower()
    return _ALIASES.get(name, name), int(match["param"]) if match["param"] else None


def apply_transform(transform: str, value: Any) -> Any:
    """The partition value of a row whose source column holds ``value``."""
    name, param = parse_transform(transform)
    if value is None or name == "void":
        return None
    if name == "identity":
        return value
    if name in _TIME_TRANSFORMS:
        return _time_transform(name, value)
    if name == "truncate" and param:
        result = _truncate(param, value)
        if result is None:
            raise ValueError(f"truncate does not apply to {type(value).__name__} values")
        return result
    if name == "bucket" and param:
        hashed = bucket_hash(param, value)
        if hashed is None:
            raise ValueError(f"cannot compute bucket[{param}] of {type(value).__name__} value {value!r}")
        return hashed
    raise ValueError(f"unknown partition transform {transform!r}")


def utc_naive(value: dt.datetime) -> dt.datetime:
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo is not None else value


def _time_transform(name: str, value: Any) -> Any:
    if isinstance(value, dt.datetime):
        value = utc_naive(value)
        if name == "hour":
            return (value - _EPOCH) // dt.timedelta(hours=1)
        day = value.date()
    elif isinstance(value, dt.date):
        if name == "hour":
            return (value - _EPOCH_DATE).days * 24
        day = value
    else:
        return None
    if name == "year":
        return day.year - 1970
    if name == "month":
        return (day.year - 1970) * 12 + day.month - 1
    return day


def _truncate(width: int, value: Any) -> Any:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value - value % width  # Python's % floors, as Iceberg's truncate does for negatives
    if isinstance(value, str | bytes):
        return value[:width]
    return None  # decimals need the column's scale, which a bare value does not carry


def bucket_hash(num_buckets: int, value: Any) -> int | None:
    """Iceberg's bucket of ``value`` (pyiceberg computes the murmur3 hash), None if not hashable."""
    from pyiceberg import types as it
    from pyiceberg.transforms import BucketTransform

    source: Any
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        source = it.LongType()  # Iceberg hashes int and long alike, as 8 little-endian bytes
    elif isinstance(value, str):
        source = it.StringType()
    elif isinstance(value, bytes):
        source = it.BinaryType()
    elif isinstance(value, dt.datetime):
        source = it.TimestamptzType() if value.tzinfo is not None else it.TimestampType()
    elif isinstance(value, dt.date):
        source = it.DateType()
    elif isinstance(value, dt.time):
        source = it.TimeType()
    elif isinstance(value, uuid.UUID):
        source = it.UUIDType()
    else:
        return None  # float and bool are not bucketable; decimals depend on the column scale
    return BucketTransform(num_buckets).transform(source)(value)


def _previous(value: Any) -> Any:
    """The largest value below ``value`` in its type (for ``x < v`` -> ``t(x) <= t(v - 1)``)."""
    if isinstance(value, dt.datetime):
        return value - dt.timedelta(microseconds=1)
    if isinstance(value, dt.date):
        return value - dt.timedelta(days=1)
    if isinstance(value, int) and not isinstance(value, bool):
        return value - 1
    return value


def _next(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value + dt.timedelta(microseconds=1)
    if isinstance(value, dt.date):
        return value + dt.timedelta(days=1)
    if isinstance(value, int) and not isinstance(value, bool):
        return value + 1
    return value


def project(field: PartitionField, predicate: Predicate, negated: bool) -> Expression:
    """Inclusive projection of ``predicate`` (or of its negation) onto ``field``."""
    name, param = parse_transform(field.transform)
    target = field.name
    if name == "void":
        return AlwaysTrue()
    if isinstance(predicate, IsNull | NotNull):
        # Every transform maps null to null and only null to null.
        return IsNull(target) if isinstance(predicate, IsNull) != negated else NotNull(target)
    if name == "identity":
        renamed = _renamed(predicate, target)
        return Not(renamed) if negated else renamed
    if negated:
        if isinstance(predicate, StartsWith):
            return _project_not_starts_with(name, param, target, predicate.prefix)
        if isinstance(predicate, Comparison):
            if isinstance(predicate.value, float):
                return AlwaysTrue()  # NaN rows satisfy a negated comparison; no transform handles them
            predicate = Comparison(NEGATED_OP[predicate.op], predicate.column, predicate.value)
        elif isinstance(predicate, In):
            predicate = NotIn(predicate.column, predicate.values)
        elif isinstance(predicate, NotIn):
            predicate = In(predicate.column, predicate.values)
    if name in _TIME_TRANSFORMS:
        return _project_monotonic(predicate, target, lambda v: _time_transform(name, v))
    if name == "truncate" and param:
        if isinstance(predicate, StartsWith):
            prefix = predicate.prefix
            return (
                StartsWith(target, prefix)
                if len(prefix) <= param
                else Comparison("=", target, prefix[:param])
            )
        return _project_monotonic(predicate, target, lambda v: _truncate(param, v))
    if name == "bucket" and param:
        return _project_bucket(predicate, target, param)
    return AlwaysTrue()


def _renamed(predicate: Predicate, target: str) -> Predicate:
    if isinstance(predicate, Comparison):
        return Comparison(predicate.op, target, predicate.value)
    if isinstance(predicate, In):
        return In(target, predicate.values)
    if isinstance(predicate, NotIn):
        return NotIn(target, predicate.values)
    if isinstance(predicate, StartsWith):
        return StartsWith(target, predicate.prefix)
    if isinstance(predicate, IsNull):
        return IsNull(target)
    return NotNull(target)


def _project_monotonic(predicate: Predicate, target: str, transform: Callable[[Any], Any]) -> Expression:
    """Projection through a non-decreasing transform (time transforms, truncate)."""

    def image(value: Any) -> Any:
        try:
            return transform(value)
        except (TypeError, ValueError, OverflowError):
            return None

    if isinstance(predicate, Comparison):
        op, value = predicate.op, predicate.value
        if op == "!=" or (isinstance(value, float) and math.isnan(value)):
            return AlwaysTrue()
        # x < v implies t(x) <= t(v - 1), a tighter bound than t(v) when v sits on a boundary.
        source = _previous(value) if op == "<" else _next(value) if op == ">" else value
        projected = image(source)
        if projected is None:
            return AlwaysTrue()
        projected_op = {"<": "<=", "<=": "<=", ">": ">=", ">=": ">=", "=": "="}[op]
        return Comparison(projected_op, target, projected)
    if isinstance(predicate, In):
        images = [image(v) for v in predicate.values]
        if any(i is None for i in images):
            return AlwaysTrue()
        return In(target, tuple(dict.fromkeys(images)))
    return AlwaysTrue()  # not-in, starts with on a non-string transform


def _project_not_starts_with(name: str, param: int | None, target: str, prefix: str | bytes) -> Expression:
    # A value not starting with p has a truncation not starting with p when p fits in the width.
    if name == "truncate" and param and len(prefix) <= param:
        return Not(StartsWith(target, prefix))
    return AlwaysTrue()


def _project_bucket(predicate: Predicate, target: str, num_buckets: int) -> Expression:
    if isinstance(predicate, Comparison) and predicate.op == "=":
        bucket = bucket_hash(num_buckets, predicate.value)
        return AlwaysTrue() if bucket is None else Comparison("=", target, bucket)
    if isinstance(predicate, In):
        buckets = [bucket_hash(num_buckets, v) for v in predicate.values]
        if any(b is None for b in buckets):
            return AlwaysTrue()
        return In(target, tuple(dict.fromkeys(buckets)))
    return AlwaysTrue()
