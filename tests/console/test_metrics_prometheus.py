"""A real Prometheus (Debian's ``prometheus``) scrapes the live server once, with the bearer token,
and a value comes back through its HTTP API."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from storage.models import Table
from tests.console.test_metrics import dashboard_expressions

TOKEN = "prometheus-scrape-token-0123456789"
PROMETHEUS = shutil.which("prometheus")

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="Debian's prometheus is not installed (apt-get install --no-install-recommends prometheus)",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _wait_until(condition, *, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.3)  # polling a condition, with a deadline
    pytest.fail(f"{what} after {seconds} s")


def _stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _config(target: str) -> str:
    # JSON is YAML: no YAML writer needed. The scrape waits for a worker ping (about 1 s).
    return json.dumps(
        {
            "global": {"scrape_interval": "2s", "scrape_timeout": "2s"},
            "scrape_configs": [
                {
                    "job_name": "lakewarden",
                    "metrics_path": "/metrics",
                    "authorization": {"type": "Bearer", "credentials": TOKEN},
                    "static_configs": [{"targets": [target]}],
                }
            ],
        }
    )


@pytest.fixture
def prometheus(tmp_path, live_server, settings):
    """A Prometheus on its own port and data folder, scraping the live server; stopped (its whole
    process group) at the end."""
    settings.LAKEWARDEN_METRICS_TOKEN = TOKEN
    settings.LAKEWARDEN_METRICS_ALLOWED_IPS = ["127.0.0.1/32"]
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(_config(f"127.0.0.1:{urllib.parse.urlsplit(live_server.url).port}"))
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        # Prometheus listens before it is ready: until then its API answers 503 with a plain-text
        # body (a clean-clone run failed decoding one as JSON); wait for its readiness endpoint
        _wait_until(lambda: _ready(base), seconds=60, what="Prometheus was not ready")
        yield base
    finally:
        _stop(process)
        log.close()


def _ready(base: str) -> bool:
    try:
        return _get(f"{base}/-/ready")[0] == 200
    except OSError:  # not listening yet
        return False


def _query(base: str, expression: str) -> dict:
    try:
        return json.loads(_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expression}))[1])
    except OSError:  # not listening yet
        return {}


def test_a_real_prometheus_scrapes_the_metrics_and_answers_a_tables_file_count(
    transactional_db, warehouse, request
):
    table = Table.objects.create(
        name="orders",
        format="iceberg",
        location=str(warehouse / "orders"),
        file_count=1234,
        total_bytes=98765,
    )
    prometheus = request.getfixturevalue("prometheus")  # started once the row is there
    selector = f'{{table_id="{table.pk}"}}'

    files = _wait_until(
        lambda: _query(prometheus, f"lakewarden_table_files{selector}").get("data", {}).get("result"),
        seconds=60,
        what="Prometheus had no lakewarden_table_files",
    )
    size = _query(prometheus, f"lakewarden_table_bytes{selector}")["data"]["result"]
    up = _query(prometheus, 'up{job="lakewarden"}')["data"]["result"]

    assert files[0]["metric"]["table"] == "orders" and files[0]["metric"]["format"] == "iceberg"
    assert float(files[0]["value"][1]) == 1234
    assert float(size[0]["value"][1]) == 98765
    assert float(up[0]["value"][1]) == 1
    # Every expression of the shipped Grafana dashboard is valid PromQL for this Prometheus.
    for expression in dashboard_expressions():
        query = expression.replace("$format", ".*").replace("$catalog", ".*")
        assert _query(prometheus, query).get("status") == "success", expression
