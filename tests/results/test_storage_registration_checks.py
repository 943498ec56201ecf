"""Registering a result storage checks what the docs promise: an ``iceberg`` storage's warehouse
(where its tables' data goes) lies inside the allowed roots, and ``postgres`` and ``iceberg``
storages answer before they are saved."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings

from storage.errors import InvalidInput
from storage.models import StorageBackend
from storage.results.plugin import StorageDescriptor

pytestmark = pytest.mark.django_db


def _database_url(name: str) -> str:
    db = django_settings.DATABASES["default"]
    return f"postgresql+psycopg://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"


def iceberg(warehouse: str | None, uri: str | None = None) -> StorageDescriptor:
    config = {"uri": uri or _database_url(django_settings.DATABASES["default"]["NAME"]), "name": "cache"}
    if warehouse is not None:
        config["warehouse"] = warehouse
    return StorageDescriptor(type="iceberg", config=config)


def test_an_iceberg_storage_whose_warehouse_is_outside_the_roots_is_refused(warehouse, tmp_path):
    from storage.services import storage_backend_register

    with pytest.raises(InvalidInput, match="warehouse: .* is outside the allowed roots"):
        storage_backend_register(name="outside", descriptor=iceberg(f"file://{tmp_path}/elsewhere"))
    with pytest.raises(InvalidInput, match="a SQL catalog needs a warehouse"):
        storage_backend_register(name="nowhere", descriptor=iceberg(None))
    assert not StorageBackend.objects.filter(name__in=["outside", "nowhere"]).exists()

    inside = storage_backend_register(name="inside", descriptor=iceberg(f"file://{warehouse}/cache"))
    assert inside.config["warehouse"] == (warehouse / "cache").as_uri()


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_unreachable_postgres_and_iceberg_storages_are_not_saved(warehouse, unused_port):
    from storage.services import storage_backend_register

    dead = f"postgresql://nobody:hunter2@127.0.0.1:{unused_port}/results"
    with pytest.raises(InvalidInput, match=f"cannot reach the storage: .*127.0.0.1:{unused_port}") as caught:
        storage_backend_register(
            name="pg", descriptor=StorageDescriptor(type="postgres", config={"dsn": dead})
        )
    assert "hunter2" not in str(caught.value)
    with pytest.raises(InvalidInput, match="cannot reach the storage"):
        storage_backend_register(
            name="ice",
            descriptor=iceberg(
                f"file://{warehouse}/cache", uri=dead.replace("postgresql", "postgresql+psycopg")
            ),
        )
    assert not StorageBackend.objects.filter(name__in=["pg", "ice"]).exists()


def test_an_iceberg_sql_catalog_whose_warehouse_is_outside_the_roots_is_refused(warehouse, tmp_path):
    from storage.models import Catalog
    from storage.services import catalog_create

    with pytest.raises(InvalidInput, match="is outside the allowed roots"):
        catalog_create(
            name="outside", kind="iceberg_sql", properties={"warehouse": f"file://{tmp_path}/elsewhere"}
        )
    assert not Catalog.objects.filter(name="outside").exists()
    inside = catalog_create(name="inside", kind="iceberg_sql", properties={"warehouse": warehouse.as_uri()})
    assert inside.properties["warehouse"] == warehouse.as_uri()
