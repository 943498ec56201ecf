"""Cached query results: an aggregation over ~1 GB of parquet, first run vs cached re-run, per backend.

Target: the cached re-run at least 10x faster than the first run on the filesystem backend.
The table is a Delta table written once under var/bench/cache (reused when present); Spark runs
local[2]. Each backend gets a fresh result (its first run computes, writes and reads back).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH_DATABASE, django_on_bench_database, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent / "var" / "bench" / "cache"
SQL = (
    "select region, kind, count(*) as n, sum(amount) as total, avg(score) as mean_score, "
    "count(distinct customer) as customers from events group by region, kind order by region, kind"
)


def build_table(path: Path, size_mb: int) -> int:
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import write_deltalake

    if (path / "_delta_log").exists():
        return sum(f.stat().st_size for f in path.glob("*.parquet"))

    def choice(values: list[str], n: int) -> pa.Array:
        index = pc.cast(pc.floor(pc.multiply(pc.random(n), len(values))), pa.int32())
        return pc.take(pa.array(values), index)

    def integers(limit: int, n: int) -> pa.Array:
        return pc.cast(pc.floor(pc.multiply(pc.random(n), limit)), pa.int64())

    rows_per_batch = 2_000_000
    written = batch = 0
    while written < size_mb * 1024 * 1024:
        start = batch * rows_per_batch
        table = pa.table(
            {
                "id": pa.array(range(start, start + rows_per_batch), pa.int64()),
                "region": choice(["eu", "us", "apac", "latam"], rows_per_batch),
                "kind": choice(["view", "click", "purchase", "refund", "error"], rows_per_batch),
                "amount": pc.multiply(pc.random(rows_per_batch), 500),
                "score": pc.random(rows_per_batch),
                "customer": integers(5_000_000, rows_per_batch),
                "payload": pc.cast(integers(1 << 53, rows_per_batch), pa.string()),
            }
        )
        write_deltalake(str(path), table, mode="append")
        written = sum(f.stat().st_size for f in path.glob("*.parquet"))
        batch += 1
    return written


def prepare(root: Path, size_mb: int) -> tuple[Path, int]:
    """A local[2] Spark bench over ``root``: its Delta table ``root/events`` of about ``size_mb``
    (reused when present) and Django on the bench database; (table path, parquet bytes)."""
    import os

    os.environ.setdefault("LAKEWARDEN_SPARK_MASTER", "local[2]")
    os.environ["LAKEWARDEN_ALLOWED_ROOTS"] = str(root)
    os.environ["LAKEWARDEN_WAREHOUSE"] = str(root)
    root.mkdir(parents=True, exist_ok=True)
    table_path = root / "events"
    size = build_table(table_path, size_mb)
    django_on_bench_database()
    return table_path, size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--reruns", type=int, default=3)
    args = parser.parse_args()

    table_path, size = prepare(ROOT, args.size_mb)

    from processes import queries
    from processes.models import Query
    from processes.spark.session import spark_session
    from storage import services
    from storage import services as console_services
    from storage.models import CachedResult, StorageBackend, Table
    from storage.results.plugin import StorageDescriptor

    Query.objects.all().delete()
    for result in CachedResult.objects.exclude(state="CLEANED").select_related("backend"):
        services.cached_result_drop(result=result)
    CachedResult.objects.all().delete()
    StorageBackend.objects.all().delete()
    Table.objects.filter(location=str(table_path)).delete()
    console_services.table_register(location=str(table_path))
    spark = spark_session(extra_config={"spark.driver.memory": "4g"})

    scratch_db = BENCH_DATABASE.rsplit("/", 1)[0] + "/lakewarden_bench"
    backends = {
        "filesystem": StorageDescriptor(type="filesystem", config={"root": str(ROOT / "results")}),
        "iceberg": StorageDescriptor(
            type="iceberg",
            config={
                "type": "sql",
                "uri": scratch_db.replace("postgresql://", "postgresql+psycopg2://"),
                "warehouse": (ROOT / "iceberg-results").as_uri(),
                "namespace": "bench_cache",
            },
        ),
        "postgres": StorageDescriptor(type="postgres", config={"dsn": scratch_db, "schema": "bench_cache"}),
    }
    lines = [
        f"| backend | first run (compute + store) | cached re-run (median of {args.reruns}) | speed-up | target |",
        "|---|---|---|---|---|",
    ]
    for name, descriptor in backends.items():
        backend = services.storage_backend_register(
            name=f"bench-{name}-{uuid.uuid4().hex[:4]}", descriptor=descriptor
        )

        def run(sql: str, backend=backend) -> tuple[float, bool]:
            query = queries.query_submit(sql=sql, backend=backend)
            started = time.perf_counter()
            queries.query_run(query_id=query.pk, spark=spark)
            elapsed = time.perf_counter() - started
            query.refresh_from_db()
            assert query.status == "SUCCESS", query.error
            return elapsed, query.served_from_cache

        sql = SQL + f" -- {name}"  # a distinct text per backend: each gets its own first run
        first, served = run(sql)
        assert not served
        reruns = []
        for _ in range(args.reruns):
            elapsed, served = run(sql)
            assert served
            reruns.append(elapsed)
        rerun = statistics.median(reruns)
        ratio = first / rerun
        target = ("≥ 10×: met" if ratio >= 10 else "≥ 10×: NOT met") if name == "filesystem" else "—"
        lines.append(f"| {name} | {first:.2f} s | {rerun:.3f} s | {ratio:.1f}× | {target} |")
        print(lines[-1], flush=True)
        services.storage_backend_delete(backend=backend)
    body = (
        f"Aggregation (group by 2 columns, count distinct, sum, avg) over a Delta table of {size / 2**20:,.0f} MiB "
        f"of parquet, Spark local[2]; the query runs through the cache manager as a worker runs it.\n\n"
        + "\n".join(lines)
        + "\n\nThe first run includes reading the table through the spec API, the aggregation, the creation hook and "
        "writing the result; a cached re-run plans the query (fingerprint), checks the stored result exists and reads it."
    )
    write_section("Cached results (bench/cache.py)", body)
    shutil.rmtree(ROOT / "results", ignore_errors=True)


if __name__ == "__main__":
    main()
