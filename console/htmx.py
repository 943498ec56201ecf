"""One URL serves the full page or, for htmx requests, its fragment."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render, resolve_url
from django.utils.cache import patch_vary_headers
from django.utils.html import format_html


def is_fragment(request) -> bool:
    """True for htmx requests that swap a part of the page (boosted navigation wants the page)."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.boosted


def render_page(
    request,
    page_template: str,
    fragment_template: str,
    context: dict,
    *,
    status: int = 200,
    error: str | None = None,
):
    """``error`` (bad input, e.g. a search the database cannot take) is shown above the page's
    content: with the page's messages, or as the first element of the fragment."""
    fragment = is_fragment(request)
    if error and not fragment:
        messages.error(request, error)
    response = render(request, fragment_template if fragment else page_template, context, status=status)
    if error and fragment:
        response.content = format_html('<p class="error">{}</p>\n', error).encode() + response.content
    patch_vary_headers(response, ("HX-Request",))
    return response


#: Marks a 4xx fragment that says why a request was refused: static/console/lakewarden.js swaps it
#: in whatever its status (htmx swaps only 2xx, and 400 by that script), instead of "the request
#: failed".
ERROR_FRAGMENT_HEADER = "X-Lakewarden-Fragment"


def error_fragment(response: HttpResponse) -> HttpResponse:
    """``response`` (a refusal rendered as a fragment) marked to be swapped in as it is."""
    response[ERROR_FRAGMENT_HEADER] = "error"
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
