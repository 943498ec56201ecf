"""Reading ``*.metadata.json`` as the Java reference (``TableMetadataParser``) does.

pyiceberg's pydantic model is stricter than the Java parser, which every other engine follows.
The JSON is normalised here before pyiceberg sees it:

* v1 legacy fields: ``schema`` without ``schemas``/``current-schema-id``, ``partition-spec``
  without ``partition-specs``/``default-spec-id``, spec fields without ``field-id`` (Java numbers
  them from 1000), no ``last-partition-id``, no ``current-snapshot-id`` (no current snapshot),
  no ``properties``, no ``table-uuid``, a snapshot ``summary`` without ``operation``;
* snapshots with an inline ``manifests`` list instead of a ``manifest-list`` file: the list is
  kept in the snapshot's ``manifest-list`` as ``INLINE_PREFIX`` + JSON, which
  ``_manifests.read_manifest_list`` expands with ``inline_manifests``;
* field defaults (``initial-default``/``write-default``) are taken out of the schemas (pyiceberg
  cannot parse every type's default, e.g. ``timestamp_ns``) and kept in ``MetadataExtras``;
* ``variant`` fields (pyiceberg 0.12 has no such type) are declared ``binary`` to pyiceberg and
  recorded in ``MetadataExtras.variants``: the table schema shows them as
  ``struct<metadata: binary, value: binary>`` (the unshredded parquet encoding of the spec).
"""

from __future__ import annotations

import io as io_module
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from storage.io.stores import StoreOptions, is_object_store

INLINE_PREFIX = "lakewarden-inline-manifests:"
_DEFAULT_KEYS = ("initial-default", "write-default")


@dataclass
class MetadataExtras:
    """What the normalisation took out of the JSON: defaults by schema id then field id, and the
    field ids of ``variant`` columns."""

    defaults: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)
    variants: set[int] = field(default_factory=set)


def _walk_type(node: Any, defaults: dict[int, dict[str, Any]], variants: set[int]) -> Any:
    """The type with variant replaced by binary and field defaults collected (recursively)."""
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind == "struct":
        fields = []
        for child in node.get("fields", []):
            child = dict(child)
            child_id = child.get("id")
            found = {key: child.pop(key) for key in _DEFAULT_KEYS if key in child}
            if found and isinstance(child_id, int):
                defaults[child_id] = found
            if child.get("type") == "variant" and isinstance(child_id, int):
                variants.add(child_id)
                child["type"] = "binary"
            else:
                child["type"] = _walk_type(child.get("type"), defaults, variants)
            fields.append(child)
        return {**node, "fields": fields}
    if kind == "list":
        out = dict(node)
        if out.get("element") == "variant" and isinstance(out.get("element-id"), int):
            variants.add(out["element-id"])
            out["element"] = "binary"
        out["element"] = _walk_type(out.get("element"), defaults, variants)
        return out
    if kind == "map":
        out = dict(node)
        if out.get("value") == "variant" and isinstance(out.get("value-id"), int):
            variants.add(out["value-id"])
            out["value"] = "binary"
        out["value"] = _walk_type(out.get("value"), defaults, variants)
        out["key"] = _walk_type(out.get("key"), defaults, variants)
        return out
    return node


def normalise(document: dict[str, Any]) -> tuple[dict[str, Any], MetadataExtras]:
    """The metadata JSON as pyiceberg accepts it, and what was taken out (see module doc)."""
    doc = dict(document)
    extras = MetadataExtras()
    doc.setdefault("format-version", 1)
    # schemas
    if "schemas" not in doc and isinstance(doc.get("schema"), dict):
        legacy = dict(doc["schema"])
        legacy.setdefault("schema-id", 0)
        doc["schemas"] = [legacy]
        doc.setdefault("current-schema-id", legacy["schema-id"])
    schemas = []
    for position, schema in enumerate(doc.get("schemas") or []):
        schema = dict(schema)
        schema.setdefault("schema-id", position)
        schema.setdefault("type", "struct")
        defaults: dict[int, dict[str, Any]] = {}
        schema = _walk_type(schema, defaults, extras.variants)
        extras.defaults[schema["schema-id"]] = defaults
        schemas.append(schema)
    if schemas:
        doc["schemas"] = schemas
        if "current-schema-id" not in doc:
            doc["current-schema-id"] = schemas[-1]["schema-id"]
        current = [s for s in schemas if s["schema-id"] == doc["current-schema-id"]]
        if doc["format-version"] == 1 and current:
            doc["schema"] = current[0]  # pyiceberg's v1 model requires it
        else:
            doc.pop("schema", None)
    _partition_specs(doc)
    if doc.get("properties") is None:
        doc["properties"] = {}
    if not doc.get("table-uuid"):
        doc["table-uuid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, str(doc.get("location", ""))))
    if doc.get("current-snapshot-id") is None:
        doc["current-snapshot-id"] = -1
    doc["snapshots"] = [_snapshot(s) for s in doc.get("snapshots") or []]
    _check_current(doc)
    return doc, extras


def _check_current(doc: dict[str, Any]) -> None:
    """Refuse (``ValueError``) what the Java reference refuses about the current snapshot, so a
    read never guesses: a ``current-snapshot-id`` that names no snapshot of the metadata, and a
    ``main`` branch that disagrees with it (also when there is no current snapshot)."""
    current = doc["current-snapshot-id"]
    ids = {s.get("snapshot-id") for s in doc["snapshots"]}
    if current != -1 and current not in ids:
        raise ValueError(f"current-snapshot-id {current} names no snapshot of the metadata")
    main = (doc.get("refs") or {}).get("main")
    if not isinstance(main, dict):
        return
    branch = main.get("snapshot-id")
    if current == -1:
        raise ValueError(
            f"the main branch names snapshot {branch} but there is no current snapshot"
            " (current-snapshot-id is -1 or absent)"
        )
    if branch != current:
        raise ValueError(f"current-snapshot-id {current} is not the main branch's snapshot {branch}")


def _partition_specs(doc: dict[str, Any]) -> None:
    """v1 ``partition-spec`` as ``partition-specs``; field ids, default spec, last partition id."""
    if "partition-specs" not in doc and isinstance(doc.get("partition-spec"), list):
        doc["partition-specs"] = [{"spec-id": 0, "fields": doc["partition-spec"]}]
        doc.setdefault("default-spec-id", 0)
    specs = []
    highest = 999
    for spec in doc.get("partition-specs") or []:
        spec = dict(spec)
        fields = []
        for position, partition_field in enumerate(spec.get("fields", [])):
            partition_field = dict(partition_field)
            partition_field.setdefault("field-id", 1000 + position)
            highest = max(highest, int(partition_field["field-id"]))
            fields.append(partition_field)
        spec["fields"] = fields
        specs.append(spec)
    if specs:
        doc["partition-specs"] = specs
        doc.pop("partition-spec", None)
        doc.setdefault("default-spec-id", specs[-1].get("spec-id", 0))
        doc.setdefault("last-partition-id", highest)
    elif "partition-specs" not in doc:
        doc["partition-specs"] = [{"spec-id": 0, "fields": []}]
        doc.setdefault("default-spec-id", 0)
    doc.setdefault("last-partition-id", highest)
    doc.pop("partition-spec", None)


def _snapshot(snapshot: dict[str, Any]) -> dict[str, Any]:
    snapshot = dict(snapshot)
    if not snapshot.get("manifest-list") and isinstance(snapshot.get("manifests"), list):
        snapshot["manifest-list"] = INLINE_PREFIX + json.dumps(list(snapshot["manifests"]))
    snapshot.pop("manifests", None)
    summary = snapshot.get("summary")
    if isinstance(summary, dict) and "operation" not in summary:
        snapshot.pop("summary")
    return snapshot


def parse_metadata(text: str | bytes) -> tuple[Any, MetadataExtras]:
    """pyiceberg ``TableMetadata`` of a metadata file's text, and the extras."""
    return parse_document(json.loads(text))


def parse_document(document: Any) -> tuple[Any, MetadataExtras]:
    """pyiceberg ``TableMetadata`` of a metadata JSON document (normalised), and the extras."""
    from pyiceberg.table.metadata import TableMetadataUtil

    if not isinstance(document, dict):
        raise ValueError("table metadata must be a JSON object")
    normalised, extras = normalise(document)
    return TableMetadataUtil.parse_obj(normalised), extras


def read_document(io: Any, location: str) -> dict[str, Any]:
    """The JSON document of a metadata file (``.gz.metadata.json`` decompressed): in one GET on
    S3 where ``storage.io.objects`` can (the client listings of the table then read through is
    made here, once), else through the FileIO, whose bytes or error stand."""
    from pyiceberg.serializers import Compressor

    from storage.io.objects import one_get_reader

    reader = one_get_reader(io)
    whole = reader.read(location) if reader is not None else None
    with (
        io_module.BytesIO(whole) if whole is not None else io.new_input(location).open(seekable=False) as raw
    ):
        with Compressor.get_compressor(location).stream_decompressor(raw) as stream:
            payload = stream.read()
    document = json.loads(payload)
    if not isinstance(document, dict):
        raise ValueError("table metadata must be a JSON object")
    return document


def load_static_table(
    metadata_location: str, storage: StoreOptions | None = None
) -> tuple[Any, MetadataExtras]:
    """A pyiceberg ``StaticTable`` of one metadata file, read through ``parse_metadata``; on an
    object store its FileIO gets ``storage``'s properties (else the environment's)."""
    from pyiceberg.catalog.noop import NoopCatalog
    from pyiceberg.io import load_file_io
    from pyiceberg.table import StaticTable

    store_properties = file_io_properties(metadata_location, storage)
    io = load_file_io(properties=store_properties, location=metadata_location)
    metadata, extras = parse_document(read_document(io, metadata_location))
    table = StaticTable(
        identifier=("static-table", metadata_location),
        metadata_location=metadata_location,
        metadata=metadata,
        io=load_file_io({**metadata.properties, **store_properties}, location=metadata_location),
        catalog=NoopCatalog("static-table"),
    )
    return table, extras


def file_io_properties(location: str, storage: StoreOptions | None) -> dict[str, str]:
    """pyiceberg FileIO properties reaching ``location`` (none for local tables)."""
    if not is_object_store(location):
        return {}
    return (storage if storage is not None else StoreOptions.from_env()).properties()


def is_inline(manifest_list: str) -> bool:
    return manifest_list.startswith(INLINE_PREFIX)
