"""Process factories are discovered by the one discovery function: a broken plugin is named (in
the admin) and never keeps the others from loading."""

from __future__ import annotations

import importlib.metadata

import pytest

from processes import registry
from storage import plugins

GROUP = registry.ENTRY_POINT_GROUP
POINTS = [
    importlib.metadata.EntryPoint(
        "delta-vacuum", "processes.maintenance.delta.vacuum:DeltaVacuumFactory", GROUP
    ),
    importlib.metadata.EntryPoint("missing", "no_such_package.factory:Factory", GROUP),
    importlib.metadata.EntryPoint("not-a-factory", "storage.spec.models:TableFormat", GROUP),
]


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(plugins, "entry_points", lambda group: POINTS if group == GROUP else [])
    registry.rediscover_factories()
    yield
    monkeypatch.undo()
    registry.rediscover_factories()


def test_a_broken_factory_plugin_leaves_the_others_loaded_and_is_named(installed):
    assert list(registry.factory_classes()) == ["delta-vacuum"]
    broken = registry.broken_factories()
    assert set(broken) == {"missing", "not-a-factory"}
    assert "no_such_package.factory:Factory failed to load" in broken["missing"]
    assert "ProcessFactory" in broken["not-a-factory"]


@pytest.mark.django_db
def test_the_admin_names_broken_factory_plugins(installed, client_as, admin_user):
    page = client_as(admin_user).get("/admin/processes/pluginconfig/", follow=True)

    assert page.status_code == 200
    body = page.content.decode()
    assert "missing" in body and "no_such_package" in body
    assert "not-a-factory" in body
