"""Axes for the server-side charts: time ticks at round instants, value ticks at round numbers,
and file-size bars scaled to the sizes a table has.

Plain functions of plain values (no Django), so the rules are tested with exact answers.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping

_SECOND = 1
_MINUTE = 60
_HOUR = 3600
_DAY = 86400
#: Tick steps in seconds, smallest first; past 14 days the steps are months (below).
_TIME_STEPS = (
    (1, _SECOND),
    (5, _SECOND),
    (15, _SECOND),
    (30, _SECOND),
    (1, _MINUTE),
    (5, _MINUTE),
    (15, _MINUTE),
    (30, _MINUTE),
    (1, _HOUR),
    (3, _HOUR),
    (6, _HOUR),
    (12, _HOUR),
    (1, _DAY),
    (2, _DAY),
    (7, _DAY),
    (14, _DAY),
)
_MONTH_STEPS = (1, 3, 6, 12, 24, 60)


def time_ticks(start: dt.datetime, end: dt.datetime, *, most: int = 6) -> list[tuple[dt.datetime, str]]:
    """Round instants between ``start`` and ``end`` (UTC), at most ``most`` of them, each with a
    label as short as its step allows: "14:05:30", "14:00" (with the day where it changes),
    "Nov 28", "Nov 2026". Empty when the span is under a second."""
    start, end = start.astimezone(dt.UTC), end.astimezone(dt.UTC)
    span = (end - start).total_seconds()
    if span < 1:
        return []
    for count, unit in _TIME_STEPS:
        step = count * unit
        if span / step <= most:
            first = math.ceil(start.timestamp() / step) * step
            ticks = [
                dt.datetime.fromtimestamp(t, dt.UTC)
                for t in range(int(first), int(end.timestamp()) + 1, step)
            ]
            return _labelled(ticks, step)
    return _month_ticks(start, end, most)


def _labelled(ticks: list[dt.datetime], step: int) -> list[tuple[dt.datetime, str]]:
    if step >= _DAY:
        return [(t, f"{t:%b} {t.day}") for t in ticks]
    clock = "%H:%M:%S" if step < _MINUTE else "%H:%M"
    labelled, day = [], None
    for t in ticks:
        label = t.strftime(clock)
        if t.date() != day:
            label = f"{t:%b} {t.day} {label}"
            day = t.date()
        labelled.append((t, label))
    return labelled


def _month_ticks(start: dt.datetime, end: dt.datetime, most: int) -> list[tuple[dt.datetime, str]]:
    months = (end.year - start.year) * 12 + end.month - start.month + 1
    step = next(
        (s for s in _MONTH_STEPS if months / s <= most), _MONTH_STEPS[-1] * math.ceil(months / most / 60)
    )
    index = start.year * 12 + start.month - 1
    index += -index % step
    if dt.datetime(index // 12, index % 12 + 1, 1, tzinfo=dt.UTC) < start:
        index += step
    ticks = []
    while True:
        tick = dt.datetime(index // 12, index % 12 + 1, 1, tzinfo=dt.UTC)
        if tick > end:
            break
        ticks.append((tick, f"{tick:%b %Y}" if step < 12 else f"{tick:%Y}"))
        index += step
    return ticks


def value_ticks(high: float, *, as_bytes: bool = False, most: int = 4) -> list[float]:
    """0 and round values up to the first at or above ``high``: steps of 1, 2 or 5 times a power
    of ten, or for bytes of a power of 1024 (so ticks read "256 MiB", not "268.4 MB")."""
    if high <= 0:
        return [0.0, 1.0]
    unit = 1.0
    if as_bytes:
        while high / unit >= 1024:
            unit *= 1024
    rough = high / unit / most
    power = 10 ** math.floor(math.log10(rough)) if rough > 0 else 1
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough) * unit
    if not as_bytes and step < 1 and high >= 1:
        step = 1.0
    count = math.ceil(high / step - 1e-9)
    return [i * step for i in range(count + 1)]


def binary_size(value: float) -> str:
    """Bytes in binary units, the console's way ("115.2 KiB", "128.0 MiB", "512 B")."""
    size, unit = float(value), 0
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    while abs(size) >= 1024 and unit < len(units) - 1:
        size /= 1024
        unit += 1
    return f"{int(size)} {units[unit]}" if unit == 0 else f"{size:.1f} {units[unit]}"


def _power_of_two(exponent: int) -> tuple[int, str]:
    """2**exponent as (number, unit): 2**25 -> (32, "MiB")."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    unit = min(exponent // 10, len(units) - 1)
    return 2 ** (exponent - unit * 10), units[unit]


def size_range_label(low_exponent: int, high_exponent: int) -> str:
    """The label of the sizes from 2**low up to 2**high bytes: "32–64 KiB", "512 KiB–1 MiB"."""
    low, low_unit = _power_of_two(low_exponent)
    high, high_unit = _power_of_two(high_exponent)
    if low_exponent == 0:
        return f"< {high} {high_unit}"
    if low_unit == high_unit:
        return f"{low}–{high} {high_unit}"
    return f"{low} {low_unit}–{high} {high_unit}"


def size_bars(
    log2: Mapping[str, int] | Mapping[int, int], *, most: int = 10, fewest: int = 5
) -> list[tuple[int, int, int]]:
    """Bars of file counts over the power-of-two sizes present: ``(low exponent, high exponent,
    files)``, a bar holding ``[2**low, 2**high)`` bytes. The bars span the table's own smallest to
    largest file (widened to ``fewest`` bars around them), neighbours merged so there are at most
    ``most``."""
    counts = {int(k): int(v) for k, v in log2.items() if int(v)}
    if not counts:
        return []
    low, high = min(counts), max(counts)
    missing = fewest - (high - low + 1)
    if missing > 0:
        low = max(low - missing // 2, 0)
        high = max(high, low + fewest - 1)
    group = math.ceil((high - low + 1) / most)
    bars = []
    for start in range(low, high + 1, group):
        files = sum(counts.get(e, 0) for e in range(start, start + group))
        bars.append((start, start + group, files))
    return bars


def small_bars(bars: list[tuple[int, int, int]], small_file_bytes: int) -> int | None:
    """The index of the last bar whose files are all under ``small_file_bytes``, None when none is."""
    last = None
    for index, (_low, high, _files) in enumerate(bars):
        if 2**high <= small_file_bytes:
            last = index
    return last
