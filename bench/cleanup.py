"""Cleanups in bounded memory (issue 35): Iceberg orphan cleanup and Delta vacuum, their streaming
scans against Python sets (the naive baseline) and, for vacuum, deltalake's own.

On local disk, for each size N, a table location of N empty files (97 partition folders, names
as a writer gives them), made once under var/bench/ and removed at the end unless ``--keep``:

- ``orphans``: N files under ``<location>/data``; the metadata side is a stream naming 90% of them
  (every tenth is an orphan). streaming: ``orphans.scan_location``, what the process runs (the
  referenced names and the listing, ``os.scandir`` + ``stat``, written as sorted runs, merged, each
  candidate through the path guard, the orphans spilled and read back once); sets: the referenced
  names in a Python set, the same listing checked against it. With the synthetic size (default
  10M) also the difference alone without a file system (generated streams), where creating 10M
  files would take ten minutes and 10M inodes here.
- ``vacuum``: a Delta table whose log (one JSON commit of adds, one of removes) keeps 90% of the
  files live; of the other 10%, half are tombstones removed 30 days ago and half were never
  committed. Full mode, a retention of 0 hours. streaming: ``vacuum.vacuum_scan`` (the log's adds
  and removes sorted on disk, the location listed and merged with them, each candidate through the
  guard); sets: the log replayed into Python sets; deltalake: ``DeltaTable(root).vacuum(dry_run=
  True, full=True)``, the table opened inside the case, then the guard over its answer.

Each case runs in a fresh subprocess (bench/_cleanup_cases.py: imports, then the peak reset) and
must name exactly a tenth of the objects. Nothing is deleted. Measured: wall and CPU time, objects
per second, and the peak resident set during the case (VmHWM, reset through /proc/self/clear_refs
just before) above the resident set before it.

    .venv/bin/python bench/cleanup.py                                 # both, 100k and 1M
    .venv/bin/python bench/cleanup.py orphans --sizes 100000 --no-synthetic
    .venv/bin/python bench/cleanup.py vacuum --sizes 100000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import write_section  # noqa: E402

BENCH_DIR = ROOT / "var" / "bench"
CASES_SCRIPT = Path(__file__).resolve().parent / "_cleanup_cases.py"
BUCKETS = 97
DAY_MS = 86_400_000
KINDS = {"orphans": ("streaming", "sets"), "vacuum": ("streaming", "sets", "deltalake")}
TITLES = {
    "orphans": "Orphan cleanup (bench/cleanup.py orphans)",
    "vacuum": "Delta vacuum (bench/cleanup.py vacuum)",
}


def _touch(path: str) -> None:
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def _fresh(root: Path, marker: Path, folder: str) -> bool:
    """Whether ``root`` must be made (no complete copy); when so, emptied with its folders made."""
    if marker.exists():
        return False
    shutil.rmtree(root, ignore_errors=True)
    for bucket in range(BUCKETS):
        (root / folder / f"bucket={bucket:02d}").mkdir(parents=True, exist_ok=True)
    return True


def make_orphan_files(root: Path, count: int) -> float:
    """``count`` empty files under ``root/data`` (kept between runs when complete); seconds taken."""
    marker = root.parent.parent / ".complete"  # outside the table location
    started = time.monotonic()
    if not _fresh(root, marker, "data"):
        return 0.0
    for i in range(count):
        _touch(f"{root}/data/bucket={i % BUCKETS:02d}/00000-{i}-6f1e5c1a-9d3b-4c2e-8a7f-{i:012d}.parquet")
    (root / "metadata").mkdir(exist_ok=True)
    marker.touch()
    return time.monotonic() - started


def vacuum_name(i: int) -> str:
    return f"bucket={i % BUCKETS:02d}/part-{i:05d}-6f1e5c1a-9d3b-4c2e-8a7f-{i:012d}-c000.snappy.parquet"


def make_delta_table(root: Path, count: int) -> float:
    """The vacuum's table (see the module docstring), kept between runs when complete; seconds."""
    marker = root.parent.parent / ".complete"
    started = time.monotonic()
    if not _fresh(root, marker, "."):
        return 0.0
    for i in range(count):
        _touch(f"{root}/{vacuum_name(i)}")
    (root / "_delta_log").mkdir()
    now = int(time.time() * 1000)
    fields = [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "bucket", "type": "string", "nullable": True, "metadata": {}},
    ]
    metadata = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps({"type": "struct", "fields": fields}),
        "partitionColumns": ["bucket"],
        "configuration": {},
        "createdTime": now,
    }
    with open(root / "_delta_log" / f"{0:020d}.json", "w") as log:
        log.write(json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}) + "\n")
        log.write(json.dumps({"metaData": metadata}) + "\n")
        for i in range(count):
            if i % 10 or i % 20 == 0:  # live, or a tombstone-to-be; i % 20 == 10 never committed
                add = {
                    "path": vacuum_name(i),
                    "partitionValues": {"bucket": f"{i % BUCKETS:02d}"},
                    "size": 0,
                    "modificationTime": now,
                    "dataChange": True,
                }
                log.write(json.dumps({"add": add}) + "\n")
    with open(root / "_delta_log" / f"{1:020d}.json", "w") as log:
        for i in range(0, count, 20):
            remove = {"path": vacuum_name(i), "deletionTimestamp": now - 30 * DAY_MS, "dataChange": True}
            log.write(json.dumps({"remove": remove}) + "\n")
    marker.touch()
    return time.monotonic() - started


def run_case(case: str, root: Path, count: int) -> dict:
    """Run ``case`` of bench/_cleanup_cases.py in a fresh subprocess; its result, which must name
    a tenth of the ``count`` objects."""
    out = BENCH_DIR / f"cleanup-{case}-{count}.json"
    subprocess.run(
        [sys.executable, str(CASES_SCRIPT), case, str(root), str(count), str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    result = json.loads(out.read_text())
    out.unlink()
    assert result["doomed"] == (count + 9) // 10, result
    print(f"  {case} {count:,}: {result}", flush=True)
    return result


def measure(process: str, sizes: list[int], keep: bool) -> tuple[dict[int, dict], dict[int, float]]:
    """{size: {kind: result}} and {size: seconds to make its files} for one process."""
    results, made = {}, {}
    for count in sizes:
        root = BENCH_DIR / f"{process}_{count}" / "db" / "events"
        make = make_orphan_files if process == "orphans" else make_delta_table
        made[count] = make(root, count)
        print(f"{process} {count:,}: files ready ({made[count]:.0f} s to create)", flush=True)
        results[count] = {kind: run_case(f"{process}_{kind}", root, count) for kind in KINDS[process]}
        if not keep:
            shutil.rmtree(root.parent.parent)
    return results, made


def growth_line(results: dict[int, dict], kinds: tuple[str, ...], where: str = "") -> str:
    sizes = sorted(results)
    if len(sizes) < 2:
        return ""
    low, high = results[sizes[0]], results[sizes[-1]]
    return (
        f"- peak RSS growth from {sizes[0]:,} to {sizes[-1]:,} objects{where}: "
        + ", ".join(f"{k} {high[k]['growth_mb'] - low[k]['growth_mb']:+.1f} MB" for k in kinds)
        + "\n"
    )


def footer(made: dict[int, float], load: float) -> str:
    return (
        "creating them took "
        + ", ".join(f"{made[c]:.0f} s for {c:,}" for c in sorted(made))
        + " (0: reused)\n"
        f"- 1-minute load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (shared "
        "machine: times vary by ±30%, ratios less)\n"
    )


def orphans_report(
    results: dict[int, dict], made: dict[int, float], synthetic: dict | None, load: float
) -> str:
    rows = [(count, "local disk", by_kind) for count, by_kind in sorted(results.items())]
    if synthetic is not None:
        rows.append((synthetic["count"], "synthetic (no file system)", synthetic))
    lines = []
    for count, where, by_kind in rows:
        streaming, sets = by_kind["streaming"], by_kind["sets"]
        lines.append(
            f"| {count:,} | {where} | {streaming['seconds']:.1f} | {sets['seconds']:.1f} "
            f"| {count / streaming['seconds']:,.0f} | {count / sets['seconds']:,.0f} "
            f"| {streaming['seconds'] / sets['seconds']:.2f} "
            f"| {streaming['growth_mb']:.1f} | {sets['growth_mb']:.1f} |"
        )
    return (
        "Orphan cleanup's scan (list the location, compare with what the metadata references, guard "
        "and age each candidate), streaming with spill to disk against Python sets; 90% of the "
        "objects referenced; nothing deleted. Fresh subprocess per case, streaming then sets.\n\n"
        "| objects | where | streaming s | sets s | streaming obj/s | sets obj/s | streaming ÷ sets "
        "| streaming peak RSS growth MB | sets peak RSS growth MB |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(lines)
        + "\n\n"
        + growth_line(results, KINDS["orphans"], " on disk")
        + "- peak RSS growth: VmHWM during the scan (reset through clear_refs) above VmRSS before it, after imports\n"
        "- files: empty, 97 partition folders, ~110-character paths; "
        + footer(made, load)
        + "- 10M on local disk not run: creating 10M files takes about ten minutes here and 10M of the "
        "disk's 16M inodes; the synthetic row runs the same difference (sorted runs, merge) at 10M "
        "from generated streams instead\n"
        "- where the time goes: without a file system (synthetic) the streaming difference is 2-3x the "
        "sets' (every entry pickled, written, read back and merged by heapq.merge in Python); on disk the "
        "listing (scandir + stat per file) dominates both, so it ends 15-35% slower, for a peak that no "
        "longer grows (sets: about 200 MB more per million objects)\n"
        "- disk: the runs take about 190 bytes per object with 84-character paths (both sides), "
        "removed when the scan ends\n"
    )


def vacuum_report(results: dict[int, dict], made: dict[int, float], load: float) -> str:
    kinds = KINDS["vacuum"]
    lines = []
    for count, by_kind in sorted(results.items()):
        cells = [f"{count:,}"]
        cells += [f"{by_kind[k]['seconds']:.1f}" for k in kinds]
        cells += [f"{count / by_kind[k]['seconds']:,.0f}" for k in kinds]
        cells += [f"{by_kind[k]['growth_mb']:.0f}" for k in kinds]
        lines.append("| " + " | ".join(cells) + " |")
    cpu = "; ".join(
        f"{c:,}: " + ", ".join(f"{k} {results[c][k]['cpu']:.1f}" for k in kinds) for c in sorted(results)
    )
    return (
        "Delta vacuum's scan (full mode): the log replayed, the whole location listed, live files, "
        "tombstones and untracked files told apart, each file to delete through the path guard; "
        "90% of the objects live, 5% expired tombstones, 5% never committed; nothing deleted. Fresh "
        "subprocess per case; deltalake is `DeltaTable(root).vacuum(dry_run=True, full=True)`, the "
        "table opened inside the case (what vacuum ran before, plus the guard over its answer).\n\n"
        "| objects | streaming s | sets s | deltalake s | streaming obj/s | sets obj/s | deltalake obj/s "
        "| streaming peak RSS growth MB | sets MB | deltalake MB |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(lines)
        + "\n\n"
        + growth_line(results, kinds)
        + "- peak RSS growth: VmHWM during the case (reset through clear_refs) above VmRSS before it, "
        "after imports\n"
        "- table: empty files in 97 partition folders, ~90-character paths, a log of two JSON commits; "
        + footer(made, load)
        + f"- CPU seconds (process_time, every thread): {cpu} (wall time is CPU time plus waiting for "
        "the disk and for the cores)\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("process", nargs="?", choices=[*KINDS, "both"], default="both")
    parser.add_argument("--sizes", default="100000,1000000", help="objects on local disk, comma-separated")
    parser.add_argument(
        "--synthetic", type=int, default=10_000_000, help="orphans: objects without a file system"
    )
    parser.add_argument("--no-synthetic", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the generated files under var/bench/")
    parser.add_argument("--no-write", action="store_true", help="print the results, RESULTS.md untouched")
    args = parser.parse_args()
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    sizes = [int(size) for size in args.sizes.split(",")]
    for process in list(KINDS) if args.process == "both" else [args.process]:
        load = os.getloadavg()[0]
        results, made = measure(process, sizes, args.keep)
        if process == "vacuum":
            body = vacuum_report(results, made, load)
        else:
            synthetic = None
            if not args.no_synthetic:
                synthetic = {
                    kind: run_case(f"synthetic_{kind}", ROOT / "nowhere", args.synthetic)
                    for kind in KINDS["orphans"]
                } | {"count": args.synthetic}
            body = orphans_report(results, made, synthetic, load)
        print(body)
        if not args.no_write:
            write_section(TITLES[process], body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
