"""One URL serves the full page or, for htmx requests, its fragment."""

from __future__ import annotations

from django.shortcuts import render
from django.utils.cache import patch_vary_headers


def is_fragment(request) -> bool:
    """True for htmx requests that swap a part of the page (boosted navigation wants the page)."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.boosted


def render_page(request, page_template: str, fragment_template: str, context: dict, *, status: int = 200):
    template = fragment_template if is_fragment(request) else page_template
    response = render(request, template, context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    return response
