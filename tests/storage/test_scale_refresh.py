"""The refresh pass at scale (issue 17): a pointer check per table, a full refresh only of tables
whose pointer moved. Real tables written by their own libraries (deltalake, pyiceberg)."""

from __future__ import annotations

import shutil
import uuid

import pyarrow as pa
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from storage import services
from storage.models import Table
from storage.refresh import refresh_changed

pytestmark = pytest.mark.django_db

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def _rows(start: int, count: int) -> pa.Table:
    return pa.table(
        {"id": list(range(start, start + count)), "name": [f"n{i}" for i in range(count)]}, SCHEMA
    )


@pytest.fixture
def lake(warehouse):
    """Two Delta tables, an Iceberg table of a SQL catalog and one registered by its folder."""
    from deltalake import write_deltalake

    from storage.catalogs import iceberg_catalog

    deltas = []
    for name in ("d1", "d2"):
        write_deltalake(str(warehouse / name), _rows(0, 3))
        deltas.append(services.table_register(location=str(warehouse / name)))
    row = services.catalog_create(
        name=f"lake-{uuid.uuid4().hex[:8]}", kind="iceberg_sql", properties={"warehouse": warehouse.as_uri()}
    )
    catalog = iceberg_catalog(row)
    catalog.create_namespace("ns")
    by_catalog = catalog.create_table("ns.events", schema=SCHEMA)
    by_catalog.append(_rows(0, 4))
    by_path = catalog.create_table("ns.other", schema=SCHEMA)
    by_path.append(_rows(0, 5))
    return {
        "delta": deltas[0],
        "idle": deltas[1],
        "catalog": services.table_register(catalog=row, identifier="ns.events"),
        "path": services.table_register(location=by_path.location().removeprefix("file://")),
        "pyiceberg": (by_catalog, by_path),
        "warehouse": warehouse,
    }


def _all_ids() -> list[int]:
    return list(Table.objects.order_by("pk").values_list("pk", flat=True))


def _fresh(table: Table) -> Table:
    return Table.objects.get(pk=table.pk)


def test_the_first_pass_refreshes_every_table_and_keeps_its_pointer(lake):
    report = refresh_changed(_all_ids())

    assert sorted(report.refreshed) == _all_ids() and report.unchanged == 0
    by_catalog, by_path = lake["pyiceberg"]
    assert _fresh(lake["delta"]).metadata_pointer == "delta:0"
    assert _fresh(lake["catalog"]).metadata_pointer == f"catalog:{by_catalog.metadata_location}"
    assert _fresh(lake["path"]).metadata_pointer == "iceberg:" + by_path.metadata_location.rsplit("/", 1)[-1]


def test_a_pass_rereads_only_the_tables_that_moved(lake):
    from deltalake import write_deltalake

    refresh_changed(_all_ids())
    before = {pk: at for pk, at in Table.objects.values_list("pk", "refreshed_at")}
    write_deltalake(str(lake["warehouse"] / "d1"), _rows(10, 2), mode="append")
    by_catalog, by_path = lake["pyiceberg"]
    by_catalog.append(_rows(10, 6))
    by_path.append(_rows(20, 1))

    report = refresh_changed(_all_ids())

    moved = [lake["delta"].pk, lake["catalog"].pk, lake["path"].pk]
    assert report.refreshed == sorted(moved) and report.unchanged == 1
    delta, catalog, path, idle = (_fresh(lake[k]) for k in ("delta", "catalog", "path", "idle"))
    assert (delta.current_instant, delta.record_count, delta.metadata_pointer) == ("1", 5, "delta:1")
    by_catalog.refresh()
    assert catalog.current_instant == str(by_catalog.current_snapshot().snapshot_id)
    assert catalog.record_count == 10
    by_path.refresh()
    assert (path.current_instant, path.record_count) == (str(by_path.current_snapshot().snapshot_id), 6)
    assert idle.refreshed_at == before[idle.pk]  # not re-read, not written
    assert refresh_changed(_all_ids()).refreshed == []  # nothing moved since


def test_a_table_whose_refresh_failed_is_tried_again_each_pass(lake):
    refresh_changed(_all_ids())
    shutil.rmtree(lake["warehouse"] / "d2")

    first = refresh_changed(_all_ids())
    second = refresh_changed(_all_ids())

    idle = _fresh(lake["idle"])
    assert first.refreshed == second.refreshed == [idle.pk]
    assert "d2" in idle.refresh_error and idle.metadata_pointer == ""
    assert _fresh(lake["delta"]).metadata_pointer == "delta:0"  # the others untouched


def test_a_pass_over_2000_unchanged_tables_costs_one_query_a_batch(warehouse):
    for i in range(2000):
        log = warehouse / f"t{i}" / "_delta_log"
        log.mkdir(parents=True)
        (log / f"{0:020d}.json").touch()
    Table.objects.bulk_create(
        Table(name=f"t{i}", format="delta", location=str(warehouse / f"t{i}"), metadata_pointer="delta:0")
        for i in range(2000)
    )
    (warehouse / "t7" / "_delta_log" / f"{1:020d}.json").touch()
    queued: list[int] = []
    ids = _all_ids()

    with CaptureQueriesContext(connection) as captured:
        report = refresh_changed(ids, refresh=queued.append)

    assert len(captured.captured_queries) == 1
    assert report.checked == 2000 and report.unchanged == 1999
    assert queued == [Table.objects.get(name="t7").pk]


@pytest.mark.parametrize("name", ["cow_v6_nonpartitioned", "cow_v8_nonpartitioned"])
def test_a_hudi_pointer_is_the_newest_completed_instant_and_moves_with_a_commit(hudi_fixture, tmp_path, name):
    from storage.pointers import table_pointer
    from storage.spec import load_table

    folder = tmp_path / name
    shutil.copytree(hudi_fixture(name), folder)
    table = Table(format="hudi", location=str(folder))
    latest = str(load_table(str(folder), format="hudi").timeline().latest().id)

    pointer = table_pointer(table)

    assert pointer.startswith(f"hudi:{latest}.")
    timeline = folder / ".hoodie" / "timeline"
    if timeline.is_dir():  # table version 8: <requested>_<completed>.<action>
        (timeline / "29990101000000000.commit.requested").touch()
        assert table_pointer(table) == pointer  # requested is not completed
        (timeline / "29990101000000000_29990101000000001.commit").touch()
    else:
        (folder / ".hoodie" / "29990101000000000.commit.requested").touch()
        assert table_pointer(table) == pointer
        (folder / ".hoodie" / "29990101000000000.commit").touch()
    assert table_pointer(table).startswith("hudi:29990101000000000.commit:")
