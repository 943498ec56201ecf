"""The demo lakehouse on an object store (``LAKEWARDEN_DEMO_STORAGE=s3``), built against the test
run's SeaweedFS: Iceberg tables in its REST catalog, Delta, Lance and Paimon tables under an
``s3://`` prefix, a result storage on S3, all registered through the services. Values are read
back from the store and the catalog themselves, not from Lakewarden's rows."""

from __future__ import annotations

import datetime as dt
import uuid

import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest

from devtools.demo import (
    EPOCH,
    LAKE_CATALOG,
    LEFT_FOR_PREVIEW,
    REST_CATALOG,
    RESULT_STORAGE,
    demo_lakehouse_build_s3,
)
from processes.maintenance.planning import REWRITE_DEFAULTS
from storage.io import StoreOptions
from storage.models import Catalog, CatalogKind, StorageBackend, Table

SCALE = 8

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(seaweedfs, settings, warehouse):
    """The demo built once in fresh places of the shared store: (result, where)."""
    tag = uuid.uuid4().hex[:8]
    where = {
        "lake_root": f"s3://lake/demo-{tag}",
        "results_root": f"s3://results/demo-{tag}",
        "namespace": f"demo_{tag}",
    }
    # as the Makefile allows them (the REST catalog's tables live in its table bucket)
    lakehouse = f"s3://lakehouse/{where['namespace']}"
    settings.LAKEWARDEN_ALLOWED_ROOTS = [warehouse, where["lake_root"], lakehouse, where["results_root"]]
    lines: list[str] = []
    result = demo_lakehouse_build_s3(
        s3_properties=seaweedfs.s3_properties(),
        rest_properties=seaweedfs.rest_catalog_properties(),
        scale=SCALE,
        report=lines.append,
        **where,
    )
    return result, where, lines


def _rest_catalog(seaweedfs):
    from pyiceberg.catalog import load_catalog

    return load_catalog("check", type="rest", **seaweedfs.rest_catalog_properties())


def _delta(seaweedfs, location: str):
    from deltalake import DeltaTable

    options = StoreOptions.from_properties(seaweedfs.s3_properties(), environ={})
    return DeltaTable(location, storage_options=options.delta_options())


def test_the_demo_builds_iceberg_tables_in_the_rest_catalog_with_their_rows(seaweedfs, demo):
    result, where, lines = demo
    namespace = where["namespace"]
    catalog = _rest_catalog(seaweedfs)

    assert sorted(".".join(t) for t in catalog.list_tables(namespace)) == [
        f"{namespace}.customers",
        f"{namespace}.events",
        f"{namespace}.orders",
    ]
    customers = catalog.load_table(f"{namespace}.customers")
    assert customers.location().startswith("s3://lakehouse/")
    rows = customers.scan().to_arrow().sort_by("id")
    assert rows.num_rows == 500
    assert rows.column("id").to_pylist() == list(range(1, 501))
    assert rows.column("name").to_pylist() == [f"customer-{i}" for i in range(1, 501)]

    events = catalog.load_table(f"{namespace}.events").scan().to_arrow()
    ids = events.column("event_id").to_pylist()
    assert 0 < len(ids) < SCALE * 25 and len(set(ids)) == len(ids) and max(ids) <= SCALE * 25
    assert set(events.column("kind").to_pylist()) <= {"click", "view", "purchase"}  # errors deleted
    orders = catalog.load_table(f"{namespace}.orders")
    order_rows = orders.scan().to_arrow()
    assert "cancelled" not in set(order_rows.column("status").to_pylist())
    assert pc.sum(pc.equal(order_rows.column("region"), "eu")).as_py() > 0
    assert len(orders.snapshots()) == SCALE + 2 + 1  # appends, the overwrite (two), the delete
    assert f"iceberg {namespace}.orders: {SCALE} appends, an overwrite and a delete" in lines


def test_the_demo_writes_delta_tables_on_s3_with_their_rows(seaweedfs, demo):
    result, where, _ = demo
    readings = _delta(seaweedfs, f"{where['lake_root']}/sensor_readings")
    table = readings.to_pyarrow_table().sort_by("reading_ts")
    assert table.num_rows == SCALE * 30
    assert table.column("reading_ts").to_pylist() == [
        EPOCH + dt.timedelta(minutes=i) for i in range(SCALE * 30)
    ]
    assert readings.version() == SCALE - 1
    # as fragmented as the local demo: one small file per commit, enough for the compaction trigger
    assert len(readings.file_uris()) == SCALE >= REWRITE_DEFAULTS["min-input-files"]

    sales = _delta(seaweedfs, f"{where['lake_root']}/sales").to_pyarrow_table()
    assert sales.num_rows > 0 and "cancelled" not in set(sales.column("status").to_pylist())
    assert set(sales.column("country").to_pylist()) <= {"DE", "FR", "US"}

    bucket, key = where["lake_root"].removeprefix("s3://").split("/", 1)
    logs = seaweedfs.filesystem().get_file_info(pafs.FileSelector(f"{bucket}/{key}/sales/_delta_log"))
    assert any(info.path.endswith("00000000000000000000.json") for info in logs)
    assert sorted(result["built"]) == sorted(
        [f"{where['namespace']}.{name}" for name in ("orders", "events", "customers")]
        + [f"{where['lake_root']}/sales", f"{where['lake_root']}/sensor_readings"]
    )


def test_the_demo_registers_its_catalogs_tables_and_result_storage(seaweedfs, demo):
    result, where, _ = demo
    assert result["failed"] == {} or all(
        not key.startswith((where["namespace"], where["lake_root"])) for key in result["failed"]
    ), result["failed"]
    rest = Catalog.objects.get(name=REST_CATALOG)
    lake = Catalog.objects.get(name=LAKE_CATALOG)
    assert rest.kind == CatalogKind.ICEBERG_REST and rest.properties["uri"] == seaweedfs.rest_uri
    assert rest.properties["warehouse"] == "s3://lakehouse/"
    assert lake.kind == CatalogKind.PATH_ROOT and lake.properties["root"] == where["lake_root"]
    assert lake.properties["s3.endpoint"] == seaweedfs.endpoint

    iceberg_rows = Table.objects.filter(catalog=rest, identifier__startswith=where["namespace"] + ".")
    assert sorted(iceberg_rows.values_list("identifier", flat=True)) == [
        f"{where['namespace']}.{name}" for name in ("customers", "events", "orders")
    ]
    assert iceberg_rows.get(identifier=f"{where['namespace']}.customers").record_count == 500
    # a path root's tables are registered by location; the root's row lends them its credentials
    lake_rows = Table.objects.filter(location__startswith=where["lake_root"] + "/").order_by("location")
    assert list(lake_rows.values_list("location", "format")) == [
        (f"{where['lake_root']}/clickstream", "lance"),
        (f"{where['lake_root']}/paimon/demo.db/paimon_orders", "paimon"),
        (f"{where['lake_root']}/sales", "delta"),
        (f"{where['lake_root']}/sensor_readings", "delta"),
    ]
    delta_rows = lake_rows.filter(format="delta")
    readings = delta_rows.get(location=f"{where['lake_root']}/sensor_readings")
    assert (readings.record_count, readings.file_count) == (SCALE * 30, SCALE)

    storage = StorageBackend.objects.get(name=RESULT_STORAGE)
    assert storage.is_default and storage.config["root"] == where["results_root"]


def test_the_demo_builds_lance_and_paimon_tables_on_s3_readable_through_lakewarden(seaweedfs, demo):
    """The same lakehouse as the local demo: the plugins' formats too, on the store, registered
    by the lake's path root and read through the spec API with the root's credentials."""
    import lance
    from lakewarden_lance._dataset import storage_options
    from lakewarden_paimon import PaimonAdapter

    from storage.services import table_open

    result, where, lines = demo
    options = StoreOptions.from_properties(seaweedfs.s3_properties(), environ={})
    lance_location = f"{where['lake_root']}/clickstream"
    dataset = lance.dataset(lance_location, storage_options=storage_options(lance_location, options))
    assert dataset.count_rows() > 0 and len(dataset.get_fragments()) == 4  # max(SCALE // 3, 4) appends
    lance_row = Table.objects.get(location=lance_location)
    assert (lance_row.format, lance_row.record_count) == ("lance", dataset.count_rows())
    lance_rows = pa_table(table_open(lance_row).read())
    assert sorted(lance_rows.column("id").to_pylist()) == sorted(dataset.to_table().column("id").to_pylist())

    paimon_location = f"{where['lake_root']}/paimon/demo.db/paimon_orders"
    assert PaimonAdapter.detect(paimon_location, options)
    paimon_row = Table.objects.get(location=paimon_location)
    assert paimon_row.format == "paimon" and paimon_row.instant_count == 5
    orders = pa_table(table_open(paimon_row).read())
    assert orders.num_rows == 260  # 200 orders, then 60 in a new region; updates merge by key
    assert sorted(orders.column("order_id").to_pylist()) == list(range(260))
    assert any(line.startswith("lance clickstream:") for line in lines)
    assert any(line.startswith("paimon paimon_orders:") for line in lines)


def pa_table(batches):
    import pyarrow as pa

    return pa.Table.from_batches(list(batches))


def test_one_demo_table_is_left_to_operators_with_work_to_preview(seaweedfs, demo):
    """The scheduler maintains the demo within a minute; the table left for preview is never
    picked, and its Preview still shows a compaction to do after the scheduler ran."""
    from processes.models import Process
    from processes.scheduler import schedule_tick
    from processes.services import process_preview

    result, where, lines = demo
    kept = Table.objects.get(identifier=f"{where['namespace']}.{LEFT_FOR_PREVIEW}")
    assert kept.properties == {"manual-actions": "*"}
    assert f"{where['namespace']}.{LEFT_FOR_PREVIEW}: left to operators" in "\n".join(lines)

    report = schedule_tick()

    assert not report.errors.keys() & {f"{kept.pk}:rewrite"}
    picked = set(Process.objects.filter(pk__in=report.triggered).values_list("table_id", flat=True))
    assert kept.pk not in picked and picked  # the other demo tables are maintained
    preview = process_preview(table=kept, action="rewrite")
    assert preview["available"] and preview["files_in"] >= SCALE - 1, preview


def test_building_the_demo_again_changes_nothing(seaweedfs, demo):
    result, where, _ = demo
    again = demo_lakehouse_build_s3(
        s3_properties=seaweedfs.s3_properties(),
        rest_properties=seaweedfs.rest_catalog_properties(),
        scale=SCALE,
        **where,
    )
    assert again["built"] == []
    assert not [key for key in again["registered"] if where["namespace"] in key or where["lake_root"] in key]
    assert _delta(seaweedfs, f"{where['lake_root']}/sensor_readings").version() == SCALE - 1


# -- the demo's server settings (no server started) -------------------------------------------


def test_a_busy_fixed_port_is_named_before_anything_starts(tmp_path):
    import random
    import socket

    from devtools.seaweedfs import PortsBusy, demo_store

    with socket.socket() as taken:
        # A port the demo accepts (its gRPC neighbour at +10000 must exist too): not an ephemeral
        # one, which may lie above 55000.
        for port in random.sample(range(20000, 55000), 200):
            try:
                taken.bind(("127.0.0.1", port))
                break
            except OSError:
                continue
        taken.listen()
        store = demo_store(tmp_path, environ={"LAKEWARDEN_S3_PORT": str(port)})
        # (its gRPC neighbour may be taken too: the message then names both before "already in use")
        with pytest.raises(PortsBusy, match=f"port {port} \\(s3\\).* already in use"):
            store.prepare()
    assert not (tmp_path / "seaweedfs" / "data").exists() or not any(
        (tmp_path / "seaweedfs" / "data").iterdir()
    )


def test_demo_ports_and_credentials_are_fixed_and_made_once(tmp_path):
    from devtools.seaweedfs import demo_credentials, demo_ports, demo_storage

    assert demo_ports({}) == {
        "s3": 8333,
        "iceberg": 8181,
        "master": 9333,
        "volume": 9334,
        "filer": 9335,
        "lance": 9336,
        "metrics": 9337,
    }
    with pytest.raises(ValueError, match="LAKEWARDEN_S3_PORT='80' must be a port number"):
        demo_ports({"LAKEWARDEN_S3_PORT": "80"})
    with pytest.raises(ValueError, match="overlap"):
        demo_ports({"LAKEWARDEN_ICEBERG_PORT": "8333"})
    first = demo_credentials(tmp_path)
    assert demo_credentials(tmp_path) == first and len(first[1]) >= 30
    assert (tmp_path / "credentials.json").stat().st_mode & 0o777 == 0o600
    assert [demo_storage(None, env) for env in ({}, {"LAKEWARDEN_DEMO_STORAGE": "S3"})] == ["local", "s3"]
    with pytest.raises(ValueError, match="must be 'local'"):
        demo_storage("minio")
