"""A /metrics scrape over 10,000 registered tables (target: under 1 s).

Runs against its own database (lakewarden_bench, created and migrated when missing): 10,000 tables
in 10 catalogs with facts on their rows, 30,000 processes in the history, every table evaluated by
the scheduler (as bench/triggers.py), a few storages with cached results and queries. Each run is
the /metrics view answering a request with the token; its database part is timed apart from the
broker probe (a worker ping that waits its timeout, run in parallel with the queries).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

TOKEN = "bench-metrics-token-0123456789abcdef"


def populate(tables: int) -> int:
    from django.utils import timezone

    from processes.models import Process, ProcessStatus, Query, QueryStatus, TableState
    from processes.registry import coordinators
    from processes.scheduler import evaluated_key, seen_snapshot_key
    from storage.models import CachedResult, CachedResultState, Catalog, StorageBackend, Table

    for model in (Query, CachedResult, StorageBackend, Process, TableState, Table, Catalog):
        model.objects.all().delete()
    catalogs = Catalog.objects.bulk_create(
        Catalog(name=f"c{i}", kind="path_root", properties={"root": f"/bench/c{i}"}) for i in range(10)
    )
    now = timezone.now()
    formats = ["iceberg", "delta"]
    rows = Table.objects.bulk_create(
        (
            Table(
                catalog=catalogs[i % 10],
                name=f"db.table_{i}",
                identifier=f"db.table_{i}",
                format=formats[i % 2],
                location=f"/bench/t{i}",
                current_instant=str(i % 7),
                file_count=100 + i % 5000,
                small_file_count=i % 300,
                total_bytes=10**9 + i,
                instant_count=1 + i % 400,
                last_maintenance_at=None if i % 9 == 0 else now - dt.timedelta(hours=i % 500),
            )  # fmt: skip
            for i in range(tables)
        ),
        batch_size=2000,
    )
    statuses = [ProcessStatus.SUCCESS] * 7 + [
        ProcessStatus.FAILED,
        ProcessStatus.CANCELED,
        ProcessStatus.KILLED,
    ]
    actions = {
        "iceberg": ("rewrite", "expire-snapshots", "clean-orphan-files"),
        "delta": ("rewrite", "vacuum", "checkpoint"),
    }
    Process.objects.bulk_create(
        (
            Process(
                table=table,
                action=actions[table.format][n],
                factory="bench",
                status=statuses[(i + n) % 10],
                started_at=now - dt.timedelta(hours=1),
                finished_at=now - dt.timedelta(seconds=3600 - (i % 900)),
            )  # fmt: skip
            for i, table in enumerate(rows)
            for n in range(3)
        ),
        batch_size=5000,
    )
    stamp = now.timestamp()
    TableState.objects.bulk_create(
        (
            state
            for table in rows
            for fmt, action in coordinators()
            if fmt == table.format
            for state in (
                TableState(table=table, key=evaluated_key(action), value=stamp - (table.pk % 3) * 86400),
                TableState(table=table, key=seen_snapshot_key(action), value=table.current_instant),
            )
        ),
        batch_size=5000,
    )
    for b in range(3):
        backend = StorageBackend.objects.create(name=f"store{b}", type="filesystem", quota_bytes=10**9)
        results = CachedResult.objects.bulk_create(
            CachedResult(
                fingerprint=f"{b}-{i}",
                backend=backend,
                name=f"r{b}_{i}",
                sql="select 1",
                source_snapshots={},
                size_bytes=1000 * i,
                state=CachedResultState.READY if i % 4 else CachedResultState.CLEANED,
            )  # fmt: skip
            for i in range(200)
        )
        Query.objects.bulk_create(
            Query(
                sql="select 1",
                status=QueryStatus.SUCCESS,
                served_from_cache=i % 3 > 0,
                cached_result=results[i % 200],
            )
            for i in range(2000)
        )
    return len(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    os.environ["LAKEWARDEN_METRICS_TOKEN"] = TOKEN

    from common import django_on_bench_database, write_section

    django_on_bench_database()
    from django.db import connection
    from django.test import RequestFactory
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from console.metrics import rows as metric_rows
    from console.metrics.views import metrics

    count = populate(args.tables)
    with connection.cursor() as cursor:  # the statistics autovacuum would have gathered by now
        cursor.execute("analyze console_table, processes_process, processes_tablestate")
    request = RequestFactory().get(
        "/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", HTTP_ACCEPT_ENCODING="gzip"
    )
    totals, database, queries = [], [], 0
    for _ in range(args.runs):
        started = time.perf_counter()
        response = metrics(request)
        totals.append(time.perf_counter() - started)
        assert response.status_code == 200, response.content[:200]
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            now = timezone.now()
            metric_rows.process_families(), metric_rows.backlog_family(now), metric_rows.cache_families()
            text = "".join(metric_rows.table_lines(now))
            database.append(time.perf_counter() - started)
        queries = len(captured.captured_queries)
    body = gzip.decompress(response.content)
    assert body.count(b"\nlakewarden_table_files{") == count
    samples = body.count(b"\n") - body.count(b"# ")
    result = (
        f"/metrics over {count:,} tables, 30,000 processes, 3 storages ({args.runs} runs; "
        f"{samples:,} samples, {len(body) / 1e6:.1f} MB, "
        f"{len(response.content) / 1e6:.2f} MB gzipped):\n\n"
        "| part | median | min | max | target |\n|---|---|---|---|---|\n"
        f"| whole scrape (view, gzip, broker probe in parallel) | {statistics.median(totals) * 1000:.0f} ms | "
        f"{min(totals) * 1000:.0f} ms | {max(totals) * 1000:.0f} ms | "
        f"< 1 s: {'met' if statistics.median(totals) < 1 else 'NOT met'} |\n"
        f"| rows to text ({queries} queries, no broker) | {statistics.median(database) * 1000:.0f} ms | "
        f"{min(database) * 1000:.0f} ms | {max(database) * 1000:.0f} ms | |\n"
    )
    assert len(text) > 0
    load = " / ".join(f"{value:.1f}" for value in os.getloadavg())
    result += f"\nLoad average (1 / 5 / 15 min) at the end: {load} on {os.cpu_count()} cores.\n"
    write_section("Metrics scrape (bench/metrics_scrape.py)", result)
    print(result)


if __name__ == "__main__":
    main()
