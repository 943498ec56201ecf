"""Registering tables: by location and by catalog identifier, and every kind of bad input."""

from __future__ import annotations

import uuid

import pytest

from storage import services
from storage.errors import InvalidInput
from storage.models import Catalog, CatalogKind, Table
from tests.console.tables import write_delta_table, write_iceberg_table

pytestmark = pytest.mark.django_db


def test_registering_a_delta_table_by_location_stores_its_format_and_metadata_facts(warehouse):
    path = write_delta_table(warehouse / "sales", commits=3)

    table = services.table_register(location=str(path))

    assert table.format == "delta"
    assert table.name == "sales"
    assert table.location == str(path)
    assert table.current_instant == "2"
    assert table.file_count == 3
    assert table.record_count == 30
    assert table.total_bytes == sum(f.stat().st_size for f in path.glob("*.parquet"))
    assert Table.objects.get().pk == table.pk


def test_registering_an_iceberg_table_by_catalog_identifier_reads_it_through_the_sql_catalog(warehouse):
    catalog = services.catalog_create(
        name="lake", kind=CatalogKind.ICEBERG_SQL, properties={"warehouse": warehouse.as_uri()}
    )
    identifier = f"ns_{uuid.uuid4().hex[:8]}.orders"
    iceberg_table = write_iceberg_table(services.iceberg_catalog(catalog), identifier, commits=4)

    table = services.table_register(catalog=catalog, identifier=identifier)

    assert table.format == "iceberg"
    assert table.identifier == identifier
    assert table.current_instant == str(iceberg_table.current_snapshot().snapshot_id)
    assert table.file_count == 4
    assert table.record_count == 40
    assert table.instant_count == 4


def test_registering_a_hudi_table_written_by_spark_detects_the_format(hudi_fixture, settings):
    path = hudi_fixture("cow_v6_nonpartitioned")
    settings.LAKEWARDEN_ALLOWED_ROOTS = [path.parent]

    table = services.table_register(location=str(path))

    assert table.format == "hudi"
    assert table.file_count >= 1


@pytest.mark.parametrize(
    ("make_location", "message"),
    [
        (lambda root: str(root / "missing"), "does not exist"),
        (lambda root: "/etc", "outside the allowed roots"),
        (lambda root: str(root / ".." / ".." / "etc"), "outside the allowed roots"),
        (lambda root: "relative/path", "not an absolute path"),
        (lambda root: "s3://bucket/table", "outside the allowed roots"),
        (lambda root: "", "give a location"),
    ],
    ids=["missing", "outside", "dot-dot", "relative", "object-store", "empty"],
)
def test_registering_a_bad_location_is_refused_with_the_problem_named_and_nothing_stored(
    warehouse, make_location, message
):
    with pytest.raises(InvalidInput, match=message) as refused:
        services.table_register(location=make_location(warehouse))

    assert refused.value.field == "location"
    assert Table.objects.count() == 0


def test_a_symlink_leading_out_of_the_allowed_roots_is_refused(warehouse, tmp_path):
    outside = write_delta_table(tmp_path / "outside_table", commits=1)
    (warehouse / "innocent").symlink_to(outside)

    with pytest.raises(InvalidInput, match="outside the allowed roots"):
        services.table_register(location=str(warehouse / "innocent"))
    assert Table.objects.count() == 0


def test_a_folder_without_a_table_is_refused(warehouse):
    (warehouse / "just_files").mkdir()
    (warehouse / "just_files" / "notes.txt").write_text("hello")

    with pytest.raises(InvalidInput, match="holds no table"):
        services.table_register(location=str(warehouse / "just_files"))
    assert Table.objects.count() == 0


def test_a_corrupt_delta_log_is_refused(warehouse):
    log = warehouse / "broken" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("{this is not json")

    with pytest.raises(InvalidInput, match="broken"):
        services.table_register(location=str(warehouse / "broken"))
    assert Table.objects.count() == 0


def test_a_corrupt_iceberg_metadata_file_is_refused(warehouse):
    metadata = warehouse / "broken_iceberg" / "metadata"
    metadata.mkdir(parents=True)
    (metadata / "v1.metadata.json").write_text('{"format-version": 2, "truncated')

    with pytest.raises(InvalidInput, match="broken_iceberg"):
        services.table_register(location=str(warehouse / "broken_iceberg"))
    assert Table.objects.count() == 0


def test_an_unknown_format_is_refused_naming_the_known_ones(warehouse):
    path = write_delta_table(warehouse / "t", commits=1)

    with pytest.raises(InvalidInput, match="unknown table format 'orc'.*delta") as refused:
        services.table_register(location=str(path), format="orc")
    assert refused.value.field == "format"
    assert Table.objects.count() == 0


def test_the_wrong_format_for_a_folder_is_refused(warehouse):
    path = write_delta_table(warehouse / "t", commits=1)

    with pytest.raises(InvalidInput):
        services.table_register(location=str(path), format="iceberg")
    assert Table.objects.count() == 0


def test_registering_the_same_table_twice_is_refused_and_keeps_one_row(warehouse):
    path = write_delta_table(warehouse / "t", commits=1)
    services.table_register(location=str(path))

    with pytest.raises(InvalidInput, match="already registered"):
        services.table_register(location=str(path) + "/")
    with pytest.raises(InvalidInput, match="already registered"):
        services.table_register(location=str(warehouse / "." / "t"))
    assert Table.objects.count() == 1


def test_an_identifier_without_a_catalog_or_in_a_path_root_catalog_is_refused(warehouse):
    root_catalog = Catalog.objects.create(
        name="paths", kind=CatalogKind.PATH_ROOT, properties={"root": str(warehouse)}
    )

    with pytest.raises(InvalidInput, match="needs a catalog"):
        services.table_register(identifier="ns.t")
    with pytest.raises(InvalidInput, match="path root"):
        services.table_register(catalog=root_catalog, identifier="ns.t")
    assert Table.objects.count() == 0


def test_an_unknown_identifier_in_an_iceberg_catalog_is_refused(warehouse):
    catalog = services.catalog_create(
        name="lake", kind=CatalogKind.ICEBERG_SQL, properties={"warehouse": warehouse.as_uri()}
    )

    with pytest.raises(InvalidInput, match="nope.missing") as refused:
        services.table_register(catalog=catalog, identifier="nope.missing")
    assert refused.value.field == "identifier"
    assert Table.objects.count() == 0


def test_syncing_a_path_root_catalog_registers_each_table_once(warehouse):
    write_delta_table(warehouse / "a", commits=1)
    write_delta_table(warehouse / "nested" / "b", commits=2)
    (warehouse / "empty_folder").mkdir()
    catalog = services.catalog_create(
        name="paths", kind=CatalogKind.PATH_ROOT, properties={"root": str(warehouse)}
    )

    first = services.catalog_sync(catalog=catalog)
    second = services.catalog_sync(catalog=catalog)

    assert sorted(first.added) == sorted([str(warehouse / "a"), str(warehouse / "nested" / "b")])
    assert second.added == [] and len(second.already_registered) == 2
    assert Table.objects.count() == 2


def test_syncing_an_iceberg_catalog_registers_tables_of_every_namespace(warehouse):
    catalog = services.catalog_create(
        name="lake", kind=CatalogKind.ICEBERG_SQL, properties={"warehouse": warehouse.as_uri()}
    )
    prefix = f"ns_{uuid.uuid4().hex[:8]}"
    pyiceberg_catalog = services.iceberg_catalog(catalog)
    write_iceberg_table(pyiceberg_catalog, f"{prefix}_a.one", commits=1)
    write_iceberg_table(pyiceberg_catalog, f"{prefix}_b.two", commits=2)

    report = services.catalog_sync(catalog=catalog)

    assert {f"{prefix}_a.one", f"{prefix}_b.two"} <= set(report.added)
    assert set(Table.objects.filter(catalog=catalog).values_list("format", flat=True)) == {"iceberg"}


def test_a_path_root_catalog_outside_the_allowed_roots_is_refused(warehouse):
    with pytest.raises(InvalidInput, match="outside the allowed roots"):
        services.catalog_create(name="escape", kind=CatalogKind.PATH_ROOT, properties={"root": "/"})
    assert Catalog.objects.count() == 0


def test_refreshing_a_table_whose_files_vanished_records_the_error_instead_of_failing(warehouse):
    import shutil

    path = write_delta_table(warehouse / "t", commits=2)
    table = services.table_register(location=str(path))
    shutil.rmtree(path / "_delta_log")

    services.table_refresh(table=table)

    table.refresh_from_db()
    assert table.refresh_error
    assert table.file_count == 2  # the last good facts stay
