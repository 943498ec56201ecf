"""v3 table metadata through a metastore catalog: pyiceberg 0.12 cannot serialise it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def check_v3_metadata(table: Any) -> None:
    """Refuse (``ValueError``) a v3 table whose metadata file holds keys pyiceberg's model does
    not keep: writing its next metadata version would drop them."""
    if table.metadata.format_version < 3:
        return
    from pyiceberg.typedef import IcebergBaseModel

    with table.io.new_input(table.metadata_location).open() as stream:
        raw = json.loads(_decompressed(table.metadata_location, stream.read()))
    kept = json.loads(IcebergBaseModel.model_dump_json(table.metadata))
    lost = sorted(set(raw) - set(kept))
    for snapshot in raw.get("snapshots", []):
        lost += sorted(f"snapshots.{key}" for key in set(snapshot) - _snapshot_keys(kept, snapshot))
    if lost:
        raise ValueError(
            "this Iceberg v3 table's metadata holds fields the rewrite cannot carry into a new"
            f" metadata version ({', '.join(sorted(set(lost)))}); it is not rewritten"
        )


def _snapshot_keys(kept: dict[str, Any], snapshot: dict[str, Any]) -> set[str]:
    for candidate in kept.get("snapshots", []):
        if candidate.get("snapshot-id") == snapshot.get("snapshot-id"):
            return set(candidate)
    return set()


def _decompressed(location: str, payload: bytes) -> bytes:
    if location.endswith(".gz.metadata.json"):
        import gzip

        return gzip.decompress(payload)
    return payload


def write_metadata(metadata: Any, io: Any, metadata_path: str) -> None:
    """pyiceberg's ``Catalog._write_metadata``, and for v3 the same JSON through pydantic's own
    serialiser (pyiceberg 0.12's v3 model refuses to serialise: apache/iceberg-python#1551). The
    result must parse back to the same metadata, or nothing is written."""
    from pyiceberg.serializers import Compressor, ToOutputFile
    from pyiceberg.table.metadata import TableMetadataUtil
    from pyiceberg.typedef import IcebergBaseModel

    if metadata.format_version < 3:
        ToOutputFile.table_metadata(metadata, io.new_output(metadata_path))
        return
    text = IcebergBaseModel.model_dump_json(metadata)
    if TableMetadataUtil.parse_raw(text) != metadata:
        raise ValueError("the v3 table metadata does not survive serialisation; nothing was committed")
    payload = Compressor.get_compressor(metadata_path).bytes_compressor()(text.encode("utf-8"))
    with io.new_output(metadata_path).create(overwrite=False) as stream:
        stream.write(payload)


@contextmanager
def v3_metadata_writes(table: Any) -> Iterator[None]:
    """While committing to a v3 table through a metastore catalog (SQL), its catalog writes the
    new metadata file with ``write_metadata`` (an attribute of that catalog instance, removed
    again after; a REST catalog's server writes the metadata itself and never calls it)."""
    catalog = getattr(table, "catalog", None)
    if table.metadata.format_version < 3 or catalog is None or not hasattr(catalog, "_write_metadata"):
        yield
        return
    had = "_write_metadata" in vars(catalog)
    previous = vars(catalog).get("_write_metadata")
    catalog._write_metadata = write_metadata
    try:
        yield
    finally:
        if had:
            catalog._write_metadata = previous
        else:
            del catalog._write_metadata
