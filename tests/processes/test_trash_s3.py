"""Trash on an object store (SeaweedFS): a vacuum (and an Iceberg expiry) copies what it removes under the table's
``.lakewarden-trash/<process>/`` prefix and deletes the originals; restore copies them back (old
versions read again); the purge deletes the batch's objects."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from deltalake import DeltaTable, write_deltalake

from storage.trash.models import TrashBatch, TrashState
from tests.objectstore.test_delta_maintenance_s3 import (  # noqa: F401
    make_s3_delta,
    objects,
    s3_root,
    storage_options,
)
from tests.objectstore.test_iceberg_maintenance_s3 import (  # noqa: F401
    append_s3_files,
    make_rest_iceberg,
    rest_catalog,
)
from tests.processes.conftest import ICEBERG_SCHEMA, delta_rows, multiset, rows
from tests.processes.test_trash import run, with_trash  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def version_rows(location, storage_options, version=None):
    return multiset(DeltaTable(location, version=version, storage_options=storage_options).to_pyarrow_table())


def vacuum_into_trash(run, console, location, seaweedfs):
    """Run a vacuum with trash on; (process, batch, {removed original: size})."""
    before = objects(seaweedfs, location)
    process = run(console, "vacuum", {"retention-hours": 0})
    removed = {f"{location}/{p}": before[f"{location}/{p}"] for p in process.summary["files"]}
    return process, TrashBatch.objects.get(process_id=process.pk), removed


def test_vacuum_trash_on_s3_is_restored_and_purged(
    make_s3_delta, run, seaweedfs, storage_options, operator, api_as
):
    console, location = make_s3_delta(
        files=2, configuration={"delta.deletedFileRetentionDuration": "interval 0 hours"}
    )
    write_deltalake(location, delta_rows(100, 5), mode="overwrite", storage_options=storage_options)
    with_trash(console)
    current = version_rows(location, storage_options)
    assert version_rows(location, storage_options, 1) == multiset(delta_rows(0, 10))

    process, batch, removed = vacuum_into_trash(run, console, location, seaweedfs)

    listing = objects(seaweedfs, location)
    prefix = f"{location}/.lakewarden-trash/{process.pk}"
    assert batch.location == prefix and len(removed) == 2
    assert not set(removed) & set(listing)  # the originals are gone
    for original, size in removed.items():  # copied, same bytes count, same relative path
        assert listing[original.replace(location, prefix, 1)] == size
    manifest = seaweedfs.filesystem().open_input_stream(
        f"{prefix}/.lakewarden-manifest.json".removeprefix("s3://")
    )
    entries = json.loads(manifest.read())["entries"]
    assert {e["original"]: e["size"] for e in entries} == removed
    assert {e["kind"] for e in entries} == {"data_file"}
    assert version_rows(location, storage_options) == current
    with pytest.raises(OSError):
        version_rows(location, storage_options, 1)

    answer = api_as(operator).post(f"/api/v1/processes/{process.pk}/restore/")

    assert answer.status_code == 200, answer.content
    listing = objects(seaweedfs, location)
    assert {p: listing.get(p) for p in removed} == removed
    assert not any(p.startswith(prefix) for p in listing)
    assert version_rows(location, storage_options, 1) == multiset(delta_rows(0, 10))
    assert version_rows(location, storage_options) == current

    # The restored files are still removed in the log: a second vacuum takes them again; once its
    # retention has passed, the purge deletes them for good.
    second, batch, removed = vacuum_into_trash(run, console, location, seaweedfs)
    TrashBatch.objects.filter(pk=batch.pk).update(
        expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    )
    from storage.tasks import purge_trash_task

    assert purge_trash_task.apply().get() == [second.pk]
    listing = objects(seaweedfs, location)
    assert not any(".lakewarden-trash" in p for p in listing) and not set(removed) & set(listing)
    assert TrashBatch.objects.get(pk=batch.pk).state == TrashState.PURGED
    assert api_as(operator).post(f"/api/v1/processes/{second.pk}/restore/").status_code == 409
    assert version_rows(location, storage_options) == current


@pytest.fixture
def s3_iceberg(seaweedfs, s3_prefix, transactional_db):
    """(console Table, pyiceberg table): an Iceberg table of the SQL catalog (on the test database)
    whose warehouse is a plain bucket prefix, three appends and an overwrite."""
    from storage import services
    from storage.catalogs import iceberg_catalog

    row = services.catalog_create(
        name=f"s3sql-{uuid.uuid4().hex[:8]}",
        kind="iceberg_sql",
        properties={"warehouse": f"{s3_prefix}/warehouse", **seaweedfs.s3_properties()},
    )
    catalog = iceberg_catalog(row)
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.events", schema=ICEBERG_SCHEMA)
    for start in (0, 100, 200):
        append_s3_files(table, [rows(start, 5)])
    table.overwrite(rows(9000, 4).cast(table.scan().to_arrow().schema))
    table.refresh()
    return services.table_register(catalog=row, identifier="ns.events"), table


def test_iceberg_expiry_trash_on_s3_is_restored_for_time_travel_through_old_metadata(
    s3_iceberg, run, seaweedfs, operator, api_as
):
    from pyiceberg.table import StaticTable

    console, table = s3_iceberg
    old_metadata, location = table.metadata_location, table.location()
    before = {
        s.snapshot_id: multiset(table.scan(snapshot_id=s.snapshot_id).to_arrow())
        for s in table.metadata.snapshots
    }
    current = multiset(table.scan().to_arrow())
    with_trash(console)
    listing = objects(seaweedfs, location)

    process = run(console, "expire-snapshots", {"max-age": 0})

    prefix = f"{location}/.lakewarden-trash/{process.pk}"
    moved = {p for paths in process.summary["files"].values() for p in paths}
    after = objects(seaweedfs, location)
    assert len(moved) == process.summary["trash"]["files"] > 0 and not moved & set(after)
    assert {p.replace(location, prefix, 1): listing[p] for p in moved} == {
        p: size for p, size in after.items() if p.startswith(prefix) and not p.endswith(".json")
    }
    assert multiset(table.scan().to_arrow()) == current
    expired = process.summary["expired_snapshots"]
    assert len(expired) == len(before) - 1
    with pytest.raises(OSError):
        StaticTable.from_metadata(old_metadata, properties=table.io.properties).scan(
            snapshot_id=expired[0]
        ).to_arrow()

    assert api_as(operator).post(f"/api/v1/processes/{process.pk}/restore/").status_code == 200

    after = objects(seaweedfs, location)
    assert {p: after.get(p) for p in moved} == {p: listing[p] for p in moved}
    old = StaticTable.from_metadata(old_metadata, properties=table.io.properties)
    for snapshot_id in expired:
        assert multiset(old.scan(snapshot_id=snapshot_id).to_arrow()) == before[snapshot_id]


def test_trash_in_a_table_bucket_that_refuses_it_fails_the_expiry_before_anything_changes(
    make_rest_iceberg, run, seaweedfs
):
    """SeaweedFS's table bucket (as S3 Tables) takes only the table's own data and metadata keys."""
    from processes.models import ProcessStatus

    console, table = make_rest_iceberg(files=2)
    table.overwrite(rows(9000, 4).cast(table.scan().to_arrow().schema))
    table.refresh()
    snapshots = [s.snapshot_id for s in table.metadata.snapshots]
    with_trash(console)
    listing = objects(seaweedfs, table.location())

    process = run(console, "expire-snapshots", {"max-age": 0}, status=ProcessStatus.FAILED)

    assert "refuses the trash folder" in process.failure and "trash-retention to 0" in process.failure
    assert process.attempt == 1 and not process.retries.exists()  # no retry mends it
    table.refresh()
    assert [s.snapshot_id for s in table.metadata.snapshots] == snapshots
    assert objects(seaweedfs, table.location()) == listing
    assert not TrashBatch.objects.exists()
