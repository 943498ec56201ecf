"""Changing, deleting and testing a catalog (its creation and sync live with the tables, in
``storage.services.tables``): the rules the console's pages and the API share."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from storage.catalogs import iceberg_catalog
from storage.errors import Conflict, InvalidInput
from storage.models import Catalog, CatalogKind
from storage.secrets import is_secret_key, mask_text, merge_secrets
from storage.services.tables import ICEBERG_KINDS, catalog_properties_checked


def catalog_update(*, catalog: Catalog, properties: dict[str, Any]) -> Catalog:
    """``catalog`` with new ``properties``, saved only once they are shown to work (as for a new
    catalog: its root listed, its Iceberg catalog reached). A secret sent blank or masked keeps
    the stored one. Its name and kind stay: its tables are registered under them."""
    if not isinstance(properties, dict):
        raise InvalidInput("the properties must be a JSON object", field="properties")
    merged = merge_secrets(catalog.properties, {str(key): value for key, value in properties.items()})
    checked = catalog_properties_checked(catalog.name, catalog.kind, merged)
    catalog.properties = checked
    catalog.save(update_fields=["properties"])
    return catalog


def catalog_delete(*, catalog: Catalog) -> None:
    """Deletes the catalog's row; its tables, data and (Iceberg) catalog entries are untouched.
    Refused (409) while tables are registered from it: they would lose how they are opened."""
    with transaction.atomic():
        registered = catalog.tables.count()
        if registered:
            raise Conflict(
                f"catalog {catalog.name} has {registered} registered table{'s' if registered != 1 else ''}; "
                "unregister them first (deleting a catalog never deletes a table or its data)"
            )
        catalog.delete()


def catalog_test(*, catalog: Catalog) -> str:
    """What a connection test says when the catalog answers: its root listed, or its Iceberg
    catalog's namespaces counted (a REST catalog through the outbound rules of
    ``storage.outbound``). ``InvalidInput`` names the location and the error, never a secret."""
    catalog_properties_checked(catalog.name, catalog.kind, dict(catalog.properties))
    if catalog.kind not in ICEBERG_KINDS:
        return f"the root {catalog.properties.get('root', '')} answers"
    try:
        namespaces = iceberg_catalog(catalog).list_namespaces()
    except Exception as error:  # pyiceberg raises many kinds; the message is what matters
        secrets = [str(v) for k, v in catalog.properties.items() if v and is_secret_key(str(k))]
        where = catalog.properties.get("uri") or catalog.name
        message = (
            f"cannot list the namespaces of {where}: {' '.join(str(error).split()) or type(error).__name__}"
        )
        raise InvalidInput(mask_text(message, secrets), field="properties") from error
    kind = "REST" if catalog.kind == CatalogKind.ICEBERG_REST else "SQL"
    return f"the Iceberg {kind} catalog answers: {len(namespaces)} namespace{'s' if len(namespaces) != 1 else ''}"
