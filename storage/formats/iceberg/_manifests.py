"""Streaming reads of Iceberg manifest lists and manifests.

pyiceberg's planner (``ManifestFile.fetch_manifest_entry``) materialises every entry of every
manifest as full ``DataFile`` records, with all column statistics decoded, before the first file
is returned; planning a large table therefore holds the whole file list in memory. Here a
manifest's blocks are read by fastavro and its entries decoded by ``_avro.ManifestDecoder``, which
keeps only the fields listing needs (the per-column sizes, value counts and NaN counts are
skipped while decoding, without building objects), entries are
turned into spec ``DataFile`` objects one at a time, and column bounds are decoded lazily
(``LazyStats``) only for the columns a filter looks at.

Delete files are the exception: the delete manifests of a snapshot (few, small) are read into a
``DeleteIndex`` first, so that each streamed data file can be given the deletes that apply to it
by the sequence-number rules of the Iceberg spec.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote_plus

import fastavro

from storage.formats.iceberg._avro import (
    Decoder,
    checked_entry,
    checked_manifest_list,
    decoder_for,
    iter_blocks,
    iter_payloads,
)
from storage.formats.iceberg._metadata import INLINE_PREFIX, is_inline
from storage.formats.iceberg._values import ColumnDecoder, LazyStats, avro_to_python, bytes_to_python
from storage.spec.errors import CorruptTable
from storage.spec.models import DataFile, FileContent, PartitionDescriptor, PartitionField, PartitionSpec

STATUS_EXISTING = 0
STATUS_ADDED = 1
STATUS_DELETED = 2
CONTENT_DATA = 0
CONTENT_DELETES = 1
POS_DELETE_PATH_ID = 2147483546

_CONTENT = {0: FileContent.DATA, 1: FileContent.POSITION_DELETES, 2: FileContent.EQUALITY_DELETES}

# Fields of manifest_entry / data_file that listing uses; everything else is skipped while decoding.
KEEP: dict[str, Any] = {
    "status": True,
    "snapshot_id": True,
    "sequence_number": True,
    "file_sequence_number": True,
    "data_file": {
        name: True
        for name in (
            "content",
            "file_path",
            "file_format",
            "partition",
            "record_count",
            "file_size_in_bytes",
            "null_value_counts",
            "lower_bounds",
            "upper_bounds",
            "split_offsets",
            "equality_ids",
            "referenced_data_file",
            "content_offset",
            "content_size_in_bytes",
            "first_row_id",
        )
    },
}

# What a filter looks at first (and what ``checked_entry`` checks): an entry it rejects is not
# decoded further (see ``iter_manifest_records``).
PROBE: dict[str, Any] = {
    "status": True,
    "data_file": {
        name: True
        for name in (
            "content",
            "file_path",
            "partition",
            "record_count",
            "file_size_in_bytes",
            "lower_bounds",
            "upper_bounds",
        )
    },
}


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
    try:
        with file_io.new_input(path).open(seekable=False) as stream:
            return stream.read()
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


def iter_manifest_records(
    file_io: Any,
    manifest: ManifestInfo,
    accept: Callable[[dict[str, Any], dict[int, str]], bool] | None = None,
) -> Iterator[tuple[dict[str, Any], dict[int, str]]]:
    """(entry, partition field id -> Avro name) for each entry of one manifest, streamed.

    Only the manifest's bytes and the current entry are held; bounds come as ``{field id: bytes}``.
    With ``accept``, each entry is first decoded with only the ``PROBE`` fields (the rest skipped
    without building objects) and checked like a full one; entries ``accept`` rejects are dropped
    there, the others decoded again in full. A filter that keeps few entries thus pays for the
    fields it looks at only.
    """
    data = read_bytes(file_io, manifest.path, "manifest")
    try:
        if accept is None:
            decoder, blocks = iter_blocks(data, KEEP)
            read, names = decoder.read, decoder.partition_names
            for dec, count in blocks:
                for _ in range(count):
                    yield checked_entry(read(dec)), names
            return
        schema, payloads = iter_payloads(data)
        decoder = decoder_for(schema, KEEP)
        read, probe, names = decoder.read, decoder_for(schema, PROBE).read, decoder.partition_names
        for payload, count in payloads:
            dec = Decoder(payload)
            for _ in range(count):
                start = dec.tell()
                if accept(checked_entry(probe(dec)), names):
                    yield checked_entry(read(Decoder(payload[start : dec.tell()]))), names
    except CorruptTable:
        raise
    except Exception as exc:  # any decoding failure (see _avro.checked_entry)
        raise CorruptTable(f"manifest {manifest.path} is not a valid Iceberg manifest: {exc!r}") from exc


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
        self.model = PartitionSpec(tuple(fields))
        self.names = self.model.names
        self._descriptors: dict[tuple[Any, ...], PartitionDescriptor] = {}

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

    def partition_values(self, raw: dict[str, Any] | None, avro_names: dict[int, str]) -> dict[str, Any]:
        if not self.names or raw is None:
            return {}
        values = {}
        for name, (field_id, convert) in zip(self.names, self.converters, strict=True):
            value = raw.get(avro_names.get(field_id, name))
            values[name] = convert(value) if convert is not None and value is not None else value
        return values

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
    data = record["data_file"]
    lower = data.get("lower_bounds")
    upper = data.get("upper_bounds")
    nulls = data.get("null_value_counts")
    equality_ids = data.get("equality_ids") or ()
    offsets = data.get("split_offsets")
    extra: dict[str, Any] = {
        "sequence_number": sequence,
        "snapshot_id": snapshot_id,
        "spec_id": context.spec_id,
    }
    if context.identity:
        extra["identity_columns"] = context.identity
        if context.exact:
            extra["identity_nanos"] = context.exact_values(data.get("partition"), avro_names)
    if equality_ids:
        extra["equality_ids"] = tuple(equality_ids)
    file_format = str(data.get("file_format", "parquet")).lower()
    content, size = _v3_fields(data, file_format, first_row_id, extra)
    return DataFile(
        path=data["file_path"],
        size_bytes=size,
        record_count=data["record_count"],
        content=content,
        file_format=file_format,
        partition=values,
        lower_bounds=LazyStats(lower, decoder, True) if lower is not None else None,
        upper_bounds=LazyStats(upper, decoder, True) if upper is not None else None,
        null_counts=LazyStats(nulls, decoder, False) if nulls is not None else None,
        split_offsets=tuple(offsets) if offsets else None,
        equality_columns=tuple(decoder.names.get(i, str(i)) for i in equality_ids),
        extra=extra,
    )


def _v3_fields(
    data: dict[str, Any], file_format: str, first_row_id: int | None, extra: dict[str, Any]
) -> tuple[FileContent, int]:
    """(content, size in bytes) of an entry's file; its v3 fields (deletion vector location, row
    lineage) go into ``extra``."""
    if data.get("referenced_data_file"):
        extra["referenced_data_file"] = data["referenced_data_file"]
    if data.get("content_offset") is not None:
        extra["content_offset"] = data["content_offset"]
        extra["content_size_in_bytes"] = data.get("content_size_in_bytes")
    if data.get("first_row_id") is not None:
        first_row_id = data["first_row_id"]
    if first_row_id is not None:
        extra["first_row_id"] = first_row_id
    content = _CONTENT.get(data.get("content") or 0, FileContent.DATA)
    size: int = data["file_size_in_bytes"]
    if file_format == "puffin" and content is FileContent.POSITION_DELETES:
        content = FileContent.DELETION_VECTOR
        extra["file_size_in_bytes"] = size
        if data.get("content_size_in_bytes") is not None:
            size = data["content_size_in_bytes"]
    return content, size


def _path_bounds(record: dict[str, Any]) -> tuple[str | None, str | None]:
    """The data file path range a position delete file covers (from its file_path bounds)."""
    data = record["data_file"]
    if data.get("referenced_data_file"):
        return data["referenced_data_file"], data["referenced_data_file"]
    found: list[str | None] = [None, None]
    for i, key in enumerate(("lower_bounds", "upper_bounds")):
        raw = (data.get(key) or {}).get(POS_DELETE_PATH_ID)
        if raw is not None:
            try:
                found[i] = bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                found[i] = None
    return found[0], found[1]


class DeleteIndex:
    """Delete files of one snapshot, matched to data files by the Iceberg spec's rules.

    A position delete applies to a data file of the same spec and partition whose data sequence
    number is <= the delete's (and whose path lies within the delete's ``file_path`` bounds);
    an equality delete applies to data files with a strictly smaller data sequence number, in
    the same partition, or everywhere when the delete was written with an unpartitioned spec.
    A deletion vector (v3) applies to its ``referenced_data_file`` only, under the position
    delete sequence rule; when a data file has one, its position delete files are ignored (the
    writer of the vector merged them into it), and two vectors for one data file are corrupt.
    """

    def __init__(self) -> None:
        self._vectors_by_path: dict[str, list[tuple[int, DataFile]]] = {}
        self._position_by_path: dict[str, list[tuple[int, DataFile]]] = {}
        self._position_by_partition: dict[
            tuple[Any, ...], list[tuple[int, DataFile, str | None, str | None]]
        ] = {}
        self._equality_by_partition: dict[tuple[Any, ...], list[tuple[int, DataFile]]] = {}
        self._equality_global: list[tuple[int, DataFile]] = []

    def __bool__(self) -> bool:
        return bool(
            self._vectors_by_path
            or self._position_by_path
            or self._position_by_partition
            or self._equality_by_partition
            or self._equality_global
        )

    def add(
        self, record: dict[str, Any], delete_file: DataFile, sequence: int, spec_id: int, unpartitioned: bool
    ) -> None:
        key = (spec_id, *delete_file.partition.values())
        if delete_file.content is FileContent.EQUALITY_DELETES:
            if unpartitioned:
                self._equality_global.append((sequence, delete_file))
            else:
                self._equality_by_partition.setdefault(key, []).append((sequence, delete_file))
            return
        lower, upper = _path_bounds(record)
        if delete_file.content is FileContent.DELETION_VECTOR:
            if lower is None:
                raise CorruptTable(f"deletion vector in {delete_file.path} names no referenced data file")
            self._vectors_by_path.setdefault(lower, []).append((sequence, delete_file))
            return
        if lower is not None and lower == upper:
            self._position_by_path.setdefault(lower, []).append((sequence, delete_file))
        else:
            self._position_by_partition.setdefault(key, []).append((sequence, delete_file, lower, upper))

    def for_data_file(
        self, path: str, sequence: int, spec_id: int, values: dict[str, Any]
    ) -> tuple[DataFile, ...]:
        found = [v for s, v in self._vectors_by_path.get(path, ()) if s >= sequence]
        if len(found) > 1:
            raise CorruptTable(
                f"data file {path} has {len(found)} deletion vectors ({found[0].path}, {found[1].path}):"
                " a snapshot may hold one per data file"
            )
        key = (spec_id, *values.values())
        if not found:
            found.extend(d for s, d in self._position_by_path.get(path, ()) if s >= sequence)
            for delete_sequence, delete_file, lower, upper in self._position_by_partition.get(key, ()):
                if delete_sequence < sequence:
                    continue
                if (lower is not None and path < lower) or (upper is not None and path > upper):
                    continue
                found.append(delete_file)
        for delete_sequence, delete_file in self._equality_by_partition.get(key, ()):
            if delete_sequence > sequence:
                found.append(delete_file)
        for delete_sequence, delete_file in self._equality_global:
            if delete_sequence > sequence:
                found.append(delete_file)
        return tuple(found)


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
