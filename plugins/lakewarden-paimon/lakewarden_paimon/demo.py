"""A demo Paimon primary-key table with several snapshots, written by pypaimon, in a local
warehouse folder or under an object-store prefix."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa

ORDERS_SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        pa.field("region", pa.string(), nullable=False),
        pa.field("status", pa.string()),
        pa.field("amount", pa.float64()),
    ]
)


def write_rows(table: object, rows: list[dict], *, overwrite: bool = False) -> None:
    """Commit ``rows`` as one snapshot through pypaimon's batch writer."""
    builder = table.new_batch_write_builder()  # type: ignore[attr-defined]
    if overwrite:
        builder = builder.overwrite()
    writer, commit = builder.new_write(), builder.new_commit()
    try:
        writer.write_arrow(pa.Table.from_pylist(rows, schema=ORDERS_SCHEMA))
        commit.commit(writer.prepare_commit())
    finally:
        writer.close()
        commit.close()


def build_demo_paimon_table(
    warehouse: str, *, database: str = "demo", name: str = "paimon_orders", storage: Any = None
) -> str:
    """A partitioned primary-key table with five snapshots (inserts, updates by key, a new
    region); kept as it is when it exists. ``warehouse`` is a folder, or an ``s3://`` prefix
    reached with ``storage`` (``StoreOptions``; None: the environment's credentials). Returns the
    table's location."""
    from pypaimon import CatalogFactory, Schema

    from lakewarden_paimon._files import Files, pypaimon_options
    from storage.io import is_local

    if is_local(warehouse):
        location = os.path.join(warehouse, f"{database}.db", name)
    else:
        location = f"{warehouse.rstrip('/')}/{database}.db/{name}"
    files = Files(location, storage)
    if files.names(files.child("snapshot")):
        return location
    catalog = CatalogFactory.create({"warehouse": warehouse, **pypaimon_options(storage)})
    catalog.create_database(database, True)
    schema = Schema.from_pyarrow_schema(
        ORDERS_SCHEMA, partition_keys=["region"], primary_keys=["order_id", "region"], options={"bucket": "2"}
    )
    catalog.create_table(f"{database}.{name}", schema, True)
    table = catalog.get_table(f"{database}.{name}")
    regions = ["eu", "us"]
    write_rows(table, [_order(i, regions[i % 2], "new") for i in range(200)])
    write_rows(table, [_order(i, regions[i % 2], "paid") for i in range(0, 200, 3)])
    write_rows(table, [_order(i, regions[i % 2], "shipped") for i in range(0, 200, 5)])
    write_rows(table, [_order(i, "apac", "new") for i in range(200, 260)])
    write_rows(table, [_order(i, regions[i % 2], "returned") for i in range(0, 200, 17)])
    return location


def _order(order_id: int, region: str, status: str) -> dict:
    return {"order_id": order_id, "region": region, "status": status, "amount": round(order_id * 1.25, 2)}
