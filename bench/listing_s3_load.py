"""Listing on the object store, ours against Polars 2.1 only, alternating round by round, on a
quiet machine and with busy loops taking cores (CI's machine is loaded: a listing that needs a
whole core of Python work slows there more than a planner that spreads over threads).

    .venv/bin/python bench/listing_s3_load.py                 # 7 rounds, 0 and 1 busy loops
    .venv/bin/python bench/listing_s3_load.py --rounds 5 --hogs 0 --hogs 2

The table and the measurement are bench/listing_s3.py's (the 200k-entry table relocated to a
SeaweedFS started for the run; each listing in a fresh process, wall time of the listing alone).
Each round lists with ours, then Polars 2.1, so both see the same load. Results replace the
"listing on the object store under load" section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import listing, listing_s3  # noqa: E402
from bench.common import write_section  # noqa: E402

TITLE = "listing on the object store under load (bench/listing_s3_load.py)"
ENTRIES = 200_000
IMPLS = ("ours", "polars2")


def rounds_under(
    hogs: int, rounds: int, cases: list[str], store, metadata: str
) -> dict[str, dict[str, list]]:
    """{case: {impl: [seconds per round]}} with ``hogs`` busy loops running."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        properties, port = store.s3_properties(), store.ports["metrics"]
        out: dict[str, dict[str, list]] = {}
        for case in cases:
            out[case] = {impl: [] for impl in IMPLS}
            for _ in range(rounds):
                for impl in IMPLS:
                    result = listing_s3.measure(impl, case, ENTRIES, metadata, properties, port)
                    out[case][impl].append(result.get("seconds", float("nan")))
        return out
    finally:
        for process in busy:
            process.kill()
            process.wait()


def report(results: dict[int, dict[str, dict[str, list]]], rounds: int, load: tuple[float, float]) -> str:
    lines = [
        f"Table: bench/listing_s3.py's ({ENTRIES:,} entries, 500 manifests, on SeaweedFS on the same"
        f" machine). {rounds} rounds per case, each round ours then Polars 2.1, fresh processes; busy"
        " loops: Python `while True: pass` processes running for the whole case.",
        "",
        "| busy loops | case | ours s (median) | Polars 2.1 s (median) | ours ÷ Polars 2.1 | per round |",
        "|---:|---|---:|---:|---:|---|",
    ]
    for hogs, by_case in results.items():
        for case, times in by_case.items():
            ours, theirs = statistics.median(times["ours"]), statistics.median(times["polars2"])
            per_round = ", ".join(
                f"{a / b:.2f}" for a, b in zip(times["ours"], times["polars2"], strict=True)
            )
            lines.append(
                f"| {hogs} | {case} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f} | {per_round} |"
            )
    lines += ["", f"- 1-minute load average {load[0]:.1f} at the start, {load[1]:.1f} at the end"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--hogs", type=int, action="append", help="busy loops (repeatable; default 0 and 1)")
    parser.add_argument(
        "--case", action="append", choices=listing.CASES, help="default: full and partition_1pct"
    )
    parser.add_argument(
        "--no-write", action="store_true", help="print the results without updating RESULTS.md"
    )
    args = parser.parse_args()
    if not listing_s3.TOOL.is_file():
        print(f"skipped: the relocate tool is not at {listing_s3.TOOL}")
        return
    from devtools.seaweedfs import SeaweedFS

    listing.BENCH_DIR.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="listing-s3-load-", dir=listing.BENCH_DIR))
    store = SeaweedFS(workdir / "seaweedfs", buckets=("lake",))
    load_before = os.getloadavg()[0]
    try:
        store.start()
        metadata, _ = listing_s3.upload(store, ENTRIES, workdir)
        cases = args.case or ["full", "partition_1pct"]
        results = {
            hogs: rounds_under(hogs, args.rounds, cases, store, metadata) for hogs in args.hogs or [0, 1]
        }
    finally:
        store.stop()
    body = report(results, args.rounds, (load_before, os.getloadavg()[0]))
    print(body)
    if not args.no_write:
        write_section(TITLE, body)


if __name__ == "__main__":
    main()
