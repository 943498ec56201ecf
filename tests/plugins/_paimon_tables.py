"""Paimon tables written by pypaimon for the plugin's tests, and the plugin put on the path.

Not a test module: ``test_paimon*.py`` import it. The plugin package is imported from
``plugins/lakewarden-paimon`` when it is not installed, so the tests run in a checkout too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("pypaimon", reason="pypaimon is not installed (scripts/setup.sh installs it)")

PLUGIN_ROOT = Path(__file__).resolve().parents[2] / "plugins" / "lakewarden-paimon"
try:
    import lakewarden_paimon  # noqa: F401
except ImportError:
    sys.path.insert(0, str(PLUGIN_ROOT))

from pypaimon import CatalogFactory, Schema  # noqa: E402

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string(), nullable=False),
        pa.field("v", pa.string()),
    ]
)


def write(table, rows: list[dict], *, overwrite: bool = False, partition: dict | None = None) -> None:
    builder = table.new_batch_write_builder()
    if overwrite:
        builder = builder.overwrite(partition)
    writer, commit = builder.new_write(), builder.new_commit()
    writer.write_arrow(pa.Table.from_pylist(rows, schema=SCHEMA))
    commit.commit(writer.prepare_commit())
    writer.close()
    commit.close()


def rows(ids, region_of, value: str) -> list[dict]:
    return [{"id": i, "region": region_of(i), "v": f"{value}{i}"} for i in ids]


def _region(i: int) -> str:
    return "eu" if i % 2 else "us"


def create(warehouse: str, name: str, *, primary_key: bool):
    catalog = CatalogFactory.create({"warehouse": warehouse})
    catalog.create_database("db", True)
    options = {"bucket": "2"} if primary_key else {}
    keys = ["id", "region"] if primary_key else []
    schema = Schema.from_pyarrow_schema(SCHEMA, partition_keys=["region"], primary_keys=keys, options=options)
    catalog.create_table(f"db.{name}", schema, False)
    return catalog.get_table(f"db.{name}"), f"{warehouse}/db.db/{name}"


def write_primary_key_table(warehouse: str) -> str:
    """Six snapshots: inserts, updates by key (twice), a new region, an overwrite of one
    partition, more updates."""
    table, location = create(warehouse, "pk", primary_key=True)
    write(table, rows(range(30), _region, "a"))
    write(table, rows(range(0, 30, 3), _region, "b"))
    write(table, rows(range(30, 40), lambda i: "apac", "c"))
    write(table, rows(range(0, 30, 4), _region, "d"))
    write(table, rows(range(100, 106), lambda i: "apac", "e"), overwrite=True, partition={"region": "apac"})
    write(table, rows(range(1, 30, 5), _region, "f"))
    return location


def write_append_table(warehouse: str) -> str:
    """Five snapshots: three appends, an overwrite of the whole table, an append."""
    table, location = create(warehouse, "ap", primary_key=False)
    write(table, rows(range(10), _region, "a"))
    write(table, rows(range(10, 20), _region, "b"))
    write(table, rows(range(20, 25), lambda i: "apac", "c"))
    write(table, rows(range(50, 60), _region, "d"), overwrite=True)
    write(table, rows(range(60, 64), _region, "e"))
    return location


def pypaimon_table(location: str, **options):
    from pypaimon.table.file_store_table import FileStoreTable

    table = FileStoreTable.from_path(location)
    return table.copy({k: str(v) for k, v in options.items()}) if options else table


def pypaimon_read(location: str, **options) -> pa.Table:
    """The rows pypaimon reads (at a snapshot with ``scan.snapshot-id``, a tag with ``scan.tag-name``)."""
    builder = pypaimon_table(location, **options).new_read_builder()
    return builder.new_read().to_arrow(builder.new_scan().plan().splits())


def pypaimon_files(location: str, **options) -> set[str]:
    builder = pypaimon_table(location, **options).new_read_builder()
    paths = set()
    for split in builder.new_scan().plan().splits():
        paths.update(p[len("file:") :] if p.startswith("file:") else p for p in split.file_paths)
    return paths


def sorted_rows(table: pa.Table | None) -> list[dict]:
    if table is None:
        return []
    return sorted(table.select(SCHEMA.names).to_pylist(), key=lambda r: (r["region"], r["id"]))
