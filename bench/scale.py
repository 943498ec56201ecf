"""100,000 tables (issue 17): the scheduler tick, the metadata refresh pass and the console pages.

Runs in a throwaway database (``lakewarden_bench_scale``, dropped first and after), rows made by
``bulk_create``:

- scheduler tick over 10k and 100k idle tables (built-in factories, every table evaluated a
  moment ago at its current snapshot): median and max of 5 ticks, queries per tick (target < 1 s);
- refresh pass at 10k and 100k tables: every row points at a real folder on local disk holding a
  Delta log or Iceberg metadata file names (nothing else: an unchanged table is never opened),
  1% of them moved since their last refresh; the pass checks every pointer and hands the moved
  tables to the refresh (counted, not run). Target: one light worker keeps up with the default
  ``LAKEWARDEN_REFRESH_SECONDS`` (300 s), i.e. the pass takes less;
- overview and tables pages at 100k tables, filtered and sorted by each kind of column: p95 of 40
  requests each (target < 150 ms).

Prints the lines for bench/RESULTS.md; writes nothing there itself.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

DATABASE = "postgresql://lakewarden:lakewarden@127.0.0.1:5432/lakewarden_bench_scale"
REFRESH_SECONDS = 300


def _recreate_database(drop_only: bool = False) -> None:
    from common import recreate_database

    recreate_database(DATABASE, drop_only)


def _make_tables(count: int, folder: Path) -> None:
    """``count`` rows, half Delta half Iceberg, each with a folder holding its pointer's file."""
    from common import pointer_folder

    from storage.models import Table

    rng = random.Random(17)
    rows = []
    for i in range(count):
        table_format = ("delta", "iceberg")[i % 2]
        location = folder / f"t{i}"
        pointer = pointer_folder(location, table_format)
        files = rng.randrange(0, 20_000)
        rows.append(
            Table(
                name=f"table_{rng.randrange(10**9):09d}",
                format=table_format,
                location=str(location),
                current_instant="1",
                file_count=files,
                small_file_count=rng.randrange(0, files + 1),
                instant_count=rng.randrange(0, 800),
                total_bytes=files * 100_000,
                metadata_pointer=pointer,
            )
        )
    Table.objects.bulk_create(rows, batch_size=5000)


def _mark_evaluated() -> None:
    """Every table evaluated now at its current snapshot by every (format, action) pair."""
    from django.db import connection
    from django.utils import timezone

    from processes.models import TableState
    from processes.registry import coordinators
    from processes.scheduler import evaluated_key, seen_snapshot_key
    from storage.models import Table

    state, table = TableState._meta.db_table, Table._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"delete from {state}")
        for table_format, action in coordinators():
            for key, value in (
                (evaluated_key(action), timezone.now().timestamp()),
                (seen_snapshot_key(action), "1"),
            ):
                cursor.execute(
                    f"insert into {state} (table_id, key, value, updated_at)"
                    f" select id, %s, %s::jsonb, now() from {table} where format = %s",
                    [key, json.dumps(value), table_format],
                )
    # What autovacuum does after a bulk insert (PostgreSQL 13+ vacuums after inserts too): the
    # visibility map lets the table list walk its (name, id) index without visiting rows.
    with connection.cursor() as cursor:
        cursor.execute(f"vacuum analyze {state}")
        cursor.execute(f"vacuum analyze {table}")


def _store_health() -> tuple[float, int, float]:
    """Every table's health score stored (what the health beat runs; a bulk insert stores none):
    seconds and rows written the first time, then seconds of a pass with nothing to change."""
    from django.db import connection

    from processes.health import health_store

    started = time.perf_counter()
    written = health_store()
    first = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("vacuum analyze console_table")
    started = time.perf_counter()
    health_store()
    return first, written, time.perf_counter() - started


def _tick(runs: int) -> tuple[float, float, int, int, float]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from processes.registry import coordinators
    from processes.scheduler import schedule_tick

    started = time.perf_counter()
    schedule_tick()  # the first tick looks at every table once and sets its wake time
    first = time.perf_counter() - started
    timings, queries = [], 0
    for _ in range(runs):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            report = schedule_tick()
            timings.append(time.perf_counter() - started)
        queries = len(captured.captured_queries)
        assert report.triggered == [] and report.due == 0, report
    return statistics.median(timings), max(timings), queries, len(coordinators()), first


def _refresh_pass(folder: Path, count: int) -> tuple[float, int]:
    """One pass over every table with 1% of them moved; the moved ones are counted, not refreshed."""
    from storage.models import Table
    from storage.refresh import refresh_changed, table_id_batches

    moved = list(
        Table.objects.filter(format="delta").order_by("pk").values_list("pk", "location")[: count // 100]
    )
    for _, location in moved:
        (Path(location) / "_delta_log" / f"{4:020d}.json").touch()
    queued: list[int] = []
    started = time.perf_counter()
    for batch in table_id_batches():
        report = refresh_changed(batch, refresh=queued.append)
        assert not report.unreadable_pointer, list(report.unreadable_pointer.items())[:3]
    seconds = time.perf_counter() - started
    assert sorted(queued) == sorted(pk for pk, _ in moved), (len(queued), len(moved))
    for _, location in moved:
        (Path(location) / "_delta_log" / f"{4:020d}.json").unlink()
    return seconds, len(queued)


def _p95(run, runs: int) -> float:
    timings = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        run()
        timings.append((time.perf_counter() - started) * 1000)
    timings = sorted(timings[1:])  # the first warms up
    return timings[max(0, int(len(timings) * 0.95) - 1)]


def _cursor_at(sort: str, position: int, **filters) -> str:
    """The ``?after=`` position of the row at ``position`` of the tables list in ``sort`` order."""
    from console import table_list
    from storage.models import Table

    keys = table_list.sort_keys(sort)
    ordered = table_list._keyed(Table.objects.filter(**filters), keys).order_by(
        *(key.order() for key in keys)
    )
    row = ordered.values(*{key.field for key in keys})[position]
    return table_list.cursor_of(keys, row)


def _old_and_new(runs: int) -> list[tuple[str, float, float]]:
    """The tables list's page queries before issue 34's indexes and after, in the same run (p95 ms):
    ranking every table's live score vs walking the stored score's index; a deep page walked from
    the start vs from the nearer end; a search walked in name order vs found then sorted; a search
    counted then paged (two scans of its matches) vs counted and paged in one query; page 1,000
    by its offset vs by the previous page's last row (keyset)."""
    from django.db import connection, transaction
    from django.utils import timezone

    from console import table_list
    from processes.health import WORST_FIRST, health_ranked
    from storage import selectors
    from storage.models import Table

    def searched(hint: bool):
        found = Table.objects.filter(name__icontains="table_12").order_by("name", "id").values_list("id")
        if not hint:
            return list(found[:50])
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off")
            return list(found[:50])

    def counted_then_paged(tables):
        count = tables.order_by().count()
        found = tables.order_by("name", "id").values_list("id")
        if count <= table_list.SORT_FOUND_AT_MOST:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off")
                return count, list(found[:50])
        return count, list(found[:50])

    ids = Table.objects.values_list("id")
    name_keys, size_keys, worst_keys = (table_list.sort_keys(sort) for sort in ("", "-size", "-health"))
    size_order = table_list._order("size", True)
    size_values = table_list.cursor_values(size_keys, _cursor_at("-size", 49949), name="after")
    worst_values = table_list.cursor_values(worst_keys, _cursor_at("-health", 49949), name="after")
    cases = {
        "worst first, page 1": (
            lambda: health_ranked(timezone.now(), limit=50),
            lambda: list(Table.objects.order_by(*WORST_FIRST).values_list("id")[:50]),
        ),
        "worst first, page 100": (
            lambda: health_ranked(timezone.now(), limit=50, offset=4950),
            lambda: list(Table.objects.order_by(*WORST_FIRST).values_list("id")[4950:5000]),
        ),
        "by name, last page": (
            lambda: list(ids.order_by("name", "id")[99950:100000]),
            lambda: list(ids.order_by("-name", "-id")[:50])[::-1],
        ),
        "search, first page": (lambda: searched(False), lambda: searched(True)),
        "search 'table_12' (3 columns), count and page": (
            lambda: counted_then_paged(selectors.table_list(search="table_12")),
            lambda: table_list._found(
                selectors.table_list(search="table_12"), name_keys, None, reverse=False, offset=0
            ),
        ),
        "by size, page 1,000": (
            lambda: list(ids.order_by(*size_order)[49950:50000]),
            lambda: table_list._walk(Table.objects.all(), size_keys, size_values, reverse=False),
        ),
        "worst first, page 1,000": (
            lambda: list(ids.order_by(*WORST_FIRST)[49950:50000]),
            lambda: table_list._walk(Table.objects.all(), worst_keys, worst_values, reverse=False),
        ),
    }
    return [(label, _p95(old, runs), _p95(new, runs)) for label, (old, new) in cases.items()]


def _pages(runs: int) -> list[tuple[str, float, float]]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(username="bench-admin")
    user.groups.add(Group.objects.get_or_create(name="admin")[0])
    client = Client()
    client.force_login(user)
    pages = {
        "overview": "/",
        "tables, first page": "/tables/",
        "tables, page 1,000": "/tables/?page=1000",
        "tables, last page": "/tables/?page=2000",
        "tables, format filter": "/tables/?format=iceberg&page=10",
        "tables, search": "/tables/?q=table_12",
        # the tables list's sortable columns (issue 34), worst first as a first click sorts them
        "tables, by health": "/tables/?sort=health",
        "tables, worst first": "/tables/?sort=-health",
        "tables, by health, page 100": "/tables/?sort=health&page=100",
        "tables, by small files": "/tables/?sort=-small_files",
        "tables, by size, page 1,000": "/tables/?sort=-size&page=1000",
        "tables, by last maintenance": "/tables/?sort=last_maintenance",
        "tables, iceberg by health": "/tables/?format=iceberg&sort=health",
        "tables, iceberg worst first, page 100": "/tables/?format=iceberg&sort=-health&page=100",
        # deep pages by keyset (issue 34): the link of page 1,000's "next"
        "tables, by size, after row 49,950 (keyset)": f"/tables/?sort=-size&after={_cursor_at('-size', 49949)}",
        "tables, by name, after row 49,950 (keyset)": f"/tables/?after={_cursor_at('', 49949)}",
        "tables, worst first, after row 49,950 (keyset)": f"/tables/?sort=-health&after={_cursor_at('-health', 49949)}",
        "tables, iceberg best first, after row 25,000 (keyset)": (
            f"/tables/?format=iceberg&sort=health&after={_cursor_at('health', 24999, format='iceberg')}"
        ),
        "tables, search 'table_12', next page (keyset)": (
            f"/tables/?q=table_12&after={_cursor_at('', 49, name__icontains='table_12')}"
        ),
        "tables, search 'table' (more than 5,000)": "/tables/?q=table",
    }
    results = []
    for label, url in pages.items():
        assert client.get(url).status_code == 200, url  # warm-up
        timings = []
        for _ in range(runs):
            started = time.perf_counter()
            response = client.get(url)
            timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, url
        timings.sort()
        results.append((label, statistics.median(timings), timings[max(0, int(len(timings) * 0.95) - 1)]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    os.environ["LAKEWARDEN_BENCH_DATABASE_URL"] = DATABASE
    _recreate_database()
    from common import django_on_bench_database, machine

    django_on_bench_database()
    from django.db import connection

    from storage.models import Table

    lines = []
    for size in sizes:
        folder = Path(tempfile.mkdtemp(prefix="lw_scale_"))
        try:
            Table.objects.all().delete()
            _make_tables(size, folder)
            _mark_evaluated()
            first, written, again = _store_health()
            lines.append(
                f"| health scores stored, {size:,} tables | {first:.1f} s the first time ({written:,} rows"
                f" written), {again:.1f} s when none changed | — | the beat's pass |"
            )
            print(lines[-1], flush=True)
            median, worst, queries, pairs, first = _tick(5)
            lines.append(
                f"| scheduler tick, {size:,} idle tables ({pairs} pairs) | {median * 1000:.0f} ms median,"
                f" {worst * 1000:.0f} ms max (first tick after a change of configuration, looking at every"
                f" table: {first:.1f} s) | {queries} queries | < 1 s: {'met' if worst < 1 else 'NOT met'} |"
            )
            print(lines[-1], flush=True)
            seconds, moved = _refresh_pass(folder, size)
            lines.append(
                f"| refresh pass, {size:,} tables ({moved} moved) | {seconds:.1f} s"
                f" ({size / seconds:,.0f} tables/s) | — | < {REFRESH_SECONDS} s (keeps up):"
                f" {'met' if seconds < REFRESH_SECONDS else 'NOT met'} |"
            )
            print(lines[-1], flush=True)
            if size == max(sizes):
                for label, median_ms, p95 in _pages(args.runs):
                    lines.append(
                        f"| {label}, {size:,} tables | {median_ms:.1f} ms median, {p95:.1f} ms p95 | — |"
                        f" p95 < 150 ms: {'met' if p95 < 150 else 'NOT met'} |"
                    )
                    print(lines[-1], flush=True)
                for label, old, new in _old_and_new(args.runs):
                    lines.append(
                        f"| query: {label} | {old:.1f} ms p95 before, {new:.1f} ms p95 now | — | — |"
                    )
                    print(lines[-1], flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    connection.close()
    _recreate_database(drop_only=True)
    print(f"\n_{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}_\n")
    print("| measure | time | queries | target |\n|---|---|---|---|\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
