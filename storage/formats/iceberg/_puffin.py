"""Iceberg v3 deletion vectors: ``deletion-vector-v1`` blobs inside Puffin files.

A Puffin file is the magic ``PFA1``, the blobs, then a footer: the magic, a JSON payload
(``{"blobs": [{"type", "fields", "snapshot-id", "sequence-number", "offset", "length",
"properties"...}], "properties": {...}}``), the payload size (4 bytes little-endian), 4 bytes of
flags (bit 0 of the first: payload LZ4-compressed) and the magic again.

A deletion vector is tracked in a delete manifest by the Puffin file's path, ``content_offset``
and ``content_size_in_bytes`` of its blob, and ``referenced_data_file``. The blob is a 4-byte
big-endian length of what follows up to the CRC, the magic ``D1 D3 39 64``, a 64-bit roaring
bitmap in the portable serialization (CRoaring's, which pyroaring reads), and a 4-byte
big-endian CRC-32 of the magic and the bitmap. Delta's deletion vectors use the same framing.

Every defect (bad magic, bad CRC, a range outside the file, a cardinality other than the
manifest's ``record_count``) raises ``CorruptTable`` naming the Puffin file.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from typing import Any

from pyroaring import BitMap64

from storage.spec.errors import CorruptTable, UnsupportedFeature
from storage.spec.models import DataFile

PUFFIN_MAGIC = b"PFA1"
DV_MAGIC = b"\xd1\xd3\x39\x64"
DV_BLOB_TYPE = "deletion-vector-v1"
_FOOTER_TAIL = 12  # payload size, flags, magic
_MIN_BLOB = 12  # length, magic, CRC around an (empty) bitmap


def decode_blob(blob: bytes, where: str) -> BitMap64:
    """The row positions of one ``deletion-vector-v1`` blob (framing, magic and CRC checked)."""
    if len(blob) < _MIN_BLOB:
        raise CorruptTable(f"deletion vector in {where} is {len(blob)} bytes, too short to be one")
    (length,) = struct.unpack_from(">I", blob)
    if length != len(blob) - 8:
        raise CorruptTable(
            f"deletion vector in {where}: its length field says {length} bytes, the blob holds {len(blob) - 8}"
        )
    body = blob[4 : 4 + length]
    if body[:4] != DV_MAGIC:
        raise CorruptTable(f"deletion vector in {where} does not start with the deletion vector magic")
    (checksum,) = struct.unpack_from(">I", blob, 4 + length)
    if zlib.crc32(body) != checksum:
        raise CorruptTable(f"deletion vector in {where} fails its CRC-32 check")
    try:
        return BitMap64.deserialize(body[4:])
    except Exception as exc:  # pyroaring raises plain ValueError/Exception on bad input
        raise CorruptTable(f"deletion vector in {where} cannot be decoded: {exc}") from exc


def _read_at(handle: Any, offset: int, length: int) -> bytes:
    handle.seek(offset)
    return bytes(handle.read(length))


def read_deletion_vector(file_io: Any, dv: DataFile, data_path: str) -> BitMap64:
    """The deleted positions of ``data_path`` held by the deletion vector ``dv`` (a delete file
    of content ``DELETION_VECTOR``, as the file index lists it)."""
    extra = dv.extra
    puffin = dv.path
    referenced = extra.get("referenced_data_file")
    if referenced is not None and referenced != data_path:
        raise CorruptTable(
            f"deletion vector in {puffin} belongs to {referenced}, not to the data file {data_path}"
        )
    file_size = extra.get("file_size_in_bytes")
    try:
        with file_io.new_input(puffin).open(seekable=True) as handle:
            if file_size is None:
                handle.seek(0, 2)
                file_size = handle.tell()
            if _read_at(handle, 0, 4) != PUFFIN_MAGIC:
                raise CorruptTable(f"Puffin file {puffin} does not start with the Puffin magic")
            offset, size = extra.get("content_offset"), extra.get("content_size_in_bytes")
            if offset is None or size is None:
                offset, size = _blob_from_footer(handle, file_size, puffin, data_path)
            if offset < 4 or size < _MIN_BLOB or offset + size > file_size:
                raise CorruptTable(
                    f"deletion vector in Puffin file {puffin} at offset {offset}, {size} bytes, lies"
                    f" outside the file ({file_size} bytes)"
                )
            blob = _read_at(handle, offset, size)
    except FileNotFoundError:
        raise CorruptTable(f"Puffin file {puffin} (deletion vectors) is missing") from None
    except OSError as exc:
        raise CorruptTable(f"cannot read Puffin file {puffin}: {exc}") from exc
    if len(blob) != size:
        raise CorruptTable(f"Puffin file {puffin} is shorter than its manifest entry says")
    positions = decode_blob(blob, f"Puffin file {puffin} at offset {offset}")
    if len(positions) != dv.record_count:
        raise CorruptTable(
            f"deletion vector in Puffin file {puffin} at offset {offset} holds {len(positions)}"
            f" positions, its manifest entry says {dv.record_count}"
        )
    return positions


def read_footer(handle: Any, file_size: int, puffin: str) -> Mapping[str, Any]:
    """The footer's JSON metadata of an open Puffin file."""
    if file_size < 4 + 4 + _FOOTER_TAIL:
        raise CorruptTable(f"Puffin file {puffin} is too short to hold a footer")
    tail = _read_at(handle, file_size - _FOOTER_TAIL, _FOOTER_TAIL)
    (payload_size,) = struct.unpack_from("<i", tail)
    if tail[8:] != PUFFIN_MAGIC or payload_size < 0 or payload_size + 8 + _FOOTER_TAIL > file_size:
        raise CorruptTable(f"Puffin file {puffin} does not end with a valid footer")
    if tail[4] & 1:
        raise UnsupportedFeature(f"Puffin file {puffin} has a compressed footer, which is not read")
    start = file_size - _FOOTER_TAIL - payload_size - 4
    footer = _read_at(handle, start, payload_size + 4)
    if footer[:4] != PUFFIN_MAGIC:
        raise CorruptTable(f"Puffin file {puffin}: its footer does not start with the Puffin magic")
    try:
        metadata = json.loads(footer[4:].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptTable(f"Puffin file {puffin}: its footer is not valid JSON: {exc}") from None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("blobs"), list):
        raise CorruptTable(f"Puffin file {puffin}: its footer lists no blobs")
    return metadata


def _blob_from_footer(handle: Any, file_size: int, puffin: str, data_path: str) -> tuple[int, int]:
    """(offset, length) of the deletion vector of ``data_path``, found in the footer (for entries
    that lack ``content_offset``)."""
    for blob in read_footer(handle, file_size, puffin)["blobs"]:
        properties = blob.get("properties") or {}
        if blob.get("type") == DV_BLOB_TYPE and properties.get("referenced-data-file") == data_path:
            return int(blob["offset"]), int(blob["length"])
    raise CorruptTable(f"Puffin file {puffin} holds no deletion vector for {data_path}")
