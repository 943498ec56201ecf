"""gunicorn as ``lakewarden_serve`` runs it takes URLs and headers up to its raised limits, and what
it still refuses itself (414 URI too long, 431 header too large) is the API's JSON error body, not
gunicorn's HTML page (issue 29, item 12: 12 such HTML answers under /api/ in the fuzzing)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys

import pytest

from console.management.commands.lakewarden_serve import (
    LIMIT_REQUEST_FIELD_SIZE,
    LIMIT_REQUEST_LINE,
    web_command,
)
from tests.conftest import REPO_ROOT
from tests.e2e.conftest import _database_url, wait_for

pytestmark = pytest.mark.django_db


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def served(tmp_path):
    """One sync gunicorn worker on the test database, started by ``web_command``; its port."""
    from django.db import connection

    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(connection.settings_dict),
        "LAKEWARDEN_VAR_DIR": str(tmp_path),
        "PYTHONPATH": str(REPO_ROOT),
    }
    log = (tmp_path / "gunicorn.log").open("wb")
    command = web_command(sys.executable, host="127.0.0.1", port=port, workers=1, threads=1)
    server = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    def answering() -> bool:
        assert server.poll() is None, (tmp_path / "gunicorn.log").read_text()[-2000:]
        try:
            return _get(port, "/healthz")[0] > 0
        except OSError:
            return False

    try:
        wait_for(answering, timeout=120, interval=0.3, message="gunicorn answering")
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def _path(request_line: int) -> str:
    """An API path whose request line (``GET <path> HTTP/1.1``) is ``request_line`` bytes long."""
    head = "/api/v1/tables/?q="
    return head + "a" * (request_line - len(head) - len("GET  HTTP/1.1"))


def test_a_url_up_to_the_raised_limit_reaches_the_api_and_a_longer_one_is_a_json_414(served):
    within = _get(served, _path(LIMIT_REQUEST_LINE))  # gunicorn's default limit was 4,094
    over = _get(served, _path(LIMIT_REQUEST_LINE + 1))

    assert within[0] == 401 and within[1].startswith("application/json")  # Django answered
    assert over[0] == 414 and over[1] == "application/json", over
    error = json.loads(over[2])
    assert error["field"] is None and "uri too long" in error["error"] and "POST body" in error["error"]


def test_a_long_header_up_to_the_raised_limit_is_taken_and_a_longer_one_is_a_json_431(served):
    def header(size: int) -> dict[str, str]:
        return {"X-Long": "b" * (size - len("X-Long: "))}

    within = _get(served, "/api/v1/tables/", header(LIMIT_REQUEST_FIELD_SIZE - 2))
    over = _get(served, "/api/v1/tables/", header(LIMIT_REQUEST_FIELD_SIZE + 10))

    assert within[0] == 401 and within[1].startswith("application/json")
    assert over[0] == 431 and over[1] == "application/json", over
    assert "request header fields too large" in json.loads(over[2])["error"]
