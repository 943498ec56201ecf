"""Manifests and manifest lists with every v3 field: read through pyiceberg's Avro layer with the v3
schemas (a superset that keeps the v3 fields pyiceberg's own readers drop), and written as v2 or v3
data and delete manifests (pyiceberg 0.12 writes v1 and v2 data manifests only)."""

from __future__ import annotations

from typing import Any

from pyiceberg.avro.file import AvroFile, AvroOutputFile
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
    write_manifest_list,
)
from pyiceberg.table.snapshots import Snapshot

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
