"""Iceberg tables through the spec API: a metadata file path, a SQL catalog (in Postgres) or REST.

``IcebergAdapter`` (``adapter``) is registered under the ``lakewarden.table_formats`` entry point
``iceberg``. ``IcebergSpecTable`` (``table``) describes the table; listing streams manifests with
fastavro (``_manifests``, ``index``); reading applies position and equality deletes with pyarrow
(``read``). What maintenance needs of the format (row lineage fields, deletion-vector blobs) is
exported here.
"""

from __future__ import annotations

from storage.formats.iceberg._lineage import (
    LAST_UPDATED_FIELD_ID,
    LAST_UPDATED_SEQUENCE_NUMBER,
    ROW_ID,
    ROW_ID_FIELD_ID,
    has_row_lineage,
    with_lineage,
)
from storage.formats.iceberg._puffin import DV_BLOB_TYPE, DV_MAGIC, decode_blob
from storage.formats.iceberg.adapter import IcebergAdapter, latest_metadata_file
from storage.formats.iceberg.index import IcebergFileIndex
from storage.formats.iceberg.table import IcebergSpecTable, IcebergTimeline

__all__ = [
    "DV_BLOB_TYPE",
    "DV_MAGIC",
    "IcebergAdapter",
    "IcebergFileIndex",
    "IcebergSpecTable",
    "IcebergTimeline",
    "LAST_UPDATED_FIELD_ID",
    "LAST_UPDATED_SEQUENCE_NUMBER",
    "ROW_ID",
    "ROW_ID_FIELD_ID",
    "decode_blob",
    "has_row_lineage",
    "latest_metadata_file",
    "with_lineage",
]
