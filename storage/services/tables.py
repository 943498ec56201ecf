"""Catalog and table services: the one place their rules live (views, API and commands call these)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from storage import spec
from storage.catalogs import (
    iceberg_catalog,
    iceberg_identifiers,
    is_catalog_error,
    object_store_table_folders,
    store_options_for,
    table_folders,
)
from storage.errors import Conflict, InvalidInput
from storage.io import (
    PathNotAllowed,
    StoreOptions,
    describe_error,
    filesystem,
    is_local,
    is_object_store,
    normalise,
)
from storage.metrics import table_metrics
from storage.models import Catalog, CatalogKind, Table
from storage.paths import confine, local_path
from storage.pointers import pointer_or_blank
from storage.secrets import is_secret_key, mask_text
from storage.services.results import cached_results_invalidate_for_table
from storage.spec import SpecError, SpecTable

logger = logging.getLogger(__name__)

# ``str`` of a choice is its value (mypy, without Django's types, would take it for a tuple).
ICEBERG_KINDS = {str(CatalogKind.ICEBERG_SQL), str(CatalogKind.ICEBERG_REST)}
#: The listing that checks a prefix answers within these (each of the store client's three
#: attempts), whatever longer timeouts the options give reads: a silent endpoint is refused in
#: about 20 s, not after minutes.
PROBE_CONNECT_SECONDS = 3.0
PROBE_REQUEST_SECONDS = 5.0


def catalog_create(*, name: str, kind: str, properties: dict[str, Any] | None = None) -> Catalog:
    """A catalog, saved only once it answers: a path root's folder or object-store prefix is
    listed with its credentials, an Iceberg catalog is connected to (and a REST catalog's
    namespaces listed, which proves its credential). A refusal names the location or URI and the
    store's or catalog's error, never a secret."""
    properties = {str(key): value for key, value in (properties or {}).items()}
    if kind not in CatalogKind.values:
        raise InvalidInput(
            f"unknown catalog kind {kind!r}; use one of {', '.join(CatalogKind.values)}", field="kind"
        )
    if Catalog.objects.filter(name=name).exists():
        raise InvalidInput(f"a catalog named {name!r} already exists", field="name")
    catalog = Catalog(name=name, kind=kind, properties=catalog_properties_checked(name, kind, properties))
    catalog.save()
    return catalog


def catalog_properties_checked(name: str, kind: str, properties: dict[str, Any]) -> dict[str, Any]:
    """``properties`` of a ``kind`` catalog once they are shown to work (the admin's form and
    ``catalog_create`` share it): the root normalised, the store or catalog reached."""
    properties = dict(properties)
    options = _store_options(properties, field_name="properties")
    if kind == str(CatalogKind.PATH_ROOT):
        root = str(properties.get("root", "") or "")
        if is_object_store(root):
            canonical = _confined_uri(root, field_name="root")
            _list_prefix(canonical, options, field_name="root", secrets=_secrets(properties))
            properties["root"] = canonical
        else:
            properties["root"] = str(_confined_existing_folder(root, field_name="root"))
    elif kind == str(CatalogKind.ICEBERG_SQL) and str(properties.get("warehouse", "") or "").strip():
        # Tables it creates (a cached result's, say) are written there: inside the roots only.
        _confined_uri(str(properties["warehouse"]).strip(), field_name="properties")  # kept as spelt
    elif kind == str(CatalogKind.ICEBERG_REST):
        uri = str(properties.get("uri", "") or "").strip()
        if not uri:
            raise InvalidInput("an Iceberg REST catalog needs a uri", field="properties")
        if not uri.lower().startswith(("http://", "https://")):
            raise InvalidInput(
                f"the REST catalog uri must be http:// or https://, not {uri!r}", field="properties"
            )
    if kind in ICEBERG_KINDS:
        _connect(Catalog(name=name, kind=kind, properties=properties))
    return properties


def _connect(catalog: Catalog) -> None:
    where = catalog.properties.get("uri") or catalog.name
    try:
        pyiceberg_catalog = iceberg_catalog(catalog)
        if catalog.kind == CatalogKind.ICEBERG_REST:
            pyiceberg_catalog.list_namespaces()
    except Exception as error:  # pyiceberg raises many kinds; the message is what matters
        message = _error_text(error, catalog.properties)
        raise InvalidInput(
            f"cannot connect to the Iceberg catalog at {where}: {message}", field="properties"
        ) from error


def _secrets(properties: dict[str, Any]) -> list[str]:
    """The secret values among ``properties`` (masked out of any message that might echo them)."""
    found = [str(v) for k, v in properties.items() if v and is_secret_key(str(k))]
    for value in list(found):  # a ``client:secret`` credential: its secret half alone too
        if ":" in value:
            found.append(value.split(":", 1)[1])
    return found


def _error_text(error: BaseException, properties: dict[str, Any]) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    if type(error).__module__.startswith("pyiceberg") and type(error).__name__ not in text:
        text = f"{type(error).__name__}: {text}"
    return mask_text(text, _secrets(properties))


def _store_options(properties: dict[str, Any], *, field_name: str) -> StoreOptions:
    try:
        return StoreOptions.from_properties(properties)
    except ValueError as error:
        raise InvalidInput(str(error), field=field_name) from error


def _list_prefix(
    location: str, options: StoreOptions, *, field_name: str, secrets: list[str] | None = None
) -> list[pafs.FileInfo]:
    """One listing of an object-store prefix (its direct children): the store's refusal (wrong
    credentials, unreachable endpoint within the options' timeouts, missing bucket) becomes
    ``InvalidInput`` naming the location and the store's error."""
    secrets = [options.secret_key, options.session_token, *(secrets or [])]
    options = replace(
        options,
        connect_timeout=min(options.connect_timeout, PROBE_CONNECT_SECONDS),
        request_timeout=min(options.request_timeout, PROBE_REQUEST_SECONDS),
    )
    try:
        fs, path = filesystem(location, options)
        entries = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        if not entries:
            bucket = path.split("/", 1)[0]
            if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                raise InvalidInput(f"{location}: the bucket {bucket!r} does not exist", field=field_name)
    except OSError as error:
        message = mask_text(describe_error(location, error), secrets)
        raise InvalidInput(f"cannot list {message}", field=field_name) from error
    return entries


def table_store_options(table: Table) -> StoreOptions:
    """The object-store credentials of a table (its catalog's, its root's, or the environment's)."""
    return store_options_for(table.location, table.catalog)


def table_open(table: Table) -> SpecTable:
    """The table through the spec API (catalog tables by identifier, others by location)."""
    if table.catalog is not None and table.catalog.kind in ICEBERG_KINDS and table.identifier:
        return spec.load_table(table.identifier, format="iceberg", catalog=iceberg_catalog(table.catalog))
    storage = table_store_options(table) if is_object_store(table.location) else None
    return spec.load_table(table.location, format=table.format, storage=storage)


def table_open_error(table: Table, error: BaseException) -> str | None:
    """What a page says when ``table_open`` (or a read) failed with ``error``: the spec's, the
    store's or the catalog's message (secrets masked); None for an error that is a bug."""
    if isinstance(error, spec.SpecError):
        return str(error)
    if isinstance(error, OSError) or is_catalog_error(error):
        return f"cannot read the table: {table_error_text(table, error)}"
    return None


def table_error_text(table: Table, error: BaseException) -> str:
    """``error`` on one line, with the secrets of the table's catalog and store masked."""
    properties = dict(table.catalog.properties or {}) if table.catalog is not None else {}
    if is_object_store(table.location):
        options = table_store_options(table)
        properties.update({"secret": options.secret_key, "session-token": options.session_token})
    return _error_text(error, properties)


def table_register(
    *,
    location: str | None = None,
    catalog: Catalog | None = None,
    identifier: str | None = None,
    format: str | None = None,
    properties: dict[str, Any] | None = None,
    allow_nested: bool = False,
) -> Table:
    """Register a table by location (any format) or by catalog identifier (Iceberg catalogs).

    The table is opened with its format's library before anything is stored, so a row only ever
    exists for a table that could be read. Refused: a table whose own location, metadata file or
    data/metadata path (as its metadata says) lies outside the allowed roots, and, unless
    ``allow_nested`` (an admin's decision), one whose location holds or lies inside another
    registered table's (maintenance of either then keeps its hands off the other's files, but
    two tables in one folder are usually a mistake).
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
    field_name = "identifier" if identifier else "location"
    _check_own_locations(spec_table, field_name=field_name)
    nesting = nesting_tables(resolved_location)
    if nesting and not allow_nested:
        named = ", ".join(f"{other} (id {pk})" for pk, other in nesting[:5])
        raise InvalidInput(
            f"the table at {resolved_location} nests with registered table(s) {named}: one folder holds"
            " the other; register it with allow_nested if that is meant (maintenance of each keeps"
            " off the other's files)",
            field=field_name,
        )
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
    # Read before the metadata: a commit landing in between moves the pointer again, so the
    # next refresh pass re-reads the table instead of keeping facts older than the pointer.
    pointer = pointer_or_blank(table)
    try:
        _apply_summary(table, table_open(table))
        table.refresh_error = ""
        table.metadata_pointer = pointer
        if table.current_instant != previous_instant:
            cached_results_invalidate_for_table(table_id=table.pk, current_instant=table.current_instant)
    except Exception as error:
        message = table_open_error(table, error)
        if message is None:
            raise
        table.refresh_error = message
        table.metadata_pointer = ""  # a failed refresh is retried by the next pass
    table.refreshed_at = timezone.now()
    table.save()
    return table


@dataclass
class SyncReport:
    added: list[str] = field(default_factory=list)
    already_registered: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def catalog_sync(*, catalog: Catalog) -> SyncReport:
    """Register every table of the catalog that is not registered yet; report what happened. A
    catalog or store that cannot be listed is a ``Conflict`` naming it and its error."""
    report = SyncReport()
    if catalog.kind == CatalogKind.PATH_ROOT:
        for location in _root_table_locations(catalog):
            _sync_one(report, location, lambda location=location: table_register(location=location))
    else:
        where = catalog.properties.get("uri") or catalog.name
        try:
            identifiers = list(iceberg_identifiers(catalog))
        except Exception as error:
            message = _error_text(error, catalog.properties or {})
            raise Conflict(f"cannot list the catalog {catalog.name} at {where}: {message}") from error
        registered = set(Table.objects.filter(catalog=catalog).values_list("identifier", flat=True))
        for identifier in identifiers:
            if identifier in registered:
                report.already_registered.append(identifier)
                continue
            _sync_one(report, identifier, lambda i=identifier: table_register(catalog=catalog, identifier=i))
    catalog.last_synced_at = timezone.now()
    catalog.save(update_fields=["last_synced_at"])
    return report


def _root_table_locations(catalog: Catalog) -> list[str]:
    root = str(catalog.properties.get("root", "") or "")
    if not is_object_store(root):
        return [str(folder) for folder in table_folders(_confined_existing_folder(root, field_name="root"))]
    canonical = _confined_uri(root, field_name="root")
    try:
        return list(object_store_table_folders(canonical, store_options_for(canonical, catalog)))
    except (OSError, ValueError) as error:
        message = mask_text(describe_error(canonical, error), _secrets(catalog.properties or {}))
        raise Conflict(f"cannot list the catalog {catalog.name}: {message}") from error


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
    if is_local(location):
        folder = _confined_existing_folder(location, field_name="location")
        return _load(location, str(folder), format, None), folder.name
    canonical = _confined_uri(location, field_name="location")
    options = store_options_for(canonical)
    if not _list_prefix(canonical, options, field_name="location"):
        raise InvalidInput(f"{location} does not exist: nothing is stored under it", field="location")
    return _load(location, canonical, format, options), canonical.rsplit("/", 1)[-1]


def _load(location: str, target: str, format: str | None, storage: StoreOptions | None) -> SpecTable:
    secrets = [storage.secret_key, storage.session_token] if storage is not None else []
    try:
        detected = format or spec.detect_format(target, storage)
        return spec.load_table(target, format=detected, storage=storage)
    except spec.TableNotFound as error:
        raise InvalidInput(f"{location} holds no table: {error}", field="location") from error
    except SpecError as error:
        raise InvalidInput(f"{location} cannot be read as a table: {error}", field="location") from error
    except OSError as error:
        message = mask_text(describe_error(location, error), secrets)
        raise InvalidInput(f"cannot read {message}", field="location") from error
    except Exception as error:  # a library's own parse error on corrupt metadata
        logger.warning("opening %s failed", location, exc_info=True)
        message = mask_text(str(error), secrets)
        raise InvalidInput(
            f"{location} holds a corrupt or unreadable table: {message}", field="location"
        ) from error


def _open_from_catalog(catalog: Catalog | None, identifier: str) -> tuple[SpecTable, str]:
    if catalog is None:
        raise InvalidInput("an identifier needs a catalog", field="catalog")
    if catalog.kind not in ICEBERG_KINDS:
        raise InvalidInput(
            f"catalog {catalog.name} is a path root: register its tables by location", field="catalog"
        )
    try:
        spec_table = spec.load_table(identifier, format="iceberg", catalog=iceberg_catalog(catalog))
    except Exception as error:  # spec errors, pyiceberg's (NoSuchTable, REST errors), store errors
        message = _error_text(error, catalog.properties or {})
        raise InvalidInput(
            f"cannot open {identifier} in catalog {catalog.name}: {message}", field="identifier"
        ) from error
    return spec_table, identifier


def _check_own_locations(spec_table: SpecTable, *, field_name: str) -> None:
    """``InvalidInput`` unless every location the table's metadata says is its own lies inside
    the allowed roots: the table location, and for Iceberg its metadata file and its
    ``write.data.path`` / ``write.metadata.path`` properties."""
    found = {"location": spec_table.location}
    pyiceberg_table = getattr(spec_table, "pyiceberg_table", None)
    if pyiceberg_table is not None:
        found["metadata file"] = pyiceberg_table.metadata_location or ""
        for key in ("write.data.path", "write.metadata.path", "write.object-storage.path"):
            found[key] = (pyiceberg_table.metadata.properties or {}).get(key, "")
    for what, location in found.items():
        if not location:
            continue
        try:
            confine(location)
        except PathNotAllowed as error:
            raise InvalidInput(
                f"the table's {what} {location} is not allowed: {error}", field=field_name
            ) from error


def nesting_tables(location: str) -> list[tuple[int, str]]:
    """(id, location) of the registered tables whose location holds ``location`` or lies inside
    it, at segment boundaries. Locations are stored normalised (``_normalised_location``), so
    two indexed look-ups answer it: the folders above, and the prefix below."""
    own = _normalised_location(location).rstrip("/")
    above = []
    parent = own
    while True:
        cut = parent.rsplit("/", 1)[0]
        if cut == parent or not cut or cut.endswith(":/"):
            break
        above.append(cut)
        parent = cut
    rows = Table.objects.filter(Q(location__in=above) | Q(location__startswith=own + "/"))
    return sorted(rows.values_list("pk", "location"))


def _confined_uri(location: str, *, field_name: str) -> str:
    try:
        return str(confine(location))
    except PathNotAllowed as error:
        raise InvalidInput(str(error), field=field_name) from error


def _confined_existing_folder(location: str, *, field_name: str) -> Path:
    try:
        folder = confine(location)
    except PathNotAllowed as error:
        raise InvalidInput(str(error), field=field_name) from error
    if not isinstance(folder, Path):
        raise InvalidInput(f"{location} is not a local folder", field=field_name)
    if not folder.exists():
        raise InvalidInput(f"{location} does not exist", field=field_name)
    if not folder.is_dir():
        raise InvalidInput(f"{location} is not a folder", field=field_name)
    return folder


def _normalised_location(location: str) -> str:
    """The form a location is stored in: a resolved local path, or a normalised URI (a catalog's
    table whose key ``normalise`` refuses keeps its own spelling, minus a trailing slash)."""
    if not is_local(location):
        try:
            return normalise(location)
        except PathNotAllowed:
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
    table.compactable_file_count = metrics["compactable_file_count"]
    table.delete_file_count = metrics["delete_file_count"]
    table.refreshed_at = timezone.now()
    table.scheduler_wake_at = None  # new facts: the scheduler looks at the table at its next tick
