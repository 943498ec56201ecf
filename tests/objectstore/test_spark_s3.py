"""Spark on the object store without s3a: Delta, Hudi and REST-catalog Iceberg tables on SeaweedFS
read through ``read_table`` (the ``lakewarden`` data source, its tasks reaching the store through
pyarrow with the credentials of the ``storage`` option), and workbench queries on S3 tables
registered with their own credentials. No credentials in the environment: the tasks can only read
with what the option carries. The fast path says once that it would need s3a, and the secret
shows in no log, plan or stored query."""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import uuid

import pyarrow as pa
import pytest

from storage.io import StoreOptions
from storage.spec.spark import plain
from storage.spec.spark_source import SourceOptions, read_table
from tests.conftest import upload_folder

pytestmark = pytest.mark.spark

SECRET = "lakewarden-secret-key"


@pytest.fixture
def fresh_fallback_note(monkeypatch):
    """The once-per-process s3a note, as if this process had not said it yet."""
    monkeypatch.setattr(plain, "_fallback_said", type(plain._fallback_said)())


def _explained(frame) -> str:
    return frame._jdf.queryExecution().toString()


def _write_delta(location: str, options: StoreOptions) -> None:
    from deltalake import write_deltalake

    for start in (0, 5):
        ids = range(start, start + 5)
        batch = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "region": pa.array([("eu", "us")[i % 2] for i in ids]),
                "amount": pa.array([decimal.Decimal(f"{i}.25") for i in ids], pa.decimal128(10, 2)),
            }
        )
        write_deltalake(location, batch, mode="append", storage_options=options.delta_options())


def test_a_delta_table_on_s3_is_read_by_spark_tasks_with_the_storage_option(
    spark, s3_prefix, s3_options, no_env_credentials, fresh_fallback_note, caplog
):
    location = f"{s3_prefix}/orders"
    _write_delta(location, s3_options)

    with caplog.at_level(logging.WARNING, logger=plain.__name__):
        frame = read_table(spark, location, storage=s3_options)
        rows = sorted(tuple(r) for r in frame.collect())
        filtered = read_table(spark, location, filters="region = 'us'", columns=["id"], storage=s3_options)
        us = sorted(r.id for r in filtered.collect())

    assert rows == [(i, ("eu", "us")[i % 2], decimal.Decimal(f"{i}.25")) for i in range(10)]
    assert us == [1, 3, 5, 7, 9]
    notes = [r.getMessage() for r in caplog.records if "s3a" in r.getMessage()]
    assert len(notes) == 1, notes  # once per process, not per read
    assert location in notes[0] and "lakewarden data source" in notes[0]
    # the plans Spark shows name the source, not its options
    assert "lakewarden" in _explained(frame)
    assert SECRET not in caplog.text + _explained(frame) + _explained(filtered)
    parsed = SourceOptions.parse({"location": location, "storage": s3_options.to_json()})
    assert StoreOptions.from_json(parsed.storage) == s3_options and SECRET not in repr(parsed)


def test_without_storage_the_drivers_environment_is_what_the_tasks_get(
    spark, seaweedfs, s3_prefix, s3_options, no_env_credentials, monkeypatch
):
    location = f"{s3_prefix}/orders"
    _write_delta(location, s3_options)
    # set in this (driver) process only: Spark's Python workers were started without them
    monkeypatch.setenv("LAKEWARDEN_S3_ENDPOINT", seaweedfs.endpoint)
    monkeypatch.setenv("LAKEWARDEN_S3_ACCESS_KEY_ID", s3_options.access_key)
    monkeypatch.setenv("LAKEWARDEN_S3_SECRET_ACCESS_KEY", s3_options.secret_key)

    frame = read_table(spark, location, filters="id >= 8", columns=["id", "region"])

    assert sorted(tuple(r) for r in frame.collect()) == [(8, "eu"), (9, "us")]


def test_a_hudi_table_on_s3_is_read_by_spark_with_its_rows(
    spark, seaweedfs, s3_prefix, s3_options, no_env_credentials, hudi_fixture
):
    local = hudi_fixture("cow_v6_simplekeygen_nonhivestyle")
    local = local if (local / ".hoodie").is_dir() else next(p.parent for p in local.glob("*/.hoodie"))
    location = upload_folder(seaweedfs, local, f"{s3_prefix}/trips")

    frame = read_table(
        spark, location, format="hudi", columns=["id", "name", "isActive", "byteField"], storage=s3_options
    )
    rows = sorted(tuple(r) for r in frame.collect())

    # the second commit updated Alice (isActive false) and added Diana
    assert rows == [
        (1, "Alice", False, 10),
        (2, "Bob", False, 20),
        (3, "Carol", True, 10),
        (4, "Diana", True, 30),
    ]
    dated = read_table(
        spark,
        location,
        filters="dateField >= date '2023-04-03'",
        columns=["id", "dateField"],
        storage=s3_options,
    )
    assert sorted(tuple(r) for r in dated.collect()) == [(3, dt.date(2023, 4, 3)), (4, dt.date(2023, 4, 4))]


@pytest.fixture(scope="module")
def rest_table(seaweedfs):
    """An Iceberg table in SeaweedFS's REST catalog: two appends and a row-level delete."""
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("spark-s3", **{"type": "rest", **seaweedfs.rest_catalog_properties()})
    namespace = f"spark_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    schema = pa.schema([("id", pa.int64()), ("city", pa.string()), ("at", pa.timestamp("us", "UTC"))])
    table = catalog.create_table(f"{namespace}.visits", schema=schema)
    for start in (0, 4):
        ids = list(range(start, start + 4))
        table.append(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "city": pa.array([f"city-{i}" for i in ids]),
                    "at": pa.array(
                        [dt.datetime(2024, 5, 1 + i, tzinfo=dt.UTC) for i in ids], pa.timestamp("us", "UTC")
                    ),
                }
            )
        )
    table.delete("id = 2")
    return catalog, f"{namespace}.visits", catalog.load_table(f"{namespace}.visits")


def test_a_rest_catalog_iceberg_table_is_read_by_spark_with_its_rows(
    spark, rest_table, s3_options, no_env_credentials
):
    _, _, table = rest_table
    assert table.metadata.location.startswith("s3://lakehouse/")

    frame = read_table(spark, table.metadata_location, format="iceberg", storage=s3_options)
    rows = sorted((r.id, r.city, r.at.astimezone(dt.UTC)) for r in frame.collect())

    expected = [(i, f"city-{i}", dt.datetime(2024, 5, 1 + i, tzinfo=dt.UTC)) for i in range(8) if i != 2]
    assert rows == expected
    first = table.history()[0].snapshot_id  # time travel: the first append, before the delete
    at_first = read_table(
        spark, table.metadata_location, format="iceberg", instant=first, columns=["id"], storage=s3_options
    )
    assert sorted(r.id for r in at_first.collect()) == [0, 1, 2, 3]
    assert SECRET not in _explained(frame)


# -- the workbench --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_workbench_queries_read_s3_tables_with_their_catalogs_credentials(
    spark, seaweedfs, s3_prefix, s3_options, rest_table, no_env_credentials, settings, warehouse, caplog
):
    from processes import queries
    from processes.models import QueryStatus
    from storage import services
    from storage.models import CatalogKind

    settings.LAKEWARDEN_ALLOWED_ROOTS = [warehouse, s3_prefix, "s3://lakehouse"]  # the REST catalog's bucket
    _write_delta(f"{s3_prefix}/orders", s3_options)
    root = services.catalog_create(
        name="lake-root",
        kind=CatalogKind.PATH_ROOT,
        properties={"root": s3_prefix, **seaweedfs.s3_properties()},
    )
    services.catalog_sync(catalog=root)
    rest = services.catalog_create(
        name="lakehouse", kind=CatalogKind.ICEBERG_REST, properties=seaweedfs.rest_catalog_properties()
    )
    _, identifier, _ = rest_table
    services.table_register(catalog=rest, identifier=identifier)

    def run(sql: str):
        query = queries.query_submit(sql=sql, cache=False)
        queries.query_run(query_id=query.pk, spark=spark)
        query.refresh_from_db()
        return query

    with caplog.at_level(logging.DEBUG):
        orders = run(
            "select region, count(*) as n, sum(id) as total from orders group by region order by region"
        )
        visits = run(f"select city from {identifier} where id >= 5 order by id")
        joined = run(
            f"select o.region, count(*) as n from orders o join {identifier} v on o.id = v.id "
            "group by o.region order by o.region"
        )

    for query in (orders, visits, joined):
        assert query.status == QueryStatus.SUCCESS, query.error
    assert orders.rows == [["eu", 5, 20], ["us", 5, 25]]
    assert visits.rows == [["city-5"], ["city-6"], ["city-7"]]
    assert joined.rows == [["eu", 3], ["us", 4]]  # ids 0..7 without 2
    stored = " ".join(str(v) for q in (orders, visits, joined) for v in (q.sql, q.error, q.rows, q.columns))
    assert SECRET not in stored
    assert SECRET not in caplog.text
