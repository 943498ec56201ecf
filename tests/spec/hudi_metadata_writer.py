"""A small writer of Hudi metadata tables with a record index, for tests only.

No Hudi writer can run here, so this writes the bytes the Java writers lay out, from their
sources (apache/hudi):

* HFile v3 as ``hudi-io`` ``HFileWriterImpl`` writes it: data blocks of HBase KeyValue cells
  (``HFileDataBlock``: key length, value length, row length, row, family length 0, timestamp
  Long.MAX_VALUE, type Put, value, a zero memstore-timestamp byte), each block with the 33-byte
  header (``HFileBlock.serialize``: NULL checksum type, 16 KiB per checksum, zeroed checksum
  bytes), GZ by default; the load-on-open section (root data index with HBase KeyValue keys and
  vint key lengths, empty meta index, ``PBUF`` file info with ``hfile.LASTKEY``,
  ``KEY_VALUE_VERSION`` = 1, ``schema``), and the 4096-byte protobuf trailer ending in version 3.
  ``index_levels=2`` writes leaf index blocks as HBase's multi-level index does, and
  ``hbase_layout=True`` lays blocks out as the HBase writer Hudi used before 1.0 does: a block is
  closed once it holds ``block_size`` bytes (``HFileWriterImpl.checkBlockBoundary``) and the index
  holds HBase's shortened "fake" first keys (``CellComparatorImpl.getMidpoint``);
* metadata records: Avro ``HoodieMetadataRecord`` (``HoodieMetadata.avsc``) of type 5 with
  ``HoodieRecordIndexInfo``, written with the key field blanked as ``HoodieAvroHFileWriter``
  does;
* log files as ``HoodieLogFormatWriter`` writes blocks (``#HUDI#``, block size, version 1, block
  type, header, content length, content, footer, total length), with HFile data blocks, version-3
  delete blocks and rollback command blocks;
* the metadata table's folder: ``.hoodie/metadata/.hoodie/hoodie.properties``, its timeline (a
  delta commit per data instant), ``record_index/record-index-NNNN-0`` file groups.
"""

from __future__ import annotations

import gzip
import io
import json
import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import fastavro

from storage.formats.hudi._metadata_index import DELETE_RECORD_LIST_SCHEMA, file_group_id, file_group_index

HEADER_SIZE = 33
BYTES_PER_CHECKSUM = 16 * 1024
LATEST_TIMESTAMP = (1 << 63) - 1
PUT = 4
CODEC_IDS = {"NONE": 2, "GZ": 1}

# HoodieMetadata.avsc, with the partitions a record index table uses (files, bloom filters and
# column stats reduced to their outer shape: a union with null, left null here).
RECORD_INDEX_INFO = {
    "type": "record",
    "name": "HoodieRecordIndexInfo",
    "fields": [
        {"name": "partitionName", "type": ["null", "string"], "default": None},
        {"name": "fileIdHighBits", "type": ["null", "long"], "default": None},
        {"name": "fileIdLowBits", "type": ["null", "long"], "default": None},
        {"name": "fileIndex", "type": ["null", "int"], "default": None},
        {"name": "fileId", "type": ["null", "string"], "default": None},
        {"name": "instantTime", "type": ["null", "long"], "default": None},
        {"name": "fileIdEncoding", "type": "int", "default": 0},
        {"name": "position", "type": ["null", "long"], "default": None},
    ],
}
METADATA_SCHEMA = {
    "namespace": "org.apache.hudi.avro.model",
    "type": "record",
    "name": "HoodieMetadataRecord",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "type", "type": "int"},
        {
            "name": "filesystemMetadata",
            "type": [
                "null",
                {
                    "type": "map",
                    "values": {
                        "type": "record",
                        "name": "HoodieMetadataFileInfo",
                        "fields": [
                            {"name": "size", "type": "long"},
                            {"name": "isDeleted", "type": "boolean"},
                        ],
                    },
                },
            ],
        },
        {
            "name": "BloomFilterMetadata",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "HoodieMetadataBloomFilter",
                    "fields": [
                        {"name": "type", "type": "string"},
                        {"name": "timestamp", "type": "string"},
                        {"name": "bloomFilter", "type": "bytes"},
                        {"name": "isDeleted", "type": "boolean"},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "recordIndexMetadata", "type": ["null", RECORD_INDEX_INFO], "default": None},
    ],
}
METADATA_SCHEMA_TEXT = json.dumps(METADATA_SCHEMA)
_PARSED = fastavro.parse_schema(json.loads(METADATA_SCHEMA_TEXT))
_DELETES = fastavro.parse_schema(json.loads(DELETE_RECORD_LIST_SCHEMA))


# --- primitive encoders -------------------------------------------------------------------------


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def vlong(value: int) -> bytes:
    """Hadoop ``WritableUtils.writeVLong``."""
    if -112 <= value <= 127:
        return struct.pack(">b", value)
    length = -112
    if value < 0:
        value ^= -1
        length = -120
    tmp = value
    while tmp:
        tmp >>= 8
        length -= 1
    size = -(length + 120) if length < -120 else -(length + 112)
    return struct.pack(">b", length) + value.to_bytes(size, "big")


def proto(fields: Iterable[tuple[int, int | bytes]]) -> bytes:
    out = bytearray()
    for number, value in fields:
        if isinstance(value, bytes):
            out += varint(number << 3 | 2) + varint(len(value)) + value
        else:
            out += varint(number << 3) + varint(value)
    return bytes(out)


def kv_key(row: bytes) -> bytes:
    """``HFileUtils.writeKeyValueKey``: row length, row, family length 0, latest timestamp, Put."""
    return struct.pack(">H", len(row)) + row + b"\x00" + struct.pack(">q", LATEST_TIMESTAMP) + bytes([PUT])


def separator(left: bytes, right: bytes) -> bytes:
    """HBase ``getMinimumMidpointArray``: a short row in (left, right]."""
    limit = min(len(left), len(right))
    diff = 0
    while diff < limit and left[diff] == right[diff]:
        diff += 1
    if diff >= limit:
        return right[: diff + 1]
    if left[diff] + 1 < right[diff]:
        return left[:diff] + bytes([left[diff] + 1])
    return right[: diff + 1]


# --- HFile --------------------------------------------------------------------------------------


def block(magic: bytes, payload: bytes, codec: str, previous: int) -> bytes:
    """``HFileBlock.serialize``."""
    body = gzip.compress(payload, mtime=0) if codec == "GZ" else payload
    data_with_header = HEADER_SIZE + len(body)
    checksum_bytes = -(-data_with_header // BYTES_PER_CHECKSUM) * 4
    header = magic + struct.pack(
        ">iiqbii", len(body) + checksum_bytes, len(payload), previous, 0, BYTES_PER_CHECKSUM, data_with_header
    )
    return header + body + bytes(checksum_bytes)


def cell(row: bytes, value: bytes) -> bytes:
    key = kv_key(row)
    return struct.pack(">ii", len(key), len(value)) + key + value + b"\x00"


def root_entry(offset: int, size: int, key: bytes) -> bytes:
    return struct.pack(">qi", offset, size) + vlong(len(key)) + key


def leaf_block_payload(entries: list[tuple[int, int, bytes]]) -> bytes:
    """A non-root index block: count, count+1 relative offsets, entries."""
    bodies = [struct.pack(">qi", off, size) + key for off, size, key in entries]
    offsets, position = [], 0
    for body in bodies:
        offsets.append(position)
        position += len(body)
    offsets.append(position)
    return struct.pack(">i", len(entries)) + struct.pack(f">{len(offsets)}i", *offsets) + b"".join(bodies)


@dataclass
class _HFileBuilder:
    codec: str
    block_size: int
    hbase_layout: bool
    out: bytearray = field(default_factory=bytearray)
    entries: list[tuple[bytes, int, int]] = field(default_factory=list)
    previous: int = -1
    last_row_written: bytes | None = None

    def add_block(self, magic: bytes, payload: bytes) -> tuple[int, int]:
        offset = len(self.out)
        self.out += block(magic, payload, self.codec, self.previous)
        self.previous = offset
        return offset, len(self.out) - offset

    def flush_data(self, rows: list[bytes], payload: bytes) -> None:
        offset, size = self.add_block(b"DATABLK*", payload)
        first = rows[0]
        if self.hbase_layout and self.last_row_written is not None:
            first = separator(self.last_row_written, rows[0])
        self.entries.append((first, offset, size))
        self.last_row_written = rows[-1]


def _write_data_blocks(builder: _HFileBuilder, cells: Mapping[bytes, bytes]) -> None:
    rows: list[bytes] = []
    payload = bytearray()
    for row in sorted(cells):
        encoded = cell(row, cells[row])
        full = (
            len(payload) >= builder.block_size
            if builder.hbase_layout
            else len(payload) + len(encoded) > builder.block_size
        )
        if rows and full:
            builder.flush_data(rows, bytes(payload))
            rows, payload = [], bytearray()
        rows.append(row)
        payload += encoded
    if rows:
        builder.flush_data(rows, bytes(payload))


def _root_entries(builder: _HFileBuilder, levels: int, fanout: int) -> list[tuple[bytes, int, int]]:
    """Root entries: the data blocks, or (two levels) leaf index blocks of ``fanout`` entries."""
    if levels == 1:
        return builder.entries
    roots = []
    for i in range(0, len(builder.entries), fanout):
        chunk = builder.entries[i : i + fanout]
        payload = leaf_block_payload([(off, size, kv_key(row)) for row, off, size in chunk])
        offset, size = builder.add_block(b"IDXLEAF2", payload)
        roots.append((chunk[0][0], offset, size))
    return roots


def write_hfile(
    cells: Mapping[bytes, bytes],
    *,
    codec: str = "GZ",
    block_size: int = 64 * 1024,
    file_info: Mapping[bytes, bytes] | None = None,
    index_levels: int = 1,
    hbase_layout: bool = False,
    leaf_fanout: int = 2,
) -> bytes:
    """An HFile v3 of ``cells`` (row -> value), rows sorted by bytes."""
    builder = _HFileBuilder(codec, block_size, hbase_layout)
    _write_data_blocks(builder, cells)
    first_data = builder.entries[0][1] if builder.entries else 0
    last_data = builder.entries[-1][1] if builder.entries else 0
    roots = _root_entries(builder, index_levels, leaf_fanout)
    load_on_open = len(builder.out)
    builder.add_block(b"IDXROOT2", b"".join(root_entry(off, size, kv_key(row)) for row, off, size in roots))
    builder.add_block(b"IDXROOT2", b"")
    file_info_offset = len(builder.out)
    builder.add_block(b"FILEINF2", _file_info(cells, file_info))
    fields: list[tuple[int, int | bytes]] = [
        (1, file_info_offset),
        (2, load_on_open),
        (3, sum(len(cell(r, v)) for r, v in cells.items())),
        (5, len(roots)),
        (6, 0),
        (7, len(cells)),
        (8, index_levels),
        (9, first_data),
        (10, last_data),
        (11, b"org.apache.hudi.io.storage.HoodieHBaseKVComparator"),
        (12, CODEC_IDS[codec]),
    ]
    message = proto(fields)
    trailer = bytearray(b'TRABLK"$' + varint(len(message)) + message)
    trailer += bytes(4096 - len(trailer))
    trailer[4092:4096] = struct.pack(">I", 3)
    return bytes(builder.out + trailer)


def _file_info(cells: Mapping[bytes, bytes], extra: Mapping[bytes, bytes] | None) -> bytes:
    last = max(cells) if cells else b""
    info = {
        b"MAX_MEMSTORE_TS_KEY": struct.pack(">q", 0),
        b"hfile.LASTKEY": struct.pack(">H", len(last)) + last if last else b"",
        b"hfile.AVG_KEY_LEN": struct.pack(">i", sum(map(len, cells)) // max(len(cells), 1)),
        b"hfile.CREATE_TIME_TS": struct.pack(">q", 0),
        b"hfile.AVG_VALUE_LEN": struct.pack(">i", sum(map(len, cells.values())) // max(len(cells), 1)),
        b"KEY_VALUE_VERSION": struct.pack(">i", 1),
        **(extra or {}),
    }
    message = proto((1, proto([(1, k), (2, v)])) for k, v in info.items())
    return b"PBUF" + varint(len(message)) + message


# --- metadata records ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Location:
    partition: str
    file_id: str
    instant_millis: int = 0


def record_index_value(location: Location) -> bytes:
    """A ``HoodieMetadataRecord`` of type 5, key blanked (``HoodieAvroHFileWriter``), fileId encoded
    as UUID bits + index when it has that shape (``HoodieMetadataPayload.createRecordIndexUpdate``)."""
    info: dict[str, object] = {"partitionName": location.partition, "instantTime": location.instant_millis}
    head, _, index = location.file_id.rpartition("-")
    try:
        parsed = uuid.UUID(head)
        high, low = parsed.int >> 64, parsed.int & (2**64 - 1)
        info.update(
            fileIdHighBits=high - (1 << 64) if high >= 1 << 63 else high,
            fileIdLowBits=low - (1 << 64) if low >= 1 << 63 else low,
            fileIndex=int(index),
            fileIdEncoding=0,
        )
    except ValueError:
        info.update(fileId=location.file_id, fileIdEncoding=1)
    record = {"key": "", "type": 5, "filesystemMetadata": None, "recordIndexMetadata": info}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _PARSED, record)
    return out.getvalue()


def record_index_hfile(locations: Mapping[str, Location], **options: object) -> bytes:
    cells = {key.encode("utf-8"): record_index_value(loc) for key, loc in locations.items()}
    info = {b"schema": METADATA_SCHEMA_TEXT.encode()}
    return write_hfile(cells, file_info=info, **options)  # type: ignore[arg-type]


# --- log files ----------------------------------------------------------------------------------


def _metadata_bytes(entries: Mapping[int, str]) -> bytes:
    out = struct.pack(">i", len(entries))
    for key, value in entries.items():
        encoded = value.encode("utf-8")
        out += struct.pack(">ii", key, len(encoded)) + encoded
    return out


def log_block(kind: int, header: Mapping[int, str], content: bytes) -> bytes:
    """``HoodieLogFormatWriter.appendBlocks`` for one block (format version 1)."""
    body = struct.pack(">ii", 1, kind) + _metadata_bytes(header) + struct.pack(">q", len(content)) + content
    body += _metadata_bytes({})
    size = len(body) + 8
    return b"#HUDI#" + struct.pack(">q", size) + body + struct.pack(">q", size + 6)


def hfile_log_block(instant: str, locations: Mapping[str, Location], **options: object) -> bytes:
    return log_block(4, {0: instant, 2: METADATA_SCHEMA_TEXT}, record_index_hfile(locations, **options))


def delete_log_block(instant: str, keys: Iterable[str]) -> bytes:
    records = [{"recordKey": k, "partitionPath": "", "orderingVal": {"value": 0}} for k in keys]
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _DELETES, {"deleteRecordList": records})
    data = out.getvalue()
    return log_block(1, {0: instant}, struct.pack(">ii", 3, len(data)) + data)


def rollback_log_block(instant: str, target: str) -> bytes:
    return log_block(0, {0: instant, 1: target, 3: "0"}, b"")


# --- the metadata table -------------------------------------------------------------------------


@dataclass
class MetadataTable:
    """A metadata table beside the data table at ``root``, with a record index of ``file_groups``."""

    root: Path
    file_groups: int
    version: int = 6  # 6: timeline in .hoodie/, 8: in .hoodie/timeline/ with completion times

    @property
    def folder(self) -> Path:
        return self.root / ".hoodie" / "metadata"

    @property
    def timeline(self) -> Path:
        base = self.folder / ".hoodie"
        return base / "timeline" if self.version >= 8 else base

    def create(self) -> MetadataTable:
        (self.folder / ".hoodie").mkdir(parents=True, exist_ok=True)
        self.timeline.mkdir(parents=True, exist_ok=True)
        (self.folder / ".hoodie" / "hoodie.properties").write_text(
            "hoodie.table.name=metadata\nhoodie.table.type=MERGE_ON_READ\n"
            f"hoodie.table.version={self.version}\nhoodie.table.base.file.format=HFILE\n"
            "hoodie.populate.meta.fields=false\nhoodie.table.recordkey.fields=key\n"
            f"hoodie.timeline.layout.version={2 if self.version >= 8 else 1}\n"
            + ("hoodie.timeline.path=timeline\n" if self.version >= 8 else "")
        )
        partition = self.folder / "record_index"
        partition.mkdir(exist_ok=True)
        (partition / ".hoodie_partition_metadata").write_text("commitTime=0\npartitionDepth=1\n")
        properties = self.root / ".hoodie" / "hoodie.properties"
        properties.write_text(properties.read_text() + "hoodie.table.metadata.partitions=record_index\n")
        return self

    def complete(self, instant: str, action: str = "deltacommit") -> None:
        """Marks ``instant`` completed in the metadata timeline (requested, inflight, completed)."""
        (self.timeline / f"{instant}.{action}.requested").write_text("")
        if self.version >= 8:
            (self.timeline / f"{instant}_{instant}.{action}").write_text("{}")
        else:
            (self.timeline / f"{instant}.{action}.inflight").write_text("")
            (self.timeline / f"{instant}.{action}").write_text("{}")

    def start(self, instant: str, action: str = "deltacommit") -> None:
        """An instant requested and inflight, never completed."""
        (self.timeline / f"{instant}.{action}.requested").write_text("")
        (self.timeline / f"{instant}.{action}.inflight").write_text("")

    def groups_of(self, locations: Mapping[str, Location]) -> dict[int, dict[str, Location]]:
        groups: dict[int, dict[str, Location]] = {i: {} for i in range(self.file_groups)}
        for key, location in locations.items():
            groups[file_group_index(key, self.file_groups)][key] = location
        return groups

    def write_base(self, instant: str, locations: Mapping[str, Location], **options: object) -> list[Path]:
        """One base HFile per file group (every group, empty or not), as the index initialisation
        writes them."""
        paths = []
        for index, group in self.groups_of(locations).items():
            path = self.folder / "record_index" / f"{file_group_id(index)}_{index}-0-0_{instant}.hfile"
            path.write_bytes(record_index_hfile(group, **options))
            paths.append(path)
        return paths

    def log_path(self, index: int, base_instant: str, version: int = 1) -> Path:
        return self.folder / "record_index" / f".{file_group_id(index)}_{base_instant}.log.{version}_0-1-0"

    def append(self, index: int, base_instant: str, data: bytes, version: int = 1) -> Path:
        path = self.log_path(index, base_instant, version)
        with path.open("ab") as handle:
            handle.write(data)
        return path
