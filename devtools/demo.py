"""The demo lakehouse: Iceberg tables in a SQL catalog kept in Lakewarden's Postgres database,
Delta tables written by deltalake and, when the plugins in ``plugins/`` are installed, a Lance
dataset and a Paimon primary-key table, built from many small commits so maintenance has work to do.

``demo_lakehouse_build`` puts it in the local warehouse; ``demo_lakehouse_build_s3`` on an object
store (SeaweedFS under ``var/`` for ``LAKEWARDEN_DEMO_STORAGE=s3``): the same tables, the Iceberg
ones in a REST catalog, the Delta, Lance and Paimon ones under an ``s3://`` prefix.

The scheduler maintains every table within a minute or two of start-up, except the one named by
``LEFT_FOR_PREVIEW``: it is registered with the ``manual-actions`` property, so the scheduler
leaves it alone and a newcomer's first Preview (or "run now") still has work to show."""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from processes.scheduler import MANUAL_ACTIONS
from storage import services
from storage.catalogs import iceberg_catalog
from storage.io import StoreOptions, filesystem, join
from storage.models import Catalog, CatalogKind, StorageBackend, Table
from storage.results.plugin import StorageDescriptor

logger = logging.getLogger(__name__)

NAMESPACE = "demo"
REGIONS = ["eu", "us", "apac", "latam"]
STATUSES = ["placed", "paid", "shipped", "delivered", "cancelled"]
EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
#: The demo table the scheduler leaves alone (its name in the demo namespace).
LEFT_FOR_PREVIEW = "events"


def _orders_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        DecimalType,
        LongType,
        NestedField,
        StringType,
        StructType,
        TimestamptzType,
    )

    return Schema(
        NestedField(1, "order_id", LongType(), required=False),
        NestedField(2, "region", StringType(), required=False),
        NestedField(3, "order_ts", TimestamptzType(), required=False),
        NestedField(4, "amount", DecimalType(12, 2), required=False),
        NestedField(5, "status", StringType(), required=False),
        NestedField(
            6,
            "customer",
            StructType(
                NestedField(7, "id", LongType(), required=False),
                NestedField(8, "name", StringType(), required=False),
                NestedField(9, "country", StringType(), required=False),
            ),
            required=False,
        ),
    )


def _events_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestampType

    return Schema(
        NestedField(1, "event_id", LongType(), required=False),
        NestedField(2, "ts", TimestampType(), required=False),
        NestedField(3, "kind", StringType(), required=False),
        NestedField(4, "duration_ms", DoubleType(), required=False),
        NestedField(5, "payload", StringType(), required=False),
    )


def _orders_batch(rng: random.Random, start_id: int, rows: int, day: int) -> pa.Table:
    base = EPOCH + dt.timedelta(days=day)
    customers = [rng.randint(1, 500) for _ in range(rows)]
    return pa.table(
        {
            "order_id": pa.array(range(start_id, start_id + rows), pa.int64()),
            "region": pa.array([rng.choice(REGIONS) for _ in range(rows)], pa.string()),
            "order_ts": pa.array(
                [base + dt.timedelta(seconds=rng.randint(0, 86_399)) for _ in range(rows)],
                pa.timestamp("us", "UTC"),
            ),
            "amount": pa.array(
                [Decimal(rng.randint(100, 99_999)) / 100 for _ in range(rows)], pa.decimal128(12, 2)
            ),
            "status": pa.array([rng.choice(STATUSES) for _ in range(rows)], pa.string()),
            "customer": pa.array(
                [
                    {"id": c, "name": f"customer-{c}", "country": rng.choice(["DE", "FR", "US", "BR", "JP"])}
                    for c in customers
                ],
                pa.struct([("id", pa.int64()), ("name", pa.string()), ("country", pa.string())]),
            ),
        }
    )


def _events_batch(rng: random.Random, start_id: int, rows: int) -> pa.Table:
    return pa.table(
        {
            "event_id": pa.array(range(start_id, start_id + rows), pa.int64()),
            "ts": pa.array(
                [dt.datetime(2024, 3, 1) + dt.timedelta(minutes=start_id + i) for i in range(rows)],
                pa.timestamp("us"),
            ),
            "kind": pa.array([rng.choice(["click", "view", "purchase", "error"]) for _ in range(rows)]),
            "duration_ms": pa.array([rng.random() * 500 for _ in range(rows)], pa.float64()),
            "payload": pa.array([f'{{"session": {rng.randint(1, 9999)}}}' for _ in range(rows)]),
        }
    )


def _build_iceberg(
    catalog, scale: int, report: Callable[[str], None], namespace: str = NAMESPACE
) -> list[str]:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform, IdentityTransform

    rng = random.Random(42)
    catalog.create_namespace_if_not_exists(namespace)
    built = []
    existing = {".".join(t) for t in catalog.list_tables(namespace)}

    name = f"{namespace}.orders"
    if name not in existing:
        spec = PartitionSpec(
            PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"),
            PartitionField(source_id=3, field_id=1001, transform=DayTransform(), name="order_ts_day"),
        )
        table = catalog.create_table(name, schema=_orders_schema(), partition_spec=spec)
        next_id = 1
        for commit in range(scale):
            table.append(_orders_batch(rng, next_id, 40, day=commit % 6))
            next_id += 40
        table.overwrite(_orders_batch(rng, next_id, 200, day=2), overwrite_filter="region = 'eu'")
        table.delete("status = 'cancelled'")
        built.append(name)
        report(f"iceberg {name}: {scale} appends, an overwrite and a delete")

    name = f"{namespace}.events"
    if name not in existing:
        table = catalog.create_table(name, schema=_events_schema())
        next_id = 1
        for _ in range(scale):
            table.append(_events_batch(rng, next_id, 25))
            next_id += 25
        table.delete("kind = 'error'")
        built.append(name)
        report(f"iceberg {name}: {scale} appends and a delete")

    name = f"{namespace}.customers"
    if name not in existing:
        customers = pa.table(
            {
                "id": pa.array(range(1, 501), pa.int64()),
                "name": [f"customer-{i}" for i in range(1, 501)],
                "country": [rng.choice(["DE", "FR", "US", "BR", "JP"]) for _ in range(500)],
                "signed_up": pa.array(
                    [dt.date(2023, 1, 1) + dt.timedelta(days=i % 365) for i in range(500)], pa.date32()
                ),
            }
        )
        table = catalog.create_table(name, schema=customers.schema)
        table.append(customers.slice(0, 250))
        table.append(customers.slice(250))
        table.overwrite(customers)
        built.append(name)
        report(f"iceberg {name}: two appends and an overwrite")
    return built


def _has_delta_log(location: str, options: StoreOptions | None) -> bool:
    fs, path = filesystem(join(location, "_delta_log"), options)
    return fs.get_file_info(path).type == pafs.FileType.Directory


def _build_delta(
    root: str, scale: int, report: Callable[[str], None], options: StoreOptions | None = None
) -> list[str]:
    """Two Delta tables under ``root`` (a folder, or an ``s3://`` prefix reached with ``options``)."""
    from deltalake import DeltaTable, write_deltalake

    storage_options = options.delta_options() if options is not None else None
    rng = random.Random(7)
    built = []
    sales = join(root, "sales")
    if not _has_delta_log(sales, options):
        next_id = 1
        for _ in range(max(scale // 2, 2)):
            batch = _orders_batch(rng, next_id, 50, day=rng.randint(0, 9))
            batch = batch.drop_columns(["customer"]).append_column(
                "country", pa.array([rng.choice(["DE", "FR", "US"]) for _ in range(50)])
            )
            write_deltalake(
                sales, batch, mode="append", partition_by=["country"], storage_options=storage_options
            )
            next_id += 50
        DeltaTable(sales, storage_options=storage_options).delete("status = 'cancelled'")
        built.append(sales)
        report(f"delta sales: {max(scale // 2, 2)} appends and a delete")
    readings = join(root, "sensor_readings")
    if not _has_delta_log(readings, options):
        for batch_number in range(scale):
            rows = 30
            write_deltalake(
                readings,
                pa.table(
                    {
                        "sensor": pa.array([f"s-{rng.randint(1, 20):02d}" for _ in range(rows)]),
                        "reading_ts": pa.array(
                            [EPOCH + dt.timedelta(minutes=batch_number * rows + i) for i in range(rows)],
                            pa.timestamp("us", "UTC"),
                        ),
                        "temperature": pa.array([15 + rng.random() * 10 for _ in range(rows)]),
                        "ok": pa.array([rng.random() > 0.05 for _ in range(rows)]),
                    }
                ),
                mode="append",
                storage_options=storage_options,
            )
        built.append(readings)
        report(f"delta sensor_readings: {scale} appends")
    return built


def demo_lakehouse_build(
    *, warehouse: Path, scale: int = 150, report: Callable[[str], None] = logger.info
) -> dict:
    """Build (or complete) the demo lakehouse and register its tables; safe to run again."""
    warehouse.mkdir(parents=True, exist_ok=True)
    delta_root = warehouse / "delta"
    delta_root.mkdir(exist_ok=True)
    iceberg_root = warehouse / "iceberg"
    iceberg_root.mkdir(exist_ok=True)

    iceberg = Catalog.objects.filter(name="demo").first() or services.catalog_create(
        name="demo", kind=CatalogKind.ICEBERG_SQL, properties={"warehouse": iceberg_root.as_uri()}
    )
    paths = Catalog.objects.filter(name="warehouse-delta").first() or services.catalog_create(
        name="warehouse-delta", kind=CatalogKind.PATH_ROOT, properties={"root": str(delta_root)}
    )
    built = _build_iceberg(iceberg_catalog(iceberg), scale, report)
    built += _build_delta(str(delta_root), scale, report)
    result = {"built": built, **_sync(iceberg, paths, *_build_plugin_formats(warehouse, scale, report))}
    _leave_for_preview(iceberg, f"{NAMESPACE}.{LEFT_FOR_PREVIEW}", result["registered"], report)
    return result


def _build_plugin_formats(warehouse: Path, scale: int, report: Callable[[str], None]) -> list[Catalog]:
    """The formats of the plugins shipped in ``plugins/``, when installed: each in its own folder
    of the warehouse, found by a path-root catalog's sync like the Delta tables."""
    catalogs = []
    try:
        from lakewarden_lance.demo import build_demo_dataset
    except ImportError:
        report("lance: the lakewarden-lance plugin is not installed; no Lance demo dataset")
    else:
        lance_root = warehouse / "lance"
        lance_root.mkdir(exist_ok=True)
        if build_demo_dataset(str(lance_root / "clickstream"), appends=max(scale // 3, 4)):
            report(f"lance clickstream: {max(scale // 3, 4)} small appends, an index, a tag and a delete")
        catalogs.append(_path_root("warehouse-lance", lance_root))
    try:
        from lakewarden_paimon.demo import build_demo_paimon_table
    except ImportError:
        report("paimon: the lakewarden-paimon plugin is not installed; no Paimon demo table")
    else:
        paimon_root = warehouse / "paimon"
        paimon_root.mkdir(exist_ok=True)
        location = build_demo_paimon_table(str(paimon_root))
        report(f"paimon paimon_orders: a primary-key table with five snapshots at {location}")
        catalogs.append(_path_root("warehouse-paimon", paimon_root))
    return catalogs


def _build_plugin_formats_s3(
    lake_root: str, options: StoreOptions, scale: int, report: Callable[[str], None]
) -> None:
    """The plugins' formats under the object-store ``lake_root``, beside the Delta tables (the
    root's path-root catalog finds them all): the Lance dataset at ``clickstream`` and the Paimon
    warehouse at ``paimon``. As in the local warehouse, what is built is reported, not counted."""
    try:
        from lakewarden_lance.demo import build_demo_dataset
    except ImportError:
        report("lance: the lakewarden-lance plugin is not installed; no Lance demo dataset")
    else:
        if build_demo_dataset(join(lake_root, "clickstream"), appends=max(scale // 3, 4), storage=options):
            report(f"lance clickstream: {max(scale // 3, 4)} small appends, an index, a tag and a delete")
    try:
        from lakewarden_paimon.demo import build_demo_paimon_table
    except ImportError:
        report("paimon: the lakewarden-paimon plugin is not installed; no Paimon demo table")
    else:
        location = build_demo_paimon_table(join(lake_root, "paimon"), storage=options)
        report(f"paimon paimon_orders: a primary-key table with five snapshots at {location}")


def _leave_for_preview(
    catalog: Catalog, identifier: str, registered: list, report: Callable[[str], None]
) -> None:
    """Keep the scheduler off the demo table ``identifier`` when this build registered it (a
    later build leaves the property as an operator set it): its files stay small, so Preview and
    "run now" have work to show. Removing the property in the admin hands it to the scheduler."""
    if identifier not in registered:
        return
    table = Table.objects.filter(catalog=catalog, identifier=identifier).first()
    if table is None:
        return
    table.properties = {**(table.properties or {}), MANUAL_ACTIONS: "*"}
    table.save(update_fields=["properties"])
    report(
        f"{identifier}: left to operators ({MANUAL_ACTIONS}: *); the scheduler maintains the other "
        "tables, so Preview this one first"
    )


def _path_root(name: str, root: Path) -> Catalog:
    return Catalog.objects.filter(name=name).first() or services.catalog_create(
        name=name, kind=CatalogKind.PATH_ROOT, properties={"root": str(root)}
    )


#: The object-store demo's catalog rows and result storage.
REST_CATALOG = "demo-rest"
LAKE_CATALOG = "lake-delta"
RESULT_STORAGE = "demo-s3-results"


def demo_lakehouse_build_s3(
    *,
    s3_properties: Mapping[str, str],
    rest_properties: Mapping[str, str],
    lake_root: str = "s3://lake/demo",
    results_root: str = "s3://results/cache",
    namespace: str = NAMESPACE,
    scale: int = 150,
    report: Callable[[str], None] = logger.info,
) -> dict:
    """The demo lakehouse on an object store: the Iceberg tables through a REST catalog
    (``rest_properties``: uri, warehouse, credential and ``s3.*``), the Delta, Lance and Paimon
    tables under ``lake_root`` (a path-root catalog with the ``s3_properties``), cached query results under
    ``results_root`` (the default result storage). Every row goes through the services; safe to
    run again."""
    rest = Catalog.objects.filter(name=REST_CATALOG).first() or services.catalog_create(
        name=REST_CATALOG, kind=CatalogKind.ICEBERG_REST, properties=dict(rest_properties)
    )
    options = StoreOptions.from_properties(s3_properties)
    built = _build_iceberg(iceberg_catalog(rest), scale, report, namespace)
    built += _build_delta(lake_root, scale, report, options)
    _build_plugin_formats_s3(lake_root, options, scale, report)
    lake = Catalog.objects.filter(name=LAKE_CATALOG).first() or services.catalog_create(
        name=LAKE_CATALOG, kind=CatalogKind.PATH_ROOT, properties={"root": lake_root, **s3_properties}
    )
    if not StorageBackend.objects.filter(name=RESULT_STORAGE).exists():
        descriptor = StorageDescriptor().with_type("filesystem").with_config("root", results_root)
        for key, value in s3_properties.items():
            descriptor.with_config(key, value)
        services.storage_backend_register(name=RESULT_STORAGE, descriptor=descriptor, is_default=True)
        report(f"result storage {RESULT_STORAGE}: {results_root} (the default)")
    result = {"built": built, **_sync(rest, lake)}
    _leave_for_preview(rest, f"{namespace}.{LEFT_FOR_PREVIEW}", result["registered"], report)
    return result


def _sync(*catalogs: Catalog) -> dict:
    registered: list = []
    failed: dict = {}
    for catalog in catalogs:
        report = services.catalog_sync(catalog=catalog)
        registered += report.added
        failed.update(report.failed)
    return {"registered": registered, "failed": failed}
