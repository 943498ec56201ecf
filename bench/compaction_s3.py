"""Compaction throughput on the object store against the same data on local disk.

The same parquet files as ``bench/compaction.py`` (1-4 MB each, ``--size-mb`` in total, default
512) are compacted into 128 MiB files by the rewrite processes as shipped (engine ``arrow``):

- Delta on local disk, and Delta on S3 (SeaweedFS, the table written by location);
- Iceberg on local disk (SQLite catalog), and Iceberg on S3 behind SeaweedFS's Iceberg REST
  catalog (commit through the catalog).

A SeaweedFS server is started under the work folder (``devtools.seaweedfs``) on this machine, so
the object store shares the cores with Spark: the numbers are a floor for a remote store with its
own machines, and the ratio shows the cost of going through S3 requests (ranged reads of every
input, multipart uploads of the outputs, no rename). Throughput is input bytes per second of wall
time; the Spark session is started and warmed up before timing.

    .venv/bin/python bench/compaction_s3.py [--size-mb 512] [--workdir DIR] [--keep] [--no-write]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import write_section  # noqa: E402
from bench.compaction import (  # noqa: E402
    MIB,
    SCHEMA,
    TARGET,
    BenchContext,
    BenchRuntime,
    generate,
    run_delta_process,
    run_iceberg_process,
    warm_up_spark,
)


class StoreRuntime(BenchRuntime):
    """A bench runtime that carries the object store's credentials, as ``TableRuntime`` does."""

    def __init__(self, location: str, options, loader=None) -> None:
        super().__init__(location, loader=loader)
        self._options = options

    def store_options(self):
        return self._options


def upload(store, files: list[Path], prefix: str) -> list[tuple[str, int]]:
    """Put the files under ``prefix`` (``s3://bucket/key``); [(uri, size)]."""
    fs = store.filesystem()
    uploaded = []
    for path in files:
        uri = f"{prefix}/{path.name}"
        with fs.open_output_stream(uri.removeprefix("s3://")) as out:
            out.write(path.read_bytes())
        uploaded.append((uri, path.stat().st_size))
    return uploaded


def run_s3_delta(store, options, files: list[Path]) -> dict:
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    from processes.maintenance.delta.rewrite import DeltaRewriteProcess

    location = f"s3://lake/bench-{uuid.uuid4().hex[:8]}/delta"
    uploaded = upload(store, files, location)
    storage = options.delta_options()
    DeltaTable.create(
        location, schema=pa.schema([pa.field(f.name, f.type) for f in SCHEMA]), storage_options=storage
    )
    table = DeltaTable(location, storage_options=storage)
    now = int(time.time() * 1000)
    adds = [
        AddAction(
            uri.rsplit("/", 1)[1], size, {}, now, True, f'{{"numRecords":{pq.read_metadata(path).num_rows}}}'
        )
        for (uri, size), path in zip(uploaded, files, strict=True)
    ]
    table.create_write_transaction(adds, mode="append", schema=table.schema())
    runtime = StoreRuntime(location, options)
    process = DeltaRewriteProcess({}, runtime.config)
    start = time.perf_counter()
    summary = process.run(BenchContext(runtime, Path("/nonexistent-staging")))
    seconds = time.perf_counter() - start
    sizes = pa.table(DeltaTable(location, storage_options=storage).get_add_actions(flatten=True))
    return {"seconds": seconds, "sizes": sizes.column("size_bytes").to_pylist(), "summary": summary}


def run_s3_iceberg(store, options, files: list[Path]) -> dict:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    from processes.maintenance.iceberg.rewrite import IcebergRewriteProcess, spec_view

    catalog = load_catalog("bench", type="rest", **store.rest_catalog_properties())
    namespace = f"bench_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.events", schema=SCHEMA)
    uploaded = upload(store, files, f"{table.location()}/data")
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            for uri, _ in uploaded:
                append.append_data_file(parquet_file_to_data_file(table.io, table.metadata, uri))
    table.refresh()
    runtime = StoreRuntime(table.location(), options, loader=lambda: spec_view(table))
    process = IcebergRewriteProcess({}, runtime.config)
    start = time.perf_counter()
    summary = process.run(BenchContext(runtime, Path("/nonexistent-staging")))
    seconds = time.perf_counter() - start
    table.refresh()
    sizes = [task.file.file_size_in_bytes for task in table.scan().plan_files()]
    return {"seconds": seconds, "sizes": sizes, "summary": summary}


def main() -> int:
    from devtools.seaweedfs import SeaweedFS
    from storage.io import StoreOptions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=512)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="print, do not update RESULTS.md")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="lakewarden-compaction-s3-"))
    store = SeaweedFS(work / "seaweedfs", buckets=("lake",))
    try:
        files = generate(work / "source", args.size_mb)
        size = sum(p.stat().st_size for p in files)
        print(f"{len(files)} files, {size / MIB:.0f} MiB", flush=True)
        store.start()
        options = StoreOptions.from_properties(store.s3_properties(), environ={})
        warm_up_spark(work)
        from processes.spark.session import spark_session

        spark_session().sparkContext.parallelize([0], 2).mapPartitions(
            lambda rows: rows
        ).collect()  # Python workers
        results = {}
        results["delta-local"] = run_delta_process(files, work / "delta-local")
        print("delta local", round(results["delta-local"]["seconds"], 1), flush=True)
        results["delta-s3"] = run_s3_delta(store, options, files)
        print("delta s3", round(results["delta-s3"]["seconds"], 1), flush=True)
        results["iceberg-local"] = run_iceberg_process(files, work / "iceberg-local")
        print("iceberg local", round(results["iceberg-local"]["seconds"], 1), flush=True)
        results["iceberg-s3"] = run_s3_iceberg(store, options, files)
        print("iceberg s3 (REST catalog)", round(results["iceberg-s3"]["seconds"], 1), flush=True)
        report(results, files, size, args)
    finally:
        store.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def report(results: dict, files: list[Path], size: int, args) -> None:
    rate = {name: size / MIB / r["seconds"] for name, r in results.items()}
    labels = {
        "delta-local": "Delta rewrite, local disk",
        "delta-s3": "Delta rewrite, S3 (SeaweedFS)",
        "iceberg-local": "Iceberg rewrite, local disk (SQLite catalog)",
        "iceberg-s3": "Iceberg rewrite, S3 + REST catalog (SeaweedFS)",
    }
    lines = [
        f"Input: {len(files)} parquet files of 1-4 MB, {size / MIB:.0f} MiB in all (`--size-mb {args.size_mb}`), "
        f"snappy; target {TARGET // MIB} MiB; engine `arrow`; Spark local[2]; SeaweedFS on the same machine.",
        "",
        "| method | seconds | MiB/s | × local | output files | mean output MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, result in results.items():
        local = rate[name.replace("-s3", "-local")]
        sizes = result["sizes"]
        lines.append(
            f"| {labels[name]} | {result['seconds']:.1f} | {rate[name]:.0f} | {rate[name] / local:.2f} "
            f"| {len(sizes)} | {sum(sizes) / max(len(sizes), 1) / MIB:.0f} |"
        )
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("Compaction on the object store", text)


if __name__ == "__main__":
    sys.exit(main())
