"""Registration and path-root catalogs on a real object store (SeaweedFS): format detection by
listing the prefix with the right credentials, confinement to the allowed URI prefixes on the
normalised key, path roots with their own credentials, sync by listing, and every bad input
refused with the location and the store's error named, no secret shown, nothing written."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from storage import services
from storage.errors import InvalidInput
from storage.models import Catalog, CatalogKind, Table
from tests.conftest import upload_folder

pytestmark = pytest.mark.django_db

SECRET = "lakewarden-secret-key"


def write_delta_s3(location: str, options, *, commits: int = 3, rows: int = 10) -> str:
    from deltalake import write_deltalake

    for commit in range(commits):
        ids = range(commit * rows, (commit + 1) * rows)
        batch = pa.table({"id": pa.array(ids, pa.int64()), "region": [("eu", "us")[i % 2] for i in ids]})
        write_deltalake(location, batch, mode="append", storage_options=options.delta_options())
    return location


def write_iceberg_s3(sql_catalog, warehouse: str, options, identifier: str = "sales.orders"):
    """A static Iceberg table whose metadata and data live under ``warehouse`` on the store
    (written through a throwaway SQL catalog made by the ``sql_catalog`` fixture)."""
    catalog = sql_catalog("writer", warehouse, **options.properties())
    catalog.create_namespace_if_not_exists(identifier.split(".")[0])
    table = catalog.create_table(identifier, schema=pa.schema([("id", pa.int64())]))
    for start in (0, 5):
        table.append(pa.table({"id": pa.array(range(start, start + 5), pa.int64())}))
    return table


@pytest.fixture
def roots(settings, warehouse, s3_prefix):
    """The warehouse and the test's own prefix are the allowed roots."""
    settings.LAKEWARDEN_ALLOWED_ROOTS = [warehouse, s3_prefix]
    return s3_prefix


@pytest.fixture
def env_credentials(monkeypatch, seaweedfs):
    """The store's credentials in the environment (what a deployment without path roots uses)."""
    properties = seaweedfs.s3_properties()
    monkeypatch.setenv("LAKEWARDEN_S3_ENDPOINT", properties["s3.endpoint"])
    monkeypatch.setenv("LAKEWARDEN_S3_ACCESS_KEY_ID", properties["s3.access-key-id"])
    monkeypatch.setenv("LAKEWARDEN_S3_SECRET_ACCESS_KEY", properties["s3.secret-access-key"])
    monkeypatch.setenv("LAKEWARDEN_S3_REGION", "us-east-1")
    return properties


def test_a_delta_table_on_s3_is_detected_by_listing_and_stored_under_its_normalised_uri(
    roots, env_credentials, s3_options
):
    location = write_delta_s3(f"{roots}/orders", s3_options)

    table = services.table_register(location=f"s3a://{location.removeprefix('s3://')}/")

    assert table.format == "delta"
    assert table.location == location
    assert table.name == "orders"
    assert (table.current_instant, table.instant_count) == ("2", 3)
    assert (table.file_count, table.record_count) == (3, 30)
    assert table.total_bytes > 0
    with pytest.raises(InvalidInput, match="already registered"):
        services.table_register(location=location + "/")
    assert Table.objects.count() == 1


def test_a_path_root_on_s3_keeps_its_credentials_and_its_sync_registers_every_format(
    roots, no_env_credentials, seaweedfs, s3_options, hudi_fixture, sql_catalog
):
    write_delta_s3(f"{roots}/delta/orders", s3_options, commits=2)
    upload_folder(seaweedfs, hudi_fixture("cow_v6_simplekeygen_nonhivestyle"), f"{roots}/hudi/trips")
    iceberg = write_iceberg_s3(sql_catalog, f"{roots}/iceberg", s3_options)
    seaweedfs.filesystem().create_dir(f"{roots.removeprefix('s3://')}/empty/x")  # no table in it

    catalog = services.catalog_create(
        name="lake-root",
        kind=CatalogKind.PATH_ROOT,
        properties={"root": roots + "/", **seaweedfs.s3_properties()},
    )
    report = services.catalog_sync(catalog=catalog)

    assert catalog.properties["root"] == roots
    assert report.failed == {}
    assert sorted(report.added) == sorted(
        [f"{roots}/delta/orders", f"{roots}/hudi/trips", iceberg.metadata.location.rstrip("/")]
    )
    assert report.failed == {}
    formats = dict(Table.objects.values_list("location", "format"))
    assert formats == {
        f"{roots}/delta/orders": "delta",
        f"{roots}/hudi/trips": "hudi",
        iceberg.metadata.location.rstrip("/"): "iceberg",
    }
    stored = Table.objects.get(format="iceberg")
    assert stored.current_instant == str(iceberg.current_snapshot().snapshot_id)
    assert (stored.record_count, stored.file_count) == (10, 2)
    assert Table.objects.get(format="delta").record_count == 20
    again = services.catalog_sync(catalog=catalog)
    assert again.added == [] and len(again.already_registered) == 3
    # Registering by location inside the root uses the root's credentials (none in the environment).
    Table.objects.filter(format="delta").delete()
    assert services.table_register(location=f"{roots}/delta/orders").record_count == 20


def _refused(callable_, *, field: str) -> str:
    with pytest.raises(InvalidInput) as refused:
        callable_()
    assert refused.value.field == field
    return refused.value.message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"s3.secret-access-key": "wrong-secret-value"}, "SIGNATURE_DOES_NOT_MATCH"),
        ({"s3.access-key-id": "nobody"}, "cannot list"),
        ({"s3.endpoint": "http://127.0.0.1:9", "s3.connect-timeout": "1"}, "connect"),
    ],
    ids=["wrong-secret", "unknown-key", "unreachable-endpoint"],
)
def test_a_path_root_the_store_refuses_is_not_created(roots, seaweedfs, change, expected):
    properties = {"root": roots, **seaweedfs.s3_properties(), **change}
    started = time.monotonic()

    message = _refused(
        lambda: services.catalog_create(name="bad-root", kind=CatalogKind.PATH_ROOT, properties=properties),
        field="root",
    )

    assert time.monotonic() - started < 20  # connect timeout 1 s, three attempts, slack for load
    assert roots in message and expected.lower() in message.lower()
    assert SECRET not in message and "wrong-secret-value" not in message
    assert Catalog.objects.count() == 0


def test_a_silent_endpoint_is_refused_within_the_probe_timeouts(roots, seaweedfs):
    import socket

    silent = socket.socket()  # accepts connections (the kernel's backlog), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
    properties = {"root": roots, **seaweedfs.s3_properties(), "s3.endpoint": endpoint}  # default timeouts
    started = time.monotonic()
    try:
        message = _refused(
            lambda: services.catalog_create(name="silent", kind=CatalogKind.PATH_ROOT, properties=properties),
            field="root",
        )
    finally:
        silent.close()

    elapsed = time.monotonic() - started
    assert elapsed < 30, elapsed  # three attempts of the 5 s probe timeout (reads keep 30 s each)
    assert roots in message and "timeout" in message.lower()
    assert Catalog.objects.count() == 0


def test_a_path_root_in_a_missing_bucket_is_not_created(settings, warehouse, seaweedfs):
    settings.LAKEWARDEN_ALLOWED_ROOTS = [warehouse, "s3://no-such-bucket"]
    properties = {"root": "s3://no-such-bucket/prod", **seaweedfs.s3_properties()}

    message = _refused(
        lambda: services.catalog_create(name="nobucket", kind=CatalogKind.PATH_ROOT, properties=properties),
        field="root",
    )

    assert "s3://no-such-bucket/prod" in message and "does not exist" in message
    assert Catalog.objects.count() == 0


@pytest.mark.parametrize(
    "location",
    [
        "s3://lake/somewhere-else",
        "s3://lake",
        "{root}/../somewhere-else",
        "{root}/%2e%2e/somewhere-else",
        "{root}%2F..%2Fsomewhere-else",
        "{root}//orders",
        "{root}/./orders",
        "s3://{bucket}-evil/orders",
        "{root}-sibling/orders",
        "gs://lake/orders",
        "http://127.0.0.1/orders",
    ],
)
def test_keys_outside_the_allowed_roots_and_tricky_keys_are_refused_by_the_api(
    roots, env_credentials, s3_options, api_as, admin_user, location
):
    write_delta_s3(f"{roots}/orders", s3_options, commits=1)
    location = location.format(root=roots, bucket="lake")

    response = api_as(admin_user).post("/api/v1/tables/", {"location": location}, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["field"] == "location"
    assert Table.objects.count() == 0


def test_a_root_outside_the_allowed_roots_is_refused(roots, seaweedfs):
    properties = {"root": "s3://lake/elsewhere", **seaweedfs.s3_properties()}

    message = _refused(
        lambda: services.catalog_create(name="outside", kind=CatalogKind.PATH_ROOT, properties=properties),
        field="root",
    )

    assert "outside the allowed roots" in message
    assert Catalog.objects.count() == 0


def test_registering_with_wrong_environment_credentials_names_the_store_error_not_the_secret(
    roots, env_credentials, s3_options, monkeypatch, api_as, admin_user
):
    write_delta_s3(f"{roots}/orders", s3_options, commits=1)
    monkeypatch.setenv("LAKEWARDEN_S3_SECRET_ACCESS_KEY", "env-wrong-secret")

    response = api_as(admin_user).post("/api/v1/tables/", {"location": f"{roots}/orders"}, format="json")

    assert response.status_code == 400
    body = response.json()
    assert f"{roots}/orders" in body["error"] and "SIGNATURE_DOES_NOT_MATCH" in body["error"]
    assert "env-wrong-secret" not in response.content.decode() and SECRET not in response.content.decode()
    assert Table.objects.count() == 0


def test_an_empty_prefix_and_a_missing_bucket_are_refused_by_name(settings, roots, env_credentials):
    message = _refused(lambda: services.table_register(location=f"{roots}/nothing-here"), field="location")
    assert f"{roots}/nothing-here" in message and "does not exist" in message

    settings.LAKEWARDEN_ALLOWED_ROOTS = ["s3://no-such-bucket"]
    message = _refused(lambda: services.table_register(location="s3://no-such-bucket/t"), field="location")
    assert "no-such-bucket" in message and "does not exist" in message
    assert Table.objects.count() == 0


def test_a_prefix_holding_no_table_is_refused(roots, env_credentials, seaweedfs):
    with seaweedfs.filesystem().open_output_stream(f"{roots.removeprefix('s3://')}/notes/readme.txt") as out:
        out.write(b"hello")

    message = _refused(lambda: services.table_register(location=f"{roots}/notes"), field="location")

    assert "holds no table" in message
    assert Table.objects.count() == 0


def test_allowed_roots_parse_folders_and_uri_prefixes(monkeypatch, tmp_path):
    from django.core.exceptions import ImproperlyConfigured

    from console.env import env_roots

    monkeypatch.setenv("LW_ROOTS", f"{tmp_path}:s3a://lake/prod/:relative:gs://bucket")
    assert env_roots("LW_ROOTS", [], base=tmp_path) == [
        tmp_path.resolve(),
        "s3://lake/prod",
        (tmp_path / "relative").resolve(),
        "gs://bucket",
    ]
    for bad in ("s3://lake/prod/../x", "s3://lake/prod//x", "ftp://lake/x", "s3://lake/a%2Fb"):
        monkeypatch.setenv("LW_ROOTS", f"{tmp_path}:{bad}")
        with pytest.raises(ImproperlyConfigured, match="LW_ROOTS"):
            env_roots("LW_ROOTS", [], base=tmp_path)
