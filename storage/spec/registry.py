"""Discovery of table format adapters through the ``lakewarden.table_formats`` entry points."""

from __future__ import annotations

import functools
from importlib.metadata import entry_points
from typing import Any

from storage.spec.errors import TableNotFound, UnknownFormat
from storage.spec.table import SpecTable, TableFormatAdapter

ENTRY_POINT_GROUP = "lakewarden.table_formats"


@functools.cache
def format_adapters() -> dict[str, type[TableFormatAdapter]]:
    """Adapters by format name, loaded once; the mapping is read-only afterwards."""
    adapters: dict[str, type[TableFormatAdapter]] = {}
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        adapters[entry_point.name] = entry_point.load()
    return adapters


def _adapter(format_name: str) -> type[TableFormatAdapter]:
    adapters = format_adapters()
    try:
        return adapters[format_name]
    except KeyError:
        known = ", ".join(sorted(adapters)) or "none"
        raise UnknownFormat(f"unknown table format {format_name!r} (known: {known})") from None


def detect_format(location: str) -> str:
    """The name of the format whose adapter recognises ``location``."""
    for name, adapter in format_adapters().items():
        if adapter.detect(location):
            return name
    raise TableNotFound(f"no Iceberg metadata, _delta_log or .hoodie folder found at {location}: not a table")


def load_table(location_or_identifier: str, format: str | None = None, catalog: Any = None) -> SpecTable:
    """Open a table by location (any format) or by catalog identifier (Iceberg with ``catalog``).

    ``catalog`` is a pyiceberg ``Catalog`` or a dict of pyiceberg catalog properties.
    """
    if format is None:
        format = "iceberg" if catalog is not None else detect_format(location_or_identifier)
    return _adapter(format).open(location_or_identifier, catalog=catalog)
