"""Scheduler tick over 10,000 registered tables with nothing due (target: under 1 s).

Runs against its own database (lakewarden_bench, created and migrated when missing) with the
built-in process factories enabled; every table was evaluated a moment ago, so the tick must
decide "nothing to do" for all of them from a handful of queries.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    from common import django_on_bench_database, write_section

    django_on_bench_database()
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from processes.models import Process, TableState
    from processes.registry import coordinators
    from processes.scheduler import evaluated_key, schedule_tick, seen_snapshot_key
    from storage.models import Table

    Process.objects.all().delete()
    TableState.objects.all().delete()
    Table.objects.all().delete()
    formats = ["iceberg", "delta"]
    tables = Table.objects.bulk_create(
        Table(
            name=f"t{i}", format=formats[i % 2], location=f"/bench/t{i}", current_instant="1", file_count=100
        )
        for i in range(args.tables)
    )
    pairs = coordinators()
    now = timezone.now().timestamp()
    states = []
    for table in tables:
        for fmt, action in pairs:
            if fmt == table.format:
                states.append(TableState(table=table, key=evaluated_key(action), value=now))
                states.append(TableState(table=table, key=seen_snapshot_key(action), value="1"))
    TableState.objects.bulk_create(states, batch_size=5000)

    timings = []
    queries = 0
    for _ in range(args.runs):
        reset_queries()
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            report = schedule_tick()
            timings.append(time.perf_counter() - started)
        queries = len(captured.captured_queries)
        assert report.triggered == [] and report.due == 0, report
    median = statistics.median(timings)
    body = (
        f"Scheduler tick over {args.tables:,} tables ({len(pairs)} (format, action) pairs enabled), nothing due, "
        f"{args.runs} runs:\n\n"
        f"| median | min | max | queries per tick | target |\n|---|---|---|---|---|\n"
        f"| {median * 1000:.0f} ms | {min(timings) * 1000:.0f} ms | {max(timings) * 1000:.0f} ms | {queries} | "
        f"< 1 s: {'met' if median < 1 else 'NOT met'} |\n"
    )
    write_section("Scheduler tick (bench/triggers.py)", body)
    print(body)


if __name__ == "__main__":
    main()
