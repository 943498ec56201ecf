"""One URL serves the full page or, for htmx requests, its fragment."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import redirect, render, resolve_url
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


def hx_redirect(request, to) -> HttpResponse:
    """After a POST: an htmx request gets 204 with ``HX-Redirect`` (htmx navigates), a plain form
    post a 302. ``to`` is a URL, a URL name or a model, as for ``redirect``."""
    url = resolve_url(to)
    if getattr(request, "htmx", False):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)
