"""Scheduler tick over 10,000 registered tables with nothing due (target: under 1 s).

Runs against its own database (lakewarden_bench, created and migrated when missing) with the
built-in process factories enabled; every table was evaluated a moment ago, so the tick must
decide "nothing to do" for all of them from a handful of queries.

``--due`` (issue 31): ticks that rank due work instead, at 10,000 and 100,000 due tables (half
Iceberg, half Delta, seeded facts, never evaluated so every table is due for each of the bench
factory's actions), with the code of this tree and with an older tree (``--old``, an export of
an earlier commit: ``git archive <commit> | tar -x -C /tmp/old``) side by side in one run, each in
its own process. The bench factory (``bench_factory.py``) offers rewrite, expire-snapshots and
rewrite-position-deletes with the default estimate and starts processes without a broker; one
resource group of 4 slots. Reports the tick's median and max, queries per tick, due pairs.
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
    parser.add_argument("--due", type=str, default="", help="due-table counts to rank, e.g. 10000,100000")
    parser.add_argument("--old", type=str, default="", help="an older tree to measure side by side")
    parser.add_argument("--measure", type=str, default="", help="(internal) the code tree to time")
    args = parser.parse_args()
    if args.measure:
        from _due_tick import measure

        measure(args.measure, args.runs)
        return
    if args.due:
        from _due_tick import compare

        compare([int(n) for n in args.due.split(",")], args.old, args.runs)
        return

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
