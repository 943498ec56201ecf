"""Iceberg maintenance on the object store: tables in SeaweedFS's Iceberg REST catalog, on S3.

Rewrite (compaction) writes its files in place under unique names and commits through the REST
catalog; a failure, a cancel or a refused commit leaves no object behind. Expiry and orphan cleanup
delete exactly the unreachable objects (the bucket is listed before and after).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from processes.maintenance.group_writer import S3A_FALLBACK
from processes.maintenance.iceberg import orphans as iceberg_orphans
from processes.maintenance.iceberg import rewrite as iceberg_rewrite
from processes.maintenance.iceberg.rewrite import IcebergRewriteProcess
from processes.models import ProcessStatus
from tests.processes.conftest import ICEBERG_SCHEMA, REGIONS, multiset, rows, run_now  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def rest_catalog(seaweedfs, transactional_db):
    """(console Catalog row, pyiceberg RestCatalog) on the test SeaweedFS."""
    from storage.catalogs import iceberg_catalog
    from storage.models import Catalog, CatalogKind

    row = Catalog.objects.create(
        name=f"rest-{uuid.uuid4().hex[:8]}",
        kind=CatalogKind.ICEBERG_REST,
        properties=seaweedfs.rest_catalog_properties(),
    )
    return row, iceberg_catalog(row)


@pytest.fixture
def other_writer(seaweedfs):
    """Another client of the same REST catalog (its own pyiceberg catalog object)."""
    from pyiceberg.catalog import load_catalog

    return load_catalog(f"other-{uuid.uuid4().hex[:6]}", type="rest", **seaweedfs.rest_catalog_properties())


@pytest.fixture
def make_rest_iceberg(rest_catalog, seaweedfs):
    """``make(files=, rows_per_file=, partitioned=)`` -> (console Table, pyiceberg table): a table
    in the REST catalog with exactly ``files`` data files on S3 (one fast append)."""
    from storage.models import Table

    row, catalog = rest_catalog

    def make(*, files: int = 30, rows_per_file: int = 5, partitioned: bool = False):
        namespace = f"ns_{uuid.uuid4().hex[:8]}"
        catalog.create_namespace(namespace)
        table = catalog.create_table(f"{namespace}.events", schema=ICEBERG_SCHEMA)
        if partitioned:
            with table.update_spec() as update:
                update.add_identity("region")
        region = (lambda i: REGIONS[i % 2]) if partitioned else (lambda i: None)
        append_s3_files(table, [rows(i * rows_per_file, rows_per_file, region(i)) for i in range(files)])
        console = Table.objects.create(
            catalog=row,
            identifier=f"{namespace}.events",
            name=f"{namespace}.events",
            format="iceberg",
            location=table.location(),
        )
        return console, table

    return make


def append_s3_files(table, parts: list[pa.Table]) -> list[str]:
    """One fast append of one parquet file per part, written through the table's file IO."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow

    schema = schema_to_pyarrow(table.schema(), include_field_ids=True)
    paths, data_files = [], []
    for part in parts:
        folder = f"{table.location()}/data"
        if table.metadata.spec().fields:
            folder += f"/region={part['region'][0].as_py()}"
        path = f"{folder}/{uuid.uuid4()}.parquet"
        with table.io.new_output(path).create(overwrite=True) as out:
            pq.write_table(part.cast(schema), out)
        data_files.append(parquet_file_to_data_file(table.io, table.metadata, path))
        paths.append(path)
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            for data_file in data_files:
                append.append_data_file(data_file)
    table.refresh()
    return paths


def objects(seaweedfs, location: str) -> dict[str, int]:
    """Every object under ``location`` (``s3://bucket/key`` -> size), from a listing."""
    fs = seaweedfs.filesystem()
    base = location.removeprefix("s3://").rstrip("/")
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return {f"s3://{i.path}": i.size for i in infos if i.type == pafs.FileType.File}


def table_rows(table) -> Counter:
    table.refresh()
    return multiset(table.scan().to_arrow())


def live_files(table) -> set[str]:
    table.refresh()
    return {task.file.file_path for task in table.scan().plan_files()}


def referenced(table) -> set[str]:
    """Everything the table's metadata names (orphan cleanup's own rule, computed by pyiceberg)."""
    table.refresh()
    metadata, io = table.metadata, table.io
    found = {table.metadata_location, *(e.metadata_file for e in metadata.metadata_log)}
    for snapshot in metadata.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            found.add(manifest.manifest_path)
            found.update(
                e.data_file.file_path for e in manifest.fetch_manifest_entry(io, discard_deleted=False)
            )
    return found


def lakewarden_objects(listing: dict[str, int]) -> set[str]:
    return {path for path in listing if path.rsplit("/", 1)[-1].startswith("lakewarden-p")}


# --- rewrite -------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["arrow", "spark-sql"])
def test_a_fragmented_rest_catalog_table_is_compacted_in_place(
    make_rest_iceberg, run_now, seaweedfs, engine, caplog
):
    console, table = make_rest_iceberg(files=40, partitioned=True)
    before_rows, before_files = table_rows(table), live_files(table)
    before_objects = objects(seaweedfs, table.location())

    process = run_now(console, "rewrite", {"engine": engine})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 40 and process.summary["files_out"] == 2
    assert process.summary["engines"] == {"arrow": 2}  # spark-sql falls back on an object store
    if engine == "spark-sql":
        assert process.summary["engine_note"] == S3A_FALLBACK
        assert sum(S3A_FALLBACK in r.getMessage() for r in caplog.records) == 1  # said once
    assert table_rows(table) == before_rows
    after_files = live_files(table)
    assert len(after_files) == 2 and not after_files & before_files
    prefix = f"lakewarden-p{process.pk}-"
    for path in after_files:  # written in place, next to the inputs, under unique names
        folder, name = path.rsplit("/", 1)
        assert name.startswith(prefix)
        assert folder.startswith(f"{table.location()}/data/region=")
    snapshot = table.current_snapshot()
    assert snapshot.snapshot_id == process.summary["snapshot_id"]
    assert snapshot.summary.additional_properties["lakewarden.process-id"] == str(process.pk)
    # Nothing but the new data files and the commit's metadata appeared; nothing was staged.
    after_objects = objects(seaweedfs, table.location())
    added = set(after_objects) - set(before_objects)
    assert added <= referenced(table)
    assert after_files <= added
    assert set(before_objects) <= set(after_objects)  # inputs stay until expiry
    assert not any(".lakewarden-staging" in p for p in after_objects)


def test_a_corrupt_input_fails_the_rewrite_and_leaves_no_object(make_rest_iceberg, run_now, seaweedfs):
    console, table = make_rest_iceberg(files=24, partitioned=True)
    victim = sorted(p for p in live_files(table) if "region=us" in p)[0]
    fs = seaweedfs.filesystem()
    with fs.open_output_stream(victim.removeprefix("s3://")) as out:
        out.write(b"PAR1 this is not a parquet file PAR1")
    snapshot = table.current_snapshot().snapshot_id
    before_objects = objects(seaweedfs, table.location())

    process = run_now(console, "rewrite")

    assert process.status == ProcessStatus.FAILED
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot
    # The healthy partition's group was written in place before the other failed: it is gone.
    assert objects(seaweedfs, table.location()) == before_objects


def test_a_cancel_before_the_commit_deletes_the_written_objects(
    make_rest_iceberg, run_now, seaweedfs, monkeypatch
):
    from processes import services
    from processes.models import Process

    console, table = make_rest_iceberg(files=20)
    snapshot, before_rows = table.current_snapshot().snapshot_id, table_rows(table)
    before_objects = objects(seaweedfs, table.location())
    seen = {}

    def cancel(self, context, plan):
        seen["written"] = lakewarden_objects(objects(seaweedfs, table.location()))
        services.process_cancel(process=Process.objects.get(pk=context.process_id))
        context.cancelled.set()  # what the heartbeat does when it sees the request

    monkeypatch.setattr(IcebergRewriteProcess, "before_commit", cancel)
    process = run_now(console, "rewrite")

    assert process.status == ProcessStatus.CANCELED
    assert seen["written"]  # the group was written in place before the cancel
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot
    assert table_rows(table) == before_rows
    assert objects(seaweedfs, table.location()) == before_objects


def test_a_commit_refused_by_the_catalog_is_retried_and_keeps_a_concurrent_append_once(
    make_rest_iceberg, run_now, seaweedfs, other_writer, monkeypatch
):
    """Another writer commits between the validation and the commit: the REST catalog refuses
    the stale commit (409), the rewrite commits again at the new head, and the manifests written
    for the refused commit are deleted."""
    console, table = make_rest_iceberg(files=30)
    identifier = console.identifier
    appended = rows(50_000, 17)
    expected = table_rows(table) + multiset(appended)
    real_validate = iceberg_rewrite.validate_rewrite
    calls = []

    def validate_then_race(tbl, plan):
        live = real_validate(tbl, plan)
        if not calls:
            append_s3_files(other_writer.load_table(identifier), [appended])
        calls.append(1)
        return live

    monkeypatch.setattr(iceberg_rewrite, "validate_rewrite", validate_then_race)
    process = run_now(console, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["attempts"] == 1  # the written files were kept, nothing re-planned
    assert process.summary["commit_attempts"] == 2
    assert table_rows(table) == expected
    table.refresh()
    parent = table.metadata.snapshot_by_id(table.current_snapshot().parent_snapshot_id)
    assert parent.summary.operation.value == "append"  # committed on top of the other writer's
    # No object of the refused commit survives: everything under the table is referenced.
    assert set(objects(seaweedfs, table.location())) <= referenced(table)


def test_a_plan_broken_twice_by_another_writer_fails_cleanly(
    make_rest_iceberg, run_now, seaweedfs, other_writer, monkeypatch
):
    console, table = make_rest_iceberg(files=20)
    identifier = console.identifier
    deleted = iter([3, 33])

    def external_delete(self, context, plan):
        other_writer.load_table(identifier).delete(f"id = {next(deleted)}")  # copy-on-write

    monkeypatch.setattr(IcebergRewriteProcess, "before_commit", external_delete)
    process = run_now(console, "rewrite")

    assert process.status == ProcessStatus.FAILED
    assert "changed during the rewrite twice" in process.failure
    table.refresh()
    assert all(
        s.summary.additional_properties.get("lakewarden.process-id") != str(process.pk)
        for s in table.metadata.snapshots
    )
    remaining = objects(seaweedfs, table.location())
    assert not lakewarden_objects(remaining)  # both attempts' files are gone
    assert set(remaining) <= referenced(table)
    ids = Counter(table.scan().to_arrow()["id"].to_pylist())
    assert 3 not in ids and 33 not in ids and set(ids.values()) == {1}


# --- expiry and orphans --------------------------------------------------------------------------


def test_expiry_deletes_exactly_the_objects_only_expired_snapshots_reach(
    make_rest_iceberg, run_now, seaweedfs
):
    console, table = make_rest_iceberg(files=6)
    for start in (1000, 2000):
        append_s3_files(table, [rows(start, 5)])
    table.overwrite(rows(9000, 12).cast(table.scan().to_arrow().schema))  # every data file replaced
    table.refresh()
    current = table.current_snapshot()
    expected_rows = table_rows(table)
    keep = set()
    keep.add(current.manifest_list)
    for manifest in current.manifests(table.io):
        keep.add(manifest.manifest_path)
        keep.update(
            e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
        )
    reached = (
        referenced(table) - {table.metadata_location} - {e.metadata_file for e in table.metadata.metadata_log}
    )
    expected_deleted = reached - keep
    before = objects(seaweedfs, table.location())
    assert expected_deleted and expected_deleted <= set(before)

    process = run_now(console, "expire-snapshots", {"max-age": 0, "min-snapshots": 1})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    table.refresh()
    assert [s.snapshot_id for s in table.metadata.snapshots] == [current.snapshot_id]
    after = objects(seaweedfs, table.location())
    assert set(before) - set(after) == expected_deleted
    assert set(after) - set(before) == {table.metadata_location}  # the expiry's own commit
    assert table_rows(table) == expected_rows


def test_orphan_cleanup_deletes_exactly_the_old_unreferenced_objects(
    make_rest_iceberg, run_now, seaweedfs, monkeypatch
):
    console, table = make_rest_iceberg(files=5)
    location = table.location()
    fs = seaweedfs.filesystem()
    orphans = {
        f"{location}/data/never-committed.parquet",
        f"{location}/data/lakewarden-p999-{uuid.uuid4().hex}-g00000-part-00000.parquet",  # killed rewrite
        f"{location}/metadata/stray-manifest.avro",
    }
    for path in orphans:
        with fs.open_output_stream(path.removeprefix("s3://")) as out:
            out.write(b"x" * 100)
    before = objects(seaweedfs, location)
    expected_rows = table_rows(table)
    # The objects were just written; the process's clock is moved two days on instead of waiting.
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
    monkeypatch.setattr(iceberg_orphans, "utcnow", lambda: later)

    guarded = run_now(console, "clean-orphan-files")  # default min-age: 3 days

    assert guarded.status == ProcessStatus.SUCCESS, guarded.failure
    assert guarded.summary["orphan_files"] == 0 and guarded.summary["too_young_to_delete"] == 3
    assert objects(seaweedfs, location) == before

    process = run_now(console, "clean-orphan-files", {"min-age": "P1D"})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert sorted(process.summary["files"]) == sorted(orphans)
    assert process.summary["deleted_files"] == 3 and process.summary["orphan_bytes"] == 300
    after = objects(seaweedfs, location)
    assert set(before) - set(after) == orphans
    assert table_rows(table) == expected_rows


# --- tables registered by location (no catalog) --------------------------------------------------


@pytest.fixture
def static_s3_iceberg(seaweedfs, s3_prefix, sql_catalog, transactional_db):
    """(console Table registered by location, pyiceberg table): an Iceberg table written on
    ``s3://lake/`` through a throwaway SQL catalog (``sql_catalog``), then known to Lakewarden by
    location only (credentials from a path-root catalog holding ``s3://lake/``)."""
    from storage.models import Catalog, CatalogKind, Table

    Catalog.objects.create(
        name=f"lake-{uuid.uuid4().hex[:8]}",
        kind=CatalogKind.PATH_ROOT,
        properties={"root": "s3://lake/", **seaweedfs.s3_properties()},
    )
    writer = sql_catalog("writer", s3_prefix, **seaweedfs.s3_properties())
    writer.create_namespace("ns")
    table = writer.create_table("ns.events", schema=ICEBERG_SCHEMA, location=f"{s3_prefix}/events")
    append_s3_files(table, [rows(i * 5, 5) for i in range(12)])
    console = Table.objects.create(name="events", format="iceberg", location=table.location())
    return console, table


def test_a_table_registered_by_location_is_not_rewritten_without_a_catalog(
    static_s3_iceberg, run_now, seaweedfs
):
    from processes.maintenance.iceberg.rewrite import IcebergRewriteFactory
    from processes.runtime import TableRuntime

    console, table = static_s3_iceberg
    before = objects(seaweedfs, table.location())
    factory = IcebergRewriteFactory()
    assert factory.trigger(TableRuntime(console, factory.properties), "rewrite") is None

    process = run_now(console, "rewrite")

    assert process.status == ProcessStatus.FAILED
    assert "without a catalog" in process.failure and "atomically" in process.failure
    assert objects(seaweedfs, table.location()) == before


def test_orphan_cleanup_of_a_table_registered_by_location_skips_staging(
    static_s3_iceberg, run_now, seaweedfs, monkeypatch
):
    console, table = static_s3_iceberg
    location = table.location()
    fs = seaweedfs.filesystem()
    orphan = f"{location}/data/lakewarden-p77-{uuid.uuid4().hex}-g00000-part-00000.parquet"
    staged = f"{location}/.lakewarden-staging/process-5/part-00000.parquet"
    for path in (orphan, staged):
        with fs.open_output_stream(path.removeprefix("s3://")) as out:
            out.write(b"y" * 64)
    before = objects(seaweedfs, location)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=4)
    monkeypatch.setattr(iceberg_orphans, "utcnow", lambda: later)

    process = run_now(console, "clean-orphan-files")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files"] == [orphan]
    assert set(before) - set(objects(seaweedfs, location)) == {orphan}
    assert multiset(table.scan().to_arrow()) == multiset(
        pa.concat_tables([rows(i * 5, 5) for i in range(12)])
    )


def test_a_rewrite_sweeps_what_an_ended_rewrite_left_and_nothing_else(make_rest_iceberg, run_now, seaweedfs):
    """A worker killed mid-rewrite cannot delete its in-place files: the next rewrite of the table
    (its retry) deletes those of processes that have ended, never those of an unknown process."""
    from processes import services
    from processes.models import Process

    console, table = make_rest_iceberg(files=20)
    killed = services.process_create(table=console, action="rewrite")
    Process.objects.filter(pk=killed.pk).update(status=ProcessStatus.FAILED)
    fs = seaweedfs.filesystem()
    left = f"{table.location()}/data/lakewarden-p{killed.pk}-{uuid.uuid4().hex}-g00000-part-00000.parquet"
    foreign = f"{table.location()}/data/lakewarden-p999999-{uuid.uuid4().hex}-g00000-part-00000.parquet"
    for path in (left, foreign):
        with fs.open_output_stream(path.removeprefix("s3://")) as out:
            out.write(b"z" * 10)
    expected_rows = table_rows(table)

    process = run_now(console, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["swept_leftover_objects"] == 1
    after = objects(seaweedfs, table.location())
    assert left not in after and foreign in after
    assert table_rows(table) == expected_rows
