"""gunicorn's configuration for ``manage.py lakewarden_serve`` (``--config python:console.gunicorn_conf``).

gunicorn answers some requests itself, before Django sees them: a request line longer than
``--limit-request-line`` (414), a header field longer than ``--limit-request-field_size`` (431),
a malformed request (400). Its answer is an HTML page; an API client expects the API's JSON error
body (``{"error": ..., "field": null}``, console/api/errors.py). ``post_worker_init`` makes each
worker write that body instead (gunicorn offers no hook for its error page: its one writer,
``gunicorn.util.write_error``, is replaced in the worker processes only).

It also sizes the web server: ``default_web_workers`` gives ``LAKEWARDEN_WEB_WORKERS`` its default
(``console/settings.py`` imports it, so gunicorn itself is imported only inside the hooks).
"""

from __future__ import annotations

import json
import os
from typing import Any

#: Most gunicorn worker processes the default gives: each thread of each worker keeps its own
#: Postgres connection (``conn_max_age``), so 8 workers x 4 threads stay well inside Postgres's
#: default 100 connections next to the Celery workers.
MAX_DEFAULT_WEB_WORKERS = 8


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, so a container's cpuset counts)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_web_workers(cores: int) -> int:
    """One worker per core (at least two), capped at ``MAX_DEFAULT_WEB_WORKERS``: a page costs a
    few milliseconds of CPU, so more processes than cores only lengthen the tail under load
    (bench/RESULTS.md, "Served console under load")."""
    return min(max(2, cores), MAX_DEFAULT_WEB_WORKERS)


#: The hint a 414 carries: what does not fit in a URL goes in a body.
TOO_LONG_HINT = "send long lists (record keys...) in a POST body"


def json_error(status: int, reason: str, message: str) -> bytes:
    """The whole HTTP answer gunicorn sends for a request it refuses itself, as the API's JSON."""
    text = f"{reason.lower()}: {message}" if message else reason.lower()
    if status == 414:
        text += f"; {TOO_LONG_HINT}"
    body = json.dumps({"error": text, "field": None}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def _write_json_error(sock: Any, status_int: int, reason: str, mesg: str) -> None:
    from gunicorn import util

    util.write_nonblock(sock, json_error(status_int, reason, mesg))


def post_worker_init(worker: Any) -> None:
    from gunicorn import util

    util.write_error = _write_json_error
