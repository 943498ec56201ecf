"""Real objects for the security tests: a registered Delta table, a catalog, a pending process,
users of every role (and one with no role), a login cache of the test's own."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.console.tables import write_delta_table


@dataclass
class Lake:
    warehouse: Path
    table: object  # storage.models.Table
    catalog: object  # storage.models.Catalog
    process: object  # processes.models.Process
    unregistered: Path  # a Delta table folder inside the warehouse that nobody registered yet
    storage: object | None = None  # storage.models.StorageBackend
    query: object | None = None  # storage.models.Query
    cached_result: object | None = None  # storage.models.CachedResult

    # Made when a test asks (the permission matrix's team and grant URLs): a team enforces teams
    # for every user (console/teams), which the other URLs' rules do not assume.
    @property
    def team(self):
        from console.teams.models import Team

        return Team.objects.get_or_create(name="matrix-team")[0]

    @property
    def grant(self):
        from console.teams.models import Grant

        return Grant.objects.get_or_create(team=self.team, table=self.table, defaults={"role": "viewer"})[0]


@pytest.fixture(autouse=True)
def _fast_passwords_and_a_private_login_cache(settings):
    """A fast password hasher (these tests make many users) and failed-login counters of this test
    only (the default cache is the broker's Redis)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"security-{uuid.uuid4().hex}",
        }
    }


@pytest.fixture
def no_role_user(db, django_user_model):
    return django_user_model.objects.create_user(username="nobody-user", password="correct horse battery")


@pytest.fixture
def users(no_role_user, viewer, operator, admin_user) -> dict:
    """Role name -> user; ``None`` is the anonymous visitor, ``"none"`` a user with no role."""
    return {None: None, "none": no_role_user, "viewer": viewer, "operator": operator, "admin": admin_user}


@pytest.fixture
def lake(warehouse, test_plugin) -> Lake:
    from processes import services as process_services
    from storage import services as console_services

    table = console_services.table_register(location=str(write_delta_table(warehouse / "orders", commits=2)))
    unregistered = write_delta_table(warehouse / "returns", commits=1)
    catalog = console_services.catalog_create(
        name="lake-root", kind="path_root", properties={"root": str(warehouse)}
    )
    process = process_services.process_create(table=table, action="touch", params={})
    lake = Lake(warehouse, table, catalog, process, unregistered)
    _add_storage_objects(lake)
    from processes.alerts.models import AlertChannel, AlertRule

    lake.alert_channel = AlertChannel.objects.create(
        name="matrix", kind="webhook", url="http://127.0.0.1:9/hook"
    )
    lake.alert_rule = AlertRule.objects.create(name="matrix", kind="process_failed")
    from processes.groups.models import ResourceGroup

    lake.resource_group = ResourceGroup.objects.create(name="matrix-group")
    return lake


def _add_storage_objects(lake: Lake) -> None:
    """A storage backend, a query and a cached result, when the storage app has them."""
    try:
        from processes.models import Query
        from storage.models import CachedResult, StorageBackend
    except ImportError:
        return
    folder = lake.warehouse / "results"
    folder.mkdir()
    lake.storage = StorageBackend.objects.create(
        name="scratch", type="filesystem", config={"root": str(folder)}, is_default=True
    )
    lake.cached_result = CachedResult.objects.create(
        fingerprint="0" * 64,
        backend=lake.storage,
        name="orders_by_region",
        properties={"path": str(folder / "orders_by_region")},
        sql="select region, count(*) from orders group by region",
        source_snapshots={str(lake.table.pk): lake.table.current_instant},
        state="READY",
    )
    lake.query = Query.objects.create(
        sql="select 1", cache=False, status="SUCCESS", columns=["1"], rows=[[1]], total_rows=1
    )
