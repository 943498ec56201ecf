"""Tables of a pyiceberg catalog, read through the metadata normaliser (``_metadata``).

A pyiceberg catalog parses the metadata with pyiceberg's pydantic model, which refuses (or, behind
some REST servers, never even sees) the legacy v1 documents the Java reference accepts. So the
document is taken from the catalog raw and parsed by ``parse_metadata``, as for a table registered
by location:

* SQL catalog: the table's row names its metadata location, and that file is read (one file read,
  as pyiceberg's own ``load_table`` does).
* REST catalog: the ``loadTable`` answer's config and storage credentials build the file IO, as
  pyiceberg does; the file at its ``metadata-location`` is read and parsed. The answer's
  ``metadata`` object is used (normalised) only when the answer gives no location: the file is
  what was committed, while a catalog may describe it wrongly (SeaweedFS 4 answers a registered
  legacy v1 table with a made-up empty v2 object instead of an error). This costs one metadata file read per open; the file is reached with the
  credentials that reach the manifests and data files, so a store error is raised as it is.
* other catalogs: pyiceberg's own ``load_table``.

The table answers reads whatever the document's age. Maintenance commits through the catalog, whose
commit path re-reads the metadata with pyiceberg's model (SQL) or applies the change to the
server's own reading (REST): so the table is bound to the catalog (committable) only when
pyiceberg's model reads the document as it is and, for REST, the server's object agrees with the
file. Otherwise it is a read-only ``StaticTable``, which maintenance refuses (no catalog to commit
through) instead of committing a metadata version built from a misreading.
"""

from __future__ import annotations

import logging
from typing import Any

from storage.formats.iceberg._metadata import MetadataExtras, normalise, read_document

logger = logging.getLogger(__name__)


def load_catalog_table(catalog: Any, identifier: str) -> tuple[Any, MetadataExtras]:
    """(pyiceberg table, extras) of ``identifier``; pyiceberg's ``NoSuchTableError``, store and
    parse errors propagate (the adapter turns them into spec errors)."""
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.catalog.sql import SqlCatalog

    if isinstance(catalog, SqlCatalog):
        table, extras, committable = _from_sql(catalog, identifier)
    elif isinstance(catalog, RestCatalog):
        table, extras, committable = _from_rest(catalog, identifier)
    else:
        return catalog.load_table(identifier), MetadataExtras()
    return (table if committable else read_only(table)), extras


def read_only(table: Any) -> Any:
    """``table`` as a ``StaticTable``: readable, never committed to (maintenance refuses it)."""
    from pyiceberg.catalog.noop import NoopCatalog
    from pyiceberg.table import StaticTable

    return StaticTable(
        identifier=table.name(),
        metadata=table.metadata,
        metadata_location=table.metadata_location,
        io=table.io,
        catalog=NoopCatalog("read-only"),
    )


def pyiceberg_reads_as_is(document: dict[str, Any], normalised: dict[str, Any]) -> bool:
    """Whether pyiceberg's own model accepts the metadata document unchanged (without a second
    parse when the normalisation changed nothing)."""
    from pyiceberg.table.metadata import TableMetadataUtil

    if normalised == document:
        return True
    try:
        TableMetadataUtil.parse_obj(document)
    except (ValueError, TypeError, KeyError, AttributeError):  # pydantic's ValidationError is a ValueError
        return False
    return True


# -- SQL ---------------------------------------------------------------------------------------------


def _from_sql(catalog: Any, identifier: str) -> tuple[Any, MetadataExtras, bool]:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadataUtil

    location = _sql_metadata_location(catalog, identifier)
    document = read_document(catalog._load_file_io(location=location), location)
    normalised, extras = normalise(document)
    metadata = TableMetadataUtil.parse_obj(normalised)
    table = Table(
        identifier=catalog.identifier_to_tuple(identifier),
        metadata=metadata,
        metadata_location=location,
        io=catalog._load_file_io(metadata.properties, location),
        catalog=catalog,
    )
    return table, extras, pyiceberg_reads_as_is(document, normalised)


def _sql_metadata_location(catalog: Any, identifier: str) -> str:
    """The metadata location in the catalog's row of the table (as pyiceberg's ``load_table``
    finds the row: views excluded)."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.catalog.sql import IcebergTables
    from pyiceberg.exceptions import NoSuchTableError
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
    name = Catalog.table_name_from(identifier)
    statement = select(IcebergTables).where(
        IcebergTables.catalog_name == catalog.name,
        IcebergTables.table_namespace == namespace,
        IcebergTables.table_name == name,
    )
    type_filter = catalog._iceberg_type_filter()
    if type_filter is not None:
        statement = statement.where(type_filter)
    with Session(catalog.engine) as session:
        row = session.scalar(statement)
        location = row.metadata_location if row is not None else None
    if row is None:
        raise NoSuchTableError(f"Table does not exist: {namespace}.{name}")
    if not location:
        raise NoSuchTableError(f"Table {namespace}.{name} has no metadata location in the catalog")
    return str(location)


# -- REST --------------------------------------------------------------------------------------------


def _from_rest(catalog: Any, identifier: str) -> tuple[Any, MetadataExtras, bool]:
    from pyiceberg.catalog.rest import TableResponse

    answer = _rest_answer(catalog, identifier)
    location = answer.get("metadata-location")
    served = answer.get("metadata")
    document = _rest_file(catalog, answer, location) if location else None
    if document is None:
        if not isinstance(served, dict):
            raise ValueError(f"the catalog's answer for {identifier} holds no table metadata")
        document = served
    normalised, extras = normalise(document)
    response = TableResponse.model_validate({**answer, "metadata": normalised})
    table = catalog._response_to_table(catalog.identifier_to_tuple(identifier), response)
    agrees = document is served or _agrees(served, document)
    committable = agrees and pyiceberg_reads_as_is(document, normalised)
    if not committable:
        logger.info("%s is read-only: its metadata is not what pyiceberg's catalog commits on", identifier)
    return table, extras, committable


def _rest_answer(catalog: Any, identifier: str) -> dict[str, Any]:
    """The raw JSON of the ``loadTable`` answer (pyiceberg's ``RestCatalog.load_table`` request)."""
    from pyiceberg.catalog.rest import SNAPSHOT_LOADING_MODE, Capability, Endpoints
    from pyiceberg.catalog.rest.response import _handle_non_200_response
    from pyiceberg.exceptions import NoSuchTableError
    from requests import HTTPError

    catalog._check_endpoint(Capability.V1_LOAD_TABLE)
    params = {}
    mode = catalog.properties.get(SNAPSHOT_LOADING_MODE)
    if mode in {"all", "refs"}:
        params["snapshots"] = mode
    url = catalog.url(Endpoints.load_table, prefixed=True, **catalog._split_identifier_for_path(identifier))
    response = catalog._session.get(url, params=params)
    try:
        response.raise_for_status()
    except HTTPError as exc:
        _handle_non_200_response(exc, {404: NoSuchTableError})
    answer = response.json()
    if not isinstance(answer, dict):
        raise ValueError(f"the catalog's answer for {identifier} is not a JSON object")
    return answer


def _rest_file(catalog: Any, answer: dict[str, Any], location: str) -> dict[str, Any]:
    """The metadata file the answer names, read with the answer's config and credentials (those
    that reach the manifests and data files too: a store error is raised as it is)."""
    config = answer.get("config") or {}
    resolved = catalog._resolve_storage_credentials(_credentials(answer), location)
    return read_document(catalog._load_file_io({**config, **resolved}, location), location)


def _credentials(answer: dict[str, Any]) -> list[Any]:
    from pyiceberg.catalog.rest.scan_planning import StorageCredential

    return [StorageCredential.model_validate(c) for c in answer.get("storage-credentials") or []]


def _agrees(served: Any, document: dict[str, Any]) -> bool:
    """Whether the server's metadata object describes the same table state as the file: the same
    table uuid, current snapshot and snapshots (a server committing on its own reading of another
    state would write a wrong next version)."""
    if not isinstance(served, dict):
        return False

    def state(doc: dict[str, Any]) -> tuple[Any, Any, list[Any]]:
        current = doc.get("current-snapshot-id")
        snapshots = sorted(s.get("snapshot-id") for s in doc.get("snapshots") or [])
        return doc.get("table-uuid"), (None if current in (None, -1) else current), snapshots

    return state(served) == state(document)
