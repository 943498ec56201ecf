"""Spark on the capacity page (issue 31 item 7): what Spark the workers use and its executors, read
from a Spark session of this process or from Spark's status REST API (a real local Spark with its
UI, in a child process), and "not reachable" with the reason, within the timeout, otherwise."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time

import pytest
from django.core.cache import cache
from django.test import Client

from processes.groups import executors
from processes.groups.executors import CACHE_KEY, read_executors, spark_target

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_answer():
    cache.delete(CACHE_KEY)
    yield
    cache.delete(CACHE_KEY)


@pytest.fixture
def web_process(monkeypatch):
    """This process as the web server is: it holds no Spark session (the workers do)."""
    monkeypatch.setattr("processes.spark.session._session", None)


def _page(user) -> str:
    client = Client()
    client.force_login(user)
    response = client.get("/capacity/")
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize(
    ("master", "remote", "mode", "cores", "words"),
    [
        ("local[3]", None, "local", 3, "local[3]: a Spark driver inside each worker process (3 cores)"),
        ("local", None, "local", 1, "local: a Spark driver inside each worker process (1 core)"),
        ("spark://m:7077", None, "standalone", None, "standalone cluster spark://m:7077"),
        ("local[2]", "sc://connect:15002", "connect", None, "Spark Connect server sc://connect:15002"),
    ],
)
def test_the_target_is_what_the_settings_say(settings, master, remote, mode, cores, words):
    settings.LAKEWARDEN_SPARK_MASTER = master
    settings.LAKEWARDEN_SPARK_REMOTE = remote
    assert spark_target() == {
        "mode": mode,
        "url": remote or master,
        "cores": cores,
        "describe": words,
    }


@pytest.mark.spark
def test_the_executors_of_a_session_in_this_process(spark, operator):
    answer = read_executors()

    assert (answer["reachable"], answer["source"]) == (True, "this process's Spark session")
    [driver] = answer["executors"]
    assert driver["id"] == "driver"
    assert driver["cores"] == spark.sparkContext.defaultParallelism > 0
    assert driver["memory"] == "1g"  # the test session's spark.driver.memory
    assert driver["active_tasks"] == 0 and driver["storage_memory_bytes"] > 0
    html = _page(operator)
    assert f"<td>driver</td><td>{driver['host']}</td><td>{driver['cores']}</td><td>1g</td>" in html


def test_with_no_session_and_no_status_url_it_says_not_reachable_and_why(web_process, settings, operator):
    settings.LAKEWARDEN_SPARK_MASTER = "local[2]"
    settings.LAKEWARDEN_SPARK_STATUS_URL = None

    html = _page(operator)

    assert "local[2]: a Spark driver inside each worker process (2 cores)" in html
    assert 'id="spark-unreachable"' in html
    assert "Executors not reachable: the workers hold their Spark sessions, not this process" in html
    assert 'id="spark-executors"' not in html


def test_a_status_api_that_never_answers_is_not_reachable_within_the_timeout(web_process, settings, operator):
    silent = socket.socket()  # accepts connections (the backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there: refused
    try:
        settings.LAKEWARDEN_SPARK_STATUS_URL = f"http://127.0.0.1:{silent.getsockname()[1]}"
        answer = read_executors()
        assert answer["reachable"] is False and answer["executors"] == []
        assert answer["reason"] == (
            f"not reachable: Spark's status API at {settings.LAKEWARDEN_SPARK_STATUS_URL} did not answer (timed out)"
        )
        assert "did not answer (timed out)" in _page(operator)

        settings.LAKEWARDEN_SPARK_STATUS_URL = f"http://127.0.0.1:{closed_port}"
        refused = read_executors()
        assert refused["reachable"] is False and "Connection refused" in refused["reason"]
    finally:
        silent.close()


SPARK_WITH_UI = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("lakewarden-ui-probe")
             .config("spark.ui.enabled", "true").config("spark.ui.port", sys.argv[1])
             .config("spark.driver.memory", "512m").getOrCreate())
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes it
    spark.stop()
    """
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.spark
def test_the_executors_read_from_a_real_spark_ui(web_process, settings, operator):
    port = _free_port()
    child = subprocess.Popen(
        [sys.executable, "-c", SPARK_WITH_UI, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        settings.LAKEWARDEN_SPARK_STATUS_URL = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 120
        answer = read_executors()
        while not answer["reachable"] and time.monotonic() < deadline:  # the UI starts with the session
            time.sleep(0.5)
            answer = read_executors()

        assert answer["reachable"], answer
        assert answer["source"] == f"Spark's status API at http://127.0.0.1:{port}/"
        [driver] = answer["executors"]
        assert driver["id"] == "lakewarden-ui-probe / driver"
        assert (driver["cores"], driver["active_tasks"]) == (2, 0)
        assert driver["storage_memory_bytes"] > 0
        html = _page(operator)
        assert "<td>lakewarden-ui-probe / driver</td>" in html and "<td>2</td>" in html
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def test_the_answer_is_shared_for_a_few_seconds(web_process, settings):
    settings.LAKEWARDEN_SPARK_STATUS_URL = None
    first = executors.recent_executors()
    settings.LAKEWARDEN_SPARK_MASTER = "local[5]"
    assert executors.recent_executors() == first  # shared
    cache.delete(CACHE_KEY)
    assert executors.recent_executors()["target"]["cores"] == 5
