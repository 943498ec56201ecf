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
