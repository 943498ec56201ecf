"""Fresh figures at 10,000 tables (issue 31): the cost of the short pointer beat.

Runs in a throwaway database (``lakewarden_bench_fresh``, dropped first and after). 10,000 table
rows, half Delta half Iceberg (by path), each pointing at a real folder on local disk holding its
Delta log or Iceberg metadata file names; a share of them active (a commit within the hour), the
rest cold. One short tick is what ``storage.tasks.refresh_active_tables_task`` runs:
``active_table_ids`` then ``refresh_moved``, with 1% of the active tables moved since their last
refresh (their refresh is counted, not run). Measured per tick: wall time, database queries, and
pointer reads (each is one listing request on an object store: the Delta log's names, the Iceberg
``metadata/`` names), and from them the requests per second at the default beat
(``LAKEWARDEN_ACTIVE_REFRESH_SECONDS``, 5 s). Target: bounded whatever the number of tables
(queries per tick constant, pointer reads at most ``ACTIVE_LIMIT``) and a tick shorter than the
beat.

Prints its section and replaces it in bench/RESULTS.md (``--print-only``: prints it only).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

for folder in (Path(__file__).resolve().parent.parent, Path(__file__).resolve().parent):
    sys.path.insert(0, str(folder))
DATABASE = "postgresql://lakewarden:lakewarden@127.0.0.1:5432/lakewarden_bench_fresh"
BEAT_SECONDS = 5


def _make_tables(count: int, active: int, folder: Path) -> None:
    """``count`` rows, the first ``active`` of them committed to a minute ago, the rest a day ago."""
    from common import pointer_folder
    from django.utils import timezone

    from storage.models import Table

    now = timezone.now()
    rows = []
    for i in range(count):
        table_format = ("delta", "iceberg")[i % 2]
        location = folder / f"t{i}"
        age = dt.timedelta(minutes=1) if i < active else dt.timedelta(days=1)
        fields = {"format": table_format, "location": str(location), "last_commit_at": now - age}
        pointer = pointer_folder(location, table_format)
        rows.append(Table(name=f"table_{i:06d}", current_instant="3", metadata_pointer=pointer, **fields))
    Table.objects.bulk_create(rows, batch_size=5000)
    Table.objects.update(registered_at=now - dt.timedelta(days=1))


def _tick(runs: int) -> dict[str, float]:
    """``runs`` short ticks; 1% of the active Delta tables moved before each (then put back)."""
    from django.core.cache import cache
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from storage import refresh

    reads = [0]
    original = refresh.table_pointer

    def counted(table):
        reads[0] += 1
        return original(table)

    refresh.table_pointer = counted
    timings, queries, pointer_reads, queued_counts = [], [], [], []
    try:
        for _ in range(runs):
            ids = refresh.active_table_ids(timezone.now())
            moved = [pk for pk in ids[::2]][: max(1, len(ids) // 100)]
            locations = dict(refresh.Table.objects.filter(pk__in=moved).values_list("pk", "location"))
            for location in locations.values():
                (Path(location) / "_delta_log" / f"{4:020d}.json").touch()
            cache.delete_many([refresh.queued_key(pk) for pk in moved])
            queued: list[int] = []
            reads[0] = 0
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                report = refresh.refresh_moved(
                    refresh.active_table_ids(timezone.now()), refresh=queued.append
                )
                timings.append(time.perf_counter() - started)
            assert sorted(queued) == sorted(moved), (queued, moved)
            assert not report.unreadable_pointer, list(report.unreadable_pointer.items())[:3]
            queries.append(len(captured.captured_queries))
            pointer_reads.append(reads[0])
            queued_counts.append(len(queued))
            for location in locations.values():
                (Path(location) / "_delta_log" / f"{4:020d}.json").unlink()
    finally:
        refresh.table_pointer = original
    return {
        "median": statistics.median(timings),
        "max": max(timings),
        "queries": max(queries),
        "reads": max(pointer_reads),
        "queued": max(queued_counts),
    }


def _case(tables: int, active: int, runs: int) -> str:
    """The RESULTS.md row of ``tables`` tables, ``active`` of them active."""
    from django.db import connection

    from storage.models import Table
    from storage.refresh import ACTIVE_LIMIT

    folder = Path(tempfile.mkdtemp(prefix="lw_fresh_"))
    try:
        Table.objects.all().delete()
        _make_tables(tables, active, folder)
        with connection.cursor() as cursor:
            cursor.execute(f"vacuum analyze {Table._meta.db_table}")
        result = _tick(runs)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    bounded = result["reads"] <= ACTIVE_LIMIT and result["max"] < BEAT_SECONDS
    line = (
        f"| {tables:,} | {active:,} | {result['median'] * 1000:.0f} ms median, {result['max'] * 1000:.0f} ms max"
        f" | {result['queries']} | {result['queries'] / BEAT_SECONDS:.1f} | {result['reads']}"
        f" | {result['reads'] / BEAT_SECONDS:.0f} | {result['queued']} | {'met' if bounded else 'NOT met'} |"
    )
    print(line, flush=True)
    return line


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=10_000)
    parser.add_argument("--active", default="0,100,500,2000")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--print-only", action="store_true", help="leave bench/RESULTS.md as it is")
    args = parser.parse_args()

    os.environ["LAKEWARDEN_BENCH_DATABASE_URL"] = DATABASE
    from common import django_on_bench_database, machine, recreate_database, write_section

    recreate_database(DATABASE)

    django_on_bench_database()
    from django.db import connection

    from storage.refresh import ACTIVE_LIMIT

    lines = [_case(args.tables, int(active), args.runs) for active in args.active.split(",")]
    connection.close()
    recreate_database(DATABASE, drop_only=True)
    body = (
        f"One short tick (`refresh_active_tables_task`: `active_table_ids` + `refresh_moved`) over"
        f" {args.tables:,} tables (half Delta, half Iceberg by path, on local disk), a given number of"
        f" them active (a commit within the hour), 1% of the active ones moved; {args.runs} ticks each."
        f" At most {ACTIVE_LIMIT} active tables are checked per tick (the most recently active);"
        f" per second: at the default beat of {BEAT_SECONDS} s. A pointer read is one listing request"
        " on an object store (Delta: the log's names; Iceberg by path: `metadata/`; an Iceberg"
        " catalog table: one catalog query instead). Moved tables are queued for a refresh (not run"
        " here); a process that commits refreshes its own table in its task.\n\n"
        "| tables | active | tick | DB queries per tick | DB queries per s | pointer reads per tick |"
        " object-store requests per s | refreshes queued | bounded, tick < beat |\n"
        "|---:|---:|---|---:|---:|---:|---:|---:|---|\n" + "\n".join(lines)
    )
    print(f"\n_{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}_\n\n{body}")
    if not args.print_only:
        write_section("Fresh figures: the short pointer beat (bench/fresh_figures.py)", body)


if __name__ == "__main__":
    main()
