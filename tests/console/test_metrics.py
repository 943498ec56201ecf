"""/metrics: who may scrape it, and every value equal to what the rows say."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import re
import socket
import uuid
from pathlib import Path

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from console.metrics.rows import backlog_counts
from processes.health import tables_by_health
from processes.models import Process, ProcessStatus, Query, QueryStatus, ServiceHeartbeat, TableState
from processes.registry import coordinators
from processes.scheduler import TickReport, _due_table_ids, _Snapshot, evaluated_key, seen_snapshot_key
from storage.models import CachedResult, CachedResultState, Catalog, StorageBackend, Table

pytestmark = pytest.mark.django_db

TOKEN = "metrics-token-for-the-tests-0123456789"


@pytest.fixture
def token(settings):
    settings.LAKEWARDEN_METRICS_TOKEN = TOKEN
    settings.LAKEWARDEN_METRICS_ALLOWED_IPS = []
    return TOKEN


def scrape(client) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one authorised scrape, parsed by prometheus-client."""
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples[(name, tuple(sorted((k, str(v)) for k, v in labels.items())))]


# --- access ---------------------------------------------------------------------------------------


def test_metrics_are_refused_with_a_clear_message_until_a_token_or_allow_list_is_set(client, settings):
    settings.LAKEWARDEN_METRICS_TOKEN = None
    settings.LAKEWARDEN_METRICS_ALLOWED_IPS = []

    response = client.get("/metrics")

    assert response.status_code == 403
    assert (
        b"LAKEWARDEN_METRICS_TOKEN" in response.content
        and b"LAKEWARDEN_METRICS_ALLOWED_IPS" in response.content
    )


def test_a_scrape_without_the_token_or_with_a_wrong_one_is_401(client, token):
    missing = client.get("/metrics")
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token-at-all-000")
    basic = client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}")

    assert [missing.status_code, wrong.status_code, basic.status_code] == [401, 401, 401]
    assert missing["WWW-Authenticate"] == 'Bearer realm="lakewarden-metrics"'
    assert 'error="invalid_token"' in wrong["WWW-Authenticate"]
    assert b"lakewarden_" not in missing.content + wrong.content + basic.content


def test_the_allow_list_admits_listed_addresses_only_and_still_wants_the_token_when_set(client, settings):
    settings.LAKEWARDEN_METRICS_TOKEN = None
    settings.LAKEWARDEN_METRICS_ALLOWED_IPS = ["10.1.0.0/16", "::1/128"]

    outside = client.get("/metrics", REMOTE_ADDR="10.2.0.7")
    settings.LAKEWARDEN_METRICS_TOKEN = TOKEN
    inside_without_token = client.get("/metrics", REMOTE_ADDR="10.1.4.5")
    outside_with_token = client.get("/metrics", REMOTE_ADDR="10.2.0.7", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")

    assert outside.status_code == 403 and b"ALLOWED_IPS" in outside.content
    assert inside_without_token.status_code == 401
    assert outside_with_token.status_code == 403


def test_bad_metrics_settings_stop_start_up_naming_the_variable(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from console.metrics.access import allowed_networks, metrics_token

    monkeypatch.setenv("LAKEWARDEN_METRICS_TOKEN", "short")
    monkeypatch.setenv("LAKEWARDEN_METRICS_ALLOWED_IPS", "10.0.0.1, example.com")
    with pytest.raises(ImproperlyConfigured, match="LAKEWARDEN_METRICS_TOKEN must be at least 16"):
        metrics_token()
    with pytest.raises(ImproperlyConfigured, match="'example.com' is not an IP address"):
        allowed_networks()
    monkeypatch.setenv("LAKEWARDEN_METRICS_ALLOWED_IPS", "10.0.0.1 2001:db8::/32")
    assert allowed_networks() == ["10.0.0.1/32", "2001:db8::/32"]


# --- values ---------------------------------------------------------------------------------------


@pytest.fixture
def tables(warehouse):
    catalog = Catalog.objects.create(name="lake", kind="path_root", properties={"root": str(warehouse)})
    now = timezone.now()
    orders = Table.objects.create(
        catalog=catalog, name='sales."orders"', format="iceberg", location=str(warehouse / "orders"),
        current_instant="7", file_count=120, small_file_count=90, total_bytes=5_000_000, instant_count=42,
        last_maintenance_at=now - dt.timedelta(hours=2),
    )  # fmt: skip
    events = Table.objects.create(
        name="events", format="delta", location=str(warehouse / "events"), current_instant="3",
        file_count=4, small_file_count=0, total_bytes=1_000, instant_count=3,
    )  # fmt: skip
    return orders, events


def test_table_gauges_equal_the_table_rows_and_the_overview_health_score(client, token, tables):
    orders, events = tables
    Process.objects.create(table=orders, action="rewrite", factory="x", status=ProcessStatus.FAILED)
    scores = {health.table.pk: health.score for health in tables_by_health(limit=None)}

    samples = scrape(client)

    for table, catalog in ((orders, "lake"), (events, "")):
        labels = {"catalog": catalog, "table": table.name, "format": table.format, "table_id": table.pk}
        assert value(samples, "lakewarden_table_files", **labels) == table.file_count
        assert value(samples, "lakewarden_table_small_files", **labels) == table.small_file_count
        assert value(samples, "lakewarden_table_bytes", **labels) == table.total_bytes
        assert value(samples, "lakewarden_table_snapshots", **labels) == table.instant_count
        if hasattr(table, "delete_file_count"):  # kept on the row once storage records it
            assert value(samples, "lakewarden_table_delete_files", **labels) == table.delete_file_count
        assert value(samples, "lakewarden_table_health_score", **labels) == scores[table.pk]
    orders_labels = {"catalog": "lake", "table": orders.name, "format": "iceberg", "table_id": orders.pk}
    assert scores[orders.pk] > 0
    since = value(samples, "lakewarden_table_seconds_since_maintenance", **orders_labels)
    assert 7200 <= since < 7200 + 600
    events_labels = {"catalog": "", "table": "events", "format": "delta", "table_id": events.pk}
    assert value(samples, "lakewarden_table_seconds_since_maintenance", **events_labels) == float("inf")


def _process(table, action, status, *, seconds=None, retry_of=None):
    started = timezone.now() - dt.timedelta(hours=1)
    return Process.objects.create(
        table=table, action=action, factory="x", status=status, retry_of=retry_of,
        attempt=2 if retry_of else 1, started_at=started if seconds is not None else None,
        finished_at=started + dt.timedelta(seconds=seconds) if seconds is not None else None,
    )  # fmt: skip


def test_processes_by_status_durations_retries_and_failures_equal_the_history(client, token, tables):
    orders, events = tables
    first = _process(orders, "rewrite", ProcessStatus.FAILED, seconds=10)
    _process(orders, "rewrite", ProcessStatus.SUCCESS, seconds=100, retry_of=first)
    _process(orders, "expire-snapshots", ProcessStatus.SUCCESS, seconds=2)
    _process(orders, "expire-snapshots", ProcessStatus.RUNNING)
    _process(events, "vacuum", ProcessStatus.PENDING)

    samples = scrape(client)

    def processes(fmt, action, status):
        return value(samples, "lakewarden_processes", format=fmt, action=action, status=status)

    assert processes("iceberg", "rewrite", "FAILED") == 1 and processes("iceberg", "rewrite", "SUCCESS") == 1
    assert processes("iceberg", "expire-snapshots", "RUNNING") == 1
    assert processes("delta", "vacuum", "PENDING") == 1
    assert value(samples, "lakewarden_process_retries_total", format="iceberg", action="rewrite") == 1
    assert value(samples, "lakewarden_process_failures_total", format="iceberg", action="rewrite") == 1
    assert (
        value(samples, "lakewarden_process_failures_total", format="iceberg", action="expire-snapshots") == 0
    )
    success = {"format": "iceberg", "action": "rewrite", "status": "SUCCESS"}
    assert value(samples, "lakewarden_process_duration_seconds_bucket", le="60.0", **success) == 0
    assert value(samples, "lakewarden_process_duration_seconds_bucket", le="120.0", **success) == 1
    assert value(samples, "lakewarden_process_duration_seconds_count", **success) == 1
    assert value(samples, "lakewarden_process_duration_seconds_sum", **success) == pytest.approx(100)
    failed = {"format": "iceberg", "action": "rewrite", "status": "FAILED"}
    assert value(samples, "lakewarden_process_duration_seconds_bucket", le="5.0", **failed) == 0
    assert value(samples, "lakewarden_process_duration_seconds_bucket", le="15.0", **failed) == 1
    running = ("lakewarden_process_duration_seconds_count", (("action", "expire-snapshots"),))
    assert not any(name == running[0] and ("status", "RUNNING") in labels for name, labels in samples)


def test_the_backlog_counts_the_tables_the_scheduler_finds_due(tables, warehouse):
    orders, events = tables
    now = timezone.now()
    stale = Table.objects.create(
        name="stale", format="iceberg", location=str(warehouse / "stale"), current_instant="9"
    )
    # orders: expire-snapshots evaluated a moment ago; rewrite seen at its current snapshot long ago.
    # stale: evaluated long ago at an older snapshot. events: vacuum running.
    long_ago = (now - dt.timedelta(days=30)).timestamp()
    TableState.objects.bulk_create([
        TableState(table=orders, key=evaluated_key("expire-snapshots"), value=now.timestamp()),
        TableState(table=orders, key=evaluated_key("rewrite"), value=long_ago),
        TableState(table=orders, key=seen_snapshot_key("rewrite"), value="7"),
        TableState(table=stale, key=evaluated_key("rewrite"), value=long_ago),
        TableState(table=stale, key=seen_snapshot_key("rewrite"), value="8"),
        TableState(table=stale, key=evaluated_key("expire-snapshots"), value=None),
    ])  # fmt: skip
    _process(events, "vacuum", ProcessStatus.RUNNING)

    backlog = backlog_counts(now)

    snapshot = _Snapshot(now)
    for (fmt, action), configured in coordinators().items():
        strategy = configured.factory.trigger_strategy(fmt, action)
        due = _due_table_ids(snapshot, fmt, action, strategy, now, TickReport())
        assert backlog[(fmt, action)] == len(due), (fmt, action)
    assert backlog[("iceberg", "rewrite")] == 1  # stale only: orders' snapshot was seen
    assert backlog[("iceberg", "expire-snapshots")] == 1  # stale only (a null evaluation counts as never)
    assert backlog[("delta", "vacuum")] == 0  # running
    assert backlog[("delta", "rewrite")] == 1


def test_cache_hits_misses_bytes_and_evictions_equal_the_rows(client, token):
    fast = StorageBackend.objects.create(name="fast", type="filesystem", quota_bytes=1000)
    slow = StorageBackend.objects.create(name="slow", type="filesystem")

    def result(backend, state, size, reason=""):
        return CachedResult.objects.create(
            fingerprint=uuid.uuid4().hex, backend=backend, name=uuid.uuid4().hex[:8], sql="select 1",
            source_snapshots={}, size_bytes=size, state=state, state_reason=reason,
        )  # fmt: skip

    kept = result(fast, CachedResultState.READY, 600)
    result(fast, CachedResultState.READY, 300)
    result(fast, CachedResultState.CLEANED, 900, "evicted: storage fast over its quota")
    result(fast, CachedResultState.CLEANED, 50, "write failed")
    result(slow, CachedResultState.INVALID, 70)
    for served in (True, True, False):
        Query.objects.create(
            sql="select 1", status=QueryStatus.SUCCESS, served_from_cache=served, cached_result=kept
        )
    Query.objects.create(sql="select 1", status=QueryStatus.SUCCESS, backend=slow)
    Query.objects.create(sql="select 1", status=QueryStatus.FAILED, backend=slow)
    Query.objects.create(sql="select 1", status=QueryStatus.SUCCESS, cache=False, backend=slow)

    samples = scrape(client)

    assert value(samples, "lakewarden_cache_hits_total", storage="fast") == 2
    assert value(samples, "lakewarden_cache_misses_total", storage="fast") == 1
    assert value(samples, "lakewarden_cache_hits_total", storage="slow") == 0
    assert value(samples, "lakewarden_cache_misses_total", storage="slow") == 1
    assert value(samples, "lakewarden_cache_bytes", storage="fast") == 900
    assert value(samples, "lakewarden_cache_bytes", storage="slow") == 0
    assert value(samples, "lakewarden_cache_evictions_total", storage="fast") == 1
    assert value(samples, "lakewarden_cache_evictions_total", storage="slow") == 0
    assert value(samples, "lakewarden_cache_results", storage="fast", state="READY") == 2
    assert value(samples, "lakewarden_cache_results", storage="fast", state="CLEANED") == 2
    assert value(samples, "lakewarden_cache_quota_bytes", storage="fast") == 1000
    assert ("lakewarden_cache_quota_bytes", (("storage", "slow"),)) not in samples


def test_queue_depth_is_what_waits_in_the_broker_and_request_latency_counts_each_scrape(
    client, token, settings
):
    from kombu import Connection, Exchange, Producer, Queue

    name = f"metrics-test-{uuid.uuid4().hex[:8]}"
    settings.CELERY_TASK_DEFAULT_QUEUE = name
    settings.LAKEWARDEN_HEAVY_QUEUE = f"{name}.heavy"
    queue = Queue(name, Exchange(name), routing_key=name)
    with Connection(settings.CELERY_BROKER_URL) as conn:
        producer = Producer(conn)
        for number in range(3):
            producer.publish({"n": number}, exchange=queue.exchange, routing_key=name, declare=[queue])
        try:
            first = scrape(client)
            second = scrape(client)
        finally:
            queue.bind(conn.default_channel).delete()

    assert value(first, "lakewarden_celery_queue_length", queue=name) == 3
    assert value(first, "lakewarden_celery_queue_length", queue=f"{name}.heavy") == 0
    assert value(first, "lakewarden_broker_up") == 1
    latency = {"view": "metrics", "method": "GET", "status": "200"}
    before = first.get(("lakewarden_http_request_duration_seconds_count", tuple(sorted(latency.items()))), 0)
    assert value(second, "lakewarden_http_request_duration_seconds_count", **latency) == before + 1


@pytest.mark.django_db(transaction=True)
def test_beat_liveness_is_the_overviews(client, token):
    # The probe reads beat's heartbeat on its own connection: the row must be committed.
    ServiceHeartbeat.objects.create(name="beat", last_seen=timezone.now() - dt.timedelta(seconds=5))
    fresh = scrape(client)
    ServiceHeartbeat.objects.filter(name="beat").update(last_seen=timezone.now() - dt.timedelta(hours=1))
    silent = scrape(client)

    assert value(fresh, "lakewarden_beat_up") == 1 and value(silent, "lakewarden_beat_up") == 0
    seen = ServiceHeartbeat.objects.get(name="beat").last_seen.timestamp()
    assert value(silent, "lakewarden_beat_last_seen_timestamp_seconds") == pytest.approx(seen)


DASHBOARD = Path(__file__).resolve().parents[2] / "conf" / "grafana" / "lakewarden.json"


def dashboard_expressions() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def test_every_metric_the_grafana_dashboard_uses_is_in_the_gzipped_scrape(client, token, tables, monkeypatch):
    from console.metrics import views

    monkeypatch.setattr(views, "GZIP_ABOVE_BYTES", 0)
    _process(tables[0], "rewrite", ProcessStatus.SUCCESS, seconds=30)
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", HTTP_ACCEPT_ENCODING="gzip")
    assert response["Content-Encoding"] == "gzip"
    exposed = set()
    for family in text_string_to_metric_families(gzip.decompress(response.content).decode()):
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}.get(family.type, [""])
        exposed.update(family.name + suffix for suffix in suffixes)

    used = {name for expr in dashboard_expressions() for name in re.findall(r"lakewarden_\w+", expr)}

    assert len(used) >= 20
    assert used <= exposed, used - exposed


def test_resetting_the_samples_folder_removes_only_sample_files(tmp_path):
    from console.metrics.http import reset_samples

    (tmp_path / "histogram_123.db").write_bytes(b"x")
    (tmp_path / "counter_9.db").write_bytes(b"x")
    (tmp_path / "README").write_text("keep")

    assert reset_samples(str(tmp_path)) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["README"]


def test_a_tables_delete_files_are_the_ones_its_refresh_counted(client, token, delta_fixture, settings):
    """A real Delta table with one deletion vector (written by Databricks): 1 delete file."""
    if not any(f.name == "delete_file_count" for f in Table._meta.get_fields()):
        pytest.skip("storage does not keep delete_file_count on the table row yet (see the metrics report)")
    from storage.services import table_register

    location = delta_fixture("table-with-dv-small")
    settings.LAKEWARDEN_ALLOWED_ROOTS = [location.parent]
    table = table_register(location=str(location))

    samples = scrape(client)

    labels = {"catalog": "", "table": table.name, "format": "delta", "table_id": table.pk}
    assert table.delete_file_count == 1
    assert value(samples, "lakewarden_table_delete_files", **labels) == 1
    assert value(samples, "lakewarden_table_files", **labels) == 1


def test_a_broker_that_is_down_is_reported_and_the_rest_still_served(client, token, settings, tables):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{port}/0"

    samples = scrape(client)

    assert value(samples, "lakewarden_broker_up") == 0
    # The ping cannot reach a worker: no worker is reported up (the gauge may be missing: too late).
    assert samples.get(("lakewarden_workers_up", ()), 0) == 0
    assert not any(name == "lakewarden_celery_queue_length" for name, _ in samples)
    assert (
        value(
            samples,
            "lakewarden_table_files",
            catalog="",
            table="events",
            format="delta",
            table_id=tables[1].pk,
        )
        == 4
    )


RABBITMQ_URL = os.environ.get("LAKEWARDEN_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


def test_queue_depth_on_rabbitmq_is_its_message_count_and_an_unknown_queue_is_empty(settings):
    from kombu import Connection, Exchange, Producer, Queue

    from console.metrics.runtime import queue_depths

    name = f"metrics-test-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name), routing_key=name)
    settings.CELERY_BROKER_URL = RABBITMQ_URL
    # Publisher confirms: each publish returns once RabbitMQ has the message queued (without them
    # a publish returns before the broker routed it, and the count could come back short).
    with Connection(RABBITMQ_URL, connect_timeout=3, transport_options={"confirm_publish": True}) as conn:
        try:
            conn.ensure_connection(max_retries=1)
        except OSError as error:
            pytest.skip(f"RabbitMQ is not reachable at {RABBITMQ_URL}: {error}")
        for number in range(2):
            Producer(conn).publish({"n": number}, exchange=queue.exchange, routing_key=name, declare=[queue])
        try:
            depths = queue_depths([name, f"{name}.never-declared"])
        finally:
            queue.bind(conn.default_channel).delete()

    assert depths == {name: 2, f"{name}.never-declared": 0}


def _answer_requests_in_this_process(count: int) -> None:
    """In a forked child: the latency middleware answers ``count`` requests, as another gunicorn
    worker would (PUT and 418: labels no other test produces)."""
    from django.http import HttpResponse
    from django.test import RequestFactory
    from django.urls import resolve

    from console.metrics.http import RequestLatencyMiddleware

    middleware = RequestLatencyMiddleware(lambda request: HttpResponse(status=418))
    for _ in range(count):
        request = RequestFactory().put("/metrics")
        request.resolver_match = resolve("/metrics")
        middleware(request)


def _latency_count(labels: dict) -> float:
    """What the samples folder holds now, summed over every process's file."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    return registry.get_sample_value("lakewarden_http_request_duration_seconds_count", labels) or 0


def test_request_latency_of_every_web_process_is_added_up(client, token):
    import multiprocessing

    labels = {"view": "metrics", "method": "PUT", "status": "418"}
    before = _latency_count(labels)
    child = multiprocessing.get_context("fork").Process(target=_answer_requests_in_this_process, args=(3,))
    child.start()
    child.join(timeout=60)

    samples = scrape(client)

    assert child.exitcode == 0
    assert value(samples, "lakewarden_http_request_duration_seconds_count", **labels) == before + 3
