"""Delta deletion vectors: locate, read and decode them into 64-bit roaring bitmaps of row indexes.

Descriptor (``add.deletionVector``): ``storageType`` ``u`` (a file next to the table, named by a
Z85-encoded UUID with an optional folder prefix), ``i`` (inline, Z85 in the log) or ``p`` (an
absolute path); ``offset`` of the vector inside the file, ``sizeInBytes``, ``cardinality``.

In a file, at ``offset``: a 4-byte big-endian size, the serialised vector, a 4-byte big-endian
CRC-32 of it. The serialised vector is a little-endian magic number followed by the "portable"
64-bit RoaringBitmapArray format, which is CRoaring's 64-bit portable format: pyroaring reads it.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from pyroaring import BitMap64

from storage.spec.errors import CorruptTable

_Z85_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUES = {char: index for index, char in enumerate(_Z85_ALPHABET)}
_MAGIC = 1681511377
_UUID_CHARS = 20  # a 16-byte UUID is 20 Z85 characters


def z85_decode(text: str, what: str = "Z85 text") -> bytes:
    """Decode Z85 (ZeroMQ base-85) as Delta's ``Base85Codec`` does: five characters make a
    number that is written as 4 big-endian bytes, keeping its low 32 bits (five characters can
    count to 85**5 - 1, past 2**32: Delta's codec truncates, so a writer may leave such blocks).
    ``CorruptTable`` naming ``what`` when the length is not a multiple of 5 or a character is
    not Z85."""
    if len(text) % 5:
        raise CorruptTable(f"{what} is not Z85: {len(text)} characters, not a multiple of 5")
    out = bytearray()
    for start in range(0, len(text), 5):
        number = 0
        for char in text[start : start + 5]:
            value = _Z85_VALUES.get(char)
            if value is None:
                raise CorruptTable(f"{what} is not Z85: {char!r} is not a Z85 character")
            number = number * 85 + value
        out += (number & 0xFFFFFFFF).to_bytes(4, "big")
    return bytes(out)


def unique_id(descriptor: Mapping[str, Any] | None) -> str | None:
    """The descriptor's unique id: with the file path, the key of an add or remove action."""
    if not descriptor:
        return None
    offset = descriptor.get("offset")
    base = f"{descriptor['storageType']}{descriptor['pathOrInlineDv']}"
    return base if offset is None else f"{base}@{offset}"


def relative_path(descriptor: Mapping[str, Any]) -> str | None:
    """Path of the vector's file relative to the table root (``u``), absolute (``p``), or None
    for an inline vector."""
    kind = descriptor["storageType"]
    if kind == "u":
        encoded = descriptor["pathOrInlineDv"]
        prefix, encoded_uuid = encoded[:-_UUID_CHARS], encoded[-_UUID_CHARS:]
        if len(encoded_uuid) < _UUID_CHARS:
            raise CorruptTable(f"deletion vector path {encoded!r} is too short for its Z85 UUID")
        id_bytes = z85_decode(encoded_uuid, f"deletion vector path {encoded!r}")
        name = f"deletion_vector_{uuid.UUID(bytes=id_bytes)}.bin"
        return f"{prefix}/{name}" if prefix else name
    if kind == "p":
        return descriptor["pathOrInlineDv"]
    if kind == "i":
        return None
    raise CorruptTable(f"unknown deletion vector storage type {kind!r}")


def decode(blob: bytes, *, where: str) -> BitMap64:
    if len(blob) < 4 or struct.unpack_from("<i", blob)[0] != _MAGIC:
        raise CorruptTable(
            f"deletion vector in {where} does not start with the RoaringBitmapArray magic number"
        )
    try:
        return BitMap64.deserialize(blob[4:])
    except Exception as exc:  # pyroaring raises plain ValueError/Exception on bad input
        raise CorruptTable(f"deletion vector in {where} cannot be decoded: {exc}") from exc


def load(
    descriptor: Mapping[str, Any], read_range: Callable[[str, int, int], bytes], path: str | None
) -> BitMap64:
    """The deleted row indexes. ``read_range(path, offset, length)`` reads bytes of a file;
    ``path`` is the vector file's location (None for inline vectors)."""
    size = int(descriptor["sizeInBytes"])
    if descriptor["storageType"] == "i":
        blob = z85_decode(descriptor["pathOrInlineDv"], "an inline deletion vector")
        if len(blob) < size:
            raise CorruptTable(f"inline deletion vector holds {len(blob)} bytes, its descriptor says {size}")
        return decode(blob[:size], where="an inline deletion vector")
    assert path is not None
    offset = int(descriptor.get("offset") or 0)
    data = read_range(path, offset, size + 8)
    if len(data) < size + 8:
        raise CorruptTable(f"deletion vector file {path} is shorter than its descriptor says")
    (stored_size,) = struct.unpack_from(">i", data)
    if stored_size != size:
        raise CorruptTable(
            f"deletion vector in {path} at offset {offset}: size {stored_size}, expected {size}"
        )
    blob = data[4 : 4 + size]
    (checksum,) = struct.unpack_from(">I", data, 4 + size)
    if zlib.crc32(blob) != checksum:
        raise CorruptTable(f"deletion vector in {path} at offset {offset} fails its CRC-32 check")
    return decode(blob, where=path)
