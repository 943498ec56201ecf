"""A table's metadata pointer: the cheapest read that changes whenever the table does (issue 17).

A refresh keeps the pointer it saw on the table row (``Table.metadata_pointer``); a refresh pass
reads the pointer of every table and re-reads the metadata only of tables whose pointer moved.

- Iceberg in a catalog: the catalog's metadata location (a SQL catalog: one row of its
  ``iceberg_tables``; a REST catalog: the location its ``loadTable`` answers).
- Any other table: what its format adapter's ``metadata_pointer`` answers (Iceberg by path: the
  current ``*.metadata.json``'s name; Delta: the last log version; Hudi: the newest completed
  instant). Formats without a cheap pointer answer None: they are refreshed every pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from storage.catalogs import iceberg_catalog, store_options_for
from storage.io import is_object_store
from storage.models import Catalog, CatalogKind, Table
from storage.spec import format_adapters

ICEBERG_CATALOG_KINDS = (CatalogKind.ICEBERG_SQL, CatalogKind.ICEBERG_REST)


def table_pointer(table: Table, *, roots: Iterable[Catalog] | None = None) -> str | None:
    """The table's pointer now, or None when its format has none. Raises what reading it raised
    (a missing folder, a catalog's refusal): the caller refreshes such a table fully, which
    records the error on its row. ``roots``: the path-root catalogs, when a pass over many
    tables read them once (``store_options_for``)."""
    if table.catalog_id is not None and table.identifier and table.catalog.kind in ICEBERG_CATALOG_KINDS:
        return "catalog:" + _catalog_metadata_location(table)
    adapter = format_adapters().get(table.format)
    if adapter is None:
        return None
    on_store = is_object_store(table.location)
    storage = store_options_for(table.location, table.catalog, roots=roots) if on_store else None
    pointer = adapter.metadata_pointer(table.location, storage)
    return None if pointer is None else f"{table.format}:{pointer}"


def _catalog_metadata_location(table: Table) -> str:
    catalog = iceberg_catalog(table.catalog)
    if table.catalog.kind == CatalogKind.ICEBERG_SQL:
        return _sql_catalog_location(catalog, table.identifier)
    return str(catalog.load_table(table.identifier).metadata_location)


def _sql_catalog_location(catalog: Any, identifier: str) -> str:
    """The ``metadata_location`` column of the SQL catalog's row: no metadata file is read."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.catalog.sql import IcebergTables
    from pyiceberg.exceptions import NoSuchTableError
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
    name = Catalog.table_name_from(identifier)
    with Session(catalog.engine) as session:
        location = session.scalar(
            select(IcebergTables.metadata_location).where(
                IcebergTables.catalog_name == catalog.name,
                IcebergTables.table_namespace == namespace,
                IcebergTables.table_name == name,
            )
        )
    if location is None:
        raise NoSuchTableError(f"Table does not exist: {namespace}.{name}")
    return str(location)


def pointer_or_blank(table: Table) -> str:
    """The pointer to keep on the row after a refresh: blank when there is none or it cannot be
    read (a blank pointer always counts as moved, so the next pass refreshes the table again)."""
    try:
        return table_pointer(table) or ""
    except Exception:  # noqa: BLE001 - the refresh itself reports what is wrong with the table
        return ""
