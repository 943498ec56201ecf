"""``IcebergAdapter``: opens an Iceberg table from a metadata file, a table folder or a catalog
(a pyiceberg SQL or REST catalog, or a dict of its properties), as an ``IcebergSpecTable``."""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

import pyarrow.fs as pafs

from storage.formats.iceberg.table import IcebergSpecTable
from storage.io.stores import StoreOptions, filesystem, uri
from storage.spec.errors import CorruptTable, TableNotFound
from storage.spec.table import TableFormatAdapter

_VERSION = re.compile(r"^v?(\d+)[-.]")


def latest_metadata_file(location: str, storage: StoreOptions | None = None) -> str:
    """The current ``*.metadata.json`` of a table folder: ``version-hint.text`` when present,
    otherwise the highest version number (``vN.metadata.json`` or ``NNNNN-uuid.metadata.json``).

    Local folders give a local path; object-store prefixes a URI (found by one listing)."""
    fs, path = filesystem(location, storage)
    path = path.rstrip("/")
    if path.endswith(".metadata.json"):
        if fs.get_file_info(path).type != pafs.FileType.File:
            raise TableNotFound(f"no Iceberg metadata file at {location}")
        return uri(location, path)
    metadata_dir = f"{path}/metadata"
    entries = fs.get_file_info(pafs.FileSelector(metadata_dir, allow_not_found=True))
    if not entries and fs.get_file_info(metadata_dir).type != pafs.FileType.Directory:
        raise TableNotFound(f"no Iceberg table at {location}: it has no metadata folder")
    files = {entry.base_name: entry for entry in entries if entry.type == pafs.FileType.File}
    hint = files.get("version-hint.text")
    if hint is not None:
        with fs.open_input_stream(hint.path) as stream:
            content = stream.read().decode("utf-8", errors="replace").strip()
        for candidate in (content, f"v{content}.metadata.json", f"{content}.metadata.json"):
            if candidate and candidate in files:
                return uri(location, files[candidate].path)
    candidates = [name for name in files if name.endswith(".metadata.json")]
    if not candidates:
        raise TableNotFound(f"no Iceberg table at {location}: metadata/ holds no *.metadata.json file")

    def version(name: str) -> tuple[int, float]:
        match = _VERSION.match(name)
        mtime = files[name].mtime
        return (int(match.group(1)) if match else -1, mtime.timestamp() if mtime is not None else 0.0)

    return uri(location, files[max(candidates, key=version)].path)


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
    def detect(cls, location: str, storage: StoreOptions | None = None) -> bool:
        try:
            fs, path = filesystem(location, storage)
            path = path.rstrip("/")
            if path.endswith(".metadata.json"):
                return fs.get_file_info(path).type == pafs.FileType.File
            entries = fs.get_file_info(pafs.FileSelector(f"{path}/metadata", allow_not_found=True))
        except Exception:  # detection must answer, never raise: any failure means "not Iceberg"
            return False
        return any(entry.base_name.endswith(".metadata.json") for entry in entries)

    @classmethod
    def metadata_pointer(cls, location: str, storage: StoreOptions | None = None) -> str | None:
        """By path: the name of the current ``*.metadata.json`` (one listing of ``metadata/``).
        (A catalog table's pointer is its catalog's metadata location: ``storage.pointers``.)"""
        return latest_metadata_file(location, storage).rsplit("/", 1)[-1]

    @classmethod
    def open(
        cls, location_or_identifier: str, catalog: Any = None, storage: StoreOptions | None = None
    ) -> IcebergSpecTable:
        if catalog is not None:
            return cls._open_from_catalog(location_or_identifier, _catalog(catalog))
        return cls._open_from_metadata(location_or_identifier, storage)

    @classmethod
    def _open_from_metadata(cls, location: str, storage: StoreOptions | None = None) -> IcebergSpecTable:
        from storage.formats.iceberg._metadata import load_static_table

        metadata_file = latest_metadata_file(location, storage)
        try:
            table, extras = load_static_table(metadata_file, storage)
        except FileNotFoundError:
            raise TableNotFound(f"no Iceberg metadata file at {metadata_file}") from None
        except _metadata_errors() as exc:
            raise CorruptTable(
                f"Iceberg metadata file {metadata_file} is not valid table metadata: {_first_line(exc)}"
            ) from None
        return IcebergSpecTable(table, location=_location_of(table), extras=extras)

    @classmethod
    def _open_from_catalog(cls, identifier: str, catalog: Any) -> IcebergSpecTable:
        """Through ``_catalog``: the metadata the catalog names, parsed as the Java reference
        parses it (legacy v1 included); read-only where pyiceberg cannot commit on it."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        from storage.formats.iceberg._catalog import load_catalog_table

        try:
            table, extras = load_catalog_table(catalog, identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise TableNotFound(f"catalog {catalog.name!r} has no table {identifier!r}") from None
        except FileNotFoundError as exc:
            raise CorruptTable(
                f"table {identifier!r} points at a metadata file that is missing: {exc}"
            ) from None
        except _metadata_errors() as exc:
            raise CorruptTable(f"table {identifier!r} has invalid metadata: {_first_line(exc)}") from None
        return IcebergSpecTable(table, location=_location_of(table), identifier=identifier, extras=extras)


def _metadata_errors() -> tuple[type[Exception], ...]:
    """What parsing invalid table metadata raises (a corrupt table, not a bug of ours)."""
    from pydantic import ValidationError
    from pyiceberg.exceptions import ValidationError as IcebergValidationError

    return (
        json.JSONDecodeError,
        ValidationError,
        IcebergValidationError,
        UnicodeDecodeError,
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
    )


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
