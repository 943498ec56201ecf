"""``bench/triggers.py --due``: the scheduler tick ranking due work, this tree against an older one.

The parent makes the tables once (in the bench database, with this tree's models: the schema is
the same), then times the tick in one child process per tree (``--measure TREE``), each importing
the code of its tree first. Between timed ticks the tick's own writes (processes, decisions,
evaluation states, wake times) are undone, so every tick sees the same due work.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MIB = 1024 * 1024
SLOTS = 4


def compare(sizes: list[int], old: str, runs: int) -> None:
    from common import django_on_bench_database, write_section

    django_on_bench_database()
    lines = []
    for size in sizes:
        _make_tables(size)
        trees = [("this tree", str(ROOT))] + ([("old", old)] if old else [])
        results = {}
        for name, tree in trees:
            started = time.perf_counter()
            results[name] = _child(tree, runs)
            print(
                f"{size:,} tables, {name}: {results[name]} ({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
        for name, result in results.items():
            lines.append(
                f"| {size:,} | {name} | {result['first_due']:,} | {result['first'] * 1000:,.0f} ms | "
                f"{result['first_cpu'] * 1000:,.0f} ms | {result['first_decisions']:,} | {result['due']:,} | "
                f"{result['median'] * 1000:,.0f} ms | {result['max'] * 1000:,.0f} ms | "
                f"{result['cpu'] * 1000:,.0f} ms | {result['queries']} | {result['triggered']} |"
            )
            print(lines[-1], flush=True)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    body = (
        "Ticks that rank due work (issue 31): the bench factory offers rewrite, expire-snapshots (and "
        "rewrite-position-deletes on Iceberg) with the default estimate from seeded facts; one resource "
        f"group of {SLOTS} slots. **First tick**: every table never evaluated, so due for each action; "
        "those below the minimum benefit are evaluated and their decisions written. **Next ticks**: the "
        "processes started are gone (slots free) and every table left waiting is due again, ranked "
        f"again. Median of {runs} ticks each after one untimed; each tree in its own process in this "
        f"run; load average at the end {load}. `old`: an earlier tree measured beside this one "
        f"(`--old` {old or 'not given'}). *CPU* is the tick's own process (``process_time``, "
        "Postgres not counted): on a loaded machine most of the wall time is waiting for a core.\n\n"
        "| tables | code | first tick: due (table, action) | median | its CPU | decisions written | next "
        "ticks: due | median | max | their CPU | queries per tick | started |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(lines) + "\n\n"
        "Target: under 1 s at 100,000 due tables. Run: `.venv/bin/python bench/triggers.py --due "
        "10000,100000 --old /tmp/old --runs 3`.\n"
    )
    sized = ", ".join(f"{size:,}" for size in sizes)
    write_section(f"Scheduler tick ranking due work, {sized} tables (bench/triggers.py --due)", body)
    print(body)


def _child(tree: str, runs: int) -> dict:
    command = [sys.executable, str(HERE / "triggers.py"), "--measure", tree, "--runs", str(runs)]
    # cwd: celery's Django fixup puts the working directory first on sys.path
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=tree)
    if done.returncode != 0:
        raise SystemExit(f"measuring {tree} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _make_tables(count: int) -> None:
    from django.db import connection
    from django.utils import timezone

    from storage.models import Table

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {Table._meta.db_table} CASCADE")
    rng = random.Random(31)
    now = timezone.now()
    rows = []
    for i in range(count):
        files = rng.randrange(1, 5_000)
        small = rng.randrange(0, files + 1) if rng.random() < 0.7 else rng.randrange(0, 5)
        rows.append(
            Table(
                name=f"t{i}",
                identifier=f"ns{i % 50}.t{i}",
                format=("iceberg", "delta")[i % 2],
                location=f"/bench/due/t{i}",
                current_instant="1",
                file_count=files,
                small_file_count=small,
                compactable_file_count=small if small >= 5 else 0,
                delete_file_count=rng.randrange(0, 40) if rng.random() < 0.3 else 0,
                total_bytes=small * MIB + (files - small) * 128 * MIB,
                instant_count=rng.randrange(1, 300),
                refreshed_at=now,
            )
        )
    Table.objects.bulk_create(rows, batch_size=5_000)
    with connection.cursor() as cursor:  # registered over the last two days: some have waited
        cursor.execute(
            f"UPDATE {Table._meta.db_table} SET registered_at = %s - (id %% 48) * interval '1 hour'", [now]
        )
        cursor.execute(f"ANALYZE {Table._meta.db_table}")


def measure(tree: str, runs: int) -> None:
    """In a child process: time ``runs`` ticks with the code of ``tree``; prints one JSON line."""
    from common import BENCH_DATABASE

    sys.path.insert(0, tree)
    # the editable install maps the project's packages to the checkout: let sys.path decide instead
    sys.meta_path = [
        f for f in sys.meta_path if "__editable___lakewarden_0" not in str(getattr(f, "__module__", ""))
    ]
    os.environ["DATABASE_URL"] = BENCH_DATABASE
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    import processes

    assert str(Path(processes.__file__).resolve()).startswith(str(Path(tree).resolve())), processes.__file__
    from processes.groups.models import DEFAULT_GROUP, ResourceGroup
    from processes.scheduler import schedule_tick

    _install_factory()
    ResourceGroup.objects.filter(name=DEFAULT_GROUP).update(
        max_concurrency=SLOTS, compute_budget_seconds=10**7
    )
    _reset()
    schedule_tick()  # untimed: the configuration fingerprint, warm caches
    first, first_report = _timed(runs, lambda: _reset())
    steady, report, queries = _timed(runs, _free_slots, count_queries=True)
    print(
        json.dumps(
            {
                "first": statistics.median(t for t, _ in first),
                "first_cpu": statistics.median(c for _, c in first),
                "first_decisions": first_report.decisions,
                "first_due": first_report.due,
                "median": statistics.median(t for t, _ in steady),
                "max": max(t for t, _ in steady),
                "cpu": statistics.median(c for _, c in steady),
                "queries": queries,
                "due": report.due,
                "triggered": len(report.triggered),
                "decisions": report.decisions,
            }
        )
    )


def _timed(runs: int, before, count_queries: bool = False):
    """``runs`` ticks, each after ``before()``: their seconds, the last report (and its queries)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from processes.scheduler import schedule_tick

    timings, report, queries = [], None, 0
    for _ in range(runs):
        before()
        with CaptureQueriesContext(connection) as captured:
            started, cpu = time.perf_counter(), time.process_time()
            report = schedule_tick()
            timings.append((time.perf_counter() - started, time.process_time() - cpu))
        queries = len(captured.captured_queries)
    return (timings, report, queries) if count_queries else (timings, report)


def _free_slots() -> None:
    """The processes the last tick started are gone: their slots are free again; every other
    table it left waiting is still due (those it asked or found below the minimum are not)."""
    from processes.models import Process

    Process.objects.all().delete()


def _reset() -> None:
    """Undo what a tick wrote, so the next one sees the same due work."""
    from django.db import connection

    from processes.decisions import Decision
    from processes.models import Process, TableState
    from storage.models import Table

    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {Decision._meta.db_table}")
        cursor.execute(f"DELETE FROM {TableState._meta.db_table}")
    Process.objects.all().delete()
    Table.objects.exclude(scheduler_wake_at=None).update(scheduler_wake_at=None)


def _install_factory() -> None:
    """The bench factory is the only one the scheduler sees; processes go to no broker."""
    from processes import registry, services
    from processes.plugin import (
        EXPIRE_SNAPSHOTS,
        REWRITE,
        REWRITE_POSITION_DELETES,
        ProcessFactory,
        TableProcess,
        TriggerStrategy,
    )
    from processes.registry import ConfiguredFactory

    class Bench(TableProcess):
        def run(self, context):  # never run: the bench times the decision only
            raise NotImplementedError

    class Factory(ProcessFactory):
        name = "bench-due"
        default_properties = {"interval": 600, "parallelism": 2}

        def supported_actions(self):
            return {
                "iceberg": {REWRITE, EXPIRE_SNAPSHOTS, REWRITE_POSITION_DELETES},
                "delta": {REWRITE, EXPIRE_SNAPSHOTS},
            }

        def trigger_strategy(self, format, action):
            return TriggerStrategy(interval=dt.timedelta(seconds=600), parallelism=2)

        def trigger(self, runtime, action):
            table = runtime.table
            wanted = {
                REWRITE: (table.compactable_file_count or 0) >= 5,
                EXPIRE_SNAPSHOTS: table.instant_count > 10,
                REWRITE_POSITION_DELETES: table.delete_file_count > 1,
            }
            return Bench(action, {}) if wanted[action] else None

        def recover(self, runtime, record):
            return Bench(record.action, record.params)

    factory = Factory()
    registry.configured_factories = lambda include_disabled=False: [
        ConfiguredFactory(name=factory.name, factory=factory, enabled=True, priority=0)
    ]
    services.process_enqueue = lambda process: None
