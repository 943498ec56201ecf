"""The ``lakewarden`` Spark data source against Spark's own parquet reader, on the same bytes.

    .venv/bin/python bench/datasource.py [--size-mb 392] [--files 40] [--runs 3] [--query scan-bound]

Builds once (cached under var/bench/datasource/) an Iceberg table of ``--files`` parquet files
adding up to about ``--size-mb`` (six columns: ids, a double, strings, a timestamp; several row
groups per file), and a copy of its metadata with position deletes removing 5% of every file's
rows (one delete file per data file, as a merge-on-read writer leaves them), and a third table
identity-partitioned by a ``region`` column that the files do not hold (a Hive-style import: each
file registered with its partition value, ``region-0`` to ``region-3``), which ``read_table`` fills
in per file. The three tables share the data files.

Each query runs side by side in one Spark session (local[2], warmed up): plain
``spark.read.parquet`` over the data files; the workbench's path (``processes.queries``'s views
over ``read_table``, whose default path is Spark's own parquet reader, with position deletes taken
out by a bitmap per file on ``_metadata.row_index`` and identity partition values a file lacks
joined in per file: ``storage.spec.spark.rowindex``);
and the same views over the Python data source itself (``spark.read.format("lakewarden")``, what
``read_table(via="source")`` reads), on the table without and with deletes and on the identity-partitioned one. Queries: a group-by with count distinct (the issue's), and a selective range
filter (row-group skipping). Every answer is checked against pyarrow's over the same rows.
Results replace the "data source" section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import write_section  # noqa: E402

MIB = 1024 * 1024
WORK = ROOT / "var" / "bench" / "datasource"
ROW_GROUP_ROWS = 128 * 1024
DELETED_EVERY = 20  # one row in 20 deleted: 5%
USERS = 200_000
REGIONS = 4  # identity partition values of the imported table

QUERIES = {
    "group-by, sums (scan-bound)": (
        "SELECT category, count(*) AS n, sum(amount) AS amount, max(ts) AS ts FROM {t} GROUP BY category"
    ),
    "group-by, count distinct": (
        "SELECT category, count(DISTINCT user_id) AS users, sum(amount) AS amount FROM {t} GROUP BY category"
    ),
    "range filter (1% of ids)": "SELECT count(*) AS n, sum(amount) AS amount FROM {t} WHERE id >= {lo} AND id < {hi}",
}


def base_chunk(rows: int, first_id: int, seed: int) -> pa.Table:
    import numpy as np

    rng = np.random.default_rng(seed)
    categories = np.array([f"category-{i:03d}" for i in range(100)], dtype=object)
    notes = np.array([os.urandom(8).hex() for _ in range(20_000)], dtype=object)
    return pa.table(
        {
            "id": pa.array(np.arange(first_id, first_id + rows, dtype=np.int64)),
            "user_id": pa.array(rng.integers(0, USERS, rows, dtype=np.int64)),
            "amount": pa.array(np.round(rng.random(rows) * 1000, 2)),
            "category": pa.array(categories[rng.integers(0, 100, rows)], pa.string()),
            "note": pa.array(notes[rng.integers(0, len(notes), rows)], pa.string()),
            "ts": pa.array(1_700_000_000_000_000 + rng.integers(0, 10**12, rows), pa.timestamp("us")),
        }
    )


def _catalog(work: Path):
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        "bench", uri=f"sqlite:///{work / 'catalog.db'}", warehouse=f"file://{work / 'warehouse'}"
    )


def build(work: Path, size_mb: int, files: int) -> tuple[str, str, str, list[str]]:
    """(plain table metadata, table-with-deletes metadata, identity-partitioned table metadata,
    data file paths), built when missing."""
    marker = work / f"built-{size_mb}-{files}-{USERS}-identity"
    if marker.exists():
        catalog = _catalog(work)
        plain = catalog.load_table("bench.plain")
        deleted = catalog.load_table("bench.deleted")
        identity = catalog.load_table("bench.identity")
        locations = (plain.metadata_location, deleted.metadata_location, identity.metadata_location)
        return (*locations, _paths(plain))
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    catalog = _catalog(work)
    catalog.create_namespace("bench")
    probe = base_chunk(200_000, 0, 0)
    buffer = pa.BufferOutputStream()
    pq.write_table(probe, buffer, compression="zstd")
    rows = int(size_mb * MIB / files / (buffer.tell() / probe.num_rows))
    props = {"write.parquet.row-group-limit": str(ROW_GROUP_ROWS), "format-version": "2"}
    tables = []
    for name in ("plain", "deleted"):
        tables.append(catalog.create_table(f"bench.{name}", schema=probe.schema, properties=props))
    plain, deleted = tables
    for index in range(files):
        plain.append(base_chunk(rows, index * rows, index + 1))
    # the same data files in the second table, then one position delete file per data file
    _add_same_files(deleted, plain)
    _add_position_deletes(deleted)
    identity = _identity_table(catalog, probe.schema, props, _paths(plain))
    marker.touch()
    return plain.metadata_location, deleted.metadata_location, identity.metadata_location, _paths(plain)


def _identity_table(catalog, schema: pa.Schema, props: dict[str, str], paths: list[str]):
    """The data files registered in a table of one more column, ``region``, identity-partitioned
    by it: file ``i`` in partition ``region-{i % REGIONS}``, the column in no file."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file
    from pyiceberg.typedef import Record

    table = catalog.create_table(
        "bench.identity", schema=schema.append(pa.field("region", pa.string())), properties=props
    )
    with table.update_spec() as update:
        update.add_identity("region")
    table = catalog.load_table("bench.identity")
    with table.transaction() as transaction:
        with transaction.update_snapshot().fast_append() as append:
            for index, path in enumerate(paths):
                data_file = parquet_file_to_data_file(table.io, table.metadata, path)
                data_file[3] = Record(f"region-{index % REGIONS}")  # DataFile.partition has no setter
                append.append_data_file(data_file)
    return catalog.load_table("bench.identity")


def _paths(table) -> list[str]:
    return sorted(task.file.file_path for task in table.scan().plan_files())


def _add_same_files(target, source) -> None:
    paths = _paths(source)
    target.add_files([p.removeprefix("file://") for p in paths])


def _add_position_deletes(table) -> None:
    import uuid

    from pyiceberg.table.snapshots import Operation, Summary
    from pyiceberg.typedef import EMPTY_DICT

    from processes.maintenance.iceberg.deletes.writing import (
        POSITION_SCHEMA,
        position_delete_file,
        position_metrics,
    )
    from storage.formats.iceberg.commit import NewDeleteFile, RewriteFiles

    class RowDelta(RewriteFiles):
        def _summary(self, snapshot_properties=EMPTY_DICT) -> Summary:
            summary = super()._summary(snapshot_properties)
            return Summary(Operation.OVERWRITE, **summary.additional_properties)

    deletes = []
    for task in table.scan().plan_files():
        data_file = task.file
        path = data_file.file_path.removeprefix("file://")
        positions = pa.array(range(0, data_file.record_count, DELETED_EVERY), pa.int64())
        rows = pa.Table.from_arrays(
            [pa.array([data_file.file_path] * len(positions)), positions], schema=POSITION_SCHEMA
        )
        out = f"{path.rsplit('/', 1)[0]}/{uuid.uuid4()}-deletes.parquet"
        pq.write_table(rows, out)
        deletes.append(
            NewDeleteFile(
                position_delete_file(
                    "file://" + out,
                    os.path.getsize(out),
                    position_metrics(rows),
                    data_file.partition,
                    data_file.spec_id,
                )
            )
        )
    transaction = table.transaction()
    RowDelta(
        transaction,
        removed=[],
        removed_dvs=set(),
        added=[],
        spec_id=table.metadata.default_spec_id,
        removed_deletes=[],
        added_deletes=deletes,
    ).commit()
    transaction.commit_transaction()


# -- measuring ---------------------------------------------------------------------------------


def expected(paths: list[str], query: str, deleted: bool, lo: int, hi: int) -> dict:
    """The query's answer by pyarrow over the same rows (deleted rows dropped), as ``answer``
    gives Spark's."""
    parts = []
    for path in paths:
        table = pq.read_table(
            path.removeprefix("file://"), columns=["id", "user_id", "amount", "category", "ts"]
        )
        if deleted:
            positions = pa.array(range(table.num_rows), pa.int64())
            keep = pc.not_equal(
                pc.subtract(positions, pc.multiply(pc.divide(positions, DELETED_EVERY), DELETED_EVERY)), 0
            )
            table = table.filter(keep)
        parts.append(table)
    table = pa.concat_tables(parts)
    if query.startswith("group-by, sums"):
        grouped = table.group_by("category").aggregate([("id", "count"), ("amount", "sum"), ("ts", "max")])
        return {r["category"]: (r["id_count"], r["amount_sum"], r["ts_max"]) for r in grouped.to_pylist()}
    if query.startswith("group-by"):
        grouped = table.group_by("category").aggregate([("user_id", "count_distinct"), ("amount", "sum")])
        return {r["category"]: (r["user_id_count_distinct"], r["amount_sum"]) for r in grouped.to_pylist()}
    picked = table.filter(pc.and_(pc.greater_equal(table["id"], lo), pc.less(table["id"], hi)))
    return {None: (picked.num_rows, pc.sum(picked["amount"]).as_py() or 0.0)}


def answer(frame, query: str) -> dict:
    rows = frame.collect()
    if query.startswith("group-by, sums"):
        return {r["category"]: (r["n"], r["amount"], r["ts"]) for r in rows}
    if query.startswith("group-by"):
        return {r["category"]: (r["users"], r["amount"]) for r in rows}
    return {None: (rows[0]["n"], rows[0]["amount"] or 0.0)}


def same(got: dict, truth: dict) -> bool:
    """Equal answers; sums of doubles equal to 1e-9 (Spark and pyarrow add in other orders)."""
    import math

    if got.keys() != truth.keys():
        return False
    for key, values in truth.items():
        for mine, theirs in zip(got[key], values, strict=True):
            if isinstance(theirs, float):
                if not math.isclose(mine, theirs, rel_tol=1e-9):
                    return False
            elif mine != theirs:
                return False
    return True


def _session():
    os.environ.setdefault("LAKEWARDEN_SPARK_MASTER", "local[2]")
    from processes.spark.session import spark_session
    from storage.spec.spark_source import register

    spark = spark_session(extra_config={"spark.driver.memory": "4g", "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _frame(spark, way: str, metadata: str, paths: list[str], query: str):
    """The query's DataFrame: over plain parquet, or as the workbench plans it through the data
    source (``sql_over_views``: only the columns the query needs are read)."""
    from storage.spec.spark.pruning import sql_over_views

    if way == "parquet":
        spark.read.parquet(*paths).createOrReplaceTempView("t")
        return spark.sql(query.format(t="t"))

    if way == "workbench":
        from storage.spec.spark_source import read_table

        return sql_over_views(
            spark, query.format(t="t"), {"t": lambda columns: read_table(spark, metadata, columns=columns)}
        )

    def read(columns):
        reader = spark.read.format("lakewarden").option("location", metadata)
        reader = reader.option("parallelism", str(spark.sparkContext.defaultParallelism))
        if columns is not None:
            reader = reader.option("columns", ",".join(columns))
        return reader.load()

    return sql_over_views(spark, query.format(t="t"), {"t": read})


def measure(spark, ways: dict[str, tuple[str, str, bool]], paths: list[str], query: str, runs: int) -> dict:
    """Median seconds per way (planning included), runs interleaved; every answer checked."""
    ids = 0
    for path in paths:
        ids += pq.ParquetFile(path.removeprefix("file://")).metadata.num_rows
    lo, hi = ids // 2, ids // 2 + ids // 100
    text = QUERIES[query].replace("{lo}", str(lo)).replace("{hi}", str(hi))
    truths = {
        deleted: expected(paths, query, deleted, lo, hi) for deleted in {d for _, _, d in ways.values()}
    }
    times: dict[str, list[float]] = {way: [] for way in ways}
    for attempt in range(runs + 1):  # the first round warms up
        for way, (kind, metadata, deleted) in ways.items():
            started = time.perf_counter()
            got = answer(_frame(spark, kind, metadata, paths, text), query)
            elapsed = time.perf_counter() - started
            if not same(got, truths[deleted]):
                raise SystemExit(f"wrong answer from {way} for {query!r}")
            if attempt:
                times[way].append(elapsed)
    return {way: statistics.median(values) for way, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=392)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--query", action="append", help="only the queries whose name contains this (repeatable)"
    )
    args = parser.parse_args()
    queries = [q for q in QUERIES if not args.query or any(part in q for part in args.query)]
    plain, deleted, identity, paths = build(WORK, args.size_mb, args.files)
    size = sum(os.path.getsize(p.removeprefix("file://")) for p in paths)
    spark = _session()
    ways = {
        "parquet": ("parquet", "", False),
        "source": ("source", plain, False),
        "workbench": ("workbench", plain, False),
        "source, deletes": ("source", deleted, True),
        "workbench, deletes": ("workbench", deleted, True),
        "source, identity": ("source", identity, False),
        "workbench, identity": ("workbench", identity, False),
    }
    rows = []
    load = [os.getloadavg()[0]]
    for query in queries:
        m = measure(spark, ways, paths, query, args.runs)
        base = m["parquet"]
        rows.append(
            f"| {query} | {base:.2f} | {m['source']:.2f} ({base / m['source']:.2f}x)"
            f" | {m['workbench']:.2f} ({base / m['workbench']:.2f}x)"
            f" | {m['source, deletes']:.2f} ({m['source, deletes'] / base:.2f}x slower)"
            f" | {m['workbench, deletes']:.2f} ({m['workbench, deletes'] / base:.2f}x slower)"
            f" | {m['source, identity']:.2f} ({base / m['source, identity']:.2f}x)"
            f" | {m['workbench, identity']:.2f} ({base / m['workbench, identity']:.2f}x) |"
        )
        print(rows[-1], flush=True)
    load.append(os.getloadavg()[0])
    write_section("data source (bench/datasource.py)", _report(size, len(paths), args.runs, rows, load))


def _report(size: int, files: int, runs: int, rows: list[str], load: list[float]) -> str:
    return "\n".join(
        [
            f"Input: {size / MIB:.0f} MiB of parquet in {files} files (zstd, row groups of {ROW_GROUP_ROWS:,}"
            " rows), an Iceberg table over them, and a second one over the same files with position"
            f" deletes removing one row in {DELETED_EVERY} of every file, and a third one over the same files"
            f" identity-partitioned by a `region` column no file holds ({REGIONS} values, a Hive-style"
            " import: `read_table` joins each file's value in). Spark local[2], session warmed up;"
            f" median of {runs} interleaved runs, planning included; every answer checked against pyarrow's."
            f" 1-minute load average {load[0]:.1f} at the start, {load[1]:.1f} at the end (2 cores shared).",
            "",
            "| query | `spark.read.parquet` s | data source s (speed vs parquet) | `read_table` s (speed)"
            " | data source with deletes s (vs parquet) | `read_table` with deletes s (vs parquet)"
            " | data source, identity partition s (speed) | `read_table`, identity partition s (speed) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            "Targets (issue 35): a scan at ≥ 0.9x of plain parquet without deletes, ≤ 1.3x slower with"
            " deletes.",
            "",
            "- `read_table` is what the workbench and every Spark job run: Spark's own parquet reader"
            " over the files the spec API lists (`storage.spec.spark.rowindex`), with position deletes"
            " and deletion vectors taken out by each file's bitmap of deleted rows read at"
            " `_metadata.row_index` (a broadcast join on `_metadata.file_size` brings the bitmap);"
            ' the Python data source (forced here with `spark.read.format("lakewarden")`) reads the'
            " rest (equality deletes, merge-on-read logs, renamed columns, object stores without s3a)",
            "- the data source's path is the workbench's: `sql_over_views` plans the query over full-width"
            " views, reads from Spark's optimized plan the columns each data-source relation needs (and"
            " the columns of filters pushed into it) and reads only those; the file reader skips row"
            " groups by their statistics (the range filter: file statistics leave 1 of the 40 files, row-group statistics 2 of its 4 row groups), applies deletes"
            " as numpy masks, and splits come in even waves over Spark's cores",
            "- the ways differ in what they run: Spark's vectorized parquet reader stays in the JVM"
            " (dictionary-encoded strings undecoded); the data source decodes in Python workers and"
            " ships Arrow batches that Spark turns into rows. The scan-bound query shows that cost;"
            " behind a heavier aggregation (count distinct) it vanishes",
            "- the machine is shared: ratios measured in one run, interleaved, vary by about ±10%",
        ]
    )


if __name__ == "__main__":
    main()
