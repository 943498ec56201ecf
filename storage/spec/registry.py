"""Discovery of table format adapters through the ``lakewarden.table_formats`` entry points."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from storage.io.stores import StoreOptions
from storage.plugins import Plugins, discover_plugins
from storage.spec.errors import TableNotFound, UnknownFormat
from storage.spec.table import SpecTable, TableFormatAdapter

ENTRY_POINT_GROUP = "lakewarden.table_formats"


@functools.cache
def _discover() -> Plugins[TableFormatAdapter]:
    return discover_plugins(ENTRY_POINT_GROUP, TableFormatAdapter)


def format_adapters() -> Mapping[str, type[TableFormatAdapter]]:
    """Adapters by format name, loaded once; the mapping is read-only afterwards. An adapter that
    fails to load is left out (see ``broken_format_adapters``); the others still work."""
    return _discover().found


def broken_format_adapters() -> Mapping[str, str]:
    """Entry points that could not be loaded as adapters, with the reason."""
    return _discover().broken


def _adapter(format_name: str) -> type[TableFormatAdapter]:
    adapters = format_adapters()
    try:
        return adapters[format_name]
    except KeyError:
        pass
    broken = broken_format_adapters()
    if format_name in broken:
        raise UnknownFormat(f"table format {format_name!r} is installed but {broken[format_name]}")
    known = ", ".join(sorted(adapters)) or "none"
    raise UnknownFormat(f"unknown table format {format_name!r} (known: {known}{_broken_note()})")


def _broken_note() -> str:
    broken = broken_format_adapters()
    if not broken:
        return ""
    return "; broken: " + "; ".join(f"{name}: {reason}" for name, reason in sorted(broken.items()))


def detect_format(location: str, storage: StoreOptions | None = None) -> str:
    """The name of the format whose adapter recognises ``location`` (on an object store, by
    listing the prefix with ``storage``'s credentials)."""
    adapters = format_adapters()
    for name, adapter in adapters.items():
        found = adapter.detect(location) if storage is None else adapter.detect(location, storage=storage)
        if found:
            return name
    looked_for = ", ".join(adapters[name].looks_for or name for name in sorted(adapters)) or "no adapter"
    raise TableNotFound(f"no table at {location}: found none of {looked_for}{_broken_note()}")


def load_table(
    location_or_identifier: str,
    format: str | None = None,
    catalog: Any = None,
    storage: StoreOptions | None = None,
) -> SpecTable:
    """Open a table by location (any format) or by catalog identifier (Iceberg with ``catalog``).

    ``catalog`` is a pyiceberg ``Catalog`` or a dict of pyiceberg catalog properties; ``storage``
    the object store's credentials (None: from the environment). Adapters of plugins written
    before ``storage`` existed are called without it when it is None.
    """
    if format is None:
        format = "iceberg" if catalog is not None else detect_format(location_or_identifier, storage)
    adapter = _adapter(format)
    if storage is None:
        return adapter.open(location_or_identifier, catalog=catalog)
    return adapter.open(location_or_identifier, catalog=catalog, storage=storage)
