"""gunicorn's configuration for ``manage.py lakewarden_serve`` (``--config python:console.gunicorn_conf``).

gunicorn answers some requests itself, before Django sees them: a request line longer than
``--limit-request-line`` (414), a header field longer than ``--limit-request-field_size`` (431),
a malformed request (400). Its answer is an HTML page; an API client expects the API's JSON error
body (``{"error": ..., "field": null}``, console/api/errors.py). ``post_worker_init`` makes each
worker write that body instead (gunicorn offers no hook for its error page: its one writer,
``gunicorn.util.write_error``, is replaced in the worker processes only).
"""

from __future__ import annotations

import json
from typing import Any

from gunicorn import util

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
    util.write_nonblock(sock, json_error(status_int, reason, mesg))


def post_worker_init(worker: Any) -> None:
    util.write_error = _write_json_error
