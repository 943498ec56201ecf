"""Hostile tables on the object store (SeaweedFS): expiry, orphan cleanup and vacuum leave alone
another table's objects, objects outside the allowed roots and a table nested under the prefix,
and still remove their own."""

from __future__ import annotations

import datetime as dt
import uuid

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from processes.maintenance.iceberg import orphans as iceberg_orphans
from storage.models import Table
from tests.objectstore.test_delta_maintenance_s3 import (  # noqa: F401
    make_s3_delta,
    objects,
    s3_root,
    storage_options,
)
from tests.objectstore.test_iceberg_maintenance_s3 import append_s3_files
from tests.processes.conftest import ICEBERG_SCHEMA, delta_rows, multiset, rows
from tests.processes.test_hostile_tables import add_files
from tests.processes.test_trash import run  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
OUTSIDE_TABLE = "outside the table's location"


@pytest.fixture
def s3_catalog(seaweedfs, s3_prefix, transactional_db, settings):
    """A SQL catalog (on the test database) whose warehouse is ``<prefix>/warehouse``; the prefix
    is the only object-store root, so the rest of the bucket is outside the roots."""
    from storage import services
    from storage.catalogs import iceberg_catalog

    settings.LAKEWARDEN_ALLOWED_ROOTS = [settings.LAKEWARDEN_WAREHOUSE, s3_prefix]
    row = services.catalog_create(
        name=f"s3sql-{uuid.uuid4().hex[:8]}",
        kind="iceberg_sql",
        properties={"warehouse": f"{s3_prefix}/warehouse", **seaweedfs.s3_properties()},
    )
    return row, iceberg_catalog(row)


def make_table(s3_catalog, files: int = 2):
    from storage import services

    row, catalog = s3_catalog
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.events", schema=ICEBERG_SCHEMA)
    append_s3_files(table, [rows(i * 5, 5) for i in range(files)])
    return services.table_register(catalog=row, identifier=f"{namespace}.events"), table


def put_parquet(table, location: str, start: int) -> None:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    with table.io.new_output(location).create(overwrite=True) as out:
        pq.write_table(rows(start, 5).cast(schema_to_pyarrow(table.schema(), include_field_ids=True)), out)


def live_files(table) -> list[str]:
    table.refresh()
    return sorted(task.file.file_path for task in table.scan().plan_files())


def test_expiry_on_s3_keeps_another_tables_object_and_one_outside_the_roots(s3_catalog, run, seaweedfs):
    console_a, a = make_table(s3_catalog)
    _, b = make_table(s3_catalog)
    own = live_files(a)
    b_rows = multiset(b.scan().to_arrow())
    stolen = live_files(b)[0]
    outside = f"s3://lake/elsewhere-{uuid.uuid4().hex[:8]}/x.parquet"
    put_parquet(a, outside, 500)
    add_files(a, [stolen, outside])
    a.overwrite(rows(9000, 4))

    process = run(console_a, "expire-snapshots", {"max-age": 0})

    listing = {
        **objects(seaweedfs, stolen.rsplit("/", 1)[0]),
        **objects(seaweedfs, outside.rsplit("/", 1)[0]),
    }
    assert stolen in listing and outside in listing
    assert multiset(b.scan().to_arrow()) == b_rows
    assert sorted(process.summary["kept"][OUTSIDE_TABLE]["files"]) == sorted([stolen, outside])
    remaining = objects(seaweedfs, a.location())
    assert not set(own) & set(remaining)  # its own expired objects went
    assert multiset(a.scan().to_arrow()) == multiset(rows(9000, 4))


def test_orphan_cleanup_on_s3_keeps_a_nested_table(s3_catalog, run, seaweedfs, storage_options, monkeypatch):
    console_a, a = make_table(s3_catalog)
    nested = f"{a.location()}/sub"
    write_deltalake(nested, delta_rows(0, 5), storage_options=storage_options)
    Table.objects.create(location=nested, format="delta", name="sub")
    nested_before = objects(seaweedfs, nested)
    orphan = f"{a.location()}/data/orphan.parquet"
    put_parquet(a, orphan, 100)
    a_rows = multiset(a.scan().to_arrow())
    monkeypatch.setattr(iceberg_orphans, "utcnow", lambda: dt.datetime.now(dt.UTC) + dt.timedelta(days=10))

    process = run(console_a, "clean-orphan-files", {"min-age": 3600})

    assert process.summary["orphan_files"] == 1 and process.summary["deleted_files"] == 1
    assert orphan not in objects(seaweedfs, a.location())
    assert objects(seaweedfs, nested) == nested_before
    assert multiset(DeltaTable(nested, storage_options=storage_options).to_pyarrow_table()) == multiset(
        delta_rows(0, 5)
    )
    assert multiset(a.scan().to_arrow()) == a_rows


def test_full_vacuum_on_s3_keeps_a_nested_table(make_s3_delta, run, seaweedfs, storage_options):
    console, location = make_s3_delta(
        files=2, configuration={"delta.deletedFileRetentionDuration": "interval 0 hours"}
    )
    nested = f"{location}/sub"
    write_deltalake(nested, delta_rows(500, 5), storage_options=storage_options)
    Table.objects.create(location=nested, format="delta", name="sub")
    nested_before = objects(seaweedfs, nested)
    orphan = f"{location}/never-committed.parquet"
    fs = seaweedfs.filesystem()
    with fs.open_output_stream(orphan.removeprefix("s3://")) as out:
        pq.write_table(delta_rows(0, 3), out)
    rows_before = multiset(DeltaTable(location, storage_options=storage_options).to_pyarrow_table())

    process = run(console, "vacuum", {"retention-hours": 0})

    listing = objects(seaweedfs, location)
    assert orphan not in listing
    assert objects(seaweedfs, nested) == nested_before
    assert any(reason.startswith("inside another registered table") for reason in process.summary["kept"])
    assert multiset(DeltaTable(nested, storage_options=storage_options).to_pyarrow_table()) == multiset(
        delta_rows(500, 5)
    )
    assert multiset(DeltaTable(location, storage_options=storage_options).to_pyarrow_table()) == rows_before
