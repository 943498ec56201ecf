"""A real local HTTP receiver for alert tests: a ThreadingHTTPServer on a free port that records every
request (path, JSON body) and answers with the status the test sets."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Receiver:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server protocol
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                receiver.requests.append(
                    {"path": self.path, "body": json.loads(raw), "type": self.headers["Content-Type"]}
                )
                self.send_response(receiver.status)
                self.end_headers()
                self.wfile.write(b"ok" if receiver.status < 400 else b"broken")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def bodies(self) -> list[dict]:
        return [request["body"] for request in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    running = Receiver()
    yield running
    running.close()


@pytest.fixture
def closed_port_url() -> str:
    """An http URL on a local port nothing listens on (connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


def test_the_receiver_records_what_it_is_sent_and_answers_the_status_set(receiver):
    receiver.status = 503
    request = urllib.request.Request(receiver.url("/x"), data=b'{"a": 1}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=10)
    assert answer.value.code == 503
    assert receiver.requests == [
        {"path": "/x", "body": {"a": 1}, "type": "application/x-www-form-urlencoded"}
    ]
