"""Fixtures of the built-in process factories' tests: real Iceberg tables in a SQL catalog on the
test database (registered in the console), real Delta tables, and a way to run a process."""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ICEBERG_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("name", pa.string()),
        pa.field("ts", pa.timestamp("us")),
        pa.field("amount", pa.decimal128(10, 2)),
    ]
)
REGIONS = ("eu", "us")


def rows(start: int, count: int, region: str | None = None) -> pa.Table:
    """``count`` distinct rows with ids from ``start`` (every value derived from the id)."""
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": ids,
            "region": [region or REGIONS[i % 2] for i in ids],
            "name": [f"name-{i}" if i % 7 else None for i in ids],
            "ts": [dt.datetime(2024, 1, 1) + dt.timedelta(minutes=i) for i in ids],
            "amount": [Decimal(i * 101 % 100000) / 100 for i in ids],
        }
    ).cast(ICEBERG_SCHEMA)


def multiset(table: pa.Table) -> Counter:
    """Every row once per occurrence: equal multisets mean the same rows, in any order."""
    table = table.select(sorted(table.column_names))
    return Counter(tuple(row.values()) for row in table.to_pylist())


# --- Iceberg -------------------------------------------------------------------------------------


@pytest.fixture
def iceberg_catalog(warehouse, db):
    """(console Catalog row, pyiceberg catalog) of a SQL catalog on the test database."""
    from storage import services
    from storage.catalogs import iceberg_catalog as build

    row = services.catalog_create(
        name=f"lake-{uuid.uuid4().hex[:8]}", kind="iceberg_sql", properties={"warehouse": warehouse.as_uri()}
    )
    return row, build(row)


@pytest.fixture
def make_iceberg(iceberg_catalog):
    """``make_iceberg(files=..., rows_per_file=..., partitioned=...)`` -> (console Table, pyiceberg table):
    an Iceberg table of exactly ``files`` data files (one fast append), registered in the console."""
    from storage import services

    row, catalog = iceberg_catalog

    def make(
        *, files: int = 200, rows_per_file: int = 5, partitioned: bool = False, properties=None, register=True
    ):
        namespace = f"ns_{uuid.uuid4().hex[:8]}"
        catalog.create_namespace(namespace)
        table = catalog.create_table(f"{namespace}.events", schema=ICEBERG_SCHEMA)
        if partitioned:
            with table.update_spec() as update:
                update.add_identity("region")
        if properties:
            with table.transaction() as tx:
                tx.set_properties(**properties)
        if files:
            append_files(
                table, [rows(i * rows_per_file, rows_per_file, _region(i, partitioned)) for i in range(files)]
            )
        if not register:
            return None, table
        console_table = services.table_register(catalog=row, identifier=f"{namespace}.events")
        return console_table, table

    return make


def _region(i: int, partitioned: bool) -> str | None:
    return REGIONS[i % 2] if partitioned else None


def append_files(table, tables: list[pa.Table]) -> None:
    """One fast append of one parquet file per given table (written with Iceberg field ids)."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow

    schema = schema_to_pyarrow(table.schema(), include_field_ids=True)
    root = Path(table.location().removeprefix("file://")) / "data"
    data_files = []
    for part in tables:
        folder = root
        if table.metadata.spec().fields:
            folder = root / f"region={part['region'][0].as_py()}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{uuid.uuid4()}.parquet"
        pq.write_table(part.cast(schema), path)
        data_files.append(parquet_file_to_data_file(table.io, table.metadata, f"file://{path}"))
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            for data_file in data_files:
                append.append_data_file(data_file)
    table.refresh()


def iceberg_rows(table, snapshot_id=None) -> pa.Table:
    table.refresh()
    return table.scan(snapshot_id=snapshot_id).to_arrow()


def iceberg_files(table) -> set[str]:
    table.refresh()
    return {task.file.file_path for task in table.scan().plan_files()}


def staging_root(location: str) -> Path:
    return Path(location) / ".lakewarden-staging"


# --- running processes ---------------------------------------------------------------------------


@pytest.fixture
def run_now(transactional_db, spark, monkeypatch):
    """``run_now(table, action, params)`` -> the Process row after running it through the executor
    (``processes.executor.run_process``). Tests using it are transactional (the executor closes
    the connection of a test transaction); nothing is sent to Celery."""
    from processes import executor, services
    from processes.models import Process

    monkeypatch.setattr(services, "process_enqueue", lambda process: None)

    def run(table, action: str, params: dict | None = None) -> Process:
        process = services.process_create(table=table, action=action, params=params or {})
        executor.run_process(process.pk)
        process.refresh_from_db()
        return process

    return run


@pytest.fixture
def old_mtime():
    """``old_mtime(path, days)``: set a file's modification time ``days`` in the past."""

    def age(path, days: float) -> None:
        when = dt.datetime.now().timestamp() - days * 86400
        os.utime(path, (when, when))

    return age


@pytest.fixture
def external_iceberg(iceberg_catalog, external_tables, warehouse):
    """``external_iceberg(name)`` -> (console Table, pyiceberg table): a fixture table written by
    another engine, relocated into the warehouse and registered in the SQL catalog."""
    import subprocess
    import sys

    from storage import services

    row, catalog = iceberg_catalog
    tool = external_tables.parent / "tools" / "relocate_iceberg.py"

    def register(name: str):
        target = warehouse / name
        subprocess.run(
            [sys.executable, str(tool), str(external_tables / "iceberg" / name), str(target)],
            check=True,
            capture_output=True,
        )
        from storage.formats.iceberg import latest_metadata_file

        namespace = f"ns_{uuid.uuid4().hex[:8]}"
        catalog.create_namespace(namespace)
        table = catalog.register_table(f"{namespace}.{name}", latest_metadata_file(str(target)))
        return services.table_register(catalog=row, identifier=f"{namespace}.{name}"), table

    return register


# --- Delta ---------------------------------------------------------------------------------------

DELTA_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("region", pa.string()),
        pa.field("name", pa.string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("amount", pa.decimal128(10, 2)),
    ]
)


def delta_rows(start: int, count: int, region: str | None = None) -> pa.Table:
    return rows(start, count, region).cast(DELTA_SCHEMA)


@pytest.fixture
def make_delta(warehouse, db):
    """``make_delta(files=..., rows_per_file=..., partitioned=...)`` -> (console Table, path): a
    Delta table written by deltalake, one commit of one file per ``files``."""
    from deltalake import write_deltalake

    from storage import services

    def make(*, files: int = 120, rows_per_file: int = 5, partitioned: bool = False, configuration=None):
        path = warehouse / f"delta_{uuid.uuid4().hex[:8]}"
        for i in range(files):
            write_deltalake(
                str(path),
                delta_rows(i * rows_per_file, rows_per_file, _region(i, partitioned)),
                mode="append",
                partition_by=["region"] if partitioned else None,
                configuration=configuration if i == 0 else None,
            )
        return services.table_register(location=str(path)), path

    return make


def delta_read(path) -> pa.Table:
    from deltalake import DeltaTable

    from storage.spec import load_table

    DeltaTable(str(path))  # the reference library must open it too
    spec = load_table(str(path), format="delta")
    return (
        pa.Table.from_batches(list(spec.read()), schema=None) if spec.summary().file_count else pa.table({})
    )


def delta_files(path) -> set[str]:
    from deltalake import DeltaTable

    return set(DeltaTable(str(path)).file_uris())
