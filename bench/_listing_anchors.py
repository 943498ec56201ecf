"""The native planners bench/listing.py measures ours against: DuckDB's Iceberg extension and
Polars' Iceberg scan planning, each in a child process of bench/listing.py (DuckDB and Polars 2
in the virtualenv this module makes for them). Only the standard library at import time: the
children of that virtualenv run without the project's dependencies.
"""

from __future__ import annotations

import hashlib
import importlib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "var" / "bench"
ANCHORS_VENV = BENCH_DIR / "anchors-venv"
ANCHORS_REQUIREMENTS = ROOT / "bench" / "requirements-anchors.txt"
Bounds = tuple[str, object, object] | None  # (column, low, high) of a half-open range


def anchors_python() -> tuple[str | None, str]:
    """The python of the anchors' virtualenv, made (once per requirements) from
    bench/requirements-anchors.txt with requirements.txt's pins as constraints (but duckdb's), or
    None and why not."""
    python = ANCHORS_VENV / "bin" / "python"
    requirements = ANCHORS_REQUIREMENTS.read_bytes() + (ROOT / "requirements.txt").read_bytes()
    stamp = ANCHORS_VENV / f".installed-{hashlib.sha256(requirements).hexdigest()[:16]}"
    if stamp.exists():
        return str(python), ""
    constraints = BENCH_DIR / "anchors-constraints.txt"
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    pins = (ROOT / "requirements.txt").read_text().splitlines()
    constraints.write_text("\n".join(line for line in pins if not line.startswith("duckdb==")) + "\n")
    print(f"installing {ANCHORS_REQUIREMENTS.name} into {ANCHORS_VENV}", flush=True)
    install = ["install", "-q", "-r", str(ANCHORS_REQUIREMENTS), "-c", str(constraints)]
    try:
        subprocess.run([sys.executable, "-m", "venv", str(ANCHORS_VENV)], check=True, capture_output=True)
        subprocess.run([str(python), "-m", "pip", *install], check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as error:
        why = error.stderr.decode() if isinstance(error.stderr, bytes) else (error.stderr or "")
        last = why.strip().splitlines()[-1:] or [str(error)]
        return None, f"could not install bench/requirements-anchors.txt: {last[0]}"
    stamp.touch()
    return str(python), ""


# -- the measured listings (in the child process) -----------------------------------------


def extension(name: str) -> str:
    """The .duckdb_extension file inside PyPI's duckdb-extension-<name> package."""
    module = importlib.import_module(f"duckdb_extension_{name}")
    package = Path(str(module.__file__)).parent
    return str(next(package.glob(f"extensions/*/{name}.duckdb_extension")))


def duckdb_sql(bounds: Bounds, metadata: str) -> str:
    """DuckDB's listing: ``iceberg_metadata`` (the manifest entries) without a filter; with one,
    the files whose column bounds (``iceberg_column_stats``) meet the range, since
    ``iceberg_scan`` prunes files only while it reads them (the files do not exist here)."""
    if bounds is None:
        return f"SELECT * FROM iceberg_metadata('{metadata}')"
    column, low, high = bounds
    cast = "TIMESTAMPTZ" if column == "ts" else "BIGINT"
    return (
        f"SELECT DISTINCT file_path FROM iceberg_column_stats('{metadata}') WHERE column_name = '{column}'"
        f" AND CAST(lower_bound AS {cast}) < '{high}' AND CAST(upper_bound AS {cast}) >= '{low}'"
    )


def setup_duckdb(bounds: Bounds, metadata: str, s3: dict):
    """Connect and load the extensions (by path: nothing is downloaded); returns the listing."""
    import duckdb

    con = duckdb.connect(
        config={
            "allow_unsigned_extensions": "true",
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
        }
    )
    for name in ("avro", "iceberg") + (("httpfs",) if s3 else ()):
        con.load_extension(extension(name))
    if s3:
        scheme, endpoint = s3["s3.endpoint"].split("://", 1)
        con.execute(
            f"CREATE SECRET store (TYPE s3, KEY_ID '{s3['s3.access-key-id']}',"
            f" SECRET '{s3['s3.secret-access-key']}', REGION '{s3['s3.region']}', ENDPOINT '{endpoint}',"
            f" URL_STYLE 'path', USE_SSL {str(scheme == 'https').lower()})"
        )
    sql = duckdb_sql(bounds, metadata)

    def listing() -> int:
        reader = con.execute(sql).to_arrow_reader(65536)
        return sum(batch.num_rows for batch in reader)

    return listing


def setup_polars(bounds: Bounds, metadata: str, s3: dict):
    """The lazy scan of the table (its metadata loaded by pyiceberg); returns the listing."""
    import polars as pl
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata, properties=s3)
    options = (
        {
            "aws_endpoint_url": s3["s3.endpoint"],
            "aws_access_key_id": s3["s3.access-key-id"],
            "aws_secret_access_key": s3["s3.secret-access-key"],
            "aws_region": s3["s3.region"],
            "aws_allow_http": "true",
        }
        if s3
        else None
    )
    frame = pl.scan_iceberg(table, storage_options=options)
    if bounds is not None:
        column, low, high = bounds
        frame = frame.filter((pl.col(column) >= low) & (pl.col(column) < high))

    def listing() -> int:
        # explain() resolves the scan (plans the files) without reading them; the plan names
        # the first file and "... N other sources".
        plan = frame.explain().splitlines()
        scan = next(line for line in plan if "SCAN [" in line)
        more = re.search(r"\.\.\. (\d+) other sources\]", scan)
        return int(more.group(1)) + 1 if more else (0 if scan.rstrip().endswith("[]") else 1)

    return listing


NOTES = [
    "DuckDB: 1.5.5 with PyPI's `duckdb-extension-iceberg` 1.5.5 (and `-avro`, loaded by path from the"
    " packages) in var/bench/anchors-venv (bench/requirements-anchors.txt): the extension packages on"
    " PyPI are built for DuckDB 1.5.5 only, a 1.5.5 extension does not load into requirements.txt's"
    " duckdb 2.0.1, and extensions.duckdb.org is not reachable here. It reads the metadata JSON"
    " directly, inside the timed query (it has no separate load step). full:"
    " `SELECT * FROM iceberg_metadata('<metadata.json>')` (the manifest entries), streamed as Arrow batches",
    "DuckDB, filtered cases (†): not scan planning. DuckDB cannot plan the files of a predicate without"
    " reading data files: `iceberg_scan(...) WHERE ...` prunes manifests and entries lazily while it"
    " scans and opens the first surviving data file (they do not exist here: IO Error), and its"
    " EXPLAIN lists no files. What it offers is the metadata listing of per-file bounds, filtered in SQL:"
    " `SELECT DISTINCT file_path FROM iceberg_column_stats(...) WHERE column_name = 'ts'|'id' AND"
    " CAST(lower_bound AS …) < high AND CAST(upper_bound AS …) >= low`, which is what is timed",
    "Polars: `pl.scan_iceberg(StaticTable)[.filter(predicate)].explain()`: resolving the scan is where"
    " Polars plans the files (without reading them; the file count is read off the plan). Polars 1.44.2"
    " (.venv, pinned by plugins/lakewarden-paimon for pypaimon) plans with pyiceberg's"
    " `DataScan.plan_files()` inside `IcebergScanResolver`, then gathers partition values and"
    " statistics per file; Polars 2.1.0 (anchors' virtualenv) plans with its Rust plugin"
    " polars-iceberg 0.1.0 (`POLARS_ICEBERG_PLANNER=plugin`: no silent fallback to pyiceberg)",
]
