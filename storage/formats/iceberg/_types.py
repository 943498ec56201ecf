"""Arrow schemas of Iceberg schemas, including what pyiceberg 0.12 does not model.

* field ids in ``PARQUET:field_id`` (as pyiceberg's ``schema_to_pyarrow``);
* ``initial-default``/``write-default`` in the field metadata (``_defaults``);
* ``unknown`` columns as Arrow ``null`` (always null, as the spec says);
* ``timestamp_ns``/``timestamptz_ns`` as ``timestamp[ns]`` (read exactly, never through
  microseconds);
* ``variant`` columns as ``struct<metadata: binary, value: binary>``: the unshredded parquet
  encoding of the spec, each row's variant metadata and value bytes as written. A shredded
  variant (a ``typed_value`` column in the file) is not reassembled: reading it raises
  ``UnsupportedFeature`` (``check_variant``); the table can still be opened and listed.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from storage.formats.iceberg._defaults import FIELD_ID_KEY, with_defaults
from storage.formats.iceberg._metadata import MetadataExtras
from storage.spec.errors import UnsupportedFeature

VARIANT_KEY = b"iceberg.type"
VARIANT_TYPE = pa.struct([pa.field("metadata", pa.binary()), pa.field("value", pa.binary())])


def _with_variants(field: pa.Field, variants: set[int]) -> pa.Field:
    metadata = field.metadata or {}
    if FIELD_ID_KEY in metadata and int(metadata[FIELD_ID_KEY]) in variants:
        return pa.field(field.name, VARIANT_TYPE, field.nullable, {**metadata, VARIANT_KEY: b"variant"})
    field_type = field.type
    if pa.types.is_struct(field_type):
        children = [_with_variants(child, variants) for child in field_type]
        if all(c is o for c, o in zip(children, field_type, strict=True)):
            return field
        field_type = pa.struct(children)
    elif pa.types.is_list(field_type) or pa.types.is_large_list(field_type):
        element = _with_variants(field_type.value_field, variants)
        if element is field_type.value_field:
            return field
        field_type = pa.large_list(element) if pa.types.is_large_list(field_type) else pa.list_(element)
    elif pa.types.is_map(field_type):
        item = _with_variants(field_type.item_field, variants)
        if item is field_type.item_field:
            return field
        field_type = pa.map_(field_type.key_field, item)
    else:
        return field
    return pa.field(field.name, field_type, field.nullable, field.metadata)


def arrow_schema(schema: Any, extras: MetadataExtras) -> pa.Schema:
    """The Arrow schema of a pyiceberg ``Schema`` (see the module doc)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    arrow = schema_to_pyarrow(schema, include_field_ids=True)
    if extras.variants:
        arrow = pa.schema([_with_variants(f, extras.variants) for f in arrow], metadata=arrow.metadata)
    return with_defaults(arrow, schema, extras.defaults.get(schema.schema_id, {}))


def has_variant(fields: Any) -> bool:
    for field in fields:
        if field.metadata and field.metadata.get(VARIANT_KEY) == b"variant":
            return True
        if pa.types.is_struct(field.type) and has_variant(field.type):
            return True
    return False


def check_variant(file_schema: pa.Schema, path: str) -> None:
    """``UnsupportedFeature`` when a data file holds a shredded variant (``typed_value``)."""

    def walk(fields: Any) -> None:
        for field in fields:
            if pa.types.is_struct(field.type):
                names = {child.name for child in field.type}
                if {"metadata", "value", "typed_value"} <= names or {"metadata", "typed_value"} <= names:
                    raise UnsupportedFeature(
                        f"data file {path} holds a shredded variant column {field.name!r};"
                        " only unshredded variants (metadata and value) are read"
                    )
                walk(field.type)

    walk(file_schema)
