"""Streaming reads of Iceberg manifest lists and manifests.

pyiceberg's planner (``ManifestFile.fetch_manifest_entry``) materialises every entry of every
manifest as full ``DataFile`` records, with all column statistics decoded, before the first file
is returned; planning a large table therefore holds the whole file list in memory. Here manifests
are fetched a few ahead of the one being decoded and each manifest's entries are decoded at once
keeping only the fields listing needs (``_entries``); entries are turned into spec ``DataFile``
objects (``make_data_file``, or the compiled ``plain_data_file``) one at a time as the consumer
asks, and column bounds are decoded lazily (``LazyStats``) only for the columns a filter looks
at. Memory is bounded by the read-ahead window and one manifest's entries, whatever the number
of files listed. This module reads the files (``read_file``), the manifest list, and turns
entries into models (``SpecContext`` for partitions).

Delete files are the exception: the delete manifests of a snapshot (few, small) are read into a
``DeleteIndex`` (``_deletes``) first, so that each streamed data file can be given the deletes
that apply to it by the sequence-number rules of the Iceberg spec.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast
from urllib.parse import quote_plus

import fastavro

from storage.formats.iceberg._avro import (
    SlotsMaker,
    plain_data_file,
)
from storage.formats.iceberg._entry_checks import checked_manifest_list
from storage.formats.iceberg._metadata import INLINE_PREFIX, is_inline
from storage.formats.iceberg._slots import slots_builder, slots_maker
from storage.formats.iceberg._values import (
    ColumnDecoder,
    LazyStats,
    avro_to_python,
    bytes_to_python,
    exact_equality,
)
from storage.io.objects import one_get_reader
from storage.spec.errors import CorruptTable
from storage.spec.models import DataFile, FileContent, PartitionDescriptor, PartitionField, PartitionSpec

T = TypeVar("T")

STATUS_EXISTING = 0
STATUS_ADDED = 1
STATUS_DELETED = 2
CONTENT_DATA = 0
CONTENT_DELETES = 1

#: (cache key or None, partition values, descriptor) of an entry's partition (SpecContext.partitions)
PartitionEntry = tuple[tuple[Any, ...] | None, dict[str, Any], PartitionDescriptor]

_CONTENT = {0: FileContent.DATA, 1: FileContent.POSITION_DELETES, 2: FileContent.EQUALITY_DELETES}


@dataclass(frozen=True, slots=True)
class ManifestInfo:
    """One row of a manifest list (v1 and v2 field names normalised)."""

    path: str
    length: int
    spec_id: int
    content: int
    sequence_number: int
    min_sequence_number: int
    added_snapshot_id: int | None
    added_files_count: int | None
    existing_files_count: int | None
    deleted_files_count: int | None
    partitions: tuple[dict[str, Any], ...] | None
    first_row_id: int | None = None  # v3 row lineage: the first row id of its null-id data files

    @property
    def may_have_live_files(self) -> bool:
        if self.added_files_count is None or self.existing_files_count is None:
            return True
        return self.added_files_count + self.existing_files_count > 0


def read_bytes(file_io: Any, path: str, what: str) -> bytes:
    """The whole file, or ``CorruptTable`` naming it when it vanished or cannot be read."""
    return bytes(read_file(file_io, path, what))


class ListingIO:
    """A pyiceberg FileIO whose whole-file reads here (manifest lists and manifests) take one GET
    each on S3 where ``OneGetReads`` can (``storage.io.objects``: no HEAD first, no AWS SDK);
    every other use, and every read it cannot take, is the FileIO's own."""

    def __init__(self, file_io: Any) -> None:
        self.file_io = file_io
        self.one_get = one_get_reader(file_io)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file_io, name)


def read_file(file_io: Any, path: str, what: str) -> Any:
    """The whole file as the stream gives it: a pyarrow ``Buffer`` (Arrow's memory pool) when the
    FileIO is pyarrow's, else bytes, or an object_store buffer when ``ListingIO`` fetched it in one
    GET; ``CorruptTable`` naming it when it cannot be read."""
    one_get = getattr(file_io, "one_get", None)
    if one_get is not None:
        data = one_get.read(path)
        if data is not None:
            return data
    try:
        with file_io.new_input(path).open(seekable=False) as stream:
            read_buffer = getattr(stream, "read_buffer", None)
            return read_buffer() if read_buffer is not None else stream.read()
    except FileNotFoundError:
        raise CorruptTable(
            f"{what} {path} is missing: the table's metadata points at a file that does not exist"
        ) from None
    except OSError as exc:
        raise CorruptTable(f"cannot read {what} {path}: {exc}") from exc


def read_manifest_list(file_io: Any, path: str) -> list[ManifestInfo]:
    if is_inline(path):  # a v1 snapshot's inline ``manifests`` (see _metadata)
        return cast(list[ManifestInfo], inline_manifests(file_io, path))
    data = read_bytes(file_io, path, "manifest list")
    try:
        # A manifest list's records read as dicts (fastavro types them as any Avro value).
        rows = cast(list[dict[str, Any]], list(fastavro.reader(io.BytesIO(data))))
    except Exception as exc:  # fastavro raises ValueError, EOFError, SchemaResolutionError...
        raise CorruptTable(f"manifest list {path} is not a valid Avro file: {exc}") from exc
    checked_manifest_list(rows, path)
    manifests = []
    for row in rows:
        manifests.append(
            ManifestInfo(
                path=row["manifest_path"],
                length=row.get("manifest_length", 0),
                spec_id=row.get("partition_spec_id", 0),
                content=row.get("content") or CONTENT_DATA,
                sequence_number=row.get("sequence_number") or 0,
                min_sequence_number=row.get("min_sequence_number") or 0,
                added_snapshot_id=row.get("added_snapshot_id"),
                added_files_count=_first(row, "added_files_count", "added_data_files_count"),
                existing_files_count=_first(row, "existing_files_count", "existing_data_files_count"),
                deleted_files_count=_first(row, "deleted_files_count", "deleted_data_files_count"),
                partitions=tuple(row["partitions"]) if row.get("partitions") is not None else None,
                first_row_id=row.get("first_row_id"),
            )
        )
    return manifests


def _first(row: dict[str, Any], *names: str) -> Any:
    for name in names:
        if row.get(name) is not None:
            return row[name]
    return None


def inherited_sequence(record: dict[str, Any], manifest: ManifestInfo) -> tuple[int, int | None]:
    """Data sequence number and snapshot id of an entry, inherited from its manifest when null."""
    sequence = record.get("sequence_number")
    if sequence is None and (manifest.sequence_number == 0 or record["status"] == STATUS_ADDED):
        sequence = manifest.sequence_number
    snapshot_id = record.get("snapshot_id")
    if snapshot_id is None:
        snapshot_id = manifest.added_snapshot_id
    return sequence or 0, snapshot_id


def _human(transform: str, value: Any) -> str:
    if value is None:
        return "null"
    if transform == "year":
        return f"{1970 + value:04d}"
    if transform == "month":
        return f"{1970 + value // 12:04d}-{value % 12 + 1:02d}"
    if transform == "hour":
        return (dt.datetime(1970, 1, 1) + dt.timedelta(hours=value)).strftime("%Y-%m-%d-%H")
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


class SpecContext:
    """What decoding entries of one partition spec needs: converters and names, built once.

    ``identity`` maps the field id of each column an identity field of this spec partitions by to
    that field's name: a data file that lacks the column reads it from its partition tuple (the
    reader fills it; every ``DataFile`` of the spec shares this one mapping in its ``extra``).
    ``timestamp_ns`` identity values are kept as their raw nanoseconds too (``exact_values``),
    because the spec models' ``datetime`` holds microseconds only.
    """

    def __init__(self, iceberg_spec: Any, schema: Any) -> None:
        from pyiceberg.transforms import IdentityTransform
        from pyiceberg.types import TimestampNanoType, TimestamptzNanoType

        self.spec_id: int = iceberg_spec.spec_id
        fields = []
        self.converters = []
        self.bound_converters = []
        self.identity: dict[int, str] = {}
        self.exact: tuple[tuple[str, int], ...] = ()
        cacheable = True
        for field in iceberg_spec.fields:
            try:
                source = schema.find_column_name(field.source_id) or str(field.source_id)
                result_type = field.transform.result_type(schema.find_type(field.source_id))
            except ValueError:
                # the source column was dropped: keep the field, values as stored
                source, result_type = str(field.source_id), None
            fields.append(
                PartitionField(name=field.name, source_column=source, transform=str(field.transform))
            )
            self.converters.append((field.field_id, avro_to_python(result_type) if result_type else None))
            self.bound_converters.append(bytes_to_python(result_type) if result_type else None)
            if result_type is not None and isinstance(field.transform, IdentityTransform):
                self.identity[field.source_id] = field.name
                if isinstance(result_type, (TimestampNanoType, TimestamptzNanoType)):
                    self.exact += ((field.name, field.field_id),)
            cacheable = cacheable and result_type is not None and exact_equality(result_type)
        self.model = PartitionSpec(tuple(fields))
        self.names = self.model.names
        self._descriptors: dict[tuple[Any, ...], PartitionDescriptor] = {}
        self._cacheable = cacheable
        self._partitions: dict[tuple[Any, ...], PartitionEntry] = {}

    def exact_values(self, raw: dict[str, Any] | None, avro_names: dict[int, str]) -> dict[str, int] | None:
        """The raw nanoseconds of the ``timestamp_ns`` identity fields of one entry, or None."""
        if not self.exact or raw is None:
            return None
        found = {}
        for name, field_id in self.exact:
            value = raw.get(avro_names.get(field_id, name))
            if isinstance(value, int):
                found[name] = value
        return found

    def partitions(self, avro_names: dict[int, str]) -> Callable[[dict[str, Any]], PartitionEntry]:
        """For the entries of one manifest (whose partition fields have ``avro_names``): its raw
        partition tuple -> (cache key, partition values, descriptor).

        Entries share few partitions, so the conversion (``_days`` and the like) and the
        descriptor are cached per raw tuple, across the manifests of this spec; the values dict is
        shared by the entries of a partition (nothing mutates it). The key is the raw values in
        field order, None when the spec's types do not allow caching (``exact_equality``: -0.0
        equals 0.0); the cache is cleared rather than grown past a bound."""
        keys = self._keys(avro_names)
        pairs = tuple(zip(self.names, keys, (convert for _, convert in self.converters), strict=True))
        descriptor = self.descriptor

        def convert(raw: dict[str, Any]) -> dict[str, Any]:
            values = {}
            for name, key, converter in pairs:
                value = raw.get(key)
                values[name] = converter(value) if converter is not None and value is not None else value
            return values

        if not self._cacheable:

            def uncached(raw: dict[str, Any]) -> PartitionEntry:
                values = convert(raw)
                return None, values, descriptor(values)

            return uncached
        cache = self._partitions

        def cached(raw: dict[str, Any]) -> PartitionEntry:
            key = tuple(map(raw.get, keys))
            try:
                return cache[key]
            except KeyError:
                pass
            except TypeError:  # an unhashable raw value (not one a manifest holds): not cached
                values = convert(raw)
                return None, values, descriptor(values)
            if len(cache) > 4096:
                cache.clear()
            values = convert(raw)
            found = cache[key] = (key, values, descriptor(values))
            return found

        return cached

    def _keys(self, avro_names: dict[int, str]) -> tuple[str, ...]:
        return tuple(
            avro_names.get(field_id, name)
            for name, (field_id, _) in zip(self.names, self.converters, strict=True)
        )

    def partition_cache(
        self, avro_names: dict[int, str]
    ) -> tuple[dict[Any, PartitionEntry] | None, tuple[str, ...]]:
        """The cache of ``partitions`` (None: not cached) and its keys' raw fields for a manifest
        with ``avro_names``: ``plain_slices`` looks partitions up in it, ``partitions`` fills it."""
        return (self._partitions if self._cacheable else None), self._keys(avro_names)

    def descriptor(self, values: dict[str, Any]) -> PartitionDescriptor:
        # consecutive entries of a manifest share few partitions: a small cache saves the
        # path formatting; it is cleared rather than grown so memory stays bounded
        key = tuple(values.values())
        found = self._descriptors.get(key)
        if found is None:
            if len(self._descriptors) > 4096:
                self._descriptors.clear()
            path = "/".join(
                f"{quote_plus(f.name, safe='')}={quote_plus(_human(f.transform, values[f.name]), safe='')}"
                for f in self.model.fields
            )
            found = self._descriptors[key] = PartitionDescriptor(path=path, values=values)
        return found

    def summary_bounds(
        self, manifest: ManifestInfo
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, bool]] | None:
        """Manifest partition summaries as (lower, upper, contains_null) keyed by field name."""
        if manifest.partitions is None or len(manifest.partitions) != len(self.names):
            return None
        lower: dict[str, Any] = {}
        upper: dict[str, Any] = {}
        nulls: dict[str, bool] = {}
        for name, summary, convert in zip(
            self.names, manifest.partitions, self.bound_converters, strict=True
        ):
            nulls[name] = bool(summary.get("contains_null", True))
            if convert is None:
                continue
            try:
                if summary.get("lower_bound") is not None:
                    lower[name] = convert(summary["lower_bound"])
                if summary.get("upper_bound") is not None:
                    upper[name] = convert(summary["upper_bound"])
            except (ValueError, UnicodeDecodeError):
                lower.pop(name, None)
                upper.pop(name, None)
        return lower, upper, nulls


_data_file = slots_builder(DataFile)
# LazyStats(raw, decoder, bounds), with its cache (_by_id) unset, as its __init__ leaves it
_lazy_stats = slots_maker(LazyStats, ("_raw", "_decoder", "_bounds", "_by_id"))
# plain_data_file calls the makers with the fields in this order (DataFile's own, checked here)
_COMPILED_MAKERS = SlotsMaker is not None and isinstance(_data_file, SlotsMaker)
assert [f.name for f in dataclasses.fields(DataFile)] == [
    "path", "size_bytes", "record_count", "content", "file_format", "partition",
    "lower_bounds", "upper_bounds", "null_counts", "split_offsets", "equality_columns", "extra",
]  # fmt: skip
_DATA = FileContent.DATA
_POSITION_DELETES = FileContent.POSITION_DELETES


def plain_context(decoder: ColumnDecoder, context: SpecContext) -> tuple[Any, ...] | None:
    """The ``context`` argument of the compiled ``plain_data_file`` for entries of ``context``'s
    spec, or None when it is not built (then ``make_data_file`` builds every model) or when the
    spec has ``timestamp_ns`` identity fields (``identity_nanos`` is left to ``make_data_file``)."""
    if plain_data_file is None or not _COMPILED_MAKERS or context.exact:
        return None
    return (_data_file, _lazy_stats, decoder, _DATA, context.spec_id, context.identity or None)


def make_data_file(
    record: dict[str, Any],
    values: dict[str, Any],
    decoder: ColumnDecoder,
    sequence: int,
    snapshot_id: int | None,
    context: SpecContext,
    avro_names: dict[int, str],
    first_row_id: int | None = None,
) -> DataFile:
    """The spec model of one manifest entry. Its ``extra`` holds the sequence number, snapshot and
    spec ids, and for a spec with identity fields ``identity_columns`` (``SpecContext.identity``)
    and, for ``timestamp_ns`` ones, ``identity_nanos`` (``SpecContext.exact_values``).

    v3: ``first_row_id`` (row lineage; the entry's own, else ``first_row_id`` as inherited from
    the manifest) is kept in ``extra``. A deletion vector (a position delete entry in a Puffin
    file) has content ``DELETION_VECTOR`` and the size of its blob (``content_size_in_bytes``, what
    a reader reads); the Puffin file's size is ``extra["file_size_in_bytes"]``."""
    # one call per listed file: the rare cases in helpers, the model built by _data_file
    data = record["data_file"]
    get = data.get
    extra: dict[str, Any] = {
        "sequence_number": sequence,
        "snapshot_id": snapshot_id,
        "spec_id": context.spec_id,
    }
    if context.identity:
        extra["identity_columns"] = context.identity
        if context.exact:
            extra["identity_nanos"] = context.exact_values(data.get("partition"), avro_names)
    equality_ids = get("equality_ids")
    equality_columns = _equality_columns(equality_ids, decoder, extra) if equality_ids else ()
    file_format = str(get("file_format", "parquet")).lower()
    v3 = first_row_id is not None or get("first_row_id") is not None or get("content_offset") is not None
    if v3 or get("referenced_data_file"):
        _v3_extra(data, first_row_id, extra)
    content = _CONTENT.get(get("content") or 0, _DATA)
    size: int = data["file_size_in_bytes"]
    if content is _POSITION_DELETES and file_format == "puffin":
        content, size = _deletion_vector(data, size, extra)
    lower, upper, nulls, offsets = (
        get("lower_bounds"),
        get("upper_bounds"),
        get("null_value_counts"),
        get("split_offsets"),
    )
    return _data_file(
        data["file_path"],  # path
        size,  # size_bytes
        data["record_count"],  # record_count
        content,  # content
        file_format,  # file_format
        values,  # partition
        None if lower is None else _lazy_stats(lower, decoder, True, None),  # lower_bounds
        None if upper is None else _lazy_stats(upper, decoder, True, None),  # upper_bounds
        None if nulls is None else _lazy_stats(nulls, decoder, False, None),  # null_counts
        tuple(offsets) if offsets else None,  # split_offsets
        equality_columns,  # equality_columns
        extra,  # extra
    )


def _equality_columns(equality_ids: Any, decoder: ColumnDecoder, extra: dict[str, Any]) -> tuple[str, ...]:
    extra["equality_ids"] = tuple(equality_ids)
    return tuple(decoder.names.get(i, str(i)) for i in equality_ids)


def _v3_extra(data: dict[str, Any], first_row_id: int | None, extra: dict[str, Any]) -> None:
    """An entry's v3 fields (deletion vector location, row lineage) into ``extra``."""
    if data.get("referenced_data_file"):
        extra["referenced_data_file"] = data["referenced_data_file"]
    if data.get("content_offset") is not None:
        extra["content_offset"] = data["content_offset"]
        extra["content_size_in_bytes"] = data.get("content_size_in_bytes")
    if data.get("first_row_id") is not None:
        first_row_id = data["first_row_id"]
    if first_row_id is not None:
        extra["first_row_id"] = first_row_id


def _deletion_vector(data: dict[str, Any], size: int, extra: dict[str, Any]) -> tuple[FileContent, int]:
    """A position delete entry in a Puffin file: a deletion vector, sized as its blob."""
    extra["file_size_in_bytes"] = size
    if data.get("content_size_in_bytes") is not None:
        size = data["content_size_in_bytes"]
    return FileContent.DELETION_VECTOR, size


def inline_manifests(file_io: Any, manifest_list: str) -> list[Any]:
    """``ManifestInfo`` rows of a v1 snapshot's inline ``manifests`` (data manifests; their
    partition spec id comes from the manifest's own Avro metadata, counts are unknown)."""
    try:
        paths = json.loads(manifest_list[len(INLINE_PREFIX) :])
    except json.JSONDecodeError as exc:  # pragma: no cover - written by normalise
        raise CorruptTable(f"invalid inline manifest list: {exc}") from None
    found = []
    for path in paths:
        if not isinstance(path, str):
            raise CorruptTable(f"a snapshot's inline manifest list holds {path!r}, not a path")
        data = read_bytes(file_io, path, "manifest")
        try:
            header = fastavro.block_reader(io.BytesIO(data)).metadata
            spec_id = int(header.get("partition-spec-id", 0))
            content = 1 if header.get("content") == "deletes" else CONTENT_DATA
        except Exception as exc:  # fastavro raises ValueError, EOFError...
            raise CorruptTable(f"manifest {path} is not a valid Avro file: {exc}") from None
        found.append(
            ManifestInfo(
                path=path,
                length=len(data),
                spec_id=spec_id,
                content=content,
                sequence_number=0,
                min_sequence_number=0,
                added_snapshot_id=None,
                added_files_count=None,
                existing_files_count=None,
                deleted_files_count=None,
                partitions=None,
            )
        )
    return found
