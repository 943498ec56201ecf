"""Catalog and table services: the one place their rules live (views, API and commands call these)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from storage import spec
from storage.catalogs import iceberg_catalog, iceberg_identifiers, store_options_for, table_folders
from storage.errors import InvalidInput
from storage.io import StoreOptions, is_local, is_object_store
from storage.metrics import table_metrics
from storage.models import Catalog, CatalogKind, Table
from storage.paths import PathNotAllowed, confine, local_path
from storage.services.results import cached_results_invalidate_for_table
from storage.spec import SpecError, SpecTable

logger = logging.getLogger(__name__)

ICEBERG_KINDS = {CatalogKind.ICEBERG_SQL, CatalogKind.ICEBERG_REST}


def catalog_create(*, name: str, kind: str, properties: dict[str, Any] | None = None) -> Catalog:
    properties = dict(properties or {})
    if kind not in CatalogKind.values:
        raise InvalidInput(
            f"unknown catalog kind {kind!r}; use one of {', '.join(CatalogKind.values)}", field="kind"
        )
    if Catalog.objects.filter(name=name).exists():
        raise InvalidInput(f"a catalog named {name!r} already exists", field="name")
    if kind == CatalogKind.PATH_ROOT:
        root = _confined_existing_folder(properties.get("root", ""), field_name="root")
        properties["root"] = str(root)
    elif kind == CatalogKind.ICEBERG_REST and not properties.get("uri"):
        raise InvalidInput("an Iceberg REST catalog needs a uri", field="properties")
    catalog = Catalog(name=name, kind=kind, properties=properties)
    if kind in ICEBERG_KINDS:
        try:
            iceberg_catalog(catalog)
        except Exception as error:  # pyiceberg raises many kinds; the message is what matters
            raise InvalidInput(
                f"cannot connect to the Iceberg catalog: {error}", field="properties"
            ) from error
    catalog.save()
    return catalog


def table_store_options(table: Table) -> StoreOptions:
    """The object-store credentials of a table (its catalog's, its root's, or the environment's)."""
    return store_options_for(table.location, table.catalog)


def table_open(table: Table) -> SpecTable:
    """The table through the spec API (catalog tables by identifier, others by location)."""
    if table.catalog is not None and table.catalog.kind in ICEBERG_KINDS and table.identifier:
        return spec.load_table(table.identifier, format="iceberg", catalog=iceberg_catalog(table.catalog))
    storage = table_store_options(table) if is_object_store(table.location) else None
    return spec.load_table(table.location, format=table.format, storage=storage)


def table_register(
    *,
    location: str | None = None,
    catalog: Catalog | None = None,
    identifier: str | None = None,
    format: str | None = None,
    properties: dict[str, Any] | None = None,
) -> Table:
    """Register a table by location (any format) or by catalog identifier (Iceberg catalogs).

    The table is opened with its format's library before anything is stored, so a row only ever
    exists for a table that could be read.
    """
    if format is not None and format not in spec.format_adapters():
        known = ", ".join(sorted(spec.format_adapters()))
        raise InvalidInput(f"unknown table format {format!r}; known formats: {known}", field="format")
    if identifier:
        spec_table, name = _open_from_catalog(catalog, identifier)
    elif location:
        spec_table, name = _open_from_location(location, format)
    else:
        raise InvalidInput("give a location, or a catalog and an identifier", field="location")

    resolved_location = _normalised_location(spec_table.location)
    if Table.objects.filter(location=resolved_location).exists():
        raise InvalidInput(f"the table at {resolved_location} is already registered", field="location")
    table = Table(
        catalog=catalog if identifier else None,
        identifier=identifier or "",
        name=name,
        format=spec_table.format.value,
        location=resolved_location,
        properties=properties or {},
    )
    _apply_summary(table, spec_table)
    try:
        with transaction.atomic():
            table.save()
    except IntegrityError:
        raise InvalidInput(
            f"the table at {resolved_location} is already registered", field="location"
        ) from None
    return table


def table_refresh(*, table: Table) -> Table:
    """Re-read the cached metadata facts; a failure is recorded on the row, not raised."""
    previous_instant = table.current_instant
    try:
        _apply_summary(table, table_open(table))
        table.refresh_error = ""
        if table.current_instant != previous_instant:
            cached_results_invalidate_for_table(table_id=table.pk, current_instant=table.current_instant)
    except SpecError as error:
        table.refresh_error = str(error)
    except OSError as error:
        table.refresh_error = f"cannot read the table: {error}"
    table.refreshed_at = timezone.now()
    table.save()
    return table


@dataclass
class SyncReport:
    added: list[str] = field(default_factory=list)
    already_registered: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def catalog_sync(*, catalog: Catalog) -> SyncReport:
    """Register every table of the catalog that is not registered yet; report what happened."""
    report = SyncReport()
    if catalog.kind == CatalogKind.PATH_ROOT:
        root = _confined_existing_folder(catalog.properties.get("root", ""), field_name="root")
        for folder in table_folders(root):
            _sync_one(report, str(folder), lambda folder=folder: table_register(location=str(folder)))
    else:
        try:
            identifiers = list(iceberg_identifiers(catalog))
        except Exception as error:
            raise InvalidInput(f"cannot list the catalog {catalog.name}: {error}") from error
        registered = set(Table.objects.filter(catalog=catalog).values_list("identifier", flat=True))
        for identifier in identifiers:
            if identifier in registered:
                report.already_registered.append(identifier)
                continue
            _sync_one(report, identifier, lambda i=identifier: table_register(catalog=catalog, identifier=i))
    catalog.last_synced_at = timezone.now()
    catalog.save(update_fields=["last_synced_at"])
    return report


def _sync_one(report: SyncReport, key: str, register) -> None:
    try:
        register()
        report.added.append(key)
    except InvalidInput as error:
        if "already registered" in error.message:
            report.already_registered.append(key)
        else:
            report.failed[key] = error.message


def _open_from_location(location: str, format: str | None) -> tuple[SpecTable, str]:
    folder = _confined_existing_folder(location, field_name="location")
    try:
        detected = format or spec.detect_format(str(folder))
        spec_table = spec.load_table(str(folder), format=detected)
    except spec.TableNotFound as error:
        raise InvalidInput(f"{location} holds no table: {error}", field="location") from error
    except SpecError as error:
        raise InvalidInput(f"{location} cannot be read as a table: {error}", field="location") from error
    except Exception as error:  # a library's own parse error on corrupt metadata
        logger.warning("opening %s failed", location, exc_info=True)
        raise InvalidInput(
            f"{location} holds a corrupt or unreadable table: {error}", field="location"
        ) from error
    return spec_table, folder.name


def _open_from_catalog(catalog: Catalog | None, identifier: str) -> tuple[SpecTable, str]:
    if catalog is None:
        raise InvalidInput("an identifier needs a catalog", field="catalog")
    if catalog.kind not in ICEBERG_KINDS:
        raise InvalidInput(
            f"catalog {catalog.name} is a path root: register its tables by location", field="catalog"
        )
    try:
        spec_table = spec.load_table(identifier, format="iceberg", catalog=iceberg_catalog(catalog))
    except SpecError as error:
        raise InvalidInput(
            f"cannot open {identifier} in catalog {catalog.name}: {error}", field="identifier"
        ) from error
    except Exception as error:
        raise InvalidInput(
            f"cannot open {identifier} in catalog {catalog.name}: {error}", field="identifier"
        ) from error
    if is_local(spec_table.location):
        try:
            confine(spec_table.location)
        except PathNotAllowed as error:
            raise InvalidInput(str(error), field="identifier") from error
    return spec_table, identifier


def _confined_existing_folder(location: str, *, field_name: str) -> Path:
    try:
        folder = confine(location)
    except PathNotAllowed as error:
        raise InvalidInput(str(error), field=field_name) from error
    if not folder.exists():
        raise InvalidInput(f"{location} does not exist", field=field_name)
    if not folder.is_dir():
        raise InvalidInput(f"{location} is not a folder", field=field_name)
    return folder


def _normalised_location(location: str) -> str:
    if not is_local(location):
        return location.rstrip("/")
    return str(local_path(location).resolve())


def _apply_summary(table: Table, spec_table: SpecTable) -> None:
    summary = spec_table.summary()
    table.current_instant = "" if summary.current_instant_id is None else str(summary.current_instant_id)
    table.file_count = summary.file_count
    table.total_bytes = summary.total_bytes
    table.record_count = summary.record_count
    table.instant_count = summary.instant_count
    table.last_commit_at = summary.last_updated
    metrics = table_metrics(spec_table)
    table.metrics = metrics
    table.small_file_count = metrics["small_file_count"]
    table.refreshed_at = timezone.now()
