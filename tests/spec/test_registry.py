"""Format adapter discovery: one broken plugin is named and never takes the other formats down."""

from __future__ import annotations

import importlib.metadata

import pytest

from storage import plugins
from storage.formats.delta import DeltaAdapter, DeltaSpecTable
from storage.spec import load_table, registry
from storage.spec.errors import TableNotFound, UnknownFormat
from storage.spec.table import TableFormatAdapter

GROUP = registry.ENTRY_POINT_GROUP


@pytest.fixture
def installed(monkeypatch):
    """``installed(points)`` makes the adapter group hold exactly ``points`` until the test ends."""

    def install(points):
        monkeypatch.setattr(plugins, "entry_points", lambda group: points if group == GROUP else [])
        registry._discover.cache_clear()

    yield install
    monkeypatch.undo()
    registry._discover.cache_clear()


BROKEN = [
    importlib.metadata.EntryPoint("delta", "storage.formats.delta:DeltaAdapter", GROUP),
    importlib.metadata.EntryPoint("lance", "no_such_package.lance:LanceAdapter", GROUP),
    importlib.metadata.EntryPoint("paimon", "storage.spec.models:TableFormat", GROUP),
]


def test_a_broken_adapter_leaves_the_other_formats_working(installed):
    installed(BROKEN)

    assert dict(registry.format_adapters()) == {"delta": DeltaAdapter}
    assert set(registry.broken_format_adapters()) == {"lance", "paimon"}


def test_broken_adapters_are_named_with_their_reason(installed):
    installed(BROKEN)
    broken = registry.broken_format_adapters()

    assert broken["lance"].startswith(
        "no_such_package.lance:LanceAdapter failed to load: ModuleNotFoundError"
    )
    assert broken["paimon"] == "storage.spec.models:TableFormat is not a subclass of TableFormatAdapter"


def test_asking_for_a_broken_format_says_why_it_is_unavailable(installed):
    installed(BROKEN)

    with pytest.raises(UnknownFormat, match="table format 'lance' is installed but no_such_package"):
        load_table("/nowhere", format="lance")


def test_an_unknown_format_names_the_known_and_the_broken_ones(installed):
    installed(BROKEN)

    with pytest.raises(
        UnknownFormat, match=r"unknown table format 'orc' \(known: delta; broken: lance: .*paimon: "
    ):
        load_table("/nowhere", format="orc")


def test_a_location_no_adapter_recognises_names_what_was_looked_for(tmp_path):
    with pytest.raises(TableNotFound, match=r"_delta_log folder, a \.hoodie folder, Iceberg metadata"):
        load_table(str(tmp_path))


def test_the_registry_is_read_only():
    with pytest.raises(TypeError):
        registry.format_adapters()["mine"] = DeltaAdapter  # type: ignore[index]


def test_discover_plugins_returns_read_only_found_and_broken_mappings(installed):
    installed(BROKEN[:2])

    found, broken = plugins.discover_plugins(GROUP, TableFormatAdapter)

    assert dict(found) == {"delta": DeltaAdapter}
    assert list(broken) == ["lance"]
    with pytest.raises(TypeError):
        broken["x"] = "y"  # type: ignore[index]


def test_a_delta_table_still_opens_through_a_registry_with_a_broken_plugin(installed, tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "t"), pa.table({"id": [1, 2]}))
    installed(BROKEN)

    assert isinstance(load_table(str(tmp_path / "t")), DeltaSpecTable)
