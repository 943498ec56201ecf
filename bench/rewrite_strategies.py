"""Rewrite strategies: sort and zorder vs binpack throughput, on the same files.

bench/compaction.py's generated parquet files (``--size-mb`` in all, default 256) are rewritten
by the Delta and the Iceberg rewrite processes three times each, every time on a fresh
hard-linked copy: ``binpack`` (small files merged, no order), ``sort`` by ``user_id`` and
``zorder`` over (``user_id``, ``amount``). Target 128 MiB, snappy, engine arrow, Spark warmed up
first. Throughput: input rows and MiB per second of wall time (plan, write, commit). A sort or
zorder group is a whole partition ordered in one task's memory (the table is unpartitioned: one
group, one task), so it uses one core where binpack spreads its groups over all of them.

    .venv/bin/python bench/rewrite_strategies.py [--size-mb 256] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import compaction as base  # noqa: E402
from bench.common import write_section  # noqa: E402

STRATEGIES = {
    "binpack": {},
    "sort": {"strategy": "sort", "sort-order": ["user_id"]},
    "zorder": {"strategy": "zorder", "zorder-columns": ["user_id", "amount"]},
}


def run_delta(files: list[Path], folder: Path, params: dict) -> dict:
    from processes.maintenance.delta.rewrite import DeltaRewriteProcess

    base.make_delta(files, folder)
    runtime = base.BenchRuntime(str(folder))
    process = DeltaRewriteProcess(params, runtime.config)
    start = time.perf_counter()
    summary = process.run(base.BenchContext(runtime, folder / ".lakewarden-staging" / "process-1"))
    return {"seconds": time.perf_counter() - start, "summary": summary}


def run_iceberg(files: list[Path], folder: Path, params: dict) -> dict:
    from processes.maintenance.iceberg import rewrite as iceberg_rewrite

    cls = iceberg_rewrite.IcebergRewriteProcess
    # bench/compaction builds the process with params {}: give it ours
    iceberg_rewrite.IcebergRewriteProcess = lambda _params, config: cls(params, config)  # type: ignore
    try:
        return base.run_iceberg_process(files, folder)
    finally:
        iceberg_rewrite.IcebergRewriteProcess = cls  # type: ignore


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="lw-strategies-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        files = base.generate(work / "input", args.size_mb)
        base.warm_up_spark(work)
        rows = []
        for fmt, run in (("Delta", run_delta), ("Iceberg", run_iceberg)):
            for name, params in STRATEGIES.items():
                result = run(files, work / f"{fmt.lower()}-{name}", params)
                summary = result["summary"]
                records = summary_rows(files)
                mib = summary["bytes_in"] / base.MIB
                seconds = result["seconds"]
                rows.append(
                    f"| {fmt} | {name} | {summary['files_in']} | {summary['files_out']} | {seconds:.1f} "
                    f"| {records / seconds:,.0f} | {mib / seconds:.0f} |"
                )
                print(rows[-1], flush=True)
        table = "\n".join(
            [
                f"Input: {len(files)} parquet files, {sum(f.stat().st_size for f in files) / base.MIB:.0f} MiB,"
                f" {summary_rows(files):,} rows (bench/compaction.py's generator); target 128 MiB; "
                "engine arrow; Spark local. sort: by user_id; zorder: (user_id, amount).",
                "",
                "| format | strategy | files in | files out | seconds | rows/s | MiB/s |",
                "|---|---|---:|---:|---:|---:|---:|",
                *rows,
            ]
        )
        if not args.no_write:
            write_section("Rewrite strategies (bench/rewrite_strategies.py)", table)
        print(table)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def summary_rows(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(f).num_rows for f in files)


if __name__ == "__main__":
    raise SystemExit(main())
