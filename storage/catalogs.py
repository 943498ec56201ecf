"""Building pyiceberg catalogs from Catalog rows, and finding tables under a path root."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.db import connection

from storage.io import PathNotAllowed, StoreOptions, is_object_store, is_within
from storage.models import Catalog, CatalogKind

# Table folders are rarely deeper than this under a root; the bound keeps a sync of a big tree quick.
MAX_DISCOVERY_DEPTH = 6


def lakewarden_database_sqlalchemy_url() -> str:
    """Lakewarden's own Postgres database (the test database under pytest) as a SQLAlchemy URL."""
    db = connection.settings_dict
    user = db.get("USER") or ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    host = db.get("HOST") or "127.0.0.1"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql+psycopg2://{auth}{host}{port}/{db['NAME']}"


def iceberg_catalog_properties(catalog: Catalog) -> dict[str, str]:
    props = {str(k): str(v) for k, v in (catalog.properties or {}).items()}
    if catalog.kind == CatalogKind.ICEBERG_SQL:
        props["type"] = "sql"
        if not props.get("uri"):
            props["uri"] = lakewarden_database_sqlalchemy_url()
        props.setdefault("warehouse", Path(settings.LAKEWARDEN_WAREHOUSE).as_uri())
    elif catalog.kind == CatalogKind.ICEBERG_REST:
        props["type"] = "rest"
    return props


_catalogs: dict[tuple, object] = {}
_catalogs_lock = threading.Lock()


def iceberg_catalog(catalog: Catalog):
    """A pyiceberg catalog for an Iceberg catalog row, one per process and configuration (a SQL
    catalog holds a connection pool; making one per request would leak connections)."""
    from pyiceberg.catalog import load_catalog

    properties = iceberg_catalog_properties(catalog)
    key = (catalog.name, tuple(sorted(properties.items())))
    with _catalogs_lock:
        if key not in _catalogs:
            _catalogs[key] = load_catalog(catalog.name, **properties)
        return _catalogs[key]


def close_iceberg_catalogs() -> None:
    """Close the SQL catalogs' connection pools (before the database is dropped, in tests)."""
    with _catalogs_lock:
        for pyiceberg_catalog in _catalogs.values():
            engine = getattr(pyiceberg_catalog, "engine", None)
            if engine is not None:
                engine.dispose()
        _catalogs.clear()


def iceberg_identifiers(catalog: Catalog) -> Iterator[str]:
    """Every table identifier of an Iceberg catalog, namespaces walked recursively."""
    pyiceberg_catalog = iceberg_catalog(catalog)
    pending = list(pyiceberg_catalog.list_namespaces())
    while pending:
        namespace = pending.pop(0)
        for identifier in pyiceberg_catalog.list_tables(namespace):
            yield ".".join(identifier)
        pending.extend(pyiceberg_catalog.list_namespaces(namespace))


def store_options_for(location: str, catalog: Catalog | None = None) -> StoreOptions:
    """The credentials reaching ``location``: the catalog's ``s3.*`` properties when the table
    belongs to one, else those of the path-root catalog whose root holds the location, over the
    environment's (``LAKEWARDEN_S3_*``, ``AWS_*``). Local locations get the environment's (unused)."""
    if catalog is None and is_object_store(location):
        catalog = _root_catalog_of(location)
    properties = (catalog.properties or {}) if catalog is not None else {}
    return StoreOptions.from_properties(properties)


def _root_catalog_of(location: str) -> Catalog | None:
    """The path-root catalog with the longest root holding ``location`` (object stores only)."""
    best: Catalog | None = None
    best_length = -1
    for catalog in Catalog.objects.filter(kind=CatalogKind.PATH_ROOT, properties__root__contains="://"):
        root = str((catalog.properties or {}).get("root", ""))
        try:
            inside = is_within(location, root)
        except PathNotAllowed:
            continue
        if inside and len(root) > best_length:
            best, best_length = catalog, len(root)
    return best


def table_folders(root: Path) -> Iterator[Path]:
    """Folders under ``root`` that hold a table; a table's own folder is not searched further."""

    def is_table(path: Path) -> bool:
        return (
            (path / "_delta_log").is_dir()
            or (path / ".hoodie").is_dir()
            or any((path / "metadata").glob("*.metadata.json"))
        )

    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        if is_table(folder):
            yield folder
            continue
        if depth >= MAX_DISCOVERY_DEPTH:
            continue
        try:
            children = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        for entry in children:
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                stack.append((Path(entry.path), depth + 1))
