"""Where a Hudi table keeps things: its filesystem, ``hoodie.properties``, partition folders.

Partition values come from the folder names, typed by the partition column (Hudi writes
``value.toString()`` of the record's field, hive-style as ``field=value``). The time-based key
generator (and a ``field:TIMESTAMP`` entry of the custom key generator) writes a formatted
timestamp such as ``2023/04/01/12`` that is *not* the column's value: such a field gets the
``hudi_timestamp[...]`` transform, keeps the folder text as its value and is never used to prune.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from storage.io.stores import StoreOptions, is_object_store
from storage.io.stores import filesystem as io_filesystem
from storage.spec.errors import CorruptTable, TableNotFound
from storage.spec.models import PartitionDescriptor, PartitionField, PartitionSpec

HOODIE_FOLDER = ".hoodie"
PROPERTIES_FILE = "hoodie.properties"
PARTITION_MARKER = ".hoodie_partition_metadata"
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
LEGACY_DEFAULT_PARTITION = "default"
TIMESTAMP_TRANSFORM = "hudi_timestamp"


def open_filesystem(location: str, storage: StoreOptions | None = None) -> tuple[pafs.FileSystem, str, str]:
    """The filesystem, the path on it, and the location to report (absolute, no trailing slash)."""
    location = location.rstrip("/") or "/"
    if "://" not in location:
        location = os.path.abspath(location)
    try:
        if is_object_store(location):
            filesystem, path = io_filesystem(location, storage)
        else:
            filesystem, path = pafs.FileSystem.from_uri(location)
    except (pa.ArrowInvalid, OSError) as exc:
        raise TableNotFound(f"cannot open {location}: {exc}") from exc
    if location.startswith("file://"):
        location = path
    return filesystem, path.rstrip("/") or "/", location


# hudi-rs reads table versions 6, 8 and 9 and needs the version in hoodie.properties. Writers before
# Hudi 0.6 (the 0.5 era) recorded none: Hudi itself reads that as table version 0 with timeline
# layout 0, whose file names (``<instant>.commit``, base files ``<fileId>_<token>_<instant>``,
# ``.hoodie_partition_metadata`` markers) are those version 6 reads; hudi-rs pairs version 6 with
# timeline layout 1 only. Nor did those writers record partition fields: their partition folders
# are found by their markers (``list_partition_paths``) and the columns stay unnamed.
LEGACY_READ_OPTIONS = {"hoodie.table.version": "6", "hoodie.timeline.layout.version": "1"}
PARTITION_FIELDS = "hoodie.table.partition.fields"


def legacy_read_options(properties: Mapping[str, str]) -> dict[str, str]:
    """hudi-rs options for a table whose ``hoodie.properties`` names no table version (see
    ``LEGACY_READ_OPTIONS``); none for every other table."""
    if (properties.get("hoodie.table.version") or "").strip():
        return {}
    return dict(LEGACY_READ_OPTIONS)


def has_partition_folders(filesystem: pafs.FileSystem, root: str) -> bool:
    """Whether some folder below the table root holds a partition marker."""
    return any(path for path in list_partition_paths(filesystem, root, True))


def hudi_storage_options(location: str, storage: StoreOptions | None) -> dict[str, str]:
    """hudi-rs storage options for an object-store location (none for local tables)."""
    if not is_object_store(location):
        return {}
    return (storage if storage is not None else StoreOptions.from_env()).hudi_options()


def file_type(filesystem: pafs.FileSystem, path: str) -> pafs.FileType:
    try:
        return filesystem.get_file_info(path).type
    except OSError:
        return pafs.FileType.NotFound


def read_properties(filesystem: pafs.FileSystem, root: str, location: str) -> dict[str, str]:
    """``.hoodie/hoodie.properties`` as a dict; ``CorruptTable`` naming what is wrong with it."""
    path = f"{root}/{HOODIE_FOLDER}/{PROPERTIES_FILE}"
    if file_type(filesystem, path) != pafs.FileType.File:
        raise CorruptTable(f"Hudi table {location}: .hoodie/{PROPERTIES_FILE} is missing")
    try:
        with filesystem.open_input_stream(path) as stream:
            raw = stream.read()
    except OSError as exc:
        raise CorruptTable(f"Hudi table {location}: cannot read .hoodie/{PROPERTIES_FILE}: {exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # java.util.Properties' own encoding
    if "\x00" in text:
        raise CorruptTable(
            f"Hudi table {location}: .hoodie/{PROPERTIES_FILE} is binary, not a properties file"
        )
    properties = parse_java_properties(text)
    for required in ("hoodie.table.name", "hoodie.table.type"):
        if not properties.get(required):
            raise CorruptTable(f"Hudi table {location}: .hoodie/{PROPERTIES_FILE} has no {required}")
    if properties["hoodie.table.type"] not in ("COPY_ON_WRITE", "MERGE_ON_READ"):
        raise CorruptTable(
            f"Hudi table {location}: unknown hoodie.table.type {properties['hoodie.table.type']!r} "
            "(expected COPY_ON_WRITE or MERGE_ON_READ)"
        )
    return properties


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_java_properties(text: str) -> dict[str, str]:
    """The subset of ``java.util.Properties`` syntax Hudi writes: escapes, ``=``/``:``, continuations."""
    properties: dict[str, str] = {}
    logical = ""
    for line in text.splitlines():
        line = line.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        properties[key] = value
        logical = ""
    if logical:
        key, value = _split_property(logical)
        properties[key] = value
    return properties


def _split_property(line: str) -> tuple[str, str]:
    key_chars: list[str] = []
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\" and i + 1 < len(line):
            key_chars.append(line[i : i + 2])
            i += 2
            continue
        if char in "=: \t":
            break
        key_chars.append(char)
        i += 1
    rest = line[i:].lstrip(" \t")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t")
    return _unescape("".join(key_chars)), _unescape(rest)


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6] or ""):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


# --- partitioning ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionLayout:
    """How partition folders map to partition values."""

    spec: PartitionSpec
    schema: pa.Schema  # the table schema, to type identity values
    hive_style: bool
    url_encoded: bool
    unnamed_folders: bool = False  # partition folders whose columns the properties do not name

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, str], schema: pa.Schema, *, unnamed_folders: bool = False
    ) -> PartitionLayout:
        return cls(
            spec=partition_spec(properties),
            schema=schema,
            hive_style=properties.get("hoodie.datasource.write.hive_style_partitioning", "false").lower()
            == "true",
            url_encoded=properties.get("hoodie.datasource.write.partitionpath.urlencode", "false").lower()
            == "true",
            unnamed_folders=unnamed_folders,
        )

    @property
    def partitioned(self) -> bool:
        """Whether rows live in partition folders (named columns or not)."""
        return self.spec.is_partitioned or self.unnamed_folders

    @property
    def pruning_spec(self) -> PartitionSpec:
        """Only identity fields: their folder values are the column's values."""
        return PartitionSpec(tuple(f for f in self.spec.fields if f.transform == "identity"))

    def descriptor(self, partition_path: str) -> tuple[PartitionDescriptor, bool]:
        """The partition of a folder and whether its identity values could all be typed."""
        values, exact = self.parse(partition_path)
        return PartitionDescriptor(path=partition_path, values=values), exact

    def raw_values(self, partition_path: str) -> list[str] | None:
        """The folder text of each partition field, hive prefixes removed; None when ambiguous."""
        fields = self.spec.fields
        if not fields:
            return []
        if len(fields) == 1:
            text = partition_path
            prefix = f"{fields[0].name}="
            if self.hive_style and text.startswith(prefix):
                text = text[len(prefix) :]
            return [text]
        segments = partition_path.split("/")
        if len(segments) != len(fields):
            return None
        raw = []
        for field, segment in zip(fields, segments, strict=True):
            prefix = f"{field.name}="
            if self.hive_style and segment.startswith(prefix):
                segment = segment[len(prefix) :]
            raw.append(segment)
        return raw

    def parse(self, partition_path: str) -> tuple[dict[str, Any], bool]:
        raw = self.raw_values(partition_path)
        if raw is None:
            return {}, False
        values: dict[str, Any] = {}
        exact = True
        for field, text in zip(self.spec.fields, raw, strict=True):
            if self.url_encoded:
                text = urllib.parse.unquote(text)
            if field.transform != "identity":
                values[field.name] = text
                continue
            try:
                values[field.name] = _typed_value(text, self.schema.field(field.source_column).type)
            except (KeyError, ValueError, ArithmeticError):
                # Shown as written; not used for pruning.
                values[field.name] = text
                exact = False
        return values, exact


def partition_spec(properties: Mapping[str, str]) -> PartitionSpec:
    """Partition fields of ``hoodie.table.partition.fields`` given the table's key generator."""
    keygen = (
        properties.get("hoodie.table.keygenerator.class")
        or properties.get("hoodie.table.keygenerator.type")
        or ""
    )
    declared = [f.strip() for f in properties.get(PARTITION_FIELDS, "").split(",") if f.strip()]
    if not declared or "Nonpartitioned" in keygen or keygen.upper() == "NON_PARTITION":
        return PartitionSpec()
    time_based = "TimestampBased" in keygen or keygen.upper() == "TIMESTAMP"
    output_format = properties.get("hoodie.keygen.timebased.output.dateformat", "")
    timestamp_transform = f"{TIMESTAMP_TRANSFORM}[{output_format}]" if output_format else TIMESTAMP_TRANSFORM
    fields = []
    for entry in declared:
        name, _, kind = entry.partition(":")  # custom key generator: "field:SIMPLE", "ts:TIMESTAMP"
        transform = timestamp_transform if time_based or kind.upper() == "TIMESTAMP" else "identity"
        fields.append(PartitionField(name=name, source_column=name, transform=transform))
    return PartitionSpec(tuple(fields))


def _typed_value(text: str, arrow_type: pa.DataType) -> Any:
    if text == HIVE_DEFAULT_PARTITION:
        return None
    if text == LEGACY_DEFAULT_PARTITION:
        # Older writers used "default" for null; for a string column it may also be the value.
        if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
            raise ValueError("ambiguous default partition")
        return None
    if pa.types.is_integer(arrow_type):
        return int(text)
    if pa.types.is_floating(arrow_type):
        return float(text)
    if pa.types.is_boolean(arrow_type):
        if text.lower() not in ("true", "false"):
            raise ValueError(text)
        return text.lower() == "true"
    if pa.types.is_decimal(arrow_type):
        try:
            return Decimal(text)
        except InvalidOperation as exc:
            raise ValueError(text) from exc
    if pa.types.is_date(arrow_type):
        if re.fullmatch(r"-?\d+", text):
            return dt.date(1970, 1, 1) + dt.timedelta(days=int(text))
        return dt.date.fromisoformat(text)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return text
    # Timestamps, binary and nested values have no reliable text form in a folder name.
    raise ValueError(f"no partition value parser for {arrow_type}")


def list_partition_paths(filesystem: pafs.FileSystem, root: str, partitioned: bool) -> Iterator[str]:
    """Partition folders (relative, sorted), found by their ``.hoodie_partition_metadata`` marker.

    Walks depth-first and stops descending at a partition, so only folders are listed, never the
    data files of another partition.
    """
    if not partitioned:
        yield ""
        return
    stack = [""]
    while stack:
        relative = stack.pop()
        folder = f"{root}/{relative}" if relative else root
        try:
            entries = filesystem.get_file_info(pafs.FileSelector(folder))
        except OSError:
            continue
        children = []
        is_partition = False
        for entry in entries:
            if entry.base_name == PARTITION_MARKER:
                is_partition = True
            elif entry.type == pafs.FileType.Directory and not entry.base_name.startswith("."):
                children.append(f"{relative}/{entry.base_name}" if relative else entry.base_name)
        if is_partition and relative:
            yield relative
            continue
        stack.extend(sorted(children, reverse=True))
