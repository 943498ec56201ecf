"""Error pages: the console's HTML ones, and under ``/api/`` the API's JSON error body
``{"error": ..., "field": null}`` (console/api/errors.py), never HTML, for errors Django answers
itself: unknown paths (or ids a route's pattern refuses), bodies over DATA_UPLOAD_MAX_MEMORY_SIZE
read before a view runs, crashes outside a view."""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.html import format_html
from django.views import defaults

from console.api.errors import INTERNAL_ERROR, body_too_large

API_PREFIX = "/api/"
API_PAGES = ("/api/docs/",)  # Swagger UI is a page


def is_api(request) -> bool:
    return request.path.startswith(API_PREFIX) and not request.path.startswith(API_PAGES)


def _api_error(message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": message, "field": None}, status=status)


def bad_request(request, exception=None):
    if isinstance(exception, RequestDataTooBig):
        message = body_too_large().message
        if is_api(request):
            return _api_error(message, 413)
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
    if is_api(request):
        return _api_error("bad request: the server could not accept it as it was sent", 400)
    return defaults.bad_request(request, exception)


def permission_denied(request, exception=None):
    if is_api(request):
        return _api_error("not allowed", 403)
    return defaults.permission_denied(request, exception)


def not_found(request, exception=None):
    if is_api(request):
        return _api_error(f"nothing at {request.path}: the API's paths are listed at /api/schema/", 404)
    return render(request, "404.html", {"path": request.path}, status=404)


def server_error(request):
    if is_api(request):
        return _api_error(INTERNAL_ERROR, 500)
    return render(request, "500.html", status=500)
