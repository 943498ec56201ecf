"""``IcebergAdapter``: opens an Iceberg table from a metadata file, a table folder or a catalog
(a pyiceberg SQL or REST catalog, or a dict of its properties), as an ``IcebergSpecTable``."""

from __future__ import annotations

import json
import os
import re
from typing import Any, ClassVar

from storage.formats.iceberg.table import IcebergSpecTable
from storage.io import is_local, local_path
from storage.spec.errors import CorruptTable, TableNotFound
from storage.spec.table import TableFormatAdapter

_VERSION = re.compile(r"^v?(\d+)[-.]")


def _local_path(location: str) -> str | None:
    """The filesystem path of a local location (plain path or ``file:`` URI), else None."""
    return str(local_path(location)) if is_local(location) else None


def latest_metadata_file(location: str) -> str:
    """The current ``*.metadata.json`` of a table folder: ``version-hint.text`` when present,
    otherwise the highest version number (``vN.metadata.json`` or ``NNNNN-uuid.metadata.json``)."""
    path = _local_path(location)
    if path is None:
        return location  # object store: pyiceberg resolves version-hint.text itself
    if path.endswith(".metadata.json"):
        if not os.path.isfile(path):
            raise TableNotFound(f"no Iceberg metadata file at {location}")
        return path
    metadata_dir = os.path.join(path, "metadata")
    if not os.path.isdir(metadata_dir):
        raise TableNotFound(f"no Iceberg table at {location}: it has no metadata folder")
    hint = os.path.join(metadata_dir, "version-hint.text")
    if os.path.isfile(hint):
        with open(hint, encoding="utf-8") as stream:
            content = stream.read().strip()
        for candidate in (content, f"v{content}.metadata.json", f"{content}.metadata.json"):
            if candidate and os.path.isfile(os.path.join(metadata_dir, candidate)):
                return os.path.join(metadata_dir, candidate)
    candidates = [name for name in os.listdir(metadata_dir) if name.endswith(".metadata.json")]
    if not candidates:
        raise TableNotFound(f"no Iceberg table at {location}: metadata/ holds no *.metadata.json file")

    def version(name: str) -> tuple[int, float]:
        match = _VERSION.match(name)
        return (int(match.group(1)) if match else -1, os.path.getmtime(os.path.join(metadata_dir, name)))

    return os.path.join(metadata_dir, max(candidates, key=version))


def _catalog(catalog: Any) -> Any:
    if isinstance(catalog, dict):
        from pyiceberg.catalog import load_catalog

        properties = dict(catalog)
        name = properties.pop("name", "lakewarden")
        return load_catalog(name, **properties)
    return catalog


def _location_of(table: Any) -> str:
    return table.metadata.location


class IcebergAdapter(TableFormatAdapter):
    name: ClassVar[str] = "iceberg"
    looks_for: ClassVar[str] = "Iceberg metadata (metadata/*.metadata.json)"

    @classmethod
    def detect(cls, location: str) -> bool:
        path = _local_path(location)
        if path is None:
            return False
        if path.endswith(".metadata.json"):
            return os.path.isfile(path)
        metadata_dir = os.path.join(path, "metadata")
        try:
            return any(name.endswith(".metadata.json") for name in os.listdir(metadata_dir))
        except OSError:
            return False

    @classmethod
    def open(cls, location_or_identifier: str, catalog: Any = None) -> IcebergSpecTable:
        if catalog is not None:
            return cls._open_from_catalog(location_or_identifier, _catalog(catalog))
        return cls._open_from_metadata(location_or_identifier)

    @classmethod
    def _open_from_metadata(cls, location: str) -> IcebergSpecTable:
        from pydantic import ValidationError
        from pyiceberg.exceptions import ValidationError as IcebergValidationError

        from storage.formats.iceberg._metadata import load_static_table

        metadata_file = latest_metadata_file(location)
        try:
            table, extras = load_static_table(metadata_file)
        except FileNotFoundError:
            raise TableNotFound(f"no Iceberg metadata file at {metadata_file}") from None
        except (
            json.JSONDecodeError,
            ValidationError,
            IcebergValidationError,
            UnicodeDecodeError,
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
        ) as exc:
            raise CorruptTable(
                f"Iceberg metadata file {metadata_file} is not valid table metadata: {_first_line(exc)}"
            ) from None
        return IcebergSpecTable(table, location=_location_of(table), extras=extras)

    @classmethod
    def _open_from_catalog(cls, identifier: str, catalog: Any) -> IcebergSpecTable:
        from pydantic import ValidationError
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
        from pyiceberg.exceptions import ValidationError as IcebergValidationError

        try:
            table = catalog.load_table(identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise TableNotFound(f"catalog {catalog.name!r} has no table {identifier!r}") from None
        except FileNotFoundError as exc:
            raise CorruptTable(
                f"table {identifier!r} points at a metadata file that is missing: {exc}"
            ) from None
        except (json.JSONDecodeError, ValidationError, IcebergValidationError) as exc:
            raise CorruptTable(f"table {identifier!r} has invalid metadata: {_first_line(exc)}") from None
        return IcebergSpecTable(table, location=_location_of(table), identifier=identifier)


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
