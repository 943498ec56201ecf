"""Small real tables for console tests, written by the formats' own libraries."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa


def write_delta_table(path: Path, *, commits: int = 3, rows_per_commit: int = 10, partition_by=None) -> Path:
    from deltalake import write_deltalake

    for commit in range(commits):
        start = commit * rows_per_commit
        write_deltalake(
            str(path),
            pa.table(
                {
                    "id": pa.array(range(start, start + rows_per_commit), pa.int64()),
                    "region": pa.array(["eu" if i % 2 else "us" for i in range(rows_per_commit)]),
                    "ts": pa.array(
                        [
                            dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(hours=start + i)
                            for i in range(rows_per_commit)
                        ],
                        pa.timestamp("us", "UTC"),
                    ),
                }
            ),
            mode="append",
            partition_by=partition_by,
        )
    return path


def write_iceberg_table(catalog, identifier: str, *, commits: int = 3, rows_per_commit: int = 10):
    """An Iceberg table in ``catalog`` (a pyiceberg catalog) built from ``commits`` appends."""
    namespace = identifier.rsplit(".", 1)[0]
    catalog.create_namespace_if_not_exists(namespace)
    batches = [
        pa.table(
            {
                "id": pa.array(range(c * rows_per_commit, (c + 1) * rows_per_commit), pa.int64()),
                "name": pa.array([f"row-{i}" for i in range(rows_per_commit)]),
            }
        )
        for c in range(commits)
    ]
    table = catalog.create_table(identifier, schema=batches[0].schema)
    for batch in batches:
        table.append(batch)
    return table
