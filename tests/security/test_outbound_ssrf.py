"""Outbound HTTP to user-configured targets (issue 29, item 7), against real local servers: an alert
webhook on an allowed address that redirects to a refused one is not followed; a name that
resolves to an allowed address when checked and to a refused one later (DNS rebinding) is sent
only to the checked address; creating an Iceberg REST catalog never shows the target's body or
banner, follows no redirect, and a silent port holds the web request a few seconds, not 30.

The HTTP servers are real (threads on 127.0.0.1 and 127.0.0.2: with private targets off,
LAKEWARDEN_ALERT_ALLOWED_NETWORKS lets 127.0.0.2 through and refuses 127.0.0.1). DNS cannot run
here, so a name is resolved through a stand-in for ``socket.getaddrinfo`` (``rebinding_dns``)."""

from __future__ import annotations

import http.server
import json
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest

from processes.alerts.delivery import attempt_delivery
from processes.alerts.models import AlertChannel, AlertDelivery
from processes.alerts.services import channel_create, channel_send_test
from storage import outbound
from storage.models import Catalog
from tests.objectstore.test_rest_catalog import silent_server  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db

CATALOGS = "/api/v1/catalogs/"
SECRET = "internal-only-9f3a"  # what a target answers: it must never reach an error message


class Server:
    """A real HTTP server on ``host`` (port 0: a free one, or ``port``) answering every request
    with ``answer(handler) -> (status, headers, body)``; it records each request's path and Host."""

    def __init__(self, answer, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None):
        self.requests: list[dict] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                server.requests.append({"path": self.path, "host": self.headers.get("Host")})
                status, headers, body = answer(self)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_HEAD = _any

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer((host, port), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.host, self.port = host, self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def url(self, path: str = "/hook") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers():
    made: list[Server] = []

    def make(answer, **kwargs) -> Server:
        made.append(Server(answer, **kwargs))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _ok(handler):
    return 200, {}, b"ok"


def _redirect_to(url: str):
    return lambda handler: (302, {"Location": url}, b"")


@pytest.fixture
def private_off_but_127_0_0_2(settings):
    settings.LAKEWARDEN_ALERT_ALLOW_PRIVATE = False
    settings.LAKEWARDEN_ALERT_ALLOWED_NETWORKS = outbound.parse_networks(["127.0.0.2/32"])


@pytest.fixture
def rebinding_dns(monkeypatch):
    """``rebinding_dns(name, answers)``: ``name`` resolves to ``answers[0]`` first, then to the
    next at each lookup (the last one for good); other names resolve as usual. Returns the log
    of the addresses handed out."""
    real = socket.getaddrinfo
    handed: list[str] = []

    def install(name: str, answers: list[str]) -> list[str]:
        def getaddrinfo(host, port, *args, **kwargs):
            if host != name:
                return real(host, port, *args, **kwargs)
            address = answers[min(len(handed), len(answers) - 1)]
            handed.append(address)
            return real(address, port, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
        return handed

    return install


# -- alert webhooks ------------------------------------------------------------------------------


def test_a_webhook_redirecting_to_a_refused_address_is_not_followed(servers, private_off_but_127_0_0_2):
    loopback = servers(_ok)  # 127.0.0.1: refused with private targets off
    allowed = servers(_redirect_to(loopback.url("/internal")), host="127.0.0.2")
    channel = channel_create(name="hook", kind="webhook", url=allowed.url())  # checked: allowed

    delivery = channel_send_test(channel=channel)

    delivery.refresh_from_db()
    assert len(allowed.requests) == 1
    assert loopback.requests == []
    assert delivery.status == "failed"
    assert "HTTP 302, a redirect to http://127.0.0.1; redirects are not followed" in delivery.last_error


def test_a_redirect_is_not_followed_even_to_an_allowed_address(servers, settings):
    settings.LAKEWARDEN_ALERT_MAX_ATTEMPTS = 1
    second = servers(_ok)
    first = servers(_redirect_to(second.url()))
    channel = AlertChannel.objects.create(name="hook", kind="webhook", url=first.url())

    channel_send_test(channel=channel)

    assert len(first.requests) == 1 and second.requests == []
    assert "redirect" in AlertDelivery.objects.get().last_error


def test_a_name_rebound_to_loopback_after_its_check_reaches_only_the_checked_address(
    servers, private_off_but_127_0_0_2, rebinding_dns
):
    allowed = servers(_ok, host="127.0.0.2")
    loopback = _same_port_on("127.0.0.1", allowed.port, servers)
    # Allowed when the channel is saved and at the next lookup, loopback after it: the old sender
    # checked the name with one lookup and connected with another.
    handed = rebinding_dns("hooks.example.test", ["127.0.0.2", "127.0.0.2", "127.0.0.1"])
    channel = channel_create(
        name="hook", kind="webhook", url=f"http://hooks.example.test:{allowed.port}/hook"
    )

    delivery = channel_send_test(channel=channel)

    delivery.refresh_from_db()
    assert delivery.status == "sent", delivery.last_error
    assert loopback.requests == []
    assert allowed.requests == [{"path": "/hook", "host": f"hooks.example.test:{allowed.port}"}]
    assert handed == ["127.0.0.2", "127.0.0.2"]  # saved, then one lookup per attempt: the address used


def test_a_name_that_resolves_to_loopback_when_sent_is_refused_for_good(
    servers, private_off_but_127_0_0_2, rebinding_dns
):
    allowed = servers(_ok, host="127.0.0.2")
    loopback = _same_port_on("127.0.0.1", allowed.port, servers)
    rebinding_dns("hooks.example.test", ["127.0.0.2", "127.0.0.1"])
    channel = channel_create(
        name="hook", kind="webhook", url=f"http://hooks.example.test:{allowed.port}/hook"
    )

    delivery = channel_send_test(channel=channel)

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("failed", 1)  # not retried: it cannot succeed
    assert "private network (127.0.0.1)" in delivery.last_error
    assert loopback.requests == [] and allowed.requests == []


def test_a_webhook_error_names_the_status_and_not_the_body(servers, settings):
    settings.LAKEWARDEN_ALERT_MAX_ATTEMPTS = 1
    failing = servers(lambda handler: (500, {}, f"stack trace with {SECRET}".encode()))
    channel = AlertChannel.objects.create(name="hook", kind="webhook", url=failing.url("/hook?token=abc"))

    channel_send_test(channel=channel)

    error = AlertDelivery.objects.get().last_error
    assert f"http://127.0.0.1:{failing.port}/hook answered HTTP 500" in error
    assert SECRET not in error and "token=abc" not in error


def test_an_unknown_host_is_a_failed_attempt_naming_it():
    channel = AlertChannel.objects.create(name="hook", kind="webhook", url="http://no-such-host.invalid/hook")
    assert attempt_delivery(_delivery_for(channel)) is not None  # retried later
    assert "no-such-host.invalid does not resolve" in AlertDelivery.objects.get().last_error


# -- the outbound adapter itself: pinned address, name kept for Host and TLS ------------------------


def test_https_to_a_pinned_address_keeps_the_name_for_sni_and_the_certificate(
    tmp_path, servers, rebinding_dns
):
    certificate, key = _self_signed(tmp_path, "catalog.example.test")
    names: list[str] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    context.sni_callback = lambda sock, name, ctx: names.append(name)
    server = servers(lambda handler: (200, {}, b'{"ok": true}'), tls=context)
    rebinding_dns("catalog.example.test", ["127.0.0.1"])

    with outbound.session(policy=outbound.TRUSTED, timeout=(2, 2)) as http_session:
        answer = http_session.get(
            f"https://catalog.example.test:{server.port}/v1/config", verify=str(certificate)
        )
        with pytest.raises(outbound.OutboundError, match="TLS certificate of https://127.0.0.1"):
            http_session.get(f"https://127.0.0.1:{server.port}/v1/config", verify=str(certificate))

    assert answer.json() == {"ok": True}
    assert names[0] == "catalog.example.test"
    assert server.requests[0]["host"] == f"catalog.example.test:{server.port}"


def test_a_web_request_bounds_a_silent_target_to_a_few_seconds(silent_server):
    with outbound.session(policy=outbound.TRUSTED, timeout=(30, 30)) as http_session:
        started = time.monotonic()
        with outbound.web_request_bounds(connect=1, read=1), pytest.raises(outbound.OutboundError) as refused:
            http_session.get(f"{silent_server}/x")
    assert time.monotonic() - started < 5
    assert f"no answer from {silent_server}/x within 1 s (timed out)" in str(refused.value)


# -- Iceberg REST catalogs -----------------------------------------------------------------------


@pytest.fixture
def banner_port():
    """A port that greets with a banner (as SSH or SMTP do) and closes: no HTTP at all."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            conn.sendall(f"SSH-2.0-OpenSSH_9.6 {SECRET}\r\n".encode())
            time.sleep(0.2)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join()
    sock.close()


ANSWERS = {
    "text-500": lambda handler: (500, {"Content-Type": "text/plain"}, f"db password {SECRET}".encode()),
    "iceberg-500": lambda handler: (
        500,
        {"Content-Type": "application/json"},
        json.dumps({"error": {"message": f"detail {SECRET}", "type": "ServerError", "code": 500}}).encode(),
    ),
    "html-200": lambda handler: (200, {"Content-Type": "text/html"}, f"<html>admin {SECRET}</html>".encode()),
    "json-200": lambda handler: (
        200,
        {"Content-Type": "application/json"},
        json.dumps({"defaults": SECRET}).encode(),
    ),
    "html-404": lambda handler: (404, {"Content-Type": "text/html"}, f"<h1>{SECRET}</h1>".encode()),
}
EXPECTED = {
    "text-500": "InternalServerError: HTTP 500 from",
    "iceberg-500": "ServerError: HTTP 500 from",
    "html-200": "answered HTTP 200 with a body that is not JSON",
    "json-200": "answered JSON that is not an Iceberg REST answer (1 fields wrong: defaults)",
    "html-404": "NotFound: HTTP 404 from",
}


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_a_rest_catalog_error_never_shows_what_the_target_answered(case, servers, api_as, admin_user):
    target = servers(ANSWERS[case])

    answer = _create_rest_catalog(api_as(admin_user), target.url(""))

    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert EXPECTED[case] in error, error
    assert f"http://127.0.0.1:{target.port}" in error
    assert SECRET not in answer.content.decode()
    assert not Catalog.objects.exists()


def test_a_rest_catalog_on_a_port_with_a_banner_does_not_show_it(banner_port, api_as, admin_user):
    answer = _create_rest_catalog(api_as(admin_user), banner_port)

    assert answer.status_code == 400, answer.content
    assert (
        f"the connection to {banner_port}/v1/config failed or the answer was not HTTP"
        in answer.json()["error"]
    )
    assert SECRET not in answer.content.decode() and "OpenSSH" not in answer.content.decode()


def test_a_rest_catalog_that_redirects_is_refused_and_the_redirect_not_followed(servers, api_as, admin_user):
    internal = servers(lambda handler: (200, {}, json.dumps({"defaults": {}, "overrides": {}}).encode()))
    redirecting = servers(_redirect_to(internal.url("/v1/config")))

    answer = _create_rest_catalog(api_as(admin_user), redirecting.url(""))

    assert answer.status_code == 400, answer.content
    assert (
        "answered HTTP 302, a redirect to http://127.0.0.1; redirects are not followed"
        in answer.json()["error"]
    )
    assert len(redirecting.requests) == 1 and internal.requests == []
    assert not Catalog.objects.exists()


def test_a_silent_rest_catalog_holds_the_web_request_a_few_seconds_not_its_timeout(
    silent_server, api_as, admin_user
):
    started = time.monotonic()

    answer = _create_rest_catalog(api_as(admin_user), silent_server)  # default timeouts: 5 s and 30 s

    elapsed = time.monotonic() - started
    assert answer.status_code == 400, answer.content
    assert (
        f"no answer from {silent_server}/v1/config within {outbound.WEB_READ_SECONDS:g} s"
        in answer.json()["error"]
    )
    assert elapsed < outbound.WEB_CONNECT_SECONDS + outbound.WEB_READ_SECONDS + 2, elapsed


# -- helpers -------------------------------------------------------------------------------------


def _create_rest_catalog(api, uri: str):
    return api.post(
        CATALOGS, {"name": "rest", "kind": "iceberg_rest", "properties": {"uri": uri}}, format="json"
    )


def _delivery_for(channel: AlertChannel) -> int:
    return AlertDelivery.objects.create(channel=channel, event="test", title="t", text="x").pk


def _same_port_on(host: str, port: int, servers) -> Server:
    """A server on ``host`` at the same port another address already serves (a rebinding keeps the port)."""
    try:
        return servers(_ok, host=host, port=port)
    except OSError as error:
        pytest.skip(f"port {port} is taken on {host}: {error}")


def _self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    certificate, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(certificate), "-subj", f"/CN={name}",
            "-addext", f"subjectAltName=DNS:{name}",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return certificate, key
