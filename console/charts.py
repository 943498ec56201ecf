"""Server-side SVG charts: no JavaScript, no CDN, readable without scripts and CSP-friendly.

Each function returns safe SVG markup sized by its viewBox (it scales with the page).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

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
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def _bytes(value: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def timeline_svg(series: Sequence[dict], key: str, title: str, *, as_bytes: bool = False) -> SafeString:
    """A line of ``key`` over the instants, one dot per instant coloured by its operation."""
    width, height, left, right, top, bottom = 640, 150, 56, 12, 28, 24
    if not series:
        return mark_safe(
            f'<svg viewBox="0 0 {width} 40" class="chart" role="img" aria-label="{escape(title)}: no data">'
            f'<text x="8" y="24" class="chart-empty">No snapshots yet</text></svg>'
        )
    if any(point.get(key) is None for point in series):
        return mark_safe(
            f'<svg viewBox="0 0 {width} 40" class="chart" role="img" aria-label="{escape(title)}: not known">'
            f'<text x="8" y="24" class="chart-empty">Not known per snapshot for this table: its files'
            f" hold rows that later rows replace on read</text></svg>"
        )
    values = [float(point[key]) for point in series]
    low, high = min(0.0, min(values)), max(values) or 1.0
    span = (high - low) or 1.0
    inner_w, inner_h = width - left - right, height - top - bottom
    step = inner_w / max(len(series) - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return left + i * step, top + inner_h - (v - low) / span * inner_h

    label = _bytes if as_bytes else _compact
    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, v) for i, v in enumerate(values)))
    dots = []
    radius = 3 if len(series) <= 60 else 1.6  # many snapshots: small dots keep the line readable
    for i, (point, value) in enumerate(zip(series, values, strict=True)):
        x, y = xy(i, value)
        colour = OPERATION_COLOURS.get(point["operation"], "#5f6b7c")
        tip = escape(f"{point['id']} · {point['operation']} · {point['at'][:19]} · {label(value)}")
        dots.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius}" fill="{colour}"><title>{tip}</title></circle>'
        )
    first, last = escape(series[0]["at"][:10]), escape(series[-1]["at"][:10])
    return mark_safe(
        f'<svg viewBox="0 0 {width} {height}" class="chart" role="img" aria-label="{escape(title)}">'
        f'<text x="{left}" y="14" class="chart-title">{escape(title)}</text>'
        f'<line x1="{left}" y1="{top + inner_h}" x2="{width - right}" y2="{top + inner_h}" class="axis"/>'
        f'<text x="{left - 6}" y="{top + 4}" class="tick" text-anchor="end">{escape(label(high))}</text>'
        f'<text x="{left - 6}" y="{top + inner_h}" class="tick" text-anchor="end">{escape(label(low))}</text>'
        f'<text x="{left}" y="{height - 6}" class="tick">{first}</text>'
        f'<text x="{width - right}" y="{height - 6}" class="tick" text-anchor="end">{last}</text>'
        f'<polyline points="{points}" class="line"/>' + "".join(dots) + "</svg>"
    )


def histogram_svg(
    labels: Sequence[str],
    counts: Sequence[int],
    *,
    title: str,
    marker_after: int | None = None,
    marker_label: str = "",
) -> SafeString:
    """Bars per bucket; a dashed line after bucket ``marker_after`` marks a threshold (e.g. small files)."""
    width, height, left, bottom, top = 640, 180, 40, 30, 34
    count = len(counts)
    inner_w, inner_h = width - left - 10, height - top - bottom
    bar_w = inner_w / max(count, 1)
    peak = max(counts) if counts and max(counts) else 1
    parts = [
        f'<svg viewBox="0 0 {width} {height}" class="chart" role="img" aria-label="{escape(title)}">',
        f'<text x="{left}" y="14" class="chart-title">{escape(title)}</text>',
        f'<line x1="{left}" y1="{top + inner_h}" x2="{width - 10}" y2="{top + inner_h}" class="axis"/>',
        f'<text x="{left - 6}" y="{top + 4}" class="tick" text-anchor="end">{peak}</text>',
    ]
    for i, (label, value) in enumerate(zip(labels, counts, strict=True)):
        bar_h = value / peak * inner_h
        x = left + i * bar_w
        parts.append(
            f'<rect x="{x + 3:.1f}" y="{top + inner_h - bar_h:.1f}" width="{bar_w - 6:.1f}" height="{bar_h:.1f}" '
            f'class="hbar{" small" if marker_after is not None and i <= marker_after else ""}">'
            f"<title>{escape(label)}: {value} files</title></rect>"
        )
        parts.append(
            f'<text x="{x + bar_w / 2:.1f}" y="{height - 12}" class="tick" text-anchor="middle">{escape(label)}</text>'
        )
        if value:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{top + inner_h - bar_h - 3:.1f}" class="tick" '
                f'text-anchor="middle">{value}</text>'
            )
    if marker_after is not None:
        x = left + (marker_after + 1) * bar_w
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + inner_h}" class="marker"/>')
        parts.append(
            f'<text x="{x + 4:.1f}" y="{top + 10}" class="tick marker-label">{escape(marker_label)}</text>'
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))


def durations_svg(points: Sequence[tuple[str, float, str, str]], *, title: str) -> SafeString:
    """Process durations over time: (finished at ISO, seconds, status, label) dots."""
    width, height, left, right, top, bottom = 640, 150, 56, 12, 22, 24
    if not points:
        return mark_safe(
            f'<svg viewBox="0 0 {width} 40" class="chart" role="img" aria-label="{escape(title)}: no data">'
            f'<text x="8" y="24" class="chart-empty">No finished processes yet</text></svg>'
        )
    peak = max(p[1] for p in points) or 1.0
    inner_w, inner_h = width - left - right, height - top - bottom
    step = inner_w / max(len(points) - 1, 1)
    dots = []
    for i, (at, seconds, status, label) in enumerate(points):
        x, y = left + i * step, top + inner_h - seconds / peak * inner_h
        colour = STATUS_COLOURS.get(status, "#5f6b7c")
        dots.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}">'
            f"<title>{escape(label)} · {escape(status)} · {seconds:.1f} s · {escape(at[:19])}</title></circle>"
        )
    return mark_safe(
        f'<svg viewBox="0 0 {width} {height}" class="chart" role="img" aria-label="{escape(title)}">'
        f'<text x="{left}" y="14" class="chart-title">{escape(title)}</text>'
        f'<line x1="{left}" y1="{top + inner_h}" x2="{width - right}" y2="{top + inner_h}" class="axis"/>'
        f'<text x="{left - 6}" y="{top + 4}" class="tick" text-anchor="end">{peak:.0f} s</text>'
        f'<text x="{left - 6}" y="{top + inner_h}" class="tick" text-anchor="end">0 s</text>'
        f'<text x="{left}" y="{height - 6}" class="tick">{escape(points[0][0][:10])}</text>'
        f'<text x="{width - right}" y="{height - 6}" class="tick" text-anchor="end">{escape(points[-1][0][:10])}</text>'
        + "".join(dots)
        + "</svg>"
    )
