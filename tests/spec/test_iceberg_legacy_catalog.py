"""Legacy Iceberg v1 metadata served through a catalog: a SQL catalog row, or a REST catalog
registration, naming a legacy v1 metadata file (``test_iceberg_legacy._legacy_table``: ``schema``
and ``partition-spec`` only, no ``current-snapshot-id``, inline ``manifests`` or manifest lists)
opens and reads exactly as the same file registered by location, although pyiceberg's own catalog
code cannot load it. Such a table is read-only for maintenance (the catalog commits through
pyiceberg's model, which cannot read the file): every Iceberg process refuses or fails cleanly and
the table's files stay as they were.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage.spec import load_table
from storage.spec.errors import CorruptTable
from tests.spec.test_iceberg_legacy import _legacy_table

LEGACY_ROWS = {101: [(1, "eu"), (2, "eu")], 202: [(1, "eu"), (2, "eu"), (3, "us")]}


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def _register_row(catalog: Any, identifier: str, metadata_location: str) -> None:
    """The catalog's row for the table, written as another engine would have (pyiceberg's own
    ``register_table`` parses the file first and cannot)."""
    from pyiceberg.catalog.sql import IcebergTables
    from sqlalchemy.orm import Session

    namespace, name = identifier.rsplit(".", 1)
    catalog.create_namespace_if_not_exists(namespace)
    with Session(catalog.engine) as session:
        session.add(
            IcebergTables(
                catalog_name=catalog.name,
                table_namespace=namespace,
                table_name=name,
                metadata_location=metadata_location,
                previous_metadata_location=None,
            )
        )
        session.commit()


def _same_table(by_catalog: Any, by_location: Any, ids: list[int]) -> None:
    """Every answer of the two opens is the same: facts, timeline, listings, reads, splits."""
    assert by_catalog.summary() == by_location.summary()
    assert by_catalog.timeline().instants() == by_location.timeline().instants()
    assert [i.id for i in by_catalog.timeline().instants()] == ids
    assert by_catalog.timeline().latest() is None and by_catalog.read_arrow().num_rows == 0
    assert by_catalog.schema == by_location.schema
    assert by_catalog.partition_spec == by_location.partition_spec
    for snapshot in ids:
        assert _rows(by_catalog.read_arrow(snapshot)) == LEGACY_ROWS[snapshot]
        assert _rows(by_location.read_arrow(snapshot)) == LEGACY_ROWS[snapshot]
        listed = [
            (s.base_file.path, s.base_file.record_count, dict(s.partition.values))
            for s in by_catalog.file_index().list_files_at(snapshot)
        ]
        assert listed == [
            (s.base_file.path, s.base_file.record_count, dict(s.partition.values))
            for s in by_location.file_index().list_files_at(snapshot)
        ]
        splits = list(by_catalog.plan_splits(snapshot))
        assert (
            sorted(r for split in splits for r in _rows(by_catalog.read_arrow(split)))
            == LEGACY_ROWS[snapshot]
        )
    changes = [(c.kind.value, c.instant_id) for c in by_catalog.file_index().list_files_between(None, ids[1])]
    assert changes == [("added", ids[0]), ("added", ids[1])]


@pytest.fixture
def catalog(tmp_path, sql_catalog):
    """A pyiceberg SQL catalog (on Postgres) of this test's own."""
    return sql_catalog("legacy", tmp_path.as_uri())


@pytest.mark.parametrize("inline", [True, False], ids=["inline-manifests", "manifest-list"])
def test_a_sql_catalog_row_naming_a_legacy_file_reads_as_the_file_does(tmp_path, catalog, inline):
    from pyiceberg.table import StaticTable

    location, ids = _legacy_table(tmp_path, inline)
    _register_row(catalog, "old.orders", location)
    with pytest.raises(Exception, match="field-id"):  # why the catalog's own load cannot serve it
        catalog.load_table("old.orders")
    by_catalog = load_table("old.orders", format="iceberg", catalog=catalog)
    assert by_catalog.definition.id.identifier == "old.orders"
    assert isinstance(by_catalog.pyiceberg_table, StaticTable)  # read-only: nothing commits on it
    _same_table(by_catalog, load_table(location), ids)


def test_a_table_pyiceberg_reads_stays_committable_and_catalog_tables_read_defaults(tmp_path, catalog):
    from pyiceberg.table import StaticTable

    from tests.spec.test_iceberg_defaults import defaults_table

    catalog.create_namespace("now")
    modern = catalog.create_table("now.t", schema=pa.schema([pa.field("id", pa.int64())]))
    modern.append(pa.table({"id": pa.array([5, 6], pa.int64())}))
    opened = load_table("now.t", format="iceberg", catalog=catalog)
    assert not isinstance(opened.pyiceberg_table, StaticTable)  # maintenance may commit on it
    assert opened.pyiceberg_table.catalog is catalog
    assert _rows(opened.read_arrow()) == [(5,), (6,)]
    # column defaults (initial-default) reach reads of catalog tables as of location ones
    location, _, _ = defaults_table(tmp_path / "defaults")
    _register_row(catalog, "now.defaults", location.removeprefix("file://"))
    by_catalog = load_table("now.defaults", format="iceberg", catalog=catalog)
    expected = load_table(location).read_arrow()
    assert by_catalog.read_arrow().to_pylist() == expected.to_pylist()
    assert by_catalog.schema == expected.schema


def test_a_catalog_row_naming_bad_metadata_is_a_clean_error(tmp_path, catalog):
    location, ids = _legacy_table(tmp_path, inline=True)
    document = json.loads(Path(location).read_text())
    cases = {
        "missing": (str(tmp_path / "nowhere.metadata.json"), "missing"),
        "dangling": ({**document, "current-snapshot-id": 999}, "current-snapshot-id 999 names no snapshot"),
        "main": (
            {**document, "refs": {"main": {"snapshot-id": ids[1], "type": "branch"}}},
            "main branch names snapshot 202 but there is no current snapshot",
        ),
    }
    for name, (content, message) in cases.items():
        path = content if isinstance(content, str) else str(tmp_path / f"{name}.metadata.json")
        if not isinstance(content, str):
            Path(path).write_text(json.dumps(content))
        _register_row(catalog, f"bad.{name}", path)
        with pytest.raises(CorruptTable, match=message):
            load_table(f"bad.{name}", format="iceberg", catalog=catalog)


# -- the console's SQL catalog and the maintenance processes ----------------------------------------


def _folder_state(root: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in root.rglob("*")
        if p.is_file()
    }


def _age(root: Path, days: int) -> None:
    when = (dt.datetime.now() - dt.timedelta(days=days)).timestamp()
    for path in root.rglob("*"):
        os.utime(path, (when, when))


@pytest.fixture
def run_process(transactional_db, monkeypatch):
    """``run(table, action)`` -> the Process row after the executor ran it (nothing sent to Celery)."""
    from processes import executor, services

    monkeypatch.setattr(services, "process_enqueue", lambda process: None)

    def run(table, action: str):
        process = services.process_create(table=table, action=action, params={})
        executor.run_process(process.pk)
        process.refresh_from_db()
        return process

    return run


def test_maintenance_refuses_a_legacy_catalog_table_and_leaves_its_files(warehouse, run_process):
    from processes.models import ProcessStatus
    from processes.registry import coordinators
    from processes.runtime import TableRuntime
    from storage import services
    from storage.catalogs import iceberg_catalog

    row = services.catalog_create(
        name=f"lake-{uuid.uuid4().hex[:6]}", kind="iceberg_sql", properties={"warehouse": warehouse.as_uri()}
    )
    location, ids = _legacy_table(warehouse, inline=True)
    _register_row(iceberg_catalog(row), "old.orders", location)
    table = services.table_register(catalog=row, identifier="old.orders")
    assert (table.current_instant, table.instant_count, table.file_count, table.record_count) == ("", 2, 0, 0)
    root = warehouse / "legacy"
    orphan = root / "data" / "left-behind.parquet"
    orphan.write_bytes(b"not referenced by any snapshot")
    _age(root, days=30)  # old enough for orphan cleanup: only a wrong reference list could delete
    before = _folder_state(root)
    actions = sorted(action for (fmt, action) in coordinators() if fmt == "iceberg")
    assert {"rewrite", "expire-snapshots", "clean-orphan-files"} <= set(actions)
    for action in actions:
        configured = coordinators()[("iceberg", action)]
        runtime = TableRuntime(table, configured.factory.properties)
        if action != "clean-orphan-files":
            assert configured.factory.trigger(runtime, action) is None, action
        process = run_process(table, action)
        assert process.status in (ProcessStatus.FAILED, ProcessStatus.SUCCESS), (action, process.status)
        if action != "clean-orphan-files":  # a commit is needed: refused, said why
            assert process.status == ProcessStatus.FAILED, (action, process.summary)
            assert process.failure, action
        assert _folder_state(root) == before, action  # nothing written, nothing deleted
    assert _rows(load_table(location).read_arrow(ids[1])) == LEGACY_ROWS[ids[1]]


# -- REST ---------------------------------------------------------------------------------------------


def _upload(seaweedfs: Any, folder: Path, prefix: str) -> None:
    filesystem = seaweedfs.filesystem()
    target = prefix.removeprefix("s3://")
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with filesystem.open_output_stream(f"{target}/{path.relative_to(folder).as_posix()}") as out:
                out.write(path.read_bytes())


@pytest.mark.parametrize("inline", [True, False], ids=["inline-manifests", "manifest-list"])
def test_a_rest_catalog_registration_of_a_legacy_file_reads_as_the_file_does(
    tmp_path, seaweedfs, s3_options, inline
):
    from pyiceberg.catalog import load_catalog
    from pyiceberg.table import StaticTable

    catalog = load_catalog(
        f"writer-{uuid.uuid4().hex[:6]}", type="rest", **seaweedfs.rest_catalog_properties()
    )
    namespace = f"legacy_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    base = f"s3://lakehouse/{namespace}/orders"
    _, ids = _legacy_table(tmp_path, inline, base=base)
    _upload(seaweedfs, tmp_path / "legacy", base)
    served = catalog.register_table(f"{namespace}.orders", f"{base}/metadata/v1.metadata.json")
    # the server accepts the file but describes it as an empty v2 table: its own object is wrong
    assert served.metadata.snapshots == [] and served.metadata.format_version == 2
    by_catalog = load_table(f"{namespace}.orders", format="iceberg", catalog=catalog)
    assert isinstance(by_catalog.pyiceberg_table, StaticTable)
    _same_table(by_catalog, load_table(base, format="iceberg", storage=s3_options), ids)


def test_the_console_registers_a_legacy_rest_table_and_maintenance_skips_it(tmp_path, seaweedfs, db):
    from processes.registry import coordinators
    from processes.runtime import TableRuntime
    from storage import selectors, services

    row = services.catalog_create(
        name=f"rest-{uuid.uuid4().hex[:6]}",
        kind="iceberg_rest",
        properties=seaweedfs.rest_catalog_properties(),
    )
    from storage.catalogs import iceberg_catalog

    namespace = f"legacy_{uuid.uuid4().hex[:8]}"
    iceberg_catalog(row).create_namespace(namespace)
    base = f"s3://lakehouse/{namespace}/orders"
    _, ids = _legacy_table(tmp_path, inline=True, base=base)
    _upload(seaweedfs, tmp_path / "legacy", base)
    iceberg_catalog(row).register_table(f"{namespace}.orders", f"{base}/metadata/v1.metadata.json")
    table = services.table_register(catalog=row, identifier=f"{namespace}.orders")
    assert (table.current_instant, table.instant_count, table.file_count) == ("", 2, 0)
    page = selectors.table_files(table=table, query=selectors.spec_query_parse({"at": "202"}))
    assert sorted(f.base_file.record_count for f in page.files) == [1, 2]
    assert selectors.table_files(table=table, query=selectors.spec_query_parse({})).files == []
    for action in ("rewrite", "expire-snapshots"):
        configured = coordinators()[("iceberg", action)]
        assert configured.factory.trigger(TableRuntime(table, configured.factory.properties), action) is None
