"""Server-side SVG charts: no JavaScript, no CDN, readable without scripts and CSP-friendly.

Each function returns safe SVG markup sized by its viewBox (it scales with the page). Instants sit
at their time on a UTC axis with round ticks (``chart_axes``); every dot and bar carries its exact
values in a ``<title>``, which browsers show on hover and screen readers read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from console.chart_axes import binary_size, time_ticks, value_ticks

OPERATION_COLOURS = {
    "append": "#1a7f37",
    "overwrite": "#b35900",
    "delete": "#cf222e",
    "replace": "#8250df",
    "merge": "#0b5cd5",
    "write": "#1a7f37",
    "optimize": "#8250df",
    "update": "#0b5cd5",
}
STATUS_COLOURS = {"SUCCESS": "#1a7f37", "FAILED": "#cf222e", "CANCELED": "#b35900", "KILLED": "#cf222e"}


def _compact(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}".rstrip("0").rstrip(".") + unit
    return f"{value:.0f}" if value == int(value) else f"{value:.2g}"


def _bytes(value: float) -> str:
    return binary_size(value).replace(".0 ", " ")


def _empty(width: int, title: str, why: str, text: str) -> SafeString:
    return mark_safe(
        f'<svg viewBox="0 0 {width} 40" class="chart" role="img" aria-label="{escape(title)}: {why}">'
        f'<text x="8" y="24" class="chart-empty">{escape(text)}</text></svg>'
    )


class _Frame:
    """A plot area: time on x (or positions when the instants are within a second of each other),
    values on y from 0 to the round tick above the highest."""

    def __init__(self, times: list[dt.datetime], high: float, *, as_bytes: bool, box: tuple[int, ...]):
        self.width, self.height, self.left, self.right, self.top, self.bottom = box
        self.inner_w = self.width - self.left - self.right
        self.inner_h = self.height - self.top - self.bottom
        self.times = times
        self.ticks = time_ticks(times[0], times[-1]) if times else []
        self.start, self.span = times[0], (times[-1] - times[0]).total_seconds()
        self.values = value_ticks(high, as_bytes=as_bytes)
        self.label = _bytes if as_bytes else _compact

    def x(self, index: int, at: dt.datetime | None = None) -> float:
        if self.span >= 1:
            return (
                self.left
                + ((at or self.times[index]) - self.start).total_seconds() / self.span * self.inner_w
            )
        return self.left + index * self.inner_w / max(len(self.times) - 1, 1)

    def y(self, value: float) -> float:
        return self.top + self.inner_h - value / (self.values[-1] or 1) * self.inner_h

    def axes(self) -> str:
        base = self.top + self.inner_h
        parts = [
            f'<line x1="{self.left}" y1="{base}" x2="{self.width - self.right}" y2="{base}" class="axis"/>'
        ]
        for value in self.values:
            y = self.y(value)
            if value:
                parts.append(
                    f'<line x1="{self.left}" y1="{y:.1f}" x2="{self.width - self.right}" y2="{y:.1f}" class="grid"/>'
                )
            parts.append(
                f'<text x="{self.left - 6}" y="{y + 3:.1f}" class="tick" text-anchor="end">'
                f"{escape(self.label(value))}</text>"
            )
        if self.span >= 1:
            for at, text in self.ticks:
                x = self.x(0, at)
                parts.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" class="axis"/>')
                parts.append(
                    f'<text x="{x:.1f}" y="{self.height - 6}" class="tick" text-anchor="middle">{escape(text)}</text>'
                )
            parts.append(
                f'<text x="{self.width - self.right}" y="{self.top - 6}" class="tick" text-anchor="end">UTC</text>'
            )
        else:
            parts.append(
                f'<text x="{self.left + self.inner_w / 2:.1f}" y="{self.height - 6}" class="tick" '
                f'text-anchor="middle">{self.times[0]:%Y-%m-%d %H:%M:%S} UTC</text>'
            )
        return "".join(parts)


def _time(text: str) -> dt.datetime:
    at = dt.datetime.fromisoformat(text)
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


def timeline_svg(series: Sequence[dict], key: str, title: str, *, as_bytes: bool = False) -> SafeString:
    """A line of ``key`` over the instants at their commit times, one dot per instant coloured by
    its operation, the exact value and time on hover."""
    width = 640
    if not series:
        return _empty(width, title, "no data", "No snapshots yet")
    if any(point.get(key) is None for point in series):
        return _empty(
            width,
            title,
            "not known",
            "Not known per snapshot for this table: its files hold rows that later rows replace on read",
        )
    values = [float(point[key]) for point in series]
    frame = _Frame(
        [_time(point["at"]) for point in series],
        max(values),
        as_bytes=as_bytes,
        box=(width, 160, 60, 14, 30, 24),
    )
    points = " ".join(f"{frame.x(i):.1f},{frame.y(v):.1f}" for i, v in enumerate(values))
    radius = 3 if len(series) <= 60 else 1.6  # many snapshots: small dots keep the line readable
    exact = (lambda v: f"{binary_size(v)} ({int(v):,} bytes)") if as_bytes else (lambda v: f"{v:,.0f}")
    dots = []
    for i, (point, value) in enumerate(zip(series, values, strict=True)):
        colour = OPERATION_COLOURS.get(point["operation"], "#5f6b7c")
        tip = escape(f"{exact(value)} · {point['operation']} · snapshot {point['id']} · {point['at'][:19]}")
        dots.append(
            f'<circle cx="{frame.x(i):.1f}" cy="{frame.y(value):.1f}" r="{radius}" fill="{colour}">'
            f"<title>{tip}</title></circle>"
        )
    return mark_safe(
        f'<svg viewBox="0 0 {width} {frame.height}" class="chart" role="img" aria-label="{escape(title)}">'
        f'<text x="{frame.left}" y="14" class="chart-title">{escape(title)}</text>'
        + frame.axes()
        + f'<polyline points="{points}" class="line"/>'
        + "".join(dots)
        + "</svg>"
    )


def histogram_svg(
    labels: Sequence[str],
    counts: Sequence[int],
    *,
    title: str,
    marker_after: int | None = None,
    marker_label: str = "",
) -> SafeString:
    """Bars per bucket; a dashed line after bucket ``marker_after`` marks a threshold (e.g. small
    files). Each bar's count and share of the files is on hover."""
    width, height, left, bottom, top = 640, 180, 40, 30, 34
    count = len(counts)
    inner_w, inner_h = width - left - 10, height - top - bottom
    bar_w = inner_w / max(count, 1)
    peak = max(counts) if counts and max(counts) else 1
    total = sum(counts) or 1
    parts = [
        f'<svg viewBox="0 0 {width} {height}" class="chart" role="img" aria-label="{escape(title)}">',
        f'<text x="{left}" y="14" class="chart-title">{escape(title)}</text>',
        f'<line x1="{left}" y1="{top + inner_h}" x2="{width - 10}" y2="{top + inner_h}" class="axis"/>',
        f'<text x="{left - 6}" y="{top + 4}" class="tick" text-anchor="end">{peak:,}</text>',
        f'<text x="{left - 6}" y="{top + inner_h}" class="tick" text-anchor="end">0</text>',
    ]
    for i, (label, value) in enumerate(zip(labels, counts, strict=True)):
        bar_h = value / peak * inner_h
        x = left + i * bar_w
        small = " small" if marker_after is not None and i <= marker_after else ""
        tip = f"{label}: {value:,} file{'' if value == 1 else 's'} ({value / total:.0%})"
        parts.append(
            f'<rect x="{x + 3:.1f}" y="{top + inner_h - bar_h:.1f}" width="{bar_w - 6:.1f}" height="{bar_h:.1f}" '
            f'class="hbar{small}"><title>{escape(tip)}</title></rect>'
        )
        parts.append(
            f'<text x="{x + bar_w / 2:.1f}" y="{height - 12}" class="tick" text-anchor="middle">{escape(label)}</text>'
        )
        if value:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{top + inner_h - bar_h - 3:.1f}" class="tick" '
                f'text-anchor="middle">{value:,}</text>'
            )
    if marker_after is not None:
        x = left + (marker_after + 1) * bar_w
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + inner_h}" class="marker"/>')
        # past the middle the label reads leftwards from the line, so it stays inside the chart
        anchor, at = ("end", x - 4) if x > left + inner_w / 2 else ("start", x + 4)
        parts.append(
            f'<text x="{at:.1f}" y="{top + 10}" class="tick marker-label" text-anchor="{anchor}">'
            f"{escape(marker_label)}</text>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))


def durations_svg(points: Sequence[tuple[str, float, str, str]], *, title: str) -> SafeString:
    """Process durations at their finishing times: (finished at ISO, seconds, status, label) dots."""
    width = 640
    if not points:
        return _empty(width, title, "no data", "No finished processes yet")
    frame = _Frame(
        [_time(p[0]) for p in points],
        max(p[1] for p in points),
        as_bytes=False,
        box=(width, 160, 60, 14, 30, 24),
    )
    frame.label = lambda v: f"{_compact(v)} s"
    dots = []
    for i, (at, seconds, status, label) in enumerate(points):
        colour = STATUS_COLOURS.get(status, "#5f6b7c")
        dots.append(
            f'<circle cx="{frame.x(i):.1f}" cy="{frame.y(seconds):.1f}" r="3.5" fill="{colour}">'
            f"<title>{escape(label)} · {escape(status)} · {seconds:,.1f} s · {escape(at[:19])}</title></circle>"
        )
    return mark_safe(
        f'<svg viewBox="0 0 {width} {frame.height}" class="chart" role="img" aria-label="{escape(title)}">'
        f'<text x="{frame.left}" y="14" class="chart-title">{escape(title)}</text>'
        + frame.axes()
        + "".join(dots)
        + "</svg>"
    )
