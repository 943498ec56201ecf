"""Delta vacuum in bounded memory (issue 35): the streaming scan against Python sets and deltalake.

On local disk, for each size N: a Delta table of N empty files (97 partition folders, writer-like
names) whose log (one JSON commit of adds, one of removes) keeps 90% of them live; of the other
10%, half are tombstones removed 30 days ago and half were never committed (a killed writer's
files). Vacuum's answer is the same 10% in each case (full mode, a retention of 0 hours so that
the untracked files count as old). Made once under var/bench/, removed at the end. Each case runs
in a fresh subprocess (imports, then the peak reset):

- streaming: ``vacuum.vacuum_scan``, what the process runs now: the log's adds and removes sorted on
  disk, the whole location listed and merged with them, each candidate through the path guard, the
  files to delete spilled to disk and read back once;
- sets (the naive baseline, kept here): the log replayed into Python sets (live paths, tombstones),
  the same listing checked against them, the files to delete in a list;
- deltalake (what vacuum ran before, and delta-rs's own): ``DeltaTable(root).vacuum(dry_run=True,
  full=True)`` (the table opened inside the case), then the path guard over its answer.

Nothing is deleted. Measured: wall time, objects per second and the peak resident set during the
case (VmHWM, reset through /proc/self/clear_refs just before) above the resident set before it.

    .venv/bin/python bench/vacuum.py                      # 100k and 1M on local disk
    .venv/bin/python bench/vacuum.py --sizes 100000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import write_section  # noqa: E402
from bench.orphans import run_case  # noqa: E402

BENCH_DIR = ROOT / "var" / "bench"
BUCKETS = 97
DAY_MS = 86_400_000

CASE = r"""
import json, os, sys, time

kind, root, count, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
from processes.maintenance.delta.vacuum import vacuum_scan
from processes.maintenance.iceberg.orphans import stored_files
from storage.formats.delta.commit import open_version
from storage.io.guard import PathGuard

guard = PathGuard.build(root, roots=[os.path.dirname(root)])


def mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024


def streaming():
    with vacuum_scan(root, hours=0, full=True, guard=guard) as found:
        return sum(1 for _ in found.scan.removable)


def sets():
    spec = open_version(root)
    live, tombstones = set(), set()
    for action in spec.log.file_actions(spec.state(spec.version).snapshot):  # oldest first
        (live if action.add else tombstones).add(action.location)
        (tombstones if action.add else live).discard(action.location)
    cutoff, doomed = time.time(), []
    for stored in stored_files(root, None, guard):
        relative = stored.location[len(root) + 1 :]
        if stored.location in live or relative.startswith(("_", ".")):
            continue
        if (stored.location in tombstones or stored.mtime < cutoff) and guard.allows(stored.location):
            doomed.append(stored)
    return len(doomed)


def deltalake():
    from deltalake import DeltaTable

    found = DeltaTable(root).vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False, full=True)
    allowed, _ = guard.split(found, path=lambda relative: f"{root}/{relative}")
    return len(allowed)


with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")
before = mb("VmRSS")
started = time.monotonic()
cpu = time.process_time()
doomed = globals()[kind]()
seconds = time.monotonic() - started
json.dump(
    {"seconds": seconds, "cpu": time.process_time() - cpu, "growth_mb": mb("VmHWM") - before, "vacuum": doomed},
    open(out, "w"),
)
"""


def name(i: int) -> str:
    return f"bucket={i % BUCKETS:02d}/part-{i:05d}-6f1e5c1a-9d3b-4c2e-8a7f-{i:012d}-c000.snappy.parquet"


def make_table(root: Path, count: int) -> float:
    """The table described in the module docstring (kept between runs when complete); seconds."""
    marker = root.parent / ".complete"
    if marker.exists():
        return 0.0
    started = time.monotonic()
    shutil.rmtree(root, ignore_errors=True)
    for bucket in range(BUCKETS):
        (root / f"bucket={bucket:02d}").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        os.close(os.open(f"{root}/{name(i)}", os.O_CREAT | os.O_WRONLY, 0o644))
    (root / "_delta_log").mkdir()
    now = int(time.time() * 1000)
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "bucket", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
    metadata = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema),
        "partitionColumns": ["bucket"],
        "configuration": {},
        "createdTime": now,
    }

    def add(i: int) -> dict:
        return {
            "path": name(i),
            "partitionValues": {"bucket": f"{i % BUCKETS:02d}"},
            "size": 0,
            "modificationTime": now,
            "dataChange": True,
        }

    with open(root / "_delta_log" / f"{0:020d}.json", "w") as log:
        log.write(json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}) + "\n")
        log.write(json.dumps({"metaData": metadata}) + "\n")
        for i in range(count):
            if i % 10 or i % 20 == 0:  # live, or a tombstone-to-be; i % 20 == 10 never committed
                log.write(json.dumps({"add": add(i)}) + "\n")
    with open(root / "_delta_log" / f"{1:020d}.json", "w") as log:
        for i in range(0, count, 20):
            remove = {"path": name(i), "deletionTimestamp": now - 30 * DAY_MS, "dataChange": True}
            log.write(json.dumps({"remove": remove}) + "\n")
    marker.touch()
    return time.monotonic() - started


KINDS = ("streaming", "sets", "deltalake")


def table_row(count: int, results: dict) -> str:
    cells = [f"{count:,}"]
    cells += [f"{results[k]['seconds']:.1f}" for k in KINDS]
    cells += [f"{count / results[k]['seconds']:,.0f}" for k in KINDS]
    cells += [f"{results[k]['growth_mb']:.0f}" for k in KINDS]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100000,1000000", help="objects on local disk, comma-separated")
    parser.add_argument("--keep", action="store_true", help="keep the generated tables under var/bench/")
    args = parser.parse_args()
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    rows, results, made = [], {}, {}
    for count in (int(size) for size in args.sizes.split(",")):
        root = BENCH_DIR / f"vacuum_{count}" / "events"
        made[count] = make_table(root, count)
        print(f"{count:,} files ready ({made[count]:.0f} s to create)", flush=True)
        results[count] = {kind: run_case(kind, root, count, script=CASE, label="vacuum") for kind in KINDS}
        rows.append(table_row(count, results[count]))
        if not args.keep:
            shutil.rmtree(root.parent)
    sizes = sorted(results)
    growth = ""
    if len(sizes) > 1:
        low, high = results[sizes[0]], results[sizes[-1]]
        growth = (
            f"- peak RSS growth from {sizes[0]:,} to {sizes[-1]:,} objects: "
            + ", ".join(f"{k} {high[k]['growth_mb'] - low[k]['growth_mb']:+.0f} MB" for k in KINDS)
            + "\n"
        )
    body = (
        "Delta vacuum's scan (full mode): the log replayed, the whole location listed, live files, "
        "tombstones and untracked files told apart, each file to delete through the path guard; "
        "90% of the objects live, 5% expired tombstones, 5% never committed; nothing deleted. Fresh "
        "subprocess per case; deltalake is `DeltaTable(root).vacuum(dry_run=True, full=True)`, the "
        "table opened inside the case (what vacuum ran before, plus the guard over its answer).\n\n"
        "| objects | streaming s | sets s | deltalake s | streaming obj/s | sets obj/s | deltalake obj/s "
        "| streaming peak RSS growth MB | sets MB | deltalake MB |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n\n"
        + growth
        + "- peak RSS growth: VmHWM during the case (reset through clear_refs) above VmRSS before it, "
        "after imports\n"
        "- table: empty files in 97 partition folders, ~90-character paths, a log of two JSON commits; "
        "creating it took " + ", ".join(f"{made[c]:.0f} s for {c:,}" for c in sizes) + " (0: reused)\n"
        "- CPU seconds (process_time, every thread): "
        + "; ".join(f"{c:,}: " + ", ".join(f"{k} {results[c][k]['cpu']:.1f}" for k in KINDS) for c in sizes)
        + " (wall time is CPU time plus waiting for the disk and for the cores)\n"
        f"- 1-minute load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (shared "
        "machine: times vary by ±30%, ratios less)\n"
    )
    write_section("Delta vacuum (bench/vacuum.py)", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
