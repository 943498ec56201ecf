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
    .venv/bin/python bench/cleanup.py orphans --sizes "" --no-synthetic --s3 20000,100000
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
KINDS = {"orphans": ("streaming", "before", "sets"), "vacuum": ("streaming", "before", "sets", "deltalake")}
S3_BUCKET = "lake"
#: The ``before`` of the object-store cases: the last commit that listed a location through pyarrow's
#: ``get_file_info`` (the whole listing as one list), with today's difference (sorted runs merged
#: by blocks), so that the two differ by the listing alone.
S3_BEFORE = "96e03da"
TITLES = {
    "orphans": "Orphan cleanup (bench/cleanup.py orphans)",
    "vacuum": "Delta vacuum (bench/cleanup.py vacuum)",
    "s3": "Orphan cleanup on SeaweedFS (bench/cleanup.py orphans --s3)",
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


def run_case(case: str, root: Path | str, count: int, env: dict[str, str] | None = None) -> dict:
    """Run ``case`` of bench/_cleanup_cases.py in a fresh subprocess; its result, which must name
    a tenth of the ``count`` objects."""
    out = BENCH_DIR / f"cleanup-{case}-{count}.json"
    subprocess.run(
        [sys.executable, str(CASES_SCRIPT), case, str(root), str(count), str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        check=True,
    )
    result = json.loads(out.read_text())
    out.unlink()
    assert result["doomed"] == (count + 9) // 10, result
    print(f"  {case} {count:,}: {result}", flush=True)
    return result


def measure(
    process: str, sizes: list[int], keep: bool, kinds: tuple[str, ...]
) -> tuple[dict[int, dict], dict[int, float]]:
    """{size: {kind: result}} and {size: seconds to make its files} for one process."""
    results, made = {}, {}
    for count in sizes:
        root = BENCH_DIR / f"{process}_{count}" / "db" / "events"
        make = make_orphan_files if process == "orphans" else make_delta_table
        made[count] = make(root, count)
        print(f"{process} {count:,}: files ready ({made[count]:.0f} s to create)", flush=True)
        results[count] = {kind: run_case(f"{process}_{kind}", root, count) for kind in kinds}
        if not keep:
            shutil.rmtree(root.parent.parent)
    return results, made


def make_s3_objects(store, root: str, count: int) -> tuple[float, int]:
    """``count`` empty objects under ``root/data`` on SeaweedFS, written into its filer's metadata
    (``SeaweedFS.make_empty_objects``: thousands a second, where one PUT each made about 280 a
    second here); (seconds taken, S3 requests the store answered: none)."""
    bucket, _, prefix = root.removeprefix("s3://").partition("/")
    before = store.request_count(S3_BUCKET)
    started = time.monotonic()
    made = store.make_empty_objects(
        bucket, (orphan_key(prefix, i) for i in range(count)), mtime=time.time() - 86400
    )
    assert made == count, made
    return time.monotonic() - started, store.request_count(S3_BUCKET) - before


def orphan_key(prefix: str, i: int) -> str:
    return f"{prefix}/data/bucket={i % BUCKETS:02d}/00000-{i}-6f1e5c1a-9d3b-4c2e-8a7f-{i:012d}.parquet"


def measure_s3(sizes: list[int], kinds: tuple[str, ...]) -> tuple[dict[int, dict], dict[int, tuple]]:
    """Orphan cleanup on a local SeaweedFS (devtools/seaweedfs.py, free ports, stopped at the
    end): {size: {kind: result with its S3 requests}}, {size: (seconds, requests) to create}."""
    from devtools.seaweedfs import SeaweedFS

    workdir = BENCH_DIR / "cleanup-s3"
    shutil.rmtree(workdir, ignore_errors=True)
    store = SeaweedFS(workdir / "seaweedfs", buckets=(S3_BUCKET,))
    results: dict[int, dict] = {}
    made: dict[int, tuple] = {}
    try:
        store.start()
        env = {
            "LAKEWARDEN_S3_ENDPOINT": store.endpoint,
            "LAKEWARDEN_S3_ACCESS_KEY_ID": store.access_key,
            "LAKEWARDEN_S3_SECRET_ACCESS_KEY": store.secret_key,
            "LAKEWARDEN_S3_REGION": "us-east-1",
            "LAKEWARDEN_BENCH_BEFORE": S3_BEFORE,
        }
        for count in sizes:
            root = f"s3://{S3_BUCKET}/orphans_{count}/db/events"
            made[count] = make_s3_objects(store, root, count)
            print(
                f"s3 {count:,}: objects ready ({made[count][0]:.0f} s, {made[count][1]:,} requests)",
                flush=True,
            )
            results[count] = {}
            for kind in kinds:
                before = store.request_count(S3_BUCKET)
                result = run_case(f"orphans_{kind}", root, count, env)
                results[count][kind] = result | {"requests": store.request_count(S3_BUCKET) - before}
    finally:
        store.stop()
        shutil.rmtree(workdir, ignore_errors=True)
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


def table(rows: list[tuple[int, str, dict]], kinds: tuple[str, ...], requests: bool = False) -> str:
    """One row per (objects, where, {kind: result}): wall seconds, objects per second, CPU seconds
    and peak RSS growth of each kind, and the ratios of the streaming scan to the others."""
    others = [k for k in kinds if k != "streaming"]
    head = ["objects", "where"]
    head += [f"{k} s" for k in kinds] + ["streaming obj/s"] + [f"{k} CPU s" for k in kinds]
    head += [f"{k} ÷ streaming (CPU)" for k in others] + [f"{k} peak RSS growth MB" for k in kinds]
    head += [f"{k} requests" for k in kinds] if requests else []
    lines = ["| " + " | ".join(head) + " |", "|---:|---|" + "---:|" * (len(head) - 2)]
    for count, where, by_kind in rows:
        cells = [f"{count:,}", where]
        cells += [f"{by_kind[k]['seconds']:.1f}" for k in kinds]
        cells.append(f"{count / by_kind['streaming']['seconds']:,.0f}")
        cells += [f"{by_kind[k]['cpu']:.1f}" for k in kinds]
        cells += [f"{by_kind[k]['cpu'] / by_kind['streaming']['cpu']:.2f}" for k in others]
        cells += [f"{by_kind[k]['growth_mb']:.1f}" for k in kinds]
        cells += [f"{by_kind[k]['requests']:,}" for k in kinds] if requests else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def loads(load: float) -> str:
    return (
        f"- 1-minute load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (shared "
        "machine: wall times vary a lot with it; CPU seconds, process_time of every thread, much less)\n"
    )


def made_line(made: dict[int, float]) -> str:
    return (
        "creating them took "
        + ", ".join(f"{made[c]:.0f} s for {c:,}" for c in sorted(made))
        + " (0: reused)\n"
    )


KIND_NOTES = (
    "- streaming: the scan as it runs now (runs merged a block at a time, joined batch against batch); "
    "before: the same scan on the modules of commit 115056d (heapq.merge of every item, pickled with a "
    "memo), loaded from git in its subprocess; sets: the referenced names in a Python set\n"
)


def orphans_report(
    results: dict[int, dict],
    made: dict[int, float],
    synthetic: dict | None,
    kinds: tuple[str, ...],
    load: float,
) -> str:
    rows = [(count, "local disk", by_kind) for count, by_kind in sorted(results.items())]
    if synthetic is not None:
        rows.append((synthetic["count"], "synthetic (no file system)", synthetic))
    body = (
        "Orphan cleanup's scan (list the location, compare with what the metadata references, guard "
        "and age each candidate), streaming with spill to disk against the previous streaming code "
        "and Python sets; 90% of the objects referenced; nothing deleted. Fresh subprocess per case.\n\n"
        + table(rows, kinds)
        + "\n"
        + KIND_NOTES
        + growth_line(results, kinds, " on disk")
        + "- peak RSS growth: VmHWM during the scan (reset through clear_refs) above VmRSS before it, after imports\n"
        "- files: empty, 97 partition folders, ~110-character paths; "
        + (made_line(made) if made else "none on disk\n")
        + loads(load)
        + (
            ""
            if max(results, default=0) >= 10_000_000
            else "- 10M on local disk not run (`--sizes` to add it: creating 10M files takes 5-15 minutes "
            "and 10M inodes); "
        )
        + "the synthetic row runs the same difference (sorted runs, merge) from generated streams, "
        "without a file system (generating the names is about half of its CPU time, in every kind)\n"
        "- disk: the runs take about 190 bytes per object with 84-character paths (both sides), "
        "removed when the scan ends\n"
    )
    return body


def s3_report(s3: tuple[dict[int, dict], dict[int, tuple]], kinds: tuple[str, ...], load: float) -> str:
    found, created = s3
    rows = [(count, "SeaweedFS", by_kind) for count, by_kind in sorted(found.items())]
    return (
        "Orphan cleanup's scan (as in the section above) on a local SeaweedFS (devtools/seaweedfs.py; "
        "S3 on 127.0.0.1, signed requests): streaming and sets list the location through "
        "object_store a page of 1,000 keys at a time (`storage.io.objects.list_pages`), before "
        "through pyarrow's S3 file system (`get_file_info`, the whole listing as one list); requests "
        "counted by SeaweedFS (`SeaweedFS_s3_request_total`).\n\n"
        + table(rows, kinds, requests=True)
        + "\n"
        + "- streaming: the scan as it runs now (the listing a page at a time); before: the same scan "
        f"on the modules of commit {S3_BEFORE} (the same difference, the listing through pyarrow as one "
        "list), loaded from git in its subprocess; sets: the referenced names in a Python set, the "
        "listing paged\n"
        + growth_line(found, kinds, " on SeaweedFS")
        + "- peak RSS growth: VmHWM during the scan (reset through clear_refs) above VmRSS before it, after imports\n"
        + "- objects: empty, 97 partition prefixes, written into the filer's metadata "
        "(`weed shell fs.meta.load`, no S3 request): "
        + ", ".join(
            f"{c:,} in {created[c][0]:.0f} s ({c / created[c][0]:,.0f} objects/s)" for c in sorted(created)
        )
        + "\n"
        + loads(load)
    )


def vacuum_report(
    results: dict[int, dict], made: dict[int, float], kinds: tuple[str, ...], load: float
) -> str:
    rows = [(count, "local disk", by_kind) for count, by_kind in sorted(results.items())]
    return (
        "Delta vacuum's scan (full mode): the log replayed, the whole location listed, live files, "
        "tombstones and untracked files told apart, each file to delete through the path guard; "
        "90% of the objects live, 5% expired tombstones, 5% never committed; nothing deleted. Fresh "
        "subprocess per case; deltalake is `DeltaTable(root).vacuum(dry_run=True, full=True)`, the "
        "table opened inside the case (what vacuum ran before, plus the guard over its answer).\n\n"
        + table(rows, kinds)
        + "\n"
        + KIND_NOTES
        + growth_line(results, kinds)
        + "- peak RSS growth: VmHWM during the case (reset through clear_refs) above VmRSS before it, "
        "after imports\n"
        "- table: empty files in 97 partition folders, ~90-character paths, a log of two JSON commits; "
        + made_line(made)
        + loads(load)
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
    parser.add_argument("--s3", default="", help="orphans: objects on a local SeaweedFS, comma-separated")
    parser.add_argument("--kinds", default="", help="only these kinds (comma-separated; streaming always)")
    parser.add_argument("--keep", action="store_true", help="keep the generated files under var/bench/")
    parser.add_argument("--no-write", action="store_true", help="print the results, RESULTS.md untouched")
    args = parser.parse_args()
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    sizes = [int(size) for size in args.sizes.split(",") if size]
    for process in list(KINDS) if args.process == "both" else [args.process]:
        wanted = {"streaming", *args.kinds.split(",")} if args.kinds else set(KINDS[process])
        kinds = tuple(kind for kind in KINDS[process] if kind in wanted)
        load = os.getloadavg()[0]
        results, made = measure(process, sizes, args.keep, kinds)
        if process == "vacuum":
            body = vacuum_report(results, made, kinds, load)
        else:
            synthetic = None
            if not args.no_synthetic:
                synthetic = {
                    kind: run_case(f"synthetic_{kind}", ROOT / "nowhere", args.synthetic) for kind in kinds
                } | {"count": args.synthetic}
            if args.s3:
                s3_body = s3_report(measure_s3([int(n) for n in args.s3.split(",")], kinds), kinds, load)
                print(s3_body)
                if not args.no_write:
                    write_section(TITLES["s3"], s3_body)
            if not sizes and synthetic is None:
                continue
            body = orphans_report(results, made, synthetic, kinds, load)
        print(body)
        if not args.no_write:
            write_section(TITLES[process], body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
