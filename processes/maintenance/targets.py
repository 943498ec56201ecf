"""Which table a process may commit to, and with which credentials: one rule each.

``store_options`` is the one credentials lookup of the built-in factories; an Iceberg process
commits only through ``iceberg_commit_target`` (a table with a catalog, and with a guard: a table
whose location and new-file locations the path guard allows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, overload

from processes.maintenance.errors import InputError
from storage.io import StoreOptions, is_object_store
from storage.io.guard import OutsideTable, PathGuard

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from processes.runtime import TableRuntime


def store_options(context_or_runtime: Any, iceberg_table: Any = None) -> StoreOptions | None:
    """The table's object-store credentials: its catalog's, its root's or the environment's
    (``TableRuntime.store_options``); None for a local table or a runtime outside the console.
    Takes a process context (its ``runtime``) or a runtime. With ``iceberg_table`` (a pyiceberg
    table on an object store), where the console has none, those of the table's own file IO."""
    runtime = getattr(context_or_runtime, "runtime", context_or_runtime)
    options = getattr(runtime, "store_options", None)
    found = options() if callable(options) else None
    if found is None and iceberg_table is not None and is_object_store(iceberg_table.location()):
        properties = iceberg_table.io.properties or {}
        found = StoreOptions.from_properties({k: v for k, v in properties.items() if isinstance(v, str)})
    return found


def iceberg_commit_target(spec_table: Any, guard: PathGuard | None = None) -> Table:
    """The pyiceberg table to commit to; with ``guard`` (a running process's), also refused
    unless the table's location and where new data and metadata files go (its location
    provider: ``write.data.path``, ``write.metadata.path``) are places the guard allows."""
    from pyiceberg.table import StaticTable

    table = getattr(spec_table, "pyiceberg_table", None)
    if table is None or isinstance(table, StaticTable):
        raise InputError(
            "this Iceberg table is registered by location without a catalog, or its catalog serves"
            " legacy v1 metadata pyiceberg cannot write back (read-only): rewrites need a catalog to"
            " commit atomically (a second writer could overwrite or lose a metadata version)"
        )
    if guard is not None:
        provider = table.location_provider()
        places = {
            "the table location": table.location(),
            "new data files": provider.new_data_location("lakewarden-probe.parquet"),
            "new metadata files": provider.new_metadata_location("lakewarden-probe.avro"),
        }
        try:
            guard.check_location()
            for what, where in places.items():
                guard.check(where, f"write {what} at")
        except OutsideTable as refused:
            raise InputError(f"{refused}; nothing was written") from None
    return table


#: Why the scheduler finds nothing to do on an Iceberg table ``iceberg_catalog_table`` gave no table for.
NO_CATALOG = "nothing would run: the table has no catalog to commit through (registered by location)"


@overload
def iceberg_catalog_table(runtime: TableRuntime, *, strict: Literal[True]) -> Table: ...
@overload
def iceberg_catalog_table(runtime: TableRuntime, *, strict: bool = False) -> Table | None: ...
def iceberg_catalog_table(runtime: TableRuntime, *, strict: bool = False) -> Table | None:
    """The table's pyiceberg table with a catalog to commit through; for one registered by location
    None (its run refuses it, saying why) or, ``strict``, an ``InputError`` saying why."""
    try:
        return iceberg_commit_target(runtime.load())
    except ValueError as error:
        if strict:
            raise InputError(str(error)) from None
        return None
