"""Error pages: the console's HTML ones, under ``/api/`` the API's JSON error body
``{"error": ..., "field": null}`` (console/api/errors.py) and under ``/metrics`` one line of plain
text (what a scraper shows), never HTML, for errors Django answers itself: unknown paths (or ids a
route's pattern refuses), bodies over DATA_UPLOAD_MAX_MEMORY_SIZE read before a view runs, crashes
outside a view."""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.html import format_html
from django.views import defaults

from console.api.errors import INTERNAL_ERROR, body_too_large

API_PREFIX = "/api/"
API_PAGES = ("/api/docs/",)  # Swagger UI is a page


METRICS_PATH = "/metrics"


def is_api(request) -> bool:
    return request.path.startswith(API_PREFIX) and not request.path.startswith(API_PAGES)


def is_metrics(request) -> bool:
    return request.path == METRICS_PATH or request.path.startswith(METRICS_PATH + "/")


def _api_error(message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": message, "field": None}, status=status)


def text_error(message: str, status: int) -> HttpResponse:
    """A scraper's error answer: the message as one line of plain text."""
    return HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")


def _machine_error(request, message: str, status: int) -> HttpResponse | None:
    """The answer for the API (JSON) or ``/metrics`` (text); None for a console page (HTML)."""
    if is_api(request):
        return _api_error(message, status)
    if is_metrics(request):
        return text_error(message, status)
    return None


def bad_request(request, exception=None):
    if isinstance(exception, RequestDataTooBig):
        message = body_too_large().message
        answer = _machine_error(request, message, 413)
        if answer is not None:
            return answer
        return HttpResponse(
            format_html(
                '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Too large · Lakewarden'
                '</title><link rel="stylesheet" href="/static/console/lakewarden.css"></head><body><main>'
                '<section class="card narrow"><h1>Too large</h1><p>{}.</p><p><a href="/">Back to the '
                "overview</a></p></section></main></body></html>",
                message[0].upper() + message[1:],
            ),
            status=413,
        )
    answer = _machine_error(request, "bad request: the server could not accept it as it was sent", 400)
    return answer or defaults.bad_request(request, exception)


def permission_denied(request, exception=None):
    return _machine_error(request, "not allowed", 403) or defaults.permission_denied(request, exception)


def not_found(request, exception=None):
    if is_metrics(request):
        return text_error(f"nothing at {request.path}: metrics are served at {METRICS_PATH}", 404)
    if is_api(request):
        return _api_error(f"nothing at {request.path}: the API's paths are listed at /api/schema/", 404)
    return render(request, "404.html", {"path": request.path}, status=404)


def server_error(request):
    return _machine_error(request, INTERNAL_ERROR, 500) or render(request, "500.html", status=500)
