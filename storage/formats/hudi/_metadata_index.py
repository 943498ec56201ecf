"""The record index of a Hudi metadata table (``.hoodie/metadata/record_index``): record key ->
(data partition, file id), read without Hudi.

Sources (apache/hudi): ``HoodieTableMetadataUtil.mapRecordKeyToFileGroupIndex`` (Java
``String.hashCode`` over UTF-16 code units, ``abs(abs(h) % n)``) and ``getFileIDForFileGroup``
(``record-index-%04d-0``); ``HoodieMetadata.avsc`` (type 5, ``recordIndexMetadata``:
partitionName, fileIdHighBits/LowBits/fileIndex or fileId by ``fileIdEncoding``, instantTime) and
``getLocationFromRecordIndexInfo`` (UUID of the two longs, ``-fileIndex`` unless -1);
``HoodieLogFileReader`` / ``HoodieLogBlock`` (``#HUDI#`` | block size | format version | block
type | header | content length | content | footer | total length), ``HoodieHFileDataBlock``
(content is a whole HFile), ``HoodieDeleteBlock`` (version 3: an Avro ``HoodieDeleteRecordList``)
and ``HoodieCommandBlock`` (rollback of ``TARGET_INSTANT_TIME``).

A file group is read as Hudi's metadata reader does: the latest base HFile written by a completed
metadata instant, then the blocks of its log files in order, each kept only when its instant is
valid: completed in the metadata timeline, not rolled back, and either a completed data instant
or the metadata table's own (compaction, log compaction, index initialisation, archived). For
an instant older than the latest, only base files and blocks at or before it are used (a slice
compacted past it cannot answer, and the caller falls back). Whether the index can be trusted at
all (the metadata table has a completed delta commit for the data instant asked) is checked here
too; anything the reader cannot vouch for raises ``IndexUnusable`` with the reason.
"""

from __future__ import annotations

import functools
import io
import json
import re
import struct
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from storage.formats.hudi._hfile import HFileReader, open_hfile
from storage.formats.hudi._layout import file_type, read_properties
from storage.spec.errors import CorruptTable

METADATA_FOLDER = ".hoodie/metadata"
RECORD_INDEX = "record_index"
FILE_ID_PREFIX = "record-index-"
RECORD_INDEX_TYPE = 5
MISSING_FILE_INDEX = -1
LOG_MAGIC = b"#HUDI#"
# HoodieLogBlockType and HeaderMetadataType ordinals.
COMMAND_BLOCK, DELETE_BLOCK, CORRUPT_BLOCK, AVRO_BLOCK, HFILE_BLOCK, PARQUET_BLOCK = range(6)
INSTANT_TIME, TARGET_INSTANT_TIME, SCHEMA, COMMAND_BLOCK_TYPE = range(4)
ROLLBACK_COMMAND = "0"
_HEAD_READ = 64 * 1024
_COMPLETED_V2 = re.compile(r"^(\d+)_(\d+)\.([a-z]+)$")
_COMPLETED_V1 = re.compile(r"^(\d+)\.([a-z]+)$")
_PENDING = re.compile(r"^(\d+)\.(?:([a-z]+)\.)?(requested|inflight)$")
_BASE_FILE = re.compile(r"^(record-index-(\d{4,})-0)_[^_]+_(\d+)\.hfile$")
_LOG_FILE = re.compile(r"^\.(record-index-(\d{4,})-0)_(\d+)\.log\.(\d+)(?:_(.+))?$")
_DATA_INSTANT_DIGITS = 17


class IndexUnusable(Exception):
    """The record index cannot answer for this table or instant; the message says why."""


# --- key hashing --------------------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """Java ``String.hashCode``: 31-polynomial over UTF-16 code units, as a signed 32-bit int."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _java_abs(value: int) -> int:
    """``Math.abs`` on an int: ``Integer.MIN_VALUE`` stays negative."""
    return value if value == -(1 << 31) else abs(value)


def file_group_index(record_key: str, file_groups: int) -> int:
    """``HoodieTableMetadataUtil.mapRecordKeyToFileGroupIndex``."""
    dividend = _java_abs(java_string_hash(record_key))
    remainder = abs(dividend) % file_groups
    if dividend < 0:  # Java's % keeps the dividend's sign
        remainder = -remainder
    return _java_abs(remainder)


def file_group_id(index: int) -> str:
    return f"{FILE_ID_PREFIX}{index:04d}-0"


@dataclass(frozen=True, slots=True)
class IndexedLocation:
    """What the record index says about one key."""

    partition: str
    file_id: str
    instant_millis: int | None


def location_of(record: dict[str, Any]) -> IndexedLocation:
    """The location in a decoded ``HoodieMetadataRecord`` of type 5."""
    if record.get("type") != RECORD_INDEX_TYPE or not record.get("recordIndexMetadata"):
        raise IndexUnusable(f"a record_index entry is not a record index record (type {record.get('type')})")
    info = record["recordIndexMetadata"]
    if info.get("fileIdEncoding", 0) == 0:
        high, low = info.get("fileIdHighBits"), info.get("fileIdLowBits")
        if high is None or low is None:
            raise IndexUnusable("a record_index entry has no file id bits")
        file_id = str(uuid.UUID(int=((high & (2**64 - 1)) << 64) | (low & (2**64 - 1))))
        file_index = info.get("fileIndex")
        if file_index is not None and file_index != MISSING_FILE_INDEX:
            file_id += f"-{file_index}"
    else:
        file_id = info.get("fileId") or ""
    if not file_id:
        raise IndexUnusable("a record_index entry has no file id")
    return IndexedLocation(info.get("partitionName") or "", file_id, info.get("instantTime"))


@functools.lru_cache(maxsize=16)
def _parsed_schema(text: str) -> Any:
    import fastavro

    return fastavro.parse_schema(json.loads(text))


def decode_avro(value: bytes, schema_text: str) -> dict[str, Any]:
    import fastavro

    record = fastavro.schemaless_reader(io.BytesIO(value), _parsed_schema(schema_text), None)
    if not isinstance(record, dict):
        raise IndexUnusable("a metadata record is not an Avro record")
    return record


# --- timelines ----------------------------------------------------------------------------------


@dataclass
class RawTimeline:
    """Instants of one ``.hoodie`` folder: completed (time -> action) and pending times."""

    completed: dict[str, str] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)
    log_compactions: set[str] = field(default_factory=set)

    @property
    def earliest(self) -> str | None:
        times = [*self.completed, *self.pending]
        return min(times) if times else None

    def is_completed(self, instant: str) -> bool:
        """Completed, or archived (older than every instant of the active timeline)."""
        if instant in self.completed:
            return True
        earliest = self.earliest
        return instant not in self.pending and earliest is not None and instant < earliest


def read_timeline(filesystem: pafs.FileSystem, hoodie_dir: str) -> RawTimeline:
    """The active timeline in ``hoodie_dir`` (``timeline/`` of table version 8, else the folder)."""
    folder = f"{hoodie_dir}/timeline"
    if file_type(filesystem, folder) != pafs.FileType.Directory:
        folder = hoodie_dir
    try:
        entries = filesystem.get_file_info(pafs.FileSelector(folder))
    except OSError as error:
        raise IndexUnusable(f"the timeline in {folder} cannot be listed: {error}") from error
    timeline = RawTimeline()
    for entry in entries:
        name = entry.base_name
        if match := _COMPLETED_V2.match(name):
            timeline.completed[match.group(1)] = match.group(3)
        elif (match := _COMPLETED_V1.match(name)) and match.group(2) not in ("inflight", "requested"):
            timeline.completed[match.group(1)] = match.group(2)
        elif match := _PENDING.match(name):
            timeline.pending.add(match.group(1))
            if match.group(2) == "logcompaction":
                timeline.log_compactions.add(match.group(1))
    timeline.pending -= set(timeline.completed)
    return timeline


# --- log files ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogBlock:
    path: str
    kind: int
    header: dict[int, str]
    content_offset: int
    content_length: int

    @property
    def instant(self) -> str:
        return self.header.get(INSTANT_TIME, "")


class _Buffer:
    """Big-endian reads from a file through ``read_at``, fetched in chunks."""

    def __init__(self, handle: Any, path: str, size: int) -> None:
        self.handle, self.path, self.size = handle, path, size
        self.start, self.data = 0, b""

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise CorruptTable(f"log file {self.path}: a block runs past the end of the file")
        if not (self.start <= offset and offset + length <= self.start + len(self.data)):
            self.start = offset
            self.data = self.handle.read_at(min(max(length, _HEAD_READ), self.size - offset), offset)
        begin = offset - self.start
        return self.data[begin : begin + length]

    def read_int(self, offset: int) -> int:
        return struct.unpack(">i", self.read(offset, 4))[0]

    def read_long(self, offset: int) -> int:
        return struct.unpack(">q", self.read(offset, 8))[0]


def read_log_blocks(filesystem: pafs.FileSystem, path: str) -> Iterator[LogBlock]:
    """The blocks of a Hudi log file, contents left on storage (only headers are read)."""
    try:
        handle = filesystem.open_input_file(path)
        buffer = _Buffer(handle, path, handle.size())
    except OSError as error:
        raise CorruptTable(f"log file {path} cannot be opened: {error}") from error
    with handle:
        yield from _blocks(buffer)


def _blocks(buffer: _Buffer) -> Iterator[LogBlock]:
    path, position = buffer.path, 0
    while position < buffer.size:
        if buffer.read(position, 6) != LOG_MAGIC:
            raise CorruptTable(f"log file {path}: no block magic at offset {position}")
        block_size = buffer.read_long(position + 6)
        end = position + 14 + block_size
        if block_size < 24 or end > buffer.size or buffer.read_long(end - 8) != block_size + 6:
            raise CorruptTable(f"log file {path}: the block at offset {position} is corrupt or cut short")
        yield _parse_block(buffer, position + 14, end)
        position = end


def _parse_block(buffer: _Buffer, start: int, end: int) -> LogBlock:
    version, kind = buffer.read_int(start), buffer.read_int(start + 4)
    if version < 1:
        raise IndexUnusable(f"log file {buffer.path} uses log format version {version}")
    header, position = _read_metadata(buffer, start + 8, end)
    content_length = buffer.read_long(position)
    content_offset = position + 8
    if content_length < 0 or content_offset + content_length > end:
        raise CorruptTable(f"log file {buffer.path}: a block's content runs past the block")
    return LogBlock(buffer.path, kind, header, content_offset, content_length)


def _read_metadata(buffer: _Buffer, position: int, end: int) -> tuple[dict[int, str], int]:
    count = buffer.read_int(position)
    position += 4
    if not 0 <= count <= 64:
        raise CorruptTable(f"log file {buffer.path}: a block header has {count} entries")
    metadata = {}
    for _ in range(count):
        key, length = buffer.read_int(position), buffer.read_int(position + 4)
        if length < 0 or position + 8 + length > end:
            raise CorruptTable(f"log file {buffer.path}: a block header entry runs past the block")
        metadata[key] = buffer.read(position + 8, length).decode("utf-8")
        position += 8 + length
    return metadata, position


def deleted_keys(filesystem: pafs.FileSystem, block: LogBlock) -> set[str]:
    """The record keys of a delete block (``HoodieDeleteRecordList``, block version 3)."""
    with filesystem.open_input_file(block.path) as handle:
        content = handle.read_at(block.content_length, block.content_offset)
    if len(content) < 8:
        raise CorruptTable(f"log file {block.path}: a delete block is cut short")
    version, length = struct.unpack_from(">ii", content, 0)
    if version < 3:
        raise IndexUnusable(
            f"log file {block.path} has a delete block of version {version} (Java-serialised)"
        )
    if length < 0 or 8 + length > len(content):
        raise CorruptTable(f"log file {block.path}: a delete block's data runs past the block")
    try:
        record = decode_avro(content[8 : 8 + length], DELETE_RECORD_LIST_SCHEMA)
    except Exception as error:  # fastavro raises many types on bad bytes
        raise CorruptTable(f"log file {block.path}: a delete block does not decode: {error}") from error
    return {r["recordKey"] for r in record.get("deleteRecordList") or () if r.get("recordKey")}


def inline_hfile(filesystem: pafs.FileSystem, block: LogBlock) -> HFileReader:
    """The HFile inlined in an HFile data block, read in place."""
    handle = filesystem.open_input_file(block.path)
    base = block.content_offset

    def read_at(offset: int, length: int) -> bytes:
        return handle.read_at(length, base + offset)

    return HFileReader(read_at, block.content_length, f"{block.path}@{base}", handle.close)


def _wrapper(name: str, avro_type: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": "value", "type": avro_type}]}


_WRAPPERS = [
    _wrapper("BooleanWrapper", "boolean"),
    _wrapper("IntWrapper", "int"),
    _wrapper("LongWrapper", "long"),
    _wrapper("FloatWrapper", "float"),
    _wrapper("DoubleWrapper", "double"),
    _wrapper("BytesWrapper", "bytes"),
    _wrapper("StringWrapper", "string"),
    _wrapper("DateWrapper", "int"),
    _wrapper("DecimalWrapper", {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15}),
    _wrapper("TimeMicrosWrapper", {"type": "long", "logicalType": "time-micros"}),
    _wrapper("TimestampMicrosWrapper", "long"),
]
_ARRAY_WRAPPER = {
    "type": "record",
    "name": "ArrayWrapper",
    "fields": [
        {
            "name": "wrappedValues",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": ["null", *(w["name"] for w in _WRAPPERS), _wrapper("LocalDateWrapper", "int")],
                },
            ],
            "default": None,
        }
    ],
}
# hudi-common HoodieDeleteRecordList.avsc (the wrappers' order is the union's branch order).
DELETE_RECORD_LIST_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "HoodieDeleteRecordList",
        "namespace": "org.apache.hudi.avro.model",
        "fields": [
            {
                "name": "deleteRecordList",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "HoodieDeleteRecord",
                        "fields": [
                            {"name": "recordKey", "type": ["null", "string"], "default": None},
                            {"name": "partitionPath", "type": ["null", "string"], "default": None},
                            {
                                "name": "orderingVal",
                                "type": ["null", *_WRAPPERS, _ARRAY_WRAPPER],
                                "default": None,
                            },
                        ],
                    },
                },
            }
        ],
    }
)


# --- the index ----------------------------------------------------------------------------------


@dataclass
class FileGroup:
    index: int
    base_files: list[tuple[str, str]] = field(default_factory=list)  # (instant, path)
    log_files: list[tuple[tuple[str, int, str], str]] = field(default_factory=list)  # (order, path)


class MetadataRecordIndex:
    """The ``record_index`` partition of the metadata table of the Hudi table at ``root``."""

    def __init__(self, filesystem: pafs.FileSystem, root: str, properties: dict[str, str]) -> None:
        self.filesystem = filesystem
        self.metadata_root = f"{root}/{METADATA_FOLDER}"
        self.files_read = 0
        _check_declared(properties)
        try:
            self.metadata_properties = read_properties(filesystem, self.metadata_root, self.metadata_root)
        except CorruptTable as error:
            raise IndexUnusable(f"no readable metadata table: {error}") from error
        self.timeline = read_timeline(filesystem, f"{self.metadata_root}/.hoodie")
        self.data_timeline = read_timeline(filesystem, f"{root}/.hoodie")
        self.file_groups = self._list_file_groups()

    def _list_file_groups(self) -> list[FileGroup]:
        folder = f"{self.metadata_root}/{RECORD_INDEX}"
        try:
            entries = self.filesystem.get_file_info(pafs.FileSelector(folder))
        except OSError as error:
            raise IndexUnusable(f"{folder} cannot be listed: {error}") from error
        groups: dict[int, FileGroup] = {}
        for entry in entries:
            name = entry.base_name
            if entry.type == pafs.FileType.Directory:
                raise IndexUnusable(f"{folder} has a sub-folder {name!r} (a partitioned record index)")
            if base := _BASE_FILE.match(name):
                group = groups.setdefault(int(base.group(2)), FileGroup(int(base.group(2))))
                group.base_files.append((base.group(3), entry.path))
            elif log := _LOG_FILE.match(name):
                group = groups.setdefault(int(log.group(2)), FileGroup(int(log.group(2))))
                group.log_files.append(((log.group(3), int(log.group(4)), log.group(5) or ""), entry.path))
        if not groups or sorted(groups) != list(range(len(groups))):
            raise IndexUnusable(f"{folder} does not hold file groups record-index-0000-0 .. N-1")
        for group in groups.values():
            group.base_files.sort()
            group.log_files.sort()
        return [groups[i] for i in range(len(groups))]

    # --- trust --------------------------------------------------------------------------------

    def check_in_sync(self, instant: str) -> None:
        """The index reflects data instant ``instant`` only if the metadata table completed it."""
        if not self.timeline.is_completed(instant):
            latest = max(self.timeline.completed, default="none")
            raise IndexUnusable(
                f"the metadata table is behind the data timeline: it has not completed instant {instant}"
                f" (its latest completed instant is {latest})"
            )

    def valid_instant(self, instant: str, rolled_back: set[str]) -> bool:
        """A metadata instant whose writes count (Hudi's ``validInstantTimestamps``)."""
        if instant in rolled_back or not self.timeline.is_completed(instant):
            return False
        if self.data_timeline.is_completed(instant):
            return True
        if instant in self.data_timeline.pending:
            return False  # the data commit failed (or is running) after its metadata commit
        return (
            len(instant) > _DATA_INSTANT_DIGITS
            or self.timeline.completed.get(instant) == "commit"  # a compaction of the metadata table
            or instant in self.timeline.log_compactions
            or set(instant[:14]) == {"0"}
        )

    # --- lookups ------------------------------------------------------------------------------

    def lookup(self, keys: Iterable[str], instant: str, latest: bool) -> dict[str, IndexedLocation]:
        """The location of each of ``keys`` the index holds as of data instant ``instant``."""
        self.check_in_sync(instant)
        by_group: dict[int, list[str]] = {}
        for key in keys:
            by_group.setdefault(file_group_index(key, len(self.file_groups)), []).append(key)
        found: dict[str, IndexedLocation] = {}
        for index, group_keys in sorted(by_group.items()):
            state = self._read_group(self.file_groups[index], group_keys, instant, latest)
            found.update({k: v for k, v in state.items() if v is not None})
        return found

    def _read_group(
        self, group: FileGroup, keys: list[str], instant: str, latest: bool
    ) -> dict[str, IndexedLocation | None]:
        base_instant, base_path = self._base_file(group, instant, latest)
        wanted = {k.encode("utf-8"): k for k in keys}
        state: dict[str, IndexedLocation | None] = {}
        if base_path is not None:
            self.files_read += 1
            with open_hfile(self.filesystem, base_path) as reader:
                self._merge(reader, _schema_of(reader), wanted, state)
        blocks = self._log_blocks(group)
        rolled_back = {
            b.header.get(TARGET_INSTANT_TIME, "")
            for b in blocks
            if b.kind == COMMAND_BLOCK and b.header.get(COMMAND_BLOCK_TYPE) == ROLLBACK_COMMAND
        }
        for block in blocks:
            if not block.instant:
                raise IndexUnusable(f"log file {block.path} has a block without an instant time")
            if block.instant <= base_instant or (not latest and block.instant > instant):
                continue
            if block.kind == COMMAND_BLOCK or not self.valid_instant(block.instant, rolled_back):
                continue
            self._apply(block, wanted, state)
        return state

    def _base_file(self, group: FileGroup, instant: str, latest: bool) -> tuple[str, str | None]:
        usable = [
            (time, path)
            for time, path in group.base_files
            if self.timeline.is_completed(time) and (latest or time <= instant)
        ]
        if usable:
            return usable[-1]
        if group.base_files:
            raise IndexUnusable(
                f"file group {file_group_id(group.index)} has no base file as of instant {instant}"
                " (compacted or cleaned since)"
            )
        return "", None

    def _log_blocks(self, group: FileGroup) -> list[LogBlock]:
        blocks: list[LogBlock] = []
        for _, path in group.log_files:
            self.files_read += 1
            blocks.extend(read_log_blocks(self.filesystem, path))
        return blocks

    @staticmethod
    def _merge(
        reader: HFileReader, schema: str, wanted: dict[bytes, str], state: dict[str, IndexedLocation | None]
    ) -> None:
        for raw_key, value in reader.get_many(wanted).items():
            state[wanted[raw_key]] = location_of(_decode(value, schema, reader.name))

    def _apply(
        self, block: LogBlock, wanted: dict[bytes, str], state: dict[str, IndexedLocation | None]
    ) -> None:
        if block.kind == HFILE_BLOCK:
            with inline_hfile(self.filesystem, block) as reader:
                self._merge(reader, block.header.get(SCHEMA) or _schema_of(reader), wanted, state)
        elif block.kind == DELETE_BLOCK:
            names = set(wanted.values())
            for key in deleted_keys(self.filesystem, block) & names:
                state[key] = None
        elif block.kind == CORRUPT_BLOCK:
            raise IndexUnusable(f"log file {block.path} has a corrupt block")
        else:
            raise IndexUnusable(
                f"log file {block.path} has a block of type {block.kind}, not HFile or delete"
            )


def _check_declared(properties: dict[str, str]) -> None:
    declared = {p.strip() for p in str(properties.get("hoodie.table.metadata.partitions", "")).split(",")}
    inflight = {
        p.strip() for p in str(properties.get("hoodie.table.metadata.partitions.inflight", "")).split(",")
    }
    if RECORD_INDEX not in declared:
        raise IndexUnusable("the table declares no record_index metadata partition")
    if RECORD_INDEX in inflight:
        raise IndexUnusable("the record_index metadata partition is still being built")


def _schema_of(reader: HFileReader) -> str:
    schema = reader.file_info.get(b"schema")
    if not schema:
        raise IndexUnusable(f"HFile {reader.name} has no Avro schema in its file info")
    return schema.decode("utf-8")


def _decode(value: bytes, schema: str, name: str) -> dict[str, Any]:
    try:
        return decode_avro(value, schema)
    except IndexUnusable:
        raise
    except Exception as error:  # fastavro raises many types on bad bytes or schemas
        raise CorruptTable(f"HFile {name}: a record index value does not decode: {error}") from error


__all__ = [
    "IndexUnusable",
    "IndexedLocation",
    "MetadataRecordIndex",
    "file_group_id",
    "file_group_index",
    "java_string_hash",
]
