"""Checked reads of Avro's binary encoding in plain Python, for ``_avro``: the container framing
(header, blocks, deflate) and the parser of Iceberg int-keyed maps kept ``"raw"`` (the fallback of
the compiled ``int_bytes_map``/``int_long_map``). Every number and length is bounds-checked and
anything malformed raises ``ValueError``: pyiceberg's Cython reads check no bounds.
"""

from __future__ import annotations

import zlib
from typing import Any

MAGIC = b"Obj\x01"


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """The zigzag long at ``data[pos:]`` and the position after it."""
    result = 0
    for shift in range(0, 70, 7):
        if pos >= len(data):
            raise ValueError("truncated Avro data: a number runs past the end")
        byte = data[pos]
        pos += 1
        if shift == 63 and byte > 1:  # as the compiled decoder: nothing past 64 bits
            raise ValueError("malformed Avro data: a number longer than 64 bits")
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
    raise ValueError("malformed Avro data: a number longer than 10 bytes")


def span(data: bytes, pos: int) -> tuple[bytes, int]:
    length, pos = varint(data, pos)
    if length < 0 or length > len(data) - pos:
        raise ValueError("truncated Avro data: a length runs past the end")
    return data[pos : pos + length], pos + length


def header(data: bytes) -> tuple[dict[str, bytes], bytes, int]:
    """(metadata, sync marker, offset of the first block) of the Avro container file ``data``.

    The container is framed here in Python with every length checked: pyiceberg's Cython
    decoder checks none (a corrupt length made it read past the buffer and crash)."""
    if data[:4] != MAGIC:
        raise ValueError("not an Avro container file (bad magic)")
    meta: dict[str, bytes] = {}
    pos = 4
    while True:
        count, pos = varint(data, pos)
        if count == 0:
            break
        if count < 0:  # a negative count is followed by the block's byte size
            count = -count
            pos = varint(data, pos)[1]
        for _ in range(count):
            key, pos = span(data, pos)
            meta[key.decode()], pos = span(data, pos)
    if len(data) - pos < 16:
        raise ValueError("truncated Avro container: no sync marker after the header")
    return meta, data[pos : pos + 16], pos + 16


def joined(data: bytes) -> tuple[str, bytes, int] | None:
    """(writer schema JSON, all records decompressed, record count) of the Avro container file
    in ``data`` when its codec is null or deflate (else None: fastavro reads it).

    A container's blocks only frame the records: their payloads, decompressed, concatenate into
    the records' plain encoding. pyiceberg writes one block per manifest entry, and reading block
    by block (fastavro's ``block_reader``: a ``Block`` and a ``BytesIO`` each, then a decoder)
    cost a tenth of a listing; here each payload is inflated by one ``zlib`` call."""
    meta, sync, pos = header(data)
    codec = meta.get("avro.codec", b"null")
    if "avro.schema" not in meta:
        raise ValueError("an Avro container file without a schema (no avro.schema)")
    if codec not in (b"null", b"deflate"):
        return None
    end, inflate = len(data), codec == b"deflate"
    payloads = []
    total = 0
    while pos < end:
        count, pos = varint(data, pos)
        size, pos = varint(data, pos)
        if count < 0 or size < 0:
            raise ValueError("an Avro block with a negative record count or size")
        if size > end - pos - 16:
            raise ValueError("truncated Avro container: a block runs past the end")
        payload, pos = data[pos : pos + size], pos + size
        if data[pos : pos + 16] != sync:
            raise ValueError("an Avro block does not end with the file's sync marker")
        pos += 16
        try:
            payloads.append(zlib.decompress(payload, -15) if inflate else payload)
        except zlib.error as exc:
            raise ValueError(f"an Avro block's deflate stream is corrupt: {exc}") from exc
        total += count
    return meta["avro.schema"].decode(), b"".join(payloads), total


def parse_int_map(raw: bytes, values: str) -> dict[Any, Any]:
    """The map a ``"raw"`` blob encodes, checked as the compiled parser checks it (every number
    and length in bounds, a block count the bytes left can hold, nothing after the closing zero
    count): pyiceberg's Cython reads check no bounds, so they are not used on a blob. Numbers
    of one byte (most keys, lengths and counts) are decoded inline: a call each tripled the time."""
    out: dict[int, Any] = {}
    pos, end, with_bytes = 0, len(raw), values == "bytes"
    while True:
        count, pos = varint(raw, pos)
        if count == 0:
            break
        if count < 0:
            count = -count
            size, pos = varint(raw, pos)
            if size < 0:
                raise ValueError("malformed Avro data: a negative block size")
        if count > (end - pos) // 2:
            raise ValueError("malformed Avro data: a block count larger than the data left")
        for _ in range(count):
            byte = raw[pos] if pos < end else 0x80  # past the end: varint says truncated
            if byte < 0x80:
                key, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            else:
                key, pos = varint(raw, pos)
            byte = raw[pos] if pos < end else 0x80
            if byte < 0x80:
                number, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            else:
                number, pos = varint(raw, pos)
            if not with_bytes:
                out[key] = number
            elif number < 0:
                raise ValueError("malformed Avro data: a negative length")
            elif number > end - pos:
                raise ValueError("truncated Avro data: bytes or a string run past the end")
            else:
                out[key], pos = raw[pos : pos + number], pos + number
    if pos != end:
        raise ValueError("malformed raw map: bytes after its closing block")
    return out


def py_int_bytes_map(raw: bytes) -> dict[int, bytes]:
    return parse_int_map(bytes(memoryview(raw)), "bytes")


def py_int_long_map(raw: bytes) -> dict[int, int]:
    return parse_int_map(bytes(memoryview(raw)), "long")
