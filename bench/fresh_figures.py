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


class _LocalLake:
    """Tables on local disk: folders holding only what a pointer check lists."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="lw_fresh_"))

    def make(self, i: int, table_format: str) -> tuple[str, str]:
        from common import pointer_folder

        location = self.folder / f"t{i}"
        return str(location), pointer_folder(location, table_format)

    def reset(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir()

    def move(self, location: str, undo: bool = False) -> None:
        path = Path(location) / "_delta_log" / f"{4:020d}.json"
        path.unlink() if undo else path.touch()

    def requests(self) -> int:
        return 0

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


class _S3Lake:
    """Tables on a local SeaweedFS (signed S3 requests, counted by the store), under a path-root
    catalog holding the credentials; only the active tables get objects (the cold are never read)."""

    def __init__(self, store, prefix: str) -> None:
        from storage.models import Catalog, CatalogKind

        self.store, self.fs, self.prefix = store, store.filesystem(), prefix
        Catalog.objects.get_or_create(
            name="fresh", kind=CatalogKind.PATH_ROOT, properties={"root": prefix, **store.s3_properties()}
        )
        self.with_objects = 0
        self.cases = 0

    def reset(self) -> None:
        self.cases += 1

    def make(self, i: int, table_format: str) -> tuple[str, str]:
        location = f"{self.prefix}/c{self.cases}/t{i}"
        key = location.removeprefix("s3://")
        names = (
            [f"_delta_log/{v:020d}.json" for v in range(4)]
            if table_format == "delta"
            else ["metadata/00003-a.metadata.json"]
        )
        if i < self.with_objects:
            for name in names:
                with self.fs.open_output_stream(f"{key}/{name}") as out:
                    out.write(b"{}")
        return location, "delta:3" if table_format == "delta" else "iceberg:00003-a.metadata.json"

    def move(self, location: str, undo: bool = False) -> None:
        key = f"{location.removeprefix('s3://')}/_delta_log/{4:020d}.json"
        if undo:
            self.fs.delete_file(key)
        else:
            with self.fs.open_output_stream(key) as out:
                out.write(b"{}")

    def requests(self) -> int:
        return self.store.request_count("lake")

    def close(self) -> None:
        pass


def _make_tables(count: int, active: int, lake) -> None:
    """``count`` rows, the first ``active`` of them committed to a minute ago, the rest a day ago."""
    from django.utils import timezone

    from storage.models import Table

    now = timezone.now()
    rows = []
    for i in range(count):
        table_format = ("delta", "iceberg")[i % 2]
        location, pointer = lake.make(i, table_format)
        age = dt.timedelta(minutes=1) if i < active else dt.timedelta(days=1)
        fields = {"format": table_format, "location": location, "last_commit_at": now - age}
        rows.append(Table(name=f"table_{i:06d}", current_instant="3", metadata_pointer=pointer, **fields))
    Table.objects.bulk_create(rows, batch_size=5000)
    Table.objects.update(registered_at=now - dt.timedelta(days=1))


def _tick(runs: int, lake) -> dict[str, float]:
    """``runs`` short ticks; 1% of the active Delta tables moved before each (then put back)."""
    from django.core.cache import cache
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from storage import refresh

    reads = [0]
    original = refresh.table_pointer

    def counted(table, **options):
        reads[0] += 1
        return original(table, **options)

    refresh.table_pointer = counted
    timings, queries, pointer_reads, queued_counts, requests = [], [], [], [], []
    try:
        for _ in range(runs):
            ids = refresh.active_table_ids(timezone.now())
            moved = [pk for pk in ids[::2]][: max(1, len(ids) // 100)]
            locations = dict(refresh.Table.objects.filter(pk__in=moved).values_list("pk", "location"))
            for location in locations.values():
                lake.move(location)
            cache.delete_many([refresh.queued_key(pk) for pk in moved])
            queued: list[int] = []
            reads[0] = 0
            before = lake.requests()
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                report = refresh.refresh_moved(
                    refresh.active_table_ids(timezone.now()), refresh=queued.append
                )
                timings.append(time.perf_counter() - started)
            requests.append(lake.requests() - before)
            assert sorted(queued) == sorted(moved), (queued, moved)
            assert not report.unreadable_pointer, list(report.unreadable_pointer.items())[:3]
            queries.append(len(captured.captured_queries))
            pointer_reads.append(reads[0])
            queued_counts.append(len(queued))
            for location in locations.values():
                lake.move(location, undo=True)
    finally:
        refresh.table_pointer = original
    return {
        "median": statistics.median(timings),
        "max": max(timings),
        "queries": max(queries),
        "reads": max(pointer_reads),
        "queued": max(queued_counts),
        "requests": max(requests),
    }


def _case(tables: int, active: int, runs: int, lake) -> str:
    """The RESULTS.md row of ``tables`` tables, ``active`` of them active."""
    from django.db import connection

    from storage.models import Table
    from storage.refresh import ACTIVE_LIMIT

    Table.objects.all().delete()
    lake.reset()
    lake.with_objects = min(active, ACTIVE_LIMIT)
    _make_tables(tables, active, lake)
    with connection.cursor() as cursor:
        cursor.execute(f"vacuum analyze {Table._meta.db_table}")
    result = _tick(runs, lake)
    bounded = result["reads"] <= ACTIVE_LIMIT and result["max"] < BEAT_SECONDS
    on_s3 = isinstance(lake, _S3Lake)
    counted = f"{result['requests']} counted" if on_s3 else "—"
    per_second = (result["requests"] if on_s3 else result["reads"]) / BEAT_SECONDS
    line = (
        f"| {tables:,} | {active:,} | {result['median'] * 1000:.0f} ms median, {result['max'] * 1000:.0f} ms max"
        f" | {result['queries']} | {result['queries'] / BEAT_SECONDS:.1f} | {result['reads']} ({counted})"
        f" | {per_second:.0f} | {result['queued']} | {'met' if bounded else 'NOT met'} |"
    )
    print(line, flush=True)
    return line


def _on_seaweedfs(args) -> list[str]:
    """The S3 cases, on a SeaweedFS started for them (stopped after)."""
    from devtools.seaweedfs import SeaweedFS

    workdir = Path(tempfile.mkdtemp(prefix="lw_fresh_s3_"))
    store = SeaweedFS(workdir / "seaweedfs", buckets=("lake",))
    try:
        store.start()
        lake = _S3Lake(store, f"s3://lake/fresh-{os.getpid()}")
        return [_case(args.tables, int(active), args.s3_runs, lake) for active in args.s3_active.split(",")]
    finally:
        store.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=10_000)
    parser.add_argument("--active", default="0,100,500,2000")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--s3-active", default="100,500", help="active counts on SeaweedFS ('': skip)")
    parser.add_argument("--s3-runs", type=int, default=3)
    parser.add_argument("--print-only", action="store_true", help="leave bench/RESULTS.md as it is")
    args = parser.parse_args()

    os.environ["LAKEWARDEN_BENCH_DATABASE_URL"] = DATABASE
    from common import django_on_bench_database, machine, recreate_database, write_section

    recreate_database(DATABASE)

    django_on_bench_database()
    from django.db import connection

    from storage.refresh import ACTIVE_LIMIT

    local = _LocalLake()
    try:
        lines = [_case(args.tables, int(active), args.runs, local) for active in args.active.split(",")]
    finally:
        local.close()
    s3_lines = _on_seaweedfs(args) if args.s3_active else []
    connection.close()
    recreate_database(DATABASE, drop_only=True)
    head = (
        "| tables | active | tick | DB queries per tick | DB queries per s | pointer reads per tick (S3 requests) |"
        " object-store requests per s | refreshes queued | bounded, tick < beat |\n"
        "|---:|---:|---|---:|---:|---:|---:|---:|---|\n"
    )
    body = (
        f"One short tick (`refresh_active_tables_task`: `active_table_ids` + `refresh_moved`) over"
        f" {args.tables:,} tables (half Delta, half Iceberg by path), a given number of them active (a"
        f" commit within the hour), 1% of the active ones moved. At most {ACTIVE_LIMIT} active tables"
        f" are checked per tick (the most recently active); per second: at the default beat of"
        f" {BEAT_SECONDS} s. A pointer read is one listing request on an object store (Delta: the"
        " log's names; Iceberg by path: `metadata/`; an Iceberg catalog table: one catalog query"
        " instead). Moved tables are queued for a refresh (not run here); a process that commits"
        " refreshes its own table in its task.\n\n"
        f"On local disk ({args.runs} ticks each):\n\n" + head + "\n".join(lines)
    )
    if s3_lines:
        body += (
            f"\n\nOn a local SeaweedFS (S3 on 127.0.0.1, signed requests, counted by the store's"
            f" `SeaweedFS_s3_request_total`; tables under a path-root catalog; {args.s3_runs} ticks"
            " each). A Delta pointer read there is 3 requests (the log's listing and the store's"
            " checks around it); the reads run on 8 threads (`storage.refresh.POINTER_THREADS`).\n\n"
            + head
            + "\n".join(s3_lines)
        )
    print(f"\n_{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}_\n\n{body}")
    if not args.print_only:
        write_section("Fresh figures: the short pointer beat (bench/fresh_figures.py)", body)


if __name__ == "__main__":
    main()
