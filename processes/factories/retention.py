"""Durations and listings shared by the expiry and cleanup processes.

Ages (``max-age``, ``min-age``) are given either as a whole number of seconds (``432000``) or as an
ISO 8601 duration of weeks, days, hours, minutes and seconds (``P5D``, ``PT36H``, ``P1DT12H``);
years and months are refused (their length varies).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

_ISO_DURATION = re.compile(
    r"^P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)

#: JSON Schema of an age property: seconds, or an ISO 8601 duration string.
AGE_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": _ISO_DURATION.pattern},
    ]
}

#: At most this many paths are listed in a summary (counts are always complete).
SUMMARY_LIST_LIMIT = 1000


def parse_duration(value: Any) -> dt.timedelta:
    """Seconds (int, float or digit string) or an ISO 8601 duration (``P5D``, ``PT12H``)."""
    if isinstance(value, dt.timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {value}")
        return dt.timedelta(seconds=value)
    text = str(value).strip().upper()
    if text.isdigit():
        return dt.timedelta(seconds=int(text))
    match = _ISO_DURATION.match(text)
    if not match or text in ("P", "PT"):
        raise ValueError(f"{value!r} is not a duration: use seconds or ISO 8601 such as P5D or PT12H")
    parts = {k: float(v) for k, v in match.groupdict().items() if v}
    return dt.timedelta(**parts)


def summary_list(paths: list[str]) -> list[str]:
    return sorted(paths)[:SUMMARY_LIST_LIMIT]
