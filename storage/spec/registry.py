"""Discovery of table format adapters through the ``lakewarden.table_formats`` entry points."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import pyarrow.fs as pafs

from storage.io.stores import StoreOptions, filesystem, join
from storage.plugins import Plugins, discover_plugins
from storage.spec.errors import TableNotFound, UnknownFormat
from storage.spec.table import SpecTable, TableFormatAdapter

ENTRY_POINT_GROUP = "lakewarden.table_formats"

#: Formats served by plugin packages that ship beside Lakewarden (``plugins/``) rather than in it:
#: the folder that marks such a table, and what to install. A table of one of them met without its
#: plugin is named as such, not as "no table" or an unknown format.
PLUGIN_FORMATS: Mapping[str, tuple[str, str]] = {
    "lance": ("_versions", "lakewarden-lance"),
    "paimon": ("snapshot", "lakewarden-paimon"),
}


def missing_plugin(format_name: str) -> str | None:
    """How to get the plugin of ``format_name`` when it is a known plugin format not installed."""
    if format_name not in PLUGIN_FORMATS or format_name in format_adapters():
        return None
    package = PLUGIN_FORMATS[format_name][1]
    return f"install the {package} plugin (.venv/bin/pip install -e plugins/{package}) and restart"


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
    advice = missing_plugin(format_name)
    if advice:
        raise UnknownFormat(f"table format {format_name!r} needs a plugin that is not installed: {advice}")
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
    raise TableNotFound(
        f"no table at {location}: found none of {looked_for}{_broken_note()}{_plugin_note(location, storage)}"
    )


def _plugin_note(location: str, storage: StoreOptions | None) -> str:
    """``; it looks like a lance table: install ...`` when a plugin format's marker folder is
    there and its plugin is not installed."""
    for name, (marker, _) in PLUGIN_FORMATS.items():
        advice = missing_plugin(name)
        if advice is None:
            continue
        try:
            fs, path = filesystem(join(location, marker), storage)
            found = fs.get_file_info(path).type == pafs.FileType.Directory
        except Exception:  # a note must never turn into an error of its own
            found = False
        if found:
            return f"; it looks like a {name} table: {advice}"
    return ""


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
