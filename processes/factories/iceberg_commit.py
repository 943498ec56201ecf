"""The commit of an Iceberg compaction, to the standard of Iceberg's own ``RewriteFiles``.

``RewriteFiles`` is a pyiceberg snapshot producer whose snapshot is a ``replace``: data files are
only moved, so streaming readers (Spark structured streaming, Flink incremental reads) skip it.
pyiceberg 0.12 offers no such producer (its summary code refuses ``replace``, and its overwrite
matches the files to remove by path, which would drop every deletion vector of a Puffin file that
holds the vectors of several data files). This one:

* removes data files by path and deletion vectors by (Puffin path, ``referenced_data_file``,
  ``content_offset``): a manifest holding any of them is rewritten with those entries DELETED (in
  this snapshot) and every other live entry EXISTING, all its fields kept (a vector's Puffin path,
  referenced data file, offset and size; sequence numbers and snapshot ids made explicit; in v3
  the inherited ``first_row_id`` of each data file written out, so row ids do not move); entries
  already deleted in an earlier snapshot are dropped, as Java does; other manifests are kept as
  they are;
* adds the new data files in one manifest of the output partition spec;
* writes the manifest list of the table's format version (v3: ``first_row_id`` assigned to the
  data manifests without one, ``first-row-id`` and ``added-rows`` on the snapshot, as Java's
  manifest list writer does);
* computes the summary with pyiceberg's collector (removed vectors count as removed position
  delete files with their blob size, plus ``removed-dvs``), operation ``replace``.

Manifests are read and written through pyiceberg's Avro layer with the v3 schemas, a superset
that keeps the v3 fields pyiceberg's own readers drop. A planned file or vector that is not live in
the parent snapshot makes the commit fail with ``ValidationException``, and so does a commit the
catalog refused (no retry inside pyiceberg): the caller validates at the new head and commits
again.

pyiceberg 0.12 cannot serialise v3 table metadata, so a metastore catalog (SQL) cannot commit to a
v3 table; ``v3_metadata_writes`` lets the catalog write it for the commit (see there).

The new files' partition records come from ``OutputPartitioner`` (rows of files of another spec are
split by their output-spec partition in the Spark task; ``encode_partition`` carries the key back).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

from pyiceberg.avro.file import AvroFile, AvroOutputFile
from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_ENTRY_SCHEMAS,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestListWriter,
    ManifestWriter,
    ManifestWriterV2,
    PartitionFieldSummary,
    _inherit_from_manifest,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import (
    Operation,
    Snapshot,
    SnapshotSummaryCollector,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate
from pyiceberg.table.update.snapshot import _new_manifest_list_file_name, _SnapshotProducer
from pyiceberg.typedef import EMPTY_DICT

#: A deletion vector: (Puffin file path, referenced data file, content offset).
DVKey = tuple[str, "str | None", "int | None"]

# Positions in the v3 structs (pyiceberg's accessors stop at the v2 fields).
FIRST_ROW_ID, REFERENCED_DATA_FILE, CONTENT_OFFSET, CONTENT_SIZE = 16, 17, 18, 19
MANIFEST_FIRST_ROW_ID = 15
V3_DATA_FILE = DATA_FILE_TYPE[3]
V3_MANIFEST_FILE = MANIFEST_LIST_FILE_SCHEMAS[3]


def dv_key(data_file: DataFile) -> DVKey:
    """The identity of a deletion vector entry read with the v3 schema."""
    return (data_file.file_path, data_file[REFERENCED_DATA_FILE], data_file[CONTENT_OFFSET])


def as_v3(data_file: DataFile) -> DataFile:
    """``data_file`` bound to the v3 struct (its v3 fields unset when it had none)."""
    if len(data_file) >= len(V3_DATA_FILE.fields):
        return data_file
    values = {f.name: data_file[i] for i, f in enumerate(DATA_FILE_TYPE[2].fields)}
    converted = DataFile.from_args(_table_format_version=3, **values)
    if hasattr(data_file, "_spec_id"):
        converted.spec_id = data_file.spec_id
    return converted


def read_manifest_list(io: Any, snapshot: Snapshot) -> list[ManifestFile]:
    """The manifests of ``snapshot`` with every v3 field (``first_row_id`` included)."""
    with AvroFile[ManifestFile](
        io.new_input(snapshot.manifest_list),
        V3_MANIFEST_FILE,
        read_types={-1: ManifestFile, 508: PartitionFieldSummary},
        read_enums={517: ManifestContent},
    ) as reader:
        return list(reader)


def read_entries(io: Any, manifest: ManifestFile) -> list[ManifestEntry]:
    """Every entry of ``manifest`` (deleted ones too) with every v3 field, inheritance applied."""
    with AvroFile[ManifestEntry](
        io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[3],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    ) as reader:
        return [_inherit_from_manifest(entry, manifest) for entry in reader]


class ManifestWriterV3(ManifestWriter):
    """A v3 manifest of data or delete files (pyiceberg 0.12 writes v1 and v2 data manifests)."""

    def __init__(self, *args: Any, content: ManifestContent = ManifestContent.DATA) -> None:
        super().__init__(*args)
        self._content = content

    def content(self) -> ManifestContent:
        return self._content

    @property
    def version(self) -> Any:
        return 3

    @property
    def _meta(self) -> dict[str, str]:
        content = "deletes" if self._content == ManifestContent.DELETES else "data"
        return {**super()._meta, "content": content}

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        schema = self._with_partition(3)
        return AvroOutputFile[ManifestEntry](
            output_file=self._output_file,
            file_schema=schema,
            record_schema=schema,
            schema_name="manifest_entry",
            metadata=self._meta,
        )

    def prepare_entry(self, entry: ManifestEntry) -> ManifestEntry:
        entry.data_file = as_v3(entry.data_file)
        return ManifestWriterV2.prepare_entry(self, entry)  # type: ignore[arg-type]


class DeleteManifestWriterV2(ManifestWriterV2):
    """A v2 manifest of delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class ManifestListWriterV3(ManifestListWriter):
    """A v3 manifest list: like v2, and a data manifest without ``first_row_id`` gets the next
    row id, which then advances by its added and existing rows (Java's ``V3Writer``)."""

    def __init__(
        self,
        output_file: Any,
        snapshot_id: int,
        parent_id: int | None,
        sequence: int,
        first_row_id: int,
        codec: Any,
    ):
        meta = {
            "snapshot-id": str(snapshot_id),
            "parent-snapshot-id": str(parent_id) if parent_id is not None else "null",
            "sequence-number": str(sequence),
            "first-row-id": str(first_row_id),
            "format-version": "3",
            "avro.codec": codec,
        }
        super().__init__(format_version=3, output_file=output_file, meta=meta)
        self._v2 = write_manifest_list(2, output_file, snapshot_id, parent_id, sequence, codec)
        self.next_row_id = first_row_id

    def __enter__(self) -> ManifestListWriterV3:
        self._writer = AvroOutputFile[ManifestFile](
            output_file=self._output_file,
            record_schema=V3_MANIFEST_FILE,
            file_schema=V3_MANIFEST_FILE,
            schema_name="manifest_file",
            metadata=self._meta,
        )
        self._writer.__enter__()
        return self

    def prepare_manifest(self, manifest_file: ManifestFile) -> ManifestFile:
        prepared = self._v2.prepare_manifest(manifest_file)  # sequence numbers, as v2
        values = {f.name: prepared[i] for i, f in enumerate(V3_MANIFEST_FILE.fields) if i < len(prepared)}
        prepared = ManifestFile.from_args(_table_format_version=3, **values)
        if prepared.content == ManifestContent.DATA and prepared[MANIFEST_FIRST_ROW_ID] is None:
            prepared[MANIFEST_FIRST_ROW_ID] = self.next_row_id
            self.next_row_id += (prepared.existing_rows_count or 0) + (prepared.added_rows_count or 0)
        return prepared


class RewriteFiles(_SnapshotProducer["RewriteFiles"]):
    """A ``replace`` snapshot: removes ``removed`` (live data files) and the deletion vectors
    ``removed_dvs``, adds ``added`` (data files of partition spec ``spec_id``)."""

    def __init__(
        self,
        transaction: Any,
        *,
        removed: Sequence[DataFile],
        removed_dvs: Collection[DVKey],
        added: Sequence[DataFile],
        spec_id: int,
        snapshot_properties: dict[str, str] = EMPTY_DICT,
    ) -> None:
        super().__init__(
            Operation.REPLACE, transaction, transaction._table.io, snapshot_properties=snapshot_properties
        )
        self._removed = {data_file.file_path: data_file for data_file in removed}
        self._removed_dvs = set(removed_dvs)
        self._added_data_files = [as_v3(data_file) for data_file in added]
        self._deleted_data_files = set(removed)
        self._output_spec_id = spec_id
        self._removed_dv_files: list[DataFile] = []

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []  # the DELETED entries are written into the filtered manifests (_filter)

    def _existing_manifests(self) -> list[ManifestFile]:
        return []  # see _manifests

    def _validate_concurrency(self) -> None:
        """pyiceberg calls this before retrying a commit the catalog refused: the producer does
        not retry inside pyiceberg (whose checks would refuse any concurrent append); the caller
        validates the plan at the new head and commits again (``iceberg_rewrite``)."""
        raise ValidationException("the catalog refused the commit: another writer committed first")

    def _manifests(self) -> list[ManifestFile]:
        metadata = self._transaction.table_metadata
        parent = metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id else None
        if parent is None:
            raise ValidationException("the table has no snapshot to rewrite")
        found: set[Any] = set()
        self._removed_dv_files = []
        kept = []
        for manifest in read_manifest_list(self._io, parent):
            wanted: Collection[Any] = (
                self._removed.keys() if manifest.content == ManifestContent.DATA else self._removed_dvs
            )
            if wanted and (manifest.has_added_files() or manifest.has_existing_files()):
                manifest = self._filter(manifest, wanted, found)
            kept.append(manifest)
        missing = (self._removed.keys() | self._removed_dvs) - found
        if missing:
            raise ValidationException(
                f"{len(missing)} file(s) to remove are not live any more, e.g. {sorted(map(str, missing))[0]}"
            )
        return self._write_added() + kept

    def _filter(self, manifest: ManifestFile, wanted: Collection[Any], found: set[Any]) -> ManifestFile:
        """``manifest`` itself when it holds nothing to remove, else its rewrite (module docstring)."""
        data = manifest.content == ManifestContent.DATA
        next_row_id = (
            manifest[MANIFEST_FIRST_ROW_ID] if data and len(manifest) > MANIFEST_FIRST_ROW_ID else None
        )
        removed, existing = [], []
        for entry in read_entries(self._io, manifest):
            if entry.status == ManifestEntryStatus.DELETED:
                continue
            data_file = entry.data_file
            if next_row_id is not None and data_file[FIRST_ROW_ID] is None:
                data_file[FIRST_ROW_ID] = next_row_id  # inherited: written out, so it stays
                next_row_id += data_file.record_count
            key = data_file.file_path if data else dv_key(data_file)
            if key in wanted:
                found.add(key)
                removed.append(entry)
                if not data:
                    self._removed_dv_files.append(data_file)
            else:
                existing.append(entry)
        if not removed:
            return manifest
        with self._writer(manifest.partition_spec_id, manifest.content) as writer:
            for entry in removed:
                writer.delete(entry)
            for entry in existing:
                writer.existing(entry)
        return writer.to_manifest_file()

    def _writer(self, spec_id: int, content: ManifestContent) -> ManifestWriter:
        version = self._transaction.table_metadata.format_version
        args = (
            self.spec(spec_id),
            self.schema(),
            self.new_manifest_output(),
            self._snapshot_id,
            self._compression,
        )
        if version >= 3:
            return ManifestWriterV3(*args, content=content)
        if content == ManifestContent.DELETES:
            return DeleteManifestWriterV2(*args)
        return write_manifest(version, *args)

    def _write_added(self) -> list[ManifestFile]:
        if not self._added_data_files:
            return []
        with self._writer(self._output_spec_id, ManifestContent.DATA) as writer:
            for data_file in self._added_data_files:
                writer.add(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=self._snapshot_id,
                        sequence_number=None,
                        file_sequence_number=None,
                        data_file=data_file,
                    )
                )
        return [writer.to_manifest_file()]

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        from pyiceberg.table import TableProperties

        metadata = self._transaction.table_metadata
        schema, specs = metadata.schema(), metadata.specs()
        limit = int(
            metadata.properties.get(
                TableProperties.WRITE_PARTITION_SUMMARY_LIMIT,
                TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT,
            )
        )
        collector = SnapshotSummaryCollector(partition_summary_limit=limit)
        for data_file in self._added_data_files:
            collector.add_file(data_file, schema, specs[self._output_spec_id])
        for data_file in self._removed.values():
            collector.remove_file(data_file, schema, specs[data_file.spec_id])
        for vector in self._removed_dv_files:
            collector.remove_file(_dv_for_summary(vector), schema, specs[vector.spec_id])
        properties = collector.build()
        if self._removed_dv_files:
            properties["removed-dvs"] = str(len(self._removed_dv_files))
        parent = metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id else None
        # pyiceberg computes totals for append/overwrite/delete only; a replace's are the same sums
        totals = update_snapshot_summaries(
            Summary(Operation.OVERWRITE, **properties, **snapshot_properties),
            parent.summary if parent is not None else None,
        )
        return Summary(Operation.REPLACE, **totals.additional_properties)

    def _commit(self) -> Any:
        metadata = self._transaction.table_metadata
        manifests = self._manifests()
        sequence = metadata.next_sequence_number()
        summary = self._summary(self.snapshot_properties)
        name = _new_manifest_list_file_name(
            snapshot_id=self._snapshot_id, attempt=0, commit_uuid=self.commit_uuid
        )
        path = self._transaction._table.location_provider().new_metadata_location(name)
        self._written_manifest_lists.append(path)
        first_row_id = (metadata.next_row_id or 0) if metadata.format_version >= 3 else None
        output = self._io.new_output(path)
        if first_row_id is not None:
            writer: ManifestListWriter = ManifestListWriterV3(
                output, self._snapshot_id, self._parent_snapshot_id, sequence, first_row_id, self._compression
            )
        else:
            writer = write_manifest_list(
                metadata.format_version,
                output,
                self._snapshot_id,
                self._parent_snapshot_id,
                sequence,
                self._compression,
            )
        with writer:
            writer.add_manifests(manifests)
        snapshot = Snapshot(
            snapshot_id=self._snapshot_id,
            parent_snapshot_id=self._parent_snapshot_id,
            manifest_list=path,
            sequence_number=sequence,
            summary=summary,
            schema_id=metadata.current_schema_id,
            first_row_id=first_row_id,
            added_rows=writer.next_row_id - first_row_id
            if isinstance(writer, ManifestListWriterV3)
            else None,
        )
        return self._updates_for(snapshot)

    def _updates_for(self, snapshot: Snapshot) -> Any:
        """The updates and requirements of adding ``snapshot`` to the target branch (as
        pyiceberg's producers do)."""
        add = AddSnapshotUpdate(snapshot=snapshot)
        branch = self._target_branch
        if branch is None:
            return (add,), ()
        refs = self._transaction.table_metadata.refs
        return (
            (
                add,
                SetSnapshotRefUpdate(
                    snapshot_id=self._snapshot_id,
                    parent_snapshot_id=self._parent_snapshot_id,
                    ref_name=branch,
                    type=SnapshotRefType.BRANCH,
                ),
            ),
            (
                AssertRefSnapshotId(
                    snapshot_id=refs[branch].snapshot_id if branch in refs else None, ref=branch
                ),
            ),
        )


def _dv_for_summary(vector: DataFile) -> DataFile:
    """A removed deletion vector as the summary counts it: a position delete file of its blob's
    size (Java's summary weighs a vector by ``content_size_in_bytes``)."""
    summary_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=vector.file_path,
        file_format=FileFormat.PUFFIN,
        partition=vector.partition,
        record_count=vector.record_count,
        file_size_in_bytes=vector[CONTENT_SIZE]
        if vector[CONTENT_SIZE] is not None
        else vector.file_size_in_bytes,
    )
    summary_file.spec_id = vector.spec_id
    return summary_file


# --- v3 table metadata -----------------------------------------------------------------------------


def check_v3_metadata(table: Any) -> None:
    """Refuse (``ValueError``) a v3 table whose metadata file holds keys pyiceberg's model does
    not keep: writing its next metadata version would drop them."""
    if table.metadata.format_version < 3:
        return
    from pyiceberg.typedef import IcebergBaseModel

    with table.io.new_input(table.metadata_location).open() as stream:
        raw = json.loads(_decompressed(table.metadata_location, stream.read()))
    kept = json.loads(IcebergBaseModel.model_dump_json(table.metadata))
    lost = sorted(set(raw) - set(kept))
    for snapshot in raw.get("snapshots", []):
        lost += sorted(f"snapshots.{key}" for key in set(snapshot) - _snapshot_keys(kept, snapshot))
    if lost:
        raise ValueError(
            "this Iceberg v3 table's metadata holds fields the rewrite cannot carry into a new"
            f" metadata version ({', '.join(sorted(set(lost)))}); it is not rewritten"
        )


def _snapshot_keys(kept: dict[str, Any], snapshot: dict[str, Any]) -> set[str]:
    for candidate in kept.get("snapshots", []):
        if candidate.get("snapshot-id") == snapshot.get("snapshot-id"):
            return set(candidate)
    return set()


def _decompressed(location: str, payload: bytes) -> bytes:
    if location.endswith(".gz.metadata.json"):
        import gzip

        return gzip.decompress(payload)
    return payload


def write_metadata(metadata: Any, io: Any, metadata_path: str) -> None:
    """pyiceberg's ``Catalog._write_metadata``, and for v3 the same JSON through pydantic's own
    serialiser (pyiceberg 0.12's v3 model refuses to serialise: apache/iceberg-python#1551). The
    result must parse back to the same metadata, or nothing is written."""
    from pyiceberg.serializers import Compressor, ToOutputFile
    from pyiceberg.table.metadata import TableMetadataUtil
    from pyiceberg.typedef import IcebergBaseModel

    if metadata.format_version < 3:
        ToOutputFile.table_metadata(metadata, io.new_output(metadata_path))
        return
    text = IcebergBaseModel.model_dump_json(metadata)
    if TableMetadataUtil.parse_raw(text) != metadata:
        raise ValueError("the v3 table metadata does not survive serialisation; nothing was committed")
    payload = Compressor.get_compressor(metadata_path).bytes_compressor()(text.encode("utf-8"))
    with io.new_output(metadata_path).create(overwrite=False) as stream:
        stream.write(payload)


@contextmanager
def v3_metadata_writes(table: Any) -> Iterator[None]:
    """While committing to a v3 table through a metastore catalog (SQL), its catalog writes the
    new metadata file with ``write_metadata`` (an attribute of that catalog instance, removed
    again after; a REST catalog's server writes the metadata itself and never calls it)."""
    catalog = getattr(table, "catalog", None)
    if table.metadata.format_version < 3 or catalog is None or not hasattr(catalog, "_write_metadata"):
        yield
        return
    had = "_write_metadata" in vars(catalog)
    previous = vars(catalog).get("_write_metadata")
    catalog._write_metadata = write_metadata
    try:
        yield
    finally:
        if had:
            catalog._write_metadata = previous
        else:
            del catalog._write_metadata


# --- partitions of the output spec -----------------------------------------------------------------


class OutputPartitioner:
    """Splits rows by their partition in the output spec (run in Spark tasks: picklable):
    [(key, rows)], the key being ``encode_partition`` of pyiceberg's partition record."""

    def __init__(self, spec: Any, schema: Any) -> None:
        self.spec, self.schema = spec, schema

    def __call__(self, rows: Any) -> list[tuple[str, Any]]:
        if not self.spec.fields:
            return [(encode_partition(()), rows)]
        from pyiceberg.io.pyarrow import _determine_partitions

        return [
            (encode_partition(part.partition_key.partition), part.arrow_table_partition)
            for part in _determine_partitions(self.spec, self.schema, rows)
        ]


def encode_partition(values: Any) -> str:
    """A partition record's values as JSON (bytes, decimals and UUIDs tagged)."""

    def encode(value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, bytes):
            return {"bytes": value.hex()}
        if isinstance(value, Decimal):
            return {"decimal": str(value)}
        if isinstance(value, uuid.UUID):
            return {"uuid": str(value)}
        raise TypeError(f"cannot carry a partition value of type {type(value).__name__}")

    return json.dumps([encode(values[i]) for i in range(len(values))])


def decode_partition(key: str) -> Any:
    """The pyiceberg partition record of ``encode_partition``'s key."""
    from pyiceberg.typedef import Record

    def decode(value: Any) -> Any:
        if isinstance(value, dict):
            kind, text = next(iter(value.items()))
            return {"bytes": bytes.fromhex, "decimal": Decimal, "uuid": uuid.UUID}[kind](text)
        return value

    return Record(*[decode(v) for v in json.loads(key)])
