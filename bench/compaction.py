"""Compaction throughput: the Spark rewrite processes vs plain pyarrow vs deltalake's optimize.

The same parquet files (1-4 MB each, ``--size-mb`` in total, default 2048) are compacted into
128 MiB files five ways, each on its own hard-linked copy of the files:

- pyarrow: a plain single-thread read-and-rewrite (``read_table(use_threads=False)`` then one
  ``ParquetWriter`` per 128 MiB of input);
- deltalake: ``DeltaTable.optimize.compact()`` on the files as a Delta table;
- the Delta rewrite process (``DeltaRewriteProcess.run``: plan, Spark read/write, commit);
- the Iceberg rewrite process (``IcebergRewriteProcess.run`` on a SQL catalog in SQLite);
- the same with the opt-in ``spark-sql`` engine (Spark's own parquet reader and writer).

Throughput is input bytes per second of wall time; the Spark session is started (and warmed up
with one small job) before timing, as on a long-running worker. Snappy everywhere.

    .venv/bin/python bench/compaction.py [--size-mb 400] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import write_section  # noqa: E402
from processes.plugin import ProcessContext  # noqa: E402

MIB = 1024 * 1024
TARGET = 128 * MIB


def field(name: str, type_: pa.DataType, field_id: int) -> pa.Field:
    return pa.field(name, type_, metadata={b"PARQUET:field_id": str(field_id).encode()})


SCHEMA = pa.schema(
    [
        field("id", pa.int64(), 1),
        field("user_id", pa.int64(), 2),
        field("amount", pa.float64(), 3),
        field("category", pa.string(), 4),
        field("note", pa.string(), 5),
        field("ts", pa.timestamp("us"), 6),
    ]
)


def base_chunk(rows: int) -> pa.Table:
    def uniform(high: int) -> pa.Array:
        return pc.cast(pc.floor(pc.multiply(pc.random(rows, initializer=high), high)), pa.int64())

    categories = pa.array([f"category-{i:03d}" for i in range(100)])
    notes = pa.array([os.urandom(8).hex() for _ in range(50_000)])
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "user_id": uniform(5_000_000),
            "amount": pc.round(pc.multiply(pc.random(rows, initializer=3), 1000), 2),
            "category": pc.take(categories, uniform(100)),
            "note": pc.take(notes, uniform(len(notes))),
            "ts": pc.cast(pc.add(uniform(10**12), 1_700_000_000_000_000), pa.timestamp("us")),
        },
        schema=SCHEMA,
    )


def generate(folder: Path, size_mb: int, seed: int = 11) -> list[Path]:
    """Parquet files of 1-4 MB adding up to ``size_mb``."""
    folder.mkdir(parents=True, exist_ok=True)
    chunk = base_chunk(1_000_000)
    sample = folder / "sample.parquet"
    pq.write_table(chunk.slice(0, 200_000), sample)
    bytes_per_row = sample.stat().st_size / 200_000
    sample.unlink()
    rng = random.Random(seed)
    files, total, offset, number = [], 0, 0, 0
    while total < size_mb * MIB:
        rows = int(rng.uniform(1, 4) * MIB / bytes_per_row)
        if offset + rows > chunk.num_rows:
            offset = 0
        part = chunk.slice(offset, rows)
        part = part.set_column(0, "id", pa.array(range(number * 10**7, number * 10**7 + rows), pa.int64()))
        path = folder / f"part-{number:05d}.parquet"
        pq.write_table(part.cast(SCHEMA), path, compression="snappy")
        files.append(path)
        total += path.stat().st_size
        offset += rows
        number += 1
    return files


def link_copy(files: list[Path], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    copies = []
    for path in files:
        target = folder / path.name
        os.link(path, target)
        copies.append(target)
    return copies


# --- the four contenders ---------------------------------------------------------------------


def run_pyarrow(files: list[Path], out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    groups, current, size = [], [], 0
    for path in files:
        if current and size + path.stat().st_size > TARGET:
            groups.append(current)
            current, size = [], 0
        current.append(path)
        size += path.stat().st_size
    if current:
        groups.append(current)
    start = time.perf_counter()
    for number, group in enumerate(groups):
        with pq.ParquetWriter(out / f"out-{number:04d}.parquet", SCHEMA, compression="snappy") as writer:
            for path in group:
                writer.write_table(pq.read_table(path, use_threads=False))
    return {"seconds": time.perf_counter() - start, "outputs": list(out.glob("*.parquet"))}


def make_delta(files: list[Path], folder: Path) -> None:
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    link_copy(files, folder)
    DeltaTable.create(str(folder), schema=pa.schema([pa.field(f.name, f.type) for f in SCHEMA]))
    table = DeltaTable(str(folder))
    now = int(time.time() * 1000)
    adds = [
        AddAction(p.name, p.stat().st_size, {}, now, True, f'{{"numRecords":{pq.read_metadata(p).num_rows}}}')
        for p in sorted(folder.glob("*.parquet"))
    ]
    table.create_write_transaction(adds, mode="append", schema=table.schema())


def delta_outputs(folder: Path) -> list[int]:
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(str(folder)).get_add_actions(flatten=True))
    return actions.column("size_bytes").to_pylist()


def run_deltalake(files: list[Path], folder: Path) -> dict:
    from deltalake import DeltaTable

    make_delta(files, folder)
    start = time.perf_counter()
    DeltaTable(str(folder)).optimize.compact(target_size=TARGET)
    return {"seconds": time.perf_counter() - start, "sizes": delta_outputs(folder)}


class BenchRuntime:
    def __init__(self, location: str, loader=None, engine: str = "arrow") -> None:
        self.location = location
        self.config = {
            "target-file-size": TARGET,
            "min-input-files": 2,
            "compression-codec": "snappy",
            "engine": engine,
        }
        self._loader = loader

    def load(self):
        return self._loader()


class BenchContext(ProcessContext):
    def __init__(self, runtime: BenchRuntime, staging: Path) -> None:
        self.process_id = 1
        self.runtime = runtime
        self.staging_dir = staging

    @property
    def spark(self):
        from processes.spark.session import spark_session

        return spark_session()

    def check_cancelled(self) -> None:
        pass

    def report_progress(self, done: int, total: int, message: str = "") -> None:
        pass


def run_delta_process(files: list[Path], folder: Path) -> dict:
    from processes.maintenance.delta.rewrite import DeltaRewriteProcess

    make_delta(files, folder)
    runtime = BenchRuntime(str(folder))
    process = DeltaRewriteProcess({}, runtime.config)
    start = time.perf_counter()
    summary = process.run(BenchContext(runtime, folder / ".lakewarden-staging" / "process-1"))
    return {"seconds": time.perf_counter() - start, "sizes": delta_outputs(folder), "summary": summary}


def run_iceberg_process(files: list[Path], folder: Path, engine: str = "arrow") -> dict:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    from processes.maintenance.iceberg.rewrite import IcebergRewriteProcess, spec_view

    folder.mkdir(parents=True)
    catalog = SqlCatalog("bench", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{folder}")
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.events", schema=SCHEMA)
    copies = link_copy(files, Path(table.location().removeprefix("file://")) / "data")
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            for path in copies:
                append.append_data_file(parquet_file_to_data_file(table.io, table.metadata, f"file://{path}"))
    table.refresh()
    runtime = BenchRuntime(table.location(), loader=lambda: spec_view(table), engine=engine)
    process = IcebergRewriteProcess({}, runtime.config)
    staging = Path(table.location().removeprefix("file://")) / ".lakewarden-staging" / "process-1"
    start = time.perf_counter()
    summary = process.run(BenchContext(runtime, staging))
    seconds = time.perf_counter() - start
    table.refresh()
    sizes = [task.file.file_size_in_bytes for task in table.scan().plan_files()]
    return {"seconds": seconds, "sizes": sizes, "summary": summary}


def warm_up_spark(folder: Path) -> None:
    from processes.spark.session import spark_session

    spark = spark_session(app_name="lakewarden-bench", extra_config={"spark.driver.memory": "3g"})
    sample = folder / "warmup"
    pq.write_table(base_chunk(10_000), folder / "warmup.parquet")
    spark.read.parquet(str(folder / "warmup.parquet")).coalesce(1).write.mode("overwrite").parquet(
        str(sample)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=2048)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="print, do not update RESULTS.md")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="lakewarden-compaction-"))
    try:
        started = time.perf_counter()
        files = generate(work / "source", args.size_mb)
        size = sum(p.stat().st_size for p in files)
        print(
            f"{len(files)} files, {size / MIB:.0f} MiB generated in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        warm_up_spark(work)
        results = {}
        results["pyarrow"] = run_pyarrow(link_copy(files, work / "pyarrow-in"), work / "pyarrow-out")
        results["pyarrow"]["sizes"] = [p.stat().st_size for p in results["pyarrow"].pop("outputs")]
        print("pyarrow", round(results["pyarrow"]["seconds"], 1), flush=True)
        results["deltalake"] = run_deltalake(files, work / "deltalake")
        print("deltalake", round(results["deltalake"]["seconds"], 1), flush=True)
        results["spark-delta"] = run_delta_process(files, work / "spark-delta")
        print("spark delta process", round(results["spark-delta"]["seconds"], 1), flush=True)
        results["spark-iceberg"] = run_iceberg_process(files, work / "spark-iceberg")
        print("spark iceberg process", round(results["spark-iceberg"]["seconds"], 1), flush=True)
        results["spark-sql-iceberg"] = run_iceberg_process(files, work / "spark-sql-iceberg", "spark-sql")
        print("spark iceberg process, spark-sql engine", round(results["spark-sql-iceberg"]["seconds"], 1))
        report(results, files, size, args)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def report(results: dict, files: list[Path], size: int, args) -> None:
    rate = {name: size / MIB / r["seconds"] for name, r in results.items()}
    labels = {
        "pyarrow": "pyarrow single-thread read + rewrite",
        "deltalake": "deltalake `optimize.compact()`",
        "spark-delta": "Delta rewrite process (Spark tasks, engine `arrow`, the default)",
        "spark-iceberg": "Iceberg rewrite process (Spark tasks, engine `arrow`, the default)",
        "spark-sql-iceberg": "Iceberg rewrite process (engine `spark-sql`: Spark's parquet reader/writer)",
    }
    lines = [
        f"Input: {len(files)} parquet files of 1-4 MB, {size / MIB:.0f} MiB in all (`--size-mb {args.size_mb}`), "
        "6 columns (ints, a double, strings, a timestamp), snappy; target 128 MiB. Spark local[2] "
        "(session started and warmed up before timing).",
        "",
        "| method | seconds | MiB/s | × pyarrow | × deltalake | output files | mean output MiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, result in results.items():
        sizes = result["sizes"]
        lines.append(
            f"| {labels[name]} | {result['seconds']:.1f} | {rate[name]:.0f} | {rate[name] / rate['pyarrow']:.2f} "
            f"| {rate[name] / rate['deltalake']:.2f} | {len(sizes)} | {sum(sizes) / max(len(sizes), 1) / MIB:.0f} |"
        )
    # The targets are for the processes as shipped (default engine), both formats.
    low = min(rate["spark-delta"], rate["spark-iceberg"])
    high = max(rate["spark-delta"], rate["spark-iceberg"])
    vs_arrow, vs_delta = rate["pyarrow"], rate["deltalake"]
    lines += [
        "",
        f"Targets (default engine, both formats): ≥ 1.0× pyarrow: {'met' if low >= vs_arrow else 'not met'} "
        f"({low / vs_arrow:.2f}-{high / vs_arrow:.2f}×); ≥ 0.5× deltalake: "
        f"{'met' if low >= 0.5 * vs_delta else 'not met'} ({low / vs_delta:.2f}-{high / vs_delta:.2f}×).",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("Compaction", text + "\n\n" + NOTES)


NOTES = """\
How the processes get their speed: one Spark job per file group, as many groups at once as Spark
has cores (threads carrying the process's job tags, so cancel and kill reach them), each group
read and written by one task, so output files hold whole groups while both cores stay busy.
(Coalescing a whole partition in one job serialises the reads instead: the issue's naive 0.25×.)
With the default engine `arrow` the task reads the group with the spec API's slice reader
(deletes applied, Iceberg columns by field id) and writes it with pyarrow, buffering 1 Mi rows per
row group. Output files are grouped by input bytes (≤ 128 MiB in); larger row groups compress
better than the 1-4 MB inputs, so outputs come out smaller than the target (about 75 MiB here).
The `spark-sql` engine (Spark's own parquet reader and row-based writer, JVM) is measured for
comparison: about 0.5× pyarrow on this machine, which is why it is opt-in.

Row-group merge (copying row groups without decoding): not implemented. pyarrow has no API that
copies encoded column chunks into a new file (`ParquetFile.read_row_group` +
`ParquetWriter.write_table` decodes and re-encodes, which is what the pyarrow baseline does), and
Spark's writer always re-encodes. A true no-decode merge needs a writer that appends raw column
chunks and rewrites the footer (parquet-mr's `ParquetFileWriter.appendFile`, not reachable through
PySpark's public API), and would keep the inputs' small row groups, which hurts readers. The
default engine already reaches deltalake's speed here, so it was left out rather than shipped
unmeasured.
"""


if __name__ == "__main__":
    sys.exit(main())
