"""The one plugin discovery function: an entry-point group loaded into read-only mappings.

    found, broken = discover_plugins("lakewarden.table_formats", TableFormatAdapter)

Every registry (table formats, result storages, process factories) loads its group through
``discover_plugins`` once and keeps the answer: ``found`` maps entry-point names to classes,
``broken`` maps the names of entry points that failed to import, or that name something other
than a subclass of the base, to a message naming the entry point. A broken plugin never keeps the
others from loading; it is logged once and shown where plugins are listed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Generic, NamedTuple, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Plugins(NamedTuple, Generic[T]):
    """What ``discover_plugins`` found: classes by entry-point name, and broken entry points
    with the reason (both read-only)."""

    found: Mapping[str, type[T]]
    broken: Mapping[str, str]


def discover_plugins(group: str, base: type[T]) -> Plugins[T]:
    """Load every entry point of ``group``; keep those naming a subclass of ``base``."""
    found: dict[str, type[T]] = {}
    broken: dict[str, str] = {}
    for entry_point in entry_points(group=group):
        try:
            loaded = entry_point.load()
        except Exception as exc:  # a plugin's import error must not take the others down
            broken[entry_point.name] = f"{entry_point.value} failed to load: {type(exc).__name__}: {exc}"
        else:
            if isinstance(loaded, type) and issubclass(loaded, base):
                found[entry_point.name] = loaded
                continue
            broken[entry_point.name] = f"{entry_point.value} is not a subclass of {base.__name__}"
        logger.error("%s plugin %r is broken: %s", group, entry_point.name, broken[entry_point.name])
    return Plugins(MappingProxyType(found), MappingProxyType(broken))


__all__ = ["Plugins", "discover_plugins"]
