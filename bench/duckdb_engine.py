"""The DuckDB query engine against the Spark engine: one workbench query, side by side in one run.

For each engine: the first run without caching (plan, read the table through the spec API, compute),
the first run with caching (compute + store the result), and the cached re-run (median of
``--reruns``). The table is a Delta table written by delta-rs under var/bench/duckdb (reused when
present), below the default auto limit (``LAKEWARDEN_DUCKDB_MAX_SCAN_BYTES``), so ``engine=auto``
would pick DuckDB for it. Spark runs local[2].
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cache import prepare  # noqa: E402
from common import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent / "var" / "bench" / "duckdb"
SQL = (
    "select region, kind, count(*) as n, sum(amount) as total, avg(score) as mean_score, "
    "count(distinct customer) as customers from events group by region, kind order by region, kind"
)


def _runner(spark, backend):
    from processes import queries

    def run(sql: str, engine: str, cache: bool) -> tuple[float, bool, list]:
        query = queries.query_submit(sql=sql, backend=backend, cache=cache, engine=engine)
        started = time.perf_counter()
        queries.query_run(query_id=query.pk, spark=spark)
        elapsed = time.perf_counter() - started
        query.refresh_from_db()
        assert query.status == "SUCCESS", query.error
        assert query.engine_used == engine, (query.engine_used, query.engine_reason)
        return elapsed, query.served_from_cache, query.rows

    return run


def _measure(run, engine: str, reruns: int) -> tuple[float, float, float, list]:
    sql = SQL + f" -- {engine} {uuid.uuid4().hex[:6]}"  # a fresh fingerprint: the first run computes
    uncached, _, rows = run(sql, engine, False)
    first, served, cached_rows = run(sql, engine, True)
    assert not served and _same(cached_rows, rows)
    times = []
    for _ in range(reruns):
        elapsed, served, again = run(sql, engine, True)
        assert served and _same(again, rows)
        times.append(elapsed)
    return uncached, first, statistics.median(times), rows


def _same(left: list, right: list) -> bool:
    """Equal rows, floating-point sums and means to 1e-9 relative (a parallel sum of doubles is
    added in a different order from run to run, on either engine)."""

    def close(a, b) -> bool:
        if isinstance(a, float) and isinstance(b, float):
            return math.isclose(a, b, rel_tol=1e-9)
        return a == b

    return len(left) == len(right) and all(
        len(x) == len(y) and all(close(a, b) for a, b in zip(x, y, strict=True))
        for x, y in zip(left, right, strict=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=128)
    parser.add_argument("--reruns", type=int, default=3)
    args = parser.parse_args()

    table_path, size = prepare(ROOT, args.size_mb)

    from processes.spark.session import spark_session
    from storage import services
    from storage.models import Table
    from storage.results.plugin import StorageDescriptor

    Table.objects.filter(location=str(table_path)).delete()
    services.table_register(location=str(table_path))
    spark = spark_session(extra_config={"spark.driver.memory": "4g"})
    backend = services.storage_backend_register(
        name=f"bench-duckdb-{uuid.uuid4().hex[:4]}",
        descriptor=StorageDescriptor(type="filesystem", config={"root": str(ROOT / "results")}),
    )
    run = _runner(spark, backend)
    run(SQL + " -- warm-up", "spark", False)  # the Spark session's first job pays its start-up
    try:
        spark_times = _measure(run, "spark", args.reruns)
        duck_times = _measure(run, "duckdb", args.reruns)
    finally:
        services.storage_backend_delete(backend=backend)
        shutil.rmtree(ROOT / "results", ignore_errors=True)
    assert _same(spark_times[3], duck_times[3]), "the engines disagree on the rows"
    lines = [
        "| run | Spark engine | DuckDB engine | Spark / DuckDB |",
        "|---|---:|---:|---:|",
    ]
    labels = (
        "first run, no cache",
        "first run, cached (compute + store)",
        f"cached re-run (median of {args.reruns})",
    )
    for label, spark_s, duck_s in zip(labels, spark_times[:3], duck_times[:3], strict=True):
        lines.append(f"| {label} | {spark_s:.2f} s | {duck_s:.2f} s | {spark_s / duck_s:.1f}× |")
        print(lines[-1], flush=True)
    body = (
        f"Aggregation (group by 2 columns, count distinct, sum, avg) over a Delta table of {size / 2**20:,.0f} MiB "
        "of parquet, through the cache manager as a worker runs it (filesystem result storage); Spark local[2] "
        "(warm session), DuckDB in-process fed with the spec API's planned splits as Arrow. Both engines "
        "returned the same rows.\n\n"
        + "\n".join(lines)
        + "\n\nA cached re-run is served from the stored result the same way for both engines (read through the "
        "storage), so its ratio is about 1; a cached first run also writes the result through Spark."
    )
    write_section("DuckDB engine vs Spark engine (bench/duckdb_engine.py)", body)


if __name__ == "__main__":
    main()
