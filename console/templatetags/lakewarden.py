from __future__ import annotations

from django import template

from console.api.serializers import mask_secrets

register = template.Library()

_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


@register.filter
def filesize(value) -> str:
    """Binary units, because file sizes in lakehouse settings (target-file-size) are in MiB."""
    try:
        size = float(value or 0)
    except (TypeError, ValueError):
        return "—"
    unit = 0
    while size >= 1024 and unit < len(_UNITS) - 1:
        size /= 1024
        unit += 1
    return f"{int(size)} {_UNITS[unit]}" if unit == 0 else f"{size:.1f} {_UNITS[unit]}"


@register.filter
def intcomma_plain(value) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "—"


@register.filter
def masked(properties) -> list[tuple[str, object]]:
    return sorted(mask_secrets(properties or {}).items())


@register.filter
def basename(path) -> str:
    return str(path or "").rstrip("/").rsplit("/", 1)[-1]


@register.filter
def stats_rows(data_file) -> list[tuple[str, object, object, object]]:
    """(column, lower, upper, null count) for the columns a file has statistics for."""
    if data_file is None:
        return []
    lower = data_file.lower_bounds or {}
    upper = data_file.upper_bounds or {}
    nulls = data_file.null_counts or {}
    columns = sorted(set(lower) | set(upper) | set(nulls))
    return [(c, lower.get(c, "?"), upper.get(c, "?"), nulls.get(c)) for c in columns]


@register.simple_tag
def query_with(params, **changes) -> str:
    """The current query string with some parameters replaced (pagination links)."""
    query = params.copy() if hasattr(params, "copy") else dict(params)
    for key, value in changes.items():
        query[key] = value
    return (
        query.urlencode() if hasattr(query, "urlencode") else "&".join(f"{k}={v}" for k, v in query.items())
    )


@register.filter
def duration(seconds) -> str:
    if seconds is None:
        return "—"
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


@register.filter
def json_inline(value) -> str:
    import json

    return json.dumps(value, default=str, sort_keys=True)


@register.filter
def split_words(text: str) -> list[str]:
    return str(text).split()


@register.filter
def get_item(mapping, key):
    return (mapping or {}).get(key)
