"""Listing on the object store: the spec API's streaming Iceberg file index against pyiceberg's
``plan_files`` on the same table in SeaweedFS, with the requests each makes.

    .venv/bin/python bench/listing_s3.py                  # 200k entries
    .venv/bin/python bench/listing_s3.py --entries 20000  # another size

The table is bench/listing.py's (N data-file entries in N/400 manifests, day-partitioned, stats
for 8 columns; built once and cached under var/bench/), relocated to ``s3://lake/...`` with the
fixtures' relocate tool (../shared/tools/relocate_iceberg.py) and uploaded to a SeaweedFS started
for the run on free ports (signed requests), stopped at the end.

Each case runs in a fresh subprocess: the listing consumed as a stream, wall time, peak RSS
(``ru_maxrss``) above the baseline taken after imports and loading the table metadata, and the S3
requests of the listing alone, counted by SeaweedFS (``SeaweedFS_s3_request_total`` scraped from
its metrics port before and after, once nothing is in flight). For scale, "ours" also lists the
local copy of the same table. Results replace the "listing on the object store" section of
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import listing  # noqa: E402
from bench.common import write_section  # noqa: E402
from console.seaweedfs import relocate_iceberg, s3_request_count  # noqa: E402

TITLE = "listing on the object store (bench/listing_s3.py)"
TOOL = ROOT.parent / "shared" / "tools" / "relocate_iceberg.py"
IMPLS = ("ours", "pyiceberg")
# -- the table on the store ----------------------------------------------------------------


def upload(store, entries: int, workdir: Path) -> tuple[str, int]:
    """The metadata URI of the relocated table on the store, and how many objects were put."""
    local_metadata = Path(listing.build(entries))
    local_root = local_metadata.parent.parent
    prefix = f"s3://lake/bench/listing_{entries}"
    target = workdir / "table"
    relocate_iceberg(TOOL, local_root, target, prefix)
    filesystem = store.filesystem()
    files = [p for p in sorted(target.rglob("*")) if p.is_file()]
    for path in files:
        with filesystem.open_output_stream(f"lake/bench/listing_{entries}/{path.relative_to(target)}") as out:
            out.write(path.read_bytes())
    shutil.rmtree(target)
    return f"{prefix}/metadata/{local_metadata.name}", len(files)


# -- the measured cases (run in a child process) -------------------------------------------


def child(impl: str, case: str, entries: int, metadata: str, properties: str, metrics_port: int) -> None:
    import pyiceberg.table  # noqa: F401
    from pyiceberg.table import StaticTable

    from storage.formats.iceberg import IcebergAdapter
    from storage.io import StoreOptions

    ours, theirs = listing._predicates(case, entries)
    s3 = json.loads(properties)
    if impl.startswith("ours"):
        storage = StoreOptions.from_properties(s3, environ={}) if s3 else None
        table = IcebergAdapter.open(metadata, storage=storage)
        table.timeline()
    else:
        table = StaticTable.from_metadata(metadata, properties=s3)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    before = s3_request_count(metrics_port) if s3 else 0
    started = time.perf_counter()
    count = 0
    if impl.startswith("ours"):
        for _ in table.file_index().list_files_at(None, ours):
            count += 1
    else:
        for _ in table.scan(row_filter=theirs).plan_files():
            count += 1
    seconds = time.perf_counter() - started
    requests = s3_request_count(metrics_port) - before if s3 else 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "rss_mb": peak - baseline, "files": count, "requests": requests}))


def measure(impl: str, case: str, entries: int, metadata: str, properties: dict, metrics_port: int) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            impl,
            case,
            str(entries),
            metadata,
            json.dumps(properties),
            str(metrics_port),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- report --------------------------------------------------------------------------------


def report(
    results: dict[int, dict[str, dict[str, dict]]], uploads: dict[int, int], loads: tuple[float, float]
) -> str:
    lines = [
        "Table: bench/listing.py's (day(ts) partitioned over 100 days, 400 entries per manifest, every"
        " manifest spanning all days, stats for 8 columns; the data files do not exist), relocated to"
        " `s3://lake/...` and uploaded to a local SeaweedFS (S3 on 127.0.0.1, signed requests)."
        " Ours: `IcebergAdapter.open(metadata, storage=StoreOptions)` then"
        " `file_index().list_files_at(None, filter)` consumed as a stream; pyiceberg:"
        " `StaticTable.from_metadata(metadata, properties=s3.*).scan(row_filter).plan_files()`."
        " RSS: peak `ru_maxrss` above the baseline after imports and loading the metadata, fresh"
        " process per case. Requests: `SeaweedFS_s3_request_total` of the listing alone.",
        "",
        "| entries | manifests | case | files | ours s | pyiceberg s | ours RSS MB | pyiceberg RSS MB |"
        " ours requests | pyiceberg requests | ours on local disk s |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for entries, cases in sorted(results.items()):
        for case, by_impl in cases.items():
            ours, theirs, local = by_impl["ours"], by_impl["pyiceberg"], by_impl.get("ours-local")
            files = (
                ours["files"] if ours["files"] == theirs["files"] else f"{ours['files']} vs {theirs['files']}"
            )
            lines.append(
                f"| {entries:,} | {entries // listing.FILES_PER_COMMIT} | {case} | {files} "
                f"| {ours['seconds']:.2f} | {theirs['seconds']:.2f} | {ours['rss_mb']:.1f} | {theirs['rss_mb']:.1f} "
                f"| {ours['requests']} | {theirs['requests']} | {local['seconds']:.2f} |"
                if local
                else f"| {entries:,} | {entries // listing.FILES_PER_COMMIT} | {case} | {files} "
                f"| {ours['seconds']:.2f} | {theirs['seconds']:.2f} | {ours['rss_mb']:.1f} | {theirs['rss_mb']:.1f} "
                f"| {ours['requests']} | {theirs['requests']} | |"
            )
    lines += [
        "",
        "- requests: both read the manifest list and each manifest whole, each object once (a HEAD and"
        " one ranged GET apiece): 2 × (manifests + 1), whatever the number of entries; the partition and"
        " stats predicates cannot skip manifests here (every manifest spans all days and ids are spread"
        " over the commits)",
        "- the machine is shared (2 cores, other jobs running): times vary by ±30% between runs,"
        f" more under load (1-minute load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end);"
        " the requests do not vary",
    ]
    lines += [f"- upload of the {n:,}-entry table: {count} objects" for n, count in sorted(uploads.items())]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, action="append", help="data-file entries (repeatable)")
    parser.add_argument(
        "--no-write", action="store_true", help="print the results without updating RESULTS.md"
    )
    args = parser.parse_args()
    if not TOOL.is_file():
        print(f"skipped: the relocate tool is not at {TOOL}")
        return
    from console.seaweedfs import SeaweedFS

    listing.BENCH_DIR.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="listing-s3-", dir=listing.BENCH_DIR))
    store = SeaweedFS(workdir / "seaweedfs", buckets=("lake",))
    results: dict[int, dict[str, dict[str, dict]]] = {}
    uploads: dict[int, int] = {}
    load_before = os.getloadavg()[0]
    try:
        store.start()
        properties = store.s3_properties()
        port = store.ports["metrics"]
        for entries in args.entries or [200_000]:
            print(f"table with {entries} entries", flush=True)
            metadata, uploads[entries] = upload(store, entries, workdir)
            results[entries] = {}
            for case in listing.CASES:
                row = {impl: measure(impl, case, entries, metadata, properties, port) for impl in IMPLS}
                if case == "full":
                    row["ours-local"] = measure("ours-local", case, entries, listing.build(entries), {}, port)
                results[entries][case] = row
                print(f"  {case}: {json.dumps(row)}", flush=True)
    finally:
        store.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    body = report(results, uploads, (load_before, os.getloadavg()[0]))
    print(body)
    if not args.no_write:
        write_section(TITLE, body)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], int(sys.argv[7]))
    else:
        main()
