"""Listing benchmark: the spec API's streaming Iceberg file index against pyiceberg's planner.

    .venv/bin/python bench/listing.py                 # 20k and 200k entries
    .venv/bin/python bench/listing.py --entries 20000 # one size only

Builds (once, cached under var/bench/) an Iceberg table with N data-file entries in N/400
manifests, committed as DataFile entries with realistic statistics through pyiceberg fast appends
(the data files do not exist; listing never opens them). The table is partitioned by day(ts)
over 100 days, each commit spreading its files over all days (late data), so a one-day predicate
selects ~1% of the files but cannot skip manifests by their partition summaries; each file holds
a disjoint ``id`` range, so an ``id`` range predicate selects ~1% of the files by column stats.

Each case runs in a fresh subprocess: wall time of the listing consumed as a stream, and peak
RSS (``ru_maxrss``) above the baseline taken after imports and loading the table metadata.
Results replace the "listing" section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "var" / "bench"
RESULTS = ROOT / "bench" / "RESULTS.md"
SERVER = os.environ.get(
    "LAKEWARDEN_BENCH_DATABASE_URL", "postgresql://lakewarden:lakewarden@127.0.0.1:5432/x"
).rsplit("/", 1)[0]
PG = SERVER.replace("postgresql://", "postgresql+psycopg2://", 1)
FILES_PER_COMMIT = 400
DAYS = 100
FIRST_DAY = dt.date(2024, 1, 1)
IDS_PER_FILE = 1000
CASES = ("full", "partition_1pct", "stats_1pct")
TIME_TARGET = 0.7
RSS_TARGET = 0.25


# -- building the table -------------------------------------------------------------------


def _table_dir(entries: int) -> Path:
    return BENCH_DIR / f"iceberg_listing_{entries}"


def _schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        DoubleType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    return Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "ts", TimestamptzType(), required=False),
        NestedField(3, "region", StringType(), required=False),
        NestedField(4, "customer", StringType(), required=False),
        NestedField(5, "amount", DoubleType(), required=False),
        NestedField(6, "quantity", IntegerType(), required=False),
        NestedField(7, "status", StringType(), required=False),
        NestedField(8, "note", StringType(), required=False),
    )


def _data_file(k: int, rng: random.Random, location: str):
    """One fake parquet file's manifest entry with stats for every column."""
    from pyiceberg.conversions import to_bytes
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record
    from pyiceberg.types import DoubleType, IntegerType, LongType, StringType, TimestamptzType

    day = rng.randrange(DAYS)
    start = dt.datetime.combine(FIRST_DAY + dt.timedelta(days=day), dt.time(), tzinfo=dt.UTC)
    ts_low = start + dt.timedelta(seconds=rng.randrange(3600))
    ts_high = start + dt.timedelta(seconds=rng.randrange(3600, 86400))
    micros = lambda t: int((t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).total_seconds() * 1_000_000)  # noqa: E731
    regions = sorted(rng.sample(["af", "ap", "ca", "eu", "me", "sa", "us"], 2))
    rows = rng.randrange(50_000, 200_000)
    size = rows * rng.randrange(60, 120)
    lower = {
        1: to_bytes(LongType(), k * IDS_PER_FILE),
        2: to_bytes(TimestamptzType(), micros(ts_low)),
        3: to_bytes(StringType(), regions[0]),
        4: to_bytes(StringType(), f"customer-{rng.randrange(10_000):05d}"),
        5: to_bytes(DoubleType(), rng.random() * 10),
        6: to_bytes(IntegerType(), rng.randrange(1, 5)),
        7: to_bytes(StringType(), "cancelled"),
        8: to_bytes(StringType(), "a note that is trunc"[:16]),
    }
    upper = {
        1: to_bytes(LongType(), k * IDS_PER_FILE + IDS_PER_FILE - 1),
        2: to_bytes(TimestamptzType(), micros(ts_high)),
        3: to_bytes(StringType(), regions[1]),
        4: to_bytes(StringType(), f"customer-{rng.randrange(10_000, 20_000):05d}"),
        5: to_bytes(DoubleType(), 10 + rng.random() * 990),
        6: to_bytes(IntegerType(), rng.randrange(5, 100)),
        7: to_bytes(StringType(), "shipped"),
        8: to_bytes(StringType(), "zz note that is!"[:16]),
    }
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=f"{location}/data/ts_day={FIRST_DAY + dt.timedelta(days=day)}/{k:08d}-{rng.getrandbits(64):016x}.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(day + (FIRST_DAY - dt.date(1970, 1, 1)).days),
        record_count=rows,
        file_size_in_bytes=size,
        column_sizes={i: size // 8 for i in range(1, 9)},
        value_counts={i: rows for i in range(1, 9)},
        null_value_counts={i: (rng.randrange(100) if i == 8 else 0) for i in range(1, 9)},
        nan_value_counts={5: 0},
        lower_bounds=lower,
        upper_bounds=upper,
        split_offsets=[4 + j * (size // 4) for j in range(4)],
        sort_order_id=0,
    )
    data_file.spec_id = 0
    return data_file


def build(entries: int) -> str:
    """The metadata file of the cached table with ``entries`` files, building it when absent."""
    table_dir = _table_dir(entries)
    marker = table_dir / "CURRENT"
    if marker.exists():
        return marker.read_text().strip()
    import psycopg
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform

    database = f"lakewarden_bench_build_{os.getpid()}"
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    try:
        catalog = SqlCatalog("bench", uri=f"{PG}/{database}", warehouse=f"file://{table_dir.parent}")
        catalog.create_namespace("bench")
        table = catalog.create_table(
            "bench.listing",
            _schema(),
            location=f"file://{table_dir}",
            partition_spec=PartitionSpec(PartitionField(2, 1000, DayTransform(), "ts_day")),
            properties={
                "write.metadata.delete-after-commit.enabled": "true",
                "write.metadata.previous-versions-max": "2",
                "commit.manifest-merge.enabled": "false",
            },
        )
        rng = random.Random(entries)
        started = time.monotonic()
        for commit in range(entries // FILES_PER_COMMIT):
            with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
                for k in range(commit * FILES_PER_COMMIT, (commit + 1) * FILES_PER_COMMIT):
                    append.append_data_file(_data_file(k, rng, f"file://{table_dir}"))
            if commit % 50 == 49:
                print(
                    f"  built {(commit + 1) * FILES_PER_COMMIT} entries in {time.monotonic() - started:.0f} s",
                    flush=True,
                )
        metadata_location = table.metadata_location
        catalog.engine.dispose()
    finally:
        with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    marker.write_text(metadata_location.removeprefix("file://"))
    return marker.read_text().strip()


# -- the measured cases (run in a child process) -------------------------------------------


def _predicates(case: str, entries: int):
    """(spec expression, pyiceberg expression) for a case; ~1% of files for the filtered ones."""
    from pyiceberg.expressions import AlwaysTrue, And, GreaterThanOrEqual, LessThan

    if case == "full":
        return None, AlwaysTrue()
    from storage.spec.expressions import And as SpecAnd
    from storage.spec.expressions import Comparison

    if case == "partition_1pct":
        day = dt.datetime.combine(FIRST_DAY + dt.timedelta(days=DAYS // 2), dt.time(), tzinfo=dt.UTC)
        end = day + dt.timedelta(days=1)
        ours = SpecAnd(Comparison(">=", "ts", day), Comparison("<", "ts", end))
        theirs = And(GreaterThanOrEqual("ts", day.isoformat()), LessThan("ts", end.isoformat()))
        return ours, theirs
    first = entries // 2 * IDS_PER_FILE
    last = first + entries // 100 * IDS_PER_FILE
    ours = SpecAnd(Comparison(">=", "id", first), Comparison("<", "id", last))
    return ours, And(GreaterThanOrEqual("id", first), LessThan("id", last))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(impl: str, case: str, entries: int, metadata: str) -> None:
    sys.path.insert(0, str(ROOT))
    import pyiceberg.table  # noqa: F401
    from pyiceberg.table import StaticTable

    from storage.formats.iceberg import IcebergAdapter

    ours, theirs = _predicates(case, entries)
    if impl == "ours":
        table = IcebergAdapter.open(metadata)
        table.timeline()
    else:
        table = StaticTable.from_metadata(metadata)
    baseline = _peak_mb()
    started = time.perf_counter()
    count = 0
    if impl == "ours":
        for _ in table.file_index().list_files_at(None, ours):
            count += 1
    else:
        for _ in table.scan(row_filter=theirs).plan_files():
            count += 1
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {"seconds": seconds, "rss_mb": _peak_mb() - baseline, "baseline_mb": baseline, "files": count}
        )
    )


def measure(impl: str, case: str, entries: int, metadata: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", impl, case, str(entries), metadata],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- report --------------------------------------------------------------------------------


def _machine() -> str:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        ram = f"{mem_kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, AttributeError):
        ram = "RAM unknown"
    return f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {ram}, {cpu}"


def _versions() -> str:
    from importlib.metadata import version

    names = ("pyiceberg", "fastavro", "pyarrow")
    return f"Python {platform.python_version()}, " + ", ".join(f"{n} {version(n)}" for n in names)


def report(results: dict[int, dict[str, dict[str, dict]]], notes: list[str]) -> str:
    lines = [
        "## listing (bench/listing.py)",
        "",
        f"- date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        f"- machine: {_machine()}",
        f"- versions: {_versions()}",
        "- table: day(ts) partitioned over 100 days, 400 entries per manifest, every manifest spanning all days;"
        " stats for 8 columns per entry; files do not exist (listing only)",
        "- ours: `IcebergSpecTable.file_index().list_files_at(None, filter)` consumed as a stream;"
        " pyiceberg: `StaticTable.scan(row_filter).plan_files()` consumed",
        "- RSS: peak `ru_maxrss` above the baseline after imports and loading the metadata, fresh process per case",
        "",
        "| entries | case | files | ours s | pyiceberg s | time ratio | ours RSS MB | pyiceberg RSS MB | RSS ratio | targets |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for entries, cases in sorted(results.items()):
        for case, pair in cases.items():
            ours, theirs = pair["ours"], pair["pyiceberg"]
            time_ratio = ours["seconds"] / theirs["seconds"]
            rss_ratio = ours["rss_mb"] / theirs["rss_mb"] if theirs["rss_mb"] > 0 else float("nan")
            checks = [f"time ≤ {TIME_TARGET}×: {'met' if time_ratio <= TIME_TARGET else 'NOT met'}"]
            if case == "full":
                checks.append(f"RSS ≤ {RSS_TARGET}×: {'met' if rss_ratio <= RSS_TARGET else 'NOT met'}")
            files = (
                ours["files"] if ours["files"] == theirs["files"] else f"{ours['files']} vs {theirs['files']}"
            )
            lines.append(
                f"| {entries:,} | {case} | {files} | {ours['seconds']:.2f} | {theirs['seconds']:.2f} | {time_ratio:.2f} "
                f"| {ours['rss_mb']:.1f} | {theirs['rss_mb']:.1f} | {rss_ratio:.3f} | {'; '.join(checks)} |"
            )
    lines += [""] + [f"- {note}" for note in notes] + [""]
    return "\n".join(lines)


def write_section(section: str) -> None:
    """Replace this benchmark's section of RESULTS.md, keeping the other benchmarks' sections."""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\n"
    pattern = re.compile(r"^## listing \(bench/listing\.py\)\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, action="append", help="data-file entries (repeatable)")
    parser.add_argument(
        "--no-write", action="store_true", help="print the results without updating RESULTS.md"
    )
    args = parser.parse_args()
    sizes = args.entries or [20_000, 200_000]
    results: dict[int, dict[str, dict[str, dict]]] = {}
    for entries in sizes:
        print(f"table with {entries} entries", flush=True)
        metadata = build(entries)
        results[entries] = {}
        for case in CASES:
            results[entries][case] = {
                impl: measure(impl, case, entries, metadata) for impl in ("ours", "pyiceberg")
            }
            print(f"  {case}: {json.dumps(results[entries][case])}", flush=True)
    notes = [
        "the issue's reference for pyiceberg on this machine: 200k full listing 12.0 s and 765 MB, 20k 200 MB;"
        " 1% partition predicate 6.8 s, 151 MB (a different table; pyiceberg's numbers above are on this one)",
        "the machine is shared (2 cores, other jobs running): times vary by ±30% between runs, ratios less",
        "how: manifests are decoded by a projecting decoder compiled per Avro schema (fastavro block reader +"
        " pyiceberg's Cython primitives), skipping size/count maps; bounds stay bytes until a filter reads"
        " them; cheap conservative pre-checks reject entries before a DataFile is built (storage/formats/iceberg)",
    ]
    if len(results) > 1:
        small, large = min(results), max(results)
        growth = results[large]["full"]["ours"]["rss_mb"] - results[small]["full"]["ours"]["rss_mb"]
        notes.append(
            f"streamed full listing RSS growth from {small:,} to {large:,} entries: {growth:+.1f} MB "
            f"(pyiceberg: {results[large]['full']['pyiceberg']['rss_mb'] - results[small]['full']['pyiceberg']['rss_mb']:+.1f} MB)"
        )
    section = report(results, notes)
    print(section)
    if not args.no_write:
        write_section(section)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main()
