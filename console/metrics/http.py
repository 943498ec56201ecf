"""HTTP request latency, per view, method and status, from every web process.

gunicorn runs several worker processes, so the histogram lives in prometheus-client's
multiprocess mode: each process writes its samples to a small memory-mapped file in
``PROMETHEUS_MULTIPROC_DIR`` and a scrape, answered by any one process, sums the files of all of
them. prometheus-client picks that mode from the environment variable when it is first imported,
so ``ConsoleConfig.ready()`` exports the setting before any module imports it; the folder itself
is made on first use (``samples_folder()``: the middleware starting, a scrape, lakewarden_serve).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from prometheus_client import Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
UNMATCHED_VIEW = "<unmatched>"

REQUEST_LATENCY = Histogram(
    "lakewarden_http_request_duration_seconds",
    "Time to answer an HTTP request, by view (URL name), method and status code",
    ["view", "method", "status"],
    buckets=LATENCY_BUCKETS,
)


def samples_folder() -> str:
    """The folder prometheus-client writes this process's samples to, made if it is missing."""
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or settings.PROMETHEUS_MULTIPROC_DIR
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ImproperlyConfigured(f"cannot create PROMETHEUS_MULTIPROC_DIR {folder}: {error}") from None
    return folder


def view_label(request: HttpRequest) -> str:
    """The URL name (``console:table-detail``, ``metrics``): few distinct values, unlike paths."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        return UNMATCHED_VIEW
    return match.view_name or match.route or UNMATCHED_VIEW


class RequestLatencyMiddleware:
    """Outermost middleware: times the whole answer, every other middleware included."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        samples_folder()

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        REQUEST_LATENCY.labels(view_label(request), request.method or "", str(response.status_code)).observe(
            time.perf_counter() - started
        )
        return response


def reset_samples(directory: str) -> int:
    """Delete the sample files of earlier web processes (call it before the web server starts, as
    prometheus-client's multiprocess mode asks); returns how many were removed."""
    removed = 0
    for path in Path(directory).glob("*.db"):
        path.unlink(missing_ok=True)
        removed += 1
    return removed
