"""Maintenance on a real object store (SeaweedFS: S3 + its Iceberg REST catalog) with real `celery
worker` and `celery beat` processes: compaction by the trigger alone, a worker killed mid-rewrite,
and an external append racing a rewrite."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from processes.models import PluginConfig, Process, ProcessStatus, ProcessTrigger
from processes.registry import configured_factories
from tests.e2e.conftest import only_factory, process_status, wait_for
from tests.processes.conftest import DELTA_SCHEMA, ICEBERG_SCHEMA, multiset, rows

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _s3_root_allowed(settings):
    """The Delta tables live under s3://lake; the worker and beat children inherit the setting."""
    settings.LAKEWARDEN_ALLOWED_ROOTS = [*settings.LAKEWARDEN_ALLOWED_ROOTS, "s3://lake"]


def _objects(seaweedfs, prefix: str) -> set[str]:
    """Every object key under an ``s3://`` prefix, listed on the store itself."""
    path = prefix.removeprefix("s3://").rstrip("/")
    infos = seaweedfs.filesystem().get_file_info(
        pafs.FileSelector(path, recursive=True, allow_not_found=True)
    )
    return {info.path for info in infos if info.type == pafs.FileType.File}


@pytest.fixture
def rest_iceberg(seaweedfs, transactional_db):
    """``make(files)`` -> (console Table, pyiceberg table): an Iceberg table in SeaweedFS's REST
    catalog, one append (one data file on S3) per file, registered through the console's services."""
    from storage import services
    from storage.catalogs import iceberg_catalog

    row = services.catalog_create(
        name=f"rest-{uuid.uuid4().hex[:8]}",
        kind="iceberg_rest",
        properties=seaweedfs.rest_catalog_properties(),
    )
    catalog = iceberg_catalog(row)

    def make(files: int, rows_per_file: int = 5):
        namespace = f"ns_{uuid.uuid4().hex[:8]}"
        catalog.create_namespace(namespace)
        table = catalog.create_table(f"{namespace}.events", schema=ICEBERG_SCHEMA)
        for i in range(files):
            table.append(rows(i * rows_per_file, rows_per_file))
        return services.table_register(catalog=row, identifier=f"{namespace}.events"), table

    return make


@pytest.fixture
def s3_delta(seaweedfs, transactional_db):
    """``make(files)`` -> (console Table, location): a Delta table on S3 written by deltalake, under
    a path-root catalog whose root carries the credentials."""
    from deltalake import write_deltalake

    from storage import services
    from storage.io import StoreOptions

    root = f"s3://lake/e2e-{uuid.uuid4().hex[:8]}"
    options = StoreOptions.from_properties(seaweedfs.s3_properties(), environ={})
    seaweedfs.filesystem().create_dir(root.removeprefix("s3://"))
    services.catalog_create(
        name=f"root-{uuid.uuid4().hex[:8]}",
        kind="path_root",
        properties={"root": root, **seaweedfs.s3_properties()},
    )

    def make(files: int, rows_per_file: int = 5):
        location = f"{root}/delta_{uuid.uuid4().hex[:8]}"
        for i in range(files):
            write_deltalake(
                location,
                rows(i * rows_per_file, rows_per_file).cast(DELTA_SCHEMA),
                mode="append",
                storage_options=options.delta_options(),
            )
        return services.table_register(location=location), location

    return make


def _delta_rows(location: str, seaweedfs) -> pa.Table:
    from deltalake import DeltaTable

    from storage.io import StoreOptions

    options = StoreOptions.from_properties(seaweedfs.s3_properties(), environ={})
    return DeltaTable(location, storage_options=options.delta_options()).to_pyarrow_table()


def _delta_files(location: str, seaweedfs) -> list[str]:
    from deltalake import DeltaTable

    from storage.io import StoreOptions

    options = StoreOptions.from_properties(seaweedfs.s3_properties(), environ={})
    return DeltaTable(location, storage_options=options.delta_options()).file_uris()


def _live_iceberg_objects(table) -> set[str]:
    table.refresh()
    return {task.file.file_path.removeprefix("s3://") for task in table.scan().plan_files()}


def test_rest_iceberg_and_s3_delta_tables_are_compacted_by_the_trigger_alone(
    celery_processes, seaweedfs, rest_iceberg, s3_delta, settings
):
    iceberg_row, iceberg = rest_iceberg(files=30)
    delta_row, delta_location = s3_delta(files=30)
    iceberg_before = multiset(iceberg.scan().to_arrow())
    delta_before = multiset(_delta_rows(delta_location, seaweedfs))
    configured_factories()
    PluginConfig.objects.update(enabled=False)
    for name in ("iceberg-rewrite", "delta-rewrite"):
        config = PluginConfig.objects.get(name=name)
        config.enabled = True
        config.properties = {**config.properties, "interval": 1}
        config.save()
    celery_processes.start_worker(name="light", queues="light", concurrency=1)
    celery_processes.start_worker(name="heavy", queues="heavy", concurrency=1)
    celery_processes.start_beat()
    celery_processes.wait_for_workers(count=2)

    finished = wait_for(
        lambda: (
            (done := list(Process.objects.filter(action="rewrite", status__in=["SUCCESS", "FAILED"])))
            and {p.table_id for p in done} >= {iceberg_row.pk, delta_row.pk}
            and done
        ),
        timeout=300,
        message="both scheduled compactions to finish\n" + celery_processes.logs(),
    )

    by_table = {p.table_id: p for p in finished}
    for table_id in (iceberg_row.pk, delta_row.pk):
        process = by_table[table_id]
        assert process.status == ProcessStatus.SUCCESS, process.failure
        assert process.trigger == ProcessTrigger.SCHEDULE
        assert process.summary["files_in"] == 30 and process.summary["files_out"] == 1
    iceberg.refresh()
    assert multiset(iceberg.scan().to_arrow()) == iceberg_before
    assert len(_live_iceberg_objects(iceberg)) == 1
    assert multiset(_delta_rows(delta_location, seaweedfs)) == delta_before
    assert len(_delta_files(delta_location, seaweedfs)) == 1


def test_a_worker_killed_mid_rewrite_on_s3_leaves_the_table_and_no_objects_behind(
    celery_processes, seaweedfs, rest_iceberg
):
    table, iceberg = rest_iceberg(files=20)
    snapshot_before = iceberg.current_snapshot().snapshot_id
    rows_before = multiset(iceberg.scan().to_arrow())
    data_prefix = f"{iceberg.location()}/data"
    objects_before = _objects(seaweedfs, data_prefix)
    only_factory("iceberg-rewrite", interval=3600)
    doomed = celery_processes.start_with_doomed_heavy_worker("before-commit=hang:600")

    process = wait_for(
        lambda: Process.objects.filter(table=table, action="rewrite").first(),
        message="the scheduler to trigger the rewrite",
    )
    wait_for(
        lambda: process_status(process.pk).progress_message == "committing",
        timeout=180,
        message="the commit step",
    )
    written = _objects(seaweedfs, data_prefix) - objects_before
    assert written, "the rewrite wrote its new file under the table's data prefix before the commit"

    celery_processes.kill_hard(doomed)
    failed = wait_for(
        lambda: (p := process_status(process.pk)).status == ProcessStatus.FAILED and p,
        timeout=30,
        message="the lost worker's process to be failed\n" + celery_processes.logs(),
    )
    assert "worker lost" in failed.failure
    iceberg.refresh()
    assert iceberg.current_snapshot().snapshot_id == snapshot_before
    assert multiset(iceberg.scan().to_arrow()) == rows_before

    celery_processes.start_worker(name="rescuer", queues="heavy", concurrency=1)
    retry = wait_for(lambda: Process.objects.filter(retry_of=failed).first(), message="an automatic retry")
    finished = wait_for(
        lambda: (p := process_status(retry.pk)).status in ("SUCCESS", "FAILED") and p,
        timeout=240,
        message="the retry to finish\n" + celery_processes.logs(),
    )
    assert finished.status == ProcessStatus.SUCCESS, finished.failure
    assert multiset(iceberg.scan().to_arrow()) == rows_before
    live = _live_iceberg_objects(iceberg)
    assert len(live) == 1
    # What the killed worker wrote is gone after the retry (or the orphan cleanup).
    wait_for(
        lambda: not (written & _objects(seaweedfs, data_prefix)),
        timeout=60,
        message="the killed worker's objects to be deleted",
    )


def test_an_external_append_during_a_rewrite_on_s3_keeps_every_row_exactly_once(
    celery_processes, seaweedfs, rest_iceberg
):
    from processes.services import process_create

    table, iceberg = rest_iceberg(files=20)
    rows_before = iceberg.scan().to_arrow()
    configured_factories()
    PluginConfig.objects.update(enabled=False)
    PluginConfig.objects.filter(name="iceberg-rewrite").update(enabled=True)
    celery_processes.start_worker(name="light", queues="light", concurrency=1)
    celery_processes.start_worker(
        name="heavy",
        queues="heavy",
        concurrency=1,
        extra_env={"LAKEWARDEN_FAILPOINTS": "after-write=sleep:8"},
    )
    celery_processes.wait_for_workers(count=2)

    rewrite = process_create(table=table, action="rewrite", params={})
    wait_for(
        lambda: process_status(rewrite.pk).status == ProcessStatus.RUNNING,
        timeout=120,
        message="the rewrite to start\n" + celery_processes.logs(),
    )
    appended = rows(100_000, 7)
    iceberg.refresh()
    iceberg.append(appended)  # through the REST catalog, while the rewrite holds its written files
    finished = wait_for(
        lambda: (p := process_status(rewrite.pk)).status in ("SUCCESS", "FAILED") and p,
        timeout=240,
        message="the rewrite to finish\n" + celery_processes.logs(),
    )

    expected = multiset(pa.concat_tables([rows_before, appended.cast(rows_before.schema)]))
    iceberg.refresh()
    assert multiset(iceberg.scan().to_arrow()) == expected, finished.failure
