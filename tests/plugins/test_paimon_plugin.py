"""The Paimon plugin installed the way a third-party package is: its dist-info on the path, found
through its entry points. Its format opens tables, a table registers, its factories appear; gone
again once the package is removed."""

from __future__ import annotations

import pytest

from tests.plugins._paimon_tables import PLUGIN_ROOT, write_primary_key_table

ENTRY_POINTS = """\
[lakewarden.table_formats]
paimon = lakewarden_paimon:PaimonAdapter

[lakewarden.process_factories]
paimon-expire-snapshots = lakewarden_paimon.maintenance:PaimonExpireSnapshotsFactory
paimon-clean-orphan-files = lakewarden_paimon.maintenance:PaimonCleanOrphanFilesFactory
"""


def _rediscover() -> None:
    from processes.registry import rediscover_factories
    from storage.spec import registry

    rediscover_factories()
    registry._discover.cache_clear()


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The plugin's package and a dist-info declaring the entry points of its pyproject.toml."""
    site = tmp_path / "site"
    dist_info = site / "lakewarden_paimon-0.1.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: lakewarden-paimon\nVersion: 0.1.0\n")
    (dist_info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(PLUGIN_ROOT))
    monkeypatch.syspath_prepend(str(site))
    _rediscover()
    yield
    monkeypatch.undo()
    _rediscover()


def test_the_entry_points_match_the_plugins_pyproject():
    import tomllib

    project = tomllib.loads((PLUGIN_ROOT / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"]
    assert declared["lakewarden.table_formats"] == {"paimon": "lakewarden_paimon:PaimonAdapter"}
    assert set(declared["lakewarden.process_factories"]) == {
        "paimon-expire-snapshots",
        "paimon-clean-orphan-files",
    }
    # pypaimon's own pins would downgrade pyarrow, fsspec and cachetools: not a hard dependency
    assert not any(dep.startswith("pypaimon") for dep in project["dependencies"])


def test_an_installed_plugin_detects_registers_and_offers_its_processes(installed, db, warehouse):
    from processes.registry import configured_factories, ensure_plugin_rows, factory_classes
    from processes.runtime import TableRuntime
    from storage.services import table_register
    from storage.spec import load_table

    location = write_primary_key_table(str(warehouse))
    assert load_table(location).format.value == "paimon"
    table = table_register(location=location)
    assert (table.format, table.current_instant, table.instant_count, table.record_count) == (
        "paimon",
        "6",
        6,
        36,
    )
    assert {"paimon-expire-snapshots", "paimon-clean-orphan-files"} <= set(factory_classes())
    ensure_plugin_rows()
    pairs = {pair for configured in configured_factories() for pair in configured.factory.pairs()}
    assert {("paimon", "expire-snapshots"), ("paimon", "clean-orphan-files")} <= pairs
    assert TableRuntime(table).load().summary().record_count == 36


def _installed_in_the_venv() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("lakewarden-paimon")
    except PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(_installed_in_the_venv(), reason="lakewarden-paimon is installed in this virtualenv")
def test_without_the_plugin_a_paimon_table_is_not_recognised(db, warehouse):
    from processes.registry import factory_classes
    from storage.spec import TableNotFound, load_table

    _rediscover()
    location = write_primary_key_table(str(warehouse))
    assert not any(name.startswith("paimon-") for name in factory_classes())
    with pytest.raises(TableNotFound):
        load_table(location)


def test_the_demo_table_is_a_primary_key_table_with_several_snapshots(tmp_path):
    from lakewarden_paimon import PaimonAdapter
    from lakewarden_paimon.demo import build_demo_paimon_table

    location = build_demo_paimon_table(str(tmp_path))
    assert build_demo_paimon_table(str(tmp_path)) == location  # built once, kept afterwards
    table = PaimonAdapter.open(location)
    assert [i.id for i in table.timeline().instants()] == [1, 2, 3, 4, 5]
    rows = [r for b in table.read() for r in b.to_pylist()]
    assert len(rows) == len({r["order_id"] for r in rows}) == 260
    statuses = {r["order_id"]: r["status"] for r in rows}
    # the newest write of each key wins: 51 was shipped (multiple of 3 and 17), then returned
    assert (statuses[51], statuses[15], statuses[3], statuses[1], statuses[230]) == (
        "returned",
        "shipped",
        "paid",
        "new",
        "new",
    )


@pytest.mark.django_db(transaction=True)
def test_an_expiry_submitted_and_run_by_the_executor_keeps_the_rows(installed, warehouse):
    from processes import services as process_services
    from processes.executor import run_process
    from processes.models import Process, ProcessStatus
    from storage.errors import InvalidInput
    from storage.services import table_register
    from tests.plugins._paimon_tables import pypaimon_read, sorted_rows

    location = write_primary_key_table(str(warehouse))
    table = table_register(location=location)
    before = sorted_rows(pypaimon_read(location))
    before_5 = sorted_rows(pypaimon_read(location, **{"scan.snapshot-id": 5}))
    with pytest.raises(InvalidInput, match="retain-max"):
        process_services.process_create(
            table=table, action="expire-snapshots", params={"retain-min": 3, "retain-max": 2}
        )
    params = {"retain-min": 2, "time-retained-seconds": 0}
    preview = process_services.process_preview(table=table, action="expire-snapshots", params=params)
    assert preview["details"]["snapshots_to_expire"] == [1, 2, 3, 4]

    process = process_services.process_create(table=table, action="expire-snapshots", params=params)
    assert run_process(process.pk, worker="w1") == ProcessStatus.SUCCESS

    process = Process.objects.get(pk=process.pk)
    assert process.summary["expired_snapshots"] == [1, 2, 3, 4] and process.summary["kept_snapshots"] == 2
    assert (
        process.preview["objects_to_delete"]
        == 4 + process.summary["data_files"] + process.summary["metadata_files"]
    )
    assert sorted_rows(pypaimon_read(location)) == before
    assert sorted_rows(pypaimon_read(location, **{"scan.snapshot-id": 5})) == before_5
    assert sorted(p.name for p in (warehouse / "db.db" / "pk" / "snapshot").iterdir()) == [
        "EARLIEST",
        "LATEST",
        "snapshot-5",
        "snapshot-6",
    ]
