"""Writing a Puffin statistics file (the reader is ``storage.formats.iceberg._puffin``)."""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.table.statistics import StatisticsFile

PUFFIN_MAGIC = b"PFA1"
CREATED_BY = "Lakewarden compute-statistics (Apache DataSketches theta, lg_k=12)"

# --- Puffin --------------------------------------------------------------------------------------


def puffin_file(
    blobs: list[tuple[dict[str, Any], bytes]], *, compression: str
) -> tuple[bytes, int, list[dict]]:
    """(file bytes, footer size, blob metadata as written) of a Puffin file holding ``blobs``
    ((metadata: type, fields, snapshot-id, sequence-number, properties), payload). The footer
    payload is plain JSON (flags 0); blobs are zstd frames with their content size when
    ``compression`` is "zstd"."""
    import zstandard

    out = bytearray(PUFFIN_MAGIC)
    written = []
    for metadata, payload in blobs:
        stored = payload
        if compression == "zstd":
            stored = zstandard.ZstdCompressor(write_content_size=True).compress(payload)
        entry = {k: metadata[k] for k in ("type", "fields", "snapshot-id", "sequence-number")}
        entry.update({"offset": len(out), "length": len(stored)})
        if compression == "zstd":
            entry["compression-codec"] = "zstd"
        if metadata.get("properties"):
            entry["properties"] = metadata["properties"]
        written.append(entry)
        out += stored
    payload_json = json.dumps({"blobs": written, "properties": {"created-by": CREATED_BY}}).encode("utf-8")
    footer = PUFFIN_MAGIC + payload_json + struct.pack("<i", len(payload_json)) + bytes(4) + PUFFIN_MAGIC
    return bytes(out + footer), len(footer), written


def statistics_file(
    path: str, snapshot_id: int, data: bytes, footer_size: int, blobs: list[dict[str, Any]]
) -> StatisticsFile:
    from pyiceberg.table.statistics import BlobMetadata, StatisticsFile

    # pyiceberg's models take their fields' names (populate_by_name); mypy knows only the aliases.
    return StatisticsFile(  # type: ignore[call-arg]
        snapshot_id=snapshot_id,
        statistics_path=path,
        file_size_in_bytes=len(data),
        file_footer_size_in_bytes=footer_size,
        blob_metadata=[
            BlobMetadata(  # type: ignore[call-arg]  # fields' names, as StatisticsFile
                type=b["type"],
                snapshot_id=b["snapshot-id"],
                sequence_number=b["sequence-number"],
                fields=b["fields"],
                properties=b.get("properties"),
            )
            for b in blobs
        ],
    )
