"""Iceberg tables through the spec API: a metadata file path, a SQL catalog (in Postgres) or REST.

``IcebergAdapter`` (``adapter``) is registered under the ``lakewarden.table_formats`` entry point
``iceberg``. ``IcebergSpecTable`` (``table``) describes the table; listing streams manifests with
fastavro (``_manifests``, ``index``); reading applies position and equality deletes with pyarrow
(``read``).
"""

from __future__ import annotations

from storage.formats.iceberg.adapter import IcebergAdapter, latest_metadata_file
from storage.formats.iceberg.index import IcebergFileIndex
from storage.formats.iceberg.table import IcebergSpecTable, IcebergTimeline

__all__ = [
    "IcebergAdapter",
    "IcebergFileIndex",
    "IcebergSpecTable",
    "IcebergTimeline",
    "latest_metadata_file",
]
