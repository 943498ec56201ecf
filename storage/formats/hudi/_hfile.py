"""A pure-Python reader of HFile v3, the format of Hudi's metadata table (base files and the
HFile data blocks of its log files), for point lookups by key.

Layout (Apache Hudi ``hudi-io`` ``org.apache.hudi.io.hfile`` — ``HFileReaderImpl``,
``HFileTrailer``, ``HFileBlock``, ``HFileRootIndexBlock``, ``HFileLeafIndexBlock``,
``HFileDataBlock``, ``HFileFileInfoBlock``, ``HFileInfo`` — and the HBase writer it mirrors):

* the last 4096 bytes are the trailer: magic ``TRABLK"$``, a varint-delimited ``TrailerProto``,
  padding, and the version int (minor in the top byte, major in the low three bytes);
* the load-on-open section (trailer ``load_on_open_data_offset`` up to the trailer) holds the
  root data index block, the root meta index block and the file info block;
* each block has a 33-byte header: 8-byte magic, on-disk size without header, uncompressed size
  without header, previous block offset, checksum type, bytes per checksum, on-disk data size
  with header; the payload is compressed with the trailer's codec (NONE or GZ; Hudi writes GZ by
  default, ``hoodie.hfile.compression.algorithm``) and followed by checksums, which are skipped;
* a root index entry is ``offset (8) | on-disk size (4) | vlong key length | key``; a non-root
  (leaf or intermediate) index block is ``count (4) | count+1 relative offsets (4 each) |
  entries (offset, size, key)``; keys are HBase KeyValue keys ``row length (2) | row | family
  length (1) | family | qualifier | timestamp (8) | type (1)``, compared by row only;
* a data block is a run of ``key length (4) | value length (4) | key | value | [tags length (2) |
  tags] | [memstore timestamp vlong]``: tags when the file info has ``hfile.MAX_TAGS_LEN``, the
  timestamp when ``KEY_VALUE_VERSION`` is 1.

A lookup reads the trailer and the load-on-open section once, then for each key only the index
blocks on its path and the one data block that may hold it; memory is bounded by one data block
plus the index. Anything malformed raises ``CorruptTable`` naming the file; formats this reader
does not decode (other codecs, encoded data blocks) raise ``UnsupportedFeature``.
"""

from __future__ import annotations

import bisect
import contextlib
import struct
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from storage.spec.errors import CorruptTable, UnsupportedFeature

TRAILER_SIZE = 4096
HEADER_SIZE = 33
TRAILER_MAGIC = b'TRABLK"$'
DATA_MAGIC = b"DATABLK*"
ENCODED_DATA_MAGIC = b"DATABLKE"
LEAF_INDEX_MAGIC = b"IDXLEAF2"
INTERMEDIATE_INDEX_MAGIC = b"IDXINTE2"
ROOT_INDEX_MAGIC = b"IDXROOT2"
FILE_INFO_MAGIC = b"FILEINF2"
PB_MAGIC = b"PBUF"
# HBase Compression.Algorithm ordinals, as stored in the trailer.
CODEC_NAMES = {0: "LZO", 1: "GZ", 2: "NONE", 3: "SNAPPY", 4: "LZ4", 5: "BZIP2", 6: "ZSTD"}
SUPPORTED_CODECS = ("NONE", "GZ")
MAX_BLOCK_SIZE = 256 * 1024 * 1024  # a larger block is corrupt, not allocated
_CELL_HEAD = struct.Struct(">iiH")  # key length, value length, row length

ReadAt = Callable[[int, int], bytes]


class _Malformed(Exception):
    """Internal: turned into ``CorruptTable`` naming the file at the public boundary."""


# --- primitive decoders -------------------------------------------------------------------------


def read_vlong(data: bytes, pos: int) -> tuple[int, int]:
    """Hadoop ``WritableUtils.readVLong`` at ``pos``: (value, bytes used)."""
    if pos >= len(data):
        raise _Malformed("a variable-length number runs past the end of its block")
    first = struct.unpack_from(">b", data, pos)[0]
    if first >= -112:
        return first, 1
    negative = first < -120
    size = (-119 - first) if negative else (-111 - first)
    if pos + size > len(data):
        raise _Malformed("a variable-length number runs past the end of its block")
    value = int.from_bytes(data[pos + 1 : pos + size], "big")
    return (~value if negative else value), size


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A protobuf base-128 varint at ``pos``: (value, new position)."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Malformed("a protobuf varint runs past the end of its buffer")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def proto_fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as ints, length-delimited as bytes."""
    pos = 0
    while pos < len(data):
        tag, pos = read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = read_varint(data, pos)
            yield number, value
        elif wire == 2:
            size, pos = read_varint(data, pos)
            if pos + size > len(data):
                raise _Malformed("a protobuf field runs past the end of its message")
            yield number, data[pos : pos + size]
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise _Malformed(f"protobuf wire type {wire} is not valid here")


def key_row(key: bytes) -> bytes:
    """The row of an HBase KeyValue key (``row length (2) | row | ...``)."""
    if len(key) < 2:
        raise _Malformed("an index key is shorter than its row length")
    (length,) = struct.unpack_from(">H", key, 0)
    if 2 + length > len(key):
        raise _Malformed("an index key's row runs past the key")
    return key[2 : 2 + length]


# --- structures ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Trailer:
    load_on_open_offset: int
    data_index_count: int
    meta_index_count: int
    entry_count: int
    index_levels: int
    codec: str
    major_version: int


@dataclass(frozen=True, slots=True)
class IndexEntry:
    row: bytes  # the row of the block's first key (or of HBase's shorter "fake" separator key)
    offset: int
    size: int


def parse_trailer(raw: bytes) -> Trailer:
    if len(raw) != TRAILER_SIZE or not raw.startswith(TRAILER_MAGIC):
        raise _Malformed("no HFile trailer at the end of the file")
    version = struct.unpack_from(">I", raw, TRAILER_SIZE - 4)[0]
    major = version & 0x00FFFFFF
    if major != 3:
        raise UnsupportedFeature(f"HFile major version {major} (only version 3 is read)")
    size, start = read_varint(raw, len(TRAILER_MAGIC))
    if start + size > TRAILER_SIZE - 4:
        raise _Malformed("the trailer's protobuf runs past the trailer")
    fields: dict[int, Any] = dict(proto_fields(raw[start : start + size]))
    codec = CODEC_NAMES.get(int(fields.get(12, 2)))
    if codec is None:
        raise _Malformed(f"unknown compression codec id {fields.get(12)}")
    if codec not in SUPPORTED_CODECS:
        raise UnsupportedFeature(f"HFile compression {codec} (only NONE and GZ are read)")
    if fields.get(13):
        raise UnsupportedFeature("encrypted HFiles")
    return Trailer(
        load_on_open_offset=int(fields.get(2, 0)),
        data_index_count=int(fields.get(5, 0)),
        meta_index_count=int(fields.get(6, 0)),
        entry_count=int(fields.get(7, 0)),
        index_levels=int(fields.get(8, 1)),
        codec=codec,
        major_version=major,
    )


def parse_root_index(payload: bytes, count: int, *, content_keys: bool) -> list[IndexEntry]:
    """``count`` root index entries; meta index keys are plain names (``content_keys``)."""
    entries = []
    pos = 0
    for _ in range(count):
        if pos + 12 > len(payload):
            raise _Malformed("the root index has fewer entries than the trailer says")
        offset, size = struct.unpack_from(">qi", payload, pos)
        length, used = read_vlong(payload, pos + 12)
        start = pos + 12 + used
        if length < 0 or start + length > len(payload):
            raise _Malformed("a root index key runs past its block")
        key = payload[start : start + length]
        entries.append(IndexEntry(key if content_keys else key_row(key), offset, size))
        pos = start + length
    return entries


def parse_nonroot_index(payload: bytes) -> list[IndexEntry]:
    """The entries of a leaf or intermediate index block."""
    if len(payload) < 4:
        raise _Malformed("an index block is too short for its entry count")
    (count,) = struct.unpack_from(">i", payload, 0)
    entries_start = 4 + 4 * (count + 1)
    if count < 0 or entries_start > len(payload):
        raise _Malformed("an index block's entry count does not fit the block")
    relative = struct.unpack_from(f">{count + 1}i", payload, 4)
    entries = []
    for i in range(count):
        start, end = entries_start + relative[i], entries_start + relative[i + 1]
        if not (entries_start <= start and start + 12 <= end <= len(payload)):
            raise _Malformed("an index block's entry offsets are out of order")
        offset, size = struct.unpack_from(">qi", payload, start)
        entries.append(IndexEntry(key_row(payload[start + 12 : end]), offset, size))
    return entries


def parse_file_info(payload: bytes) -> dict[bytes, bytes]:
    if not payload.startswith(PB_MAGIC):
        raise _Malformed("the file info block does not start with PBUF")
    size, start = read_varint(payload, len(PB_MAGIC))
    if start + size > len(payload):
        raise _Malformed("the file info protobuf runs past its block")
    info: dict[bytes, bytes] = {}
    for number, pair in proto_fields(payload[start : start + size]):
        if number != 1 or not isinstance(pair, bytes):
            continue
        fields = dict(proto_fields(pair))
        first, second = fields.get(1, b""), fields.get(2, b"")
        if isinstance(first, bytes) and isinstance(second, bytes):
            info[first] = second
    return info


def decode_block(raw: bytes, codec: str, expected: Iterable[bytes]) -> tuple[bytes, bytes, int]:
    """(magic, uncompressed payload, on-disk size with header) of the block starting ``raw``."""
    if len(raw) < HEADER_SIZE:
        raise _Malformed("a block is shorter than its header")
    magic = raw[:8]
    if magic == ENCODED_DATA_MAGIC:
        raise UnsupportedFeature("HFile data block encoding (prefix/diff encoded blocks)")
    if magic not in expected:
        raise _Malformed(f"expected a {'/'.join(m.decode() for m in expected)} block, found {magic!r}")
    on_disk, uncompressed = struct.unpack_from(">ii", raw, 8)
    (data_with_header,) = struct.unpack_from(">i", raw, 29)
    if not (0 <= uncompressed <= MAX_BLOCK_SIZE and 0 <= on_disk <= MAX_BLOCK_SIZE):
        raise _Malformed("a block header has an impossible size")
    if not HEADER_SIZE <= data_with_header <= HEADER_SIZE + on_disk:
        data_with_header = HEADER_SIZE + on_disk  # headers without the data size field
    if len(raw) < data_with_header:
        raise _Malformed("a block is cut short")
    body = raw[HEADER_SIZE:data_with_header]
    if codec == "GZ":
        try:
            inflater = zlib.decompressobj(wbits=47)  # gzip or zlib framing
            payload = inflater.decompress(body, uncompressed + 1)
        except zlib.error as error:
            raise _Malformed(f"a GZ block does not decompress: {error}") from error
    else:
        payload = body
    if len(payload) != uncompressed:
        raise _Malformed(f"a block holds {len(payload)} bytes, its header says {uncompressed}")
    return magic, payload, HEADER_SIZE + on_disk


# --- the reader ---------------------------------------------------------------------------------


class HFileReader:
    """Point lookups in one HFile, read through ``read_at(offset, length)``.

    ``name`` is used in error messages; ``size`` is the file's length in bytes (for an HFile
    inlined in a log block, the block content's length, ``read_at`` relative to its start).
    """

    def __init__(
        self, read_at: ReadAt, size: int, name: str, close: Callable[[], None] | None = None
    ) -> None:
        self.name = name
        self._read_at = read_at
        self._close = close
        self._size = size
        self._index_blocks: OrderedDict[int, list[IndexEntry]] = OrderedDict()
        self._block: tuple[int, bytes] | None = None
        try:
            with self._errors("opening"):
                self._open()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None

    def __enter__(self) -> HFileReader:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _errors(self, doing: str) -> Any:
        return _hfile_errors(self.name, doing)

    def _read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self._size:
            raise _Malformed(f"a read of {length} bytes at {offset} falls outside the {self._size}-byte file")
        data = self._read_at(offset, length)
        if len(data) != length:
            raise _Malformed(f"read {len(data)} of {length} bytes at {offset}")
        return data

    def _open(self) -> None:
        if self._size < TRAILER_SIZE:
            raise _Malformed(f"{self._size} bytes is too short for an HFile (the trailer alone is 4096)")
        trailer = parse_trailer(self._read(self._size - TRAILER_SIZE, TRAILER_SIZE))
        start = trailer.load_on_open_offset
        if not 0 <= start <= self._size - TRAILER_SIZE or trailer.index_levels < 1:
            raise _Malformed("the trailer's load-on-open offset or index levels are impossible")
        section = self._read(start, self._size - TRAILER_SIZE - start)
        _, root, used = decode_block(section, trailer.codec, (ROOT_INDEX_MAGIC,))
        _, meta, meta_used = decode_block(section[used:], trailer.codec, (ROOT_INDEX_MAGIC,))
        _, info, _ = decode_block(section[used + meta_used :], trailer.codec, (FILE_INFO_MAGIC,))
        self.trailer = trailer
        self.root = parse_root_index(root, trailer.data_index_count, content_keys=False)
        self.meta_index = parse_root_index(meta, trailer.meta_index_count, content_keys=True)
        self.file_info = parse_file_info(info)
        self._rows = [entry.row for entry in self.root]
        version = self.file_info.get(b"KEY_VALUE_VERSION", b"")
        self._with_memstore_ts = len(version) == 4 and struct.unpack(">i", version)[0] == 1
        self._with_tags = b"hfile.MAX_TAGS_LEN" in self.file_info

    @property
    def entry_count(self) -> int:
        return self.trailer.entry_count

    def get(self, key: bytes) -> bytes | None:
        """The value stored under ``key`` (compared as the row), None when absent."""
        return self.get_many((key,)).get(key)

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        """The values of those ``keys`` present; each data block holding some is read and scanned
        once, and only up to the last key looked up in it."""
        with self._errors("looking up keys"):
            by_block: dict[int, tuple[IndexEntry, set[bytes]]] = {}
            for key in sorted(set(keys)):
                entry = self._data_block_for(key)
                if entry is not None:
                    by_block.setdefault(entry.offset, (entry, set()))[1].add(key)
            found: dict[bytes, bytes] = {}
            for entry, wanted in by_block.values():
                for row, value in self._cells(self._data_payload(entry), max(wanted)):
                    if row in wanted:
                        found.setdefault(row, value)
            return found

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) in key order, one data block in memory at a time."""
        with self._errors("scanning"):
            for entry in self._leaf_entries(self.root, self.trailer.index_levels):
                yield from self._cells(self._data_payload(entry), None)

    # --- index descent ----------------------------------------------------------------------

    def _data_block_for(self, key: bytes) -> IndexEntry | None:
        entries, rows = self.root, self._rows
        for level in range(self.trailer.index_levels, 0, -1):
            position = bisect.bisect_right(rows, key) - 1
            if position < 0:
                return None  # before the first key of the file
            entry = entries[position]
            if level == 1:
                return entry
            entries = self._index_block(entry, leaf=level == 2)
            rows = [e.row for e in entries]
        return None

    def _index_block(self, entry: IndexEntry, *, leaf: bool) -> list[IndexEntry]:
        if entry.offset not in self._index_blocks:
            magic = LEAF_INDEX_MAGIC if leaf else INTERMEDIATE_INDEX_MAGIC
            _, payload, _ = decode_block(self._read(entry.offset, entry.size), self.trailer.codec, (magic,))
            self._index_blocks[entry.offset] = parse_nonroot_index(payload)
            if len(self._index_blocks) > 64:
                self._index_blocks.popitem(last=False)
        return self._index_blocks[entry.offset]

    def _leaf_entries(self, entries: list[IndexEntry], level: int) -> Iterator[IndexEntry]:
        for entry in entries:
            if level == 1:
                yield entry
            else:
                yield from self._leaf_entries(self._index_block(entry, leaf=level == 2), level - 1)

    # --- data blocks ------------------------------------------------------------------------

    def _data_payload(self, entry: IndexEntry) -> bytes:
        """The uncompressed cells of a data block (the last one read is kept)."""
        if self._block is None or self._block[0] != entry.offset:
            raw = self._read(entry.offset, entry.size)
            _, payload, _ = decode_block(raw, self.trailer.codec, (DATA_MAGIC,))
            self._block = (entry.offset, payload)
        return self._block[1]

    def _cells(self, payload: bytes, last: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """(row, value) of the block's cells in order, stopping after row ``last`` if given."""
        pos, end = 0, len(payload)
        tags, memstore_ts = self._with_tags, self._with_memstore_ts
        while pos < end:
            if pos + 10 > end:
                raise _Malformed("a cell header runs past its data block")
            key_length, value_length, row_length = _CELL_HEAD.unpack_from(payload, pos)
            value_start = pos + 8 + key_length
            pos = value_start + value_length
            if key_length < 2 + row_length or value_length < 0 or pos > end:
                raise _Malformed("a cell runs past its data block")
            row = payload[value_start - key_length + 2 : value_start - key_length + 2 + row_length]
            if last is not None and row > last:
                return
            yield row, payload[value_start:pos]
            if tags:
                if pos + 2 > end:
                    raise _Malformed("a cell's tags run past its data block")
                pos += 2 + struct.unpack_from(">H", payload, pos)[0]
            if memstore_ts:
                pos += (
                    1
                    if pos < end and (payload[pos] < 0x80 or payload[pos] >= 0x90)
                    else read_vlong(payload, pos)[1]
                )


@contextlib.contextmanager
def _hfile_errors(name: str, doing: str) -> Iterator[None]:
    """Turns decoding errors into ``CorruptTable`` naming the HFile and what was being done."""
    try:
        yield
    except CorruptTable:
        raise
    except UnsupportedFeature as error:
        if name in str(error):
            raise
        raise UnsupportedFeature(f"HFile {name}: {error}") from error
    except (_Malformed, struct.error, IndexError, ValueError, OverflowError, OSError) as error:
        raise CorruptTable(f"HFile {name} is corrupt ({doing}): {error}") from error


def open_hfile(filesystem: Any, path: str, size: int | None = None) -> HFileReader:
    """An ``HFileReader`` over ``path`` read through a pyarrow filesystem (local or S3)."""
    try:
        handle = filesystem.open_input_file(path)
        size = handle.size() if size is None else size
    except OSError as error:
        raise CorruptTable(f"HFile {path} cannot be opened: {error}") from error

    def read_at(offset: int, length: int) -> bytes:
        return handle.read_at(length, offset)

    return HFileReader(read_at, size, path, handle.close)


__all__ = ["HFileReader", "open_hfile", "read_vlong"]
