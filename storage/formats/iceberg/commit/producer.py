"""``RewriteFiles``: the ``replace`` snapshot producer (see the package docstring)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, NamedTuple

from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestListWriter,
    ManifestWriter,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.table.metadata import TableMetadataV3
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import (
    Operation,
    Snapshot,
    SnapshotSummaryCollector,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    SetSnapshotRefUpdate,
    UpdatesAndRequirements,
)
from pyiceberg.table.update.snapshot import _new_manifest_list_file_name, _SnapshotProducer
from pyiceberg.typedef import EMPTY_DICT

from storage.formats.iceberg.commit.manifests import (
    CONTENT_SIZE,
    FIRST_ROW_ID,
    MANIFEST_FIRST_ROW_ID,
    REFERENCED_DATA_FILE,
    DeleteManifestWriterV2,
    DVKey,
    ManifestListWriterV3,
    ManifestWriterV3,
    as_v3,
    dv_key,
    read_entries,
    read_manifest_list,
)

if TYPE_CHECKING:
    from pyiceberg.table import Transaction
    from pyiceberg.table.metadata import TableMetadata


class NewDeleteFile(NamedTuple):
    """A delete file to add (position or equality deletes; its ``spec_id`` set) with the data
    sequence number its entry carries: None for the new snapshot's own; a rewrite of delete files
    gives the one of the deletes it replaces (package docstring)."""

    data_file: DataFile
    data_sequence_number: int | None = None


def delete_key(data_file: DataFile) -> DVKey | str:
    """How a delete entry is matched for removal: a deletion vector by ``dv_key`` (a Puffin file
    holds the vectors of many data files), any other delete file by its path."""
    return dv_key(data_file) if data_file.file_format == FileFormat.PUFFIN else data_file.file_path


class RewriteFiles(_SnapshotProducer["RewriteFiles"]):
    """A ``replace`` snapshot: removes ``removed`` (live data files), the deletion vectors
    ``removed_dvs`` and the delete files ``removed_deletes`` (by path), adds ``added`` (data files
    of partition spec ``spec_id``) and ``added_deletes`` (each with its data sequence number)."""

    def __init__(
        self,
        transaction: Transaction,
        *,
        removed: Sequence[DataFile],
        removed_dvs: Collection[DVKey],
        added: Sequence[DataFile],
        spec_id: int,
        snapshot_properties: dict[str, str] = EMPTY_DICT,
        removed_deletes: Sequence[DataFile] = (),
        added_deletes: Sequence[NewDeleteFile] = (),
    ) -> None:
        _check_delete_files(transaction.table_metadata, removed_deletes, added_deletes)
        super().__init__(
            Operation.REPLACE, transaction, transaction._table.io, snapshot_properties=snapshot_properties
        )
        self._removed = {data_file.file_path: data_file for data_file in removed}
        self._removed_dvs = set(removed_dvs)
        self._added_data_files = [as_v3(data_file) for data_file in added]
        self._deleted_data_files = set(removed)
        self._output_spec_id = spec_id
        self._removed_delete_paths = {data_file.file_path for data_file in removed_deletes}
        self._added_deletes = [
            NewDeleteFile(as_v3(new.data_file), new.data_sequence_number) for new in added_deletes
        ]
        self._removed_delete_files: list[DataFile] = []

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []  # the DELETED entries are written into the filtered manifests (_filter)

    def _existing_manifests(self) -> list[ManifestFile]:
        return []  # see _manifests

    def _validate_concurrency(self) -> None:
        """pyiceberg calls this before retrying a commit the catalog refused: the producer does
        not retry inside pyiceberg (whose checks would refuse any concurrent append); the caller
        validates the plan at the new head and commits again (``iceberg_rewrite``, ``iceberg_deletes``)."""
        raise ValidationException("the catalog refused the commit: another writer committed first")

    def _manifests(self) -> list[ManifestFile]:
        metadata = self._transaction.table_metadata
        parent = metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id else None
        if parent is None:
            raise ValidationException("the table has no snapshot to rewrite")
        found: set[DVKey | str] = set()
        self._removed_delete_files = []
        kept = []
        removed_deletes = self._removed_dvs | self._removed_delete_paths
        manifests = read_manifest_list(self._io, parent)
        self._check_one_vector_per_file(manifests)
        for manifest in manifests:
            wanted: Collection[DVKey | str] = (
                self._removed.keys() if manifest.content == ManifestContent.DATA else removed_deletes
            )
            if wanted and (manifest.has_added_files() or manifest.has_existing_files()):
                manifest = self._filter(manifest, wanted, found)
            kept.append(manifest)
        missing = (self._removed.keys() | removed_deletes) - found
        if missing:
            raise ValidationException(
                f"{len(missing)} file(s) to remove are not live any more, e.g. {sorted(map(str, missing))[0]}"
            )
        return self._write_added() + self._write_added_deletes() + kept

    def _check_one_vector_per_file(self, manifests: list[ManifestFile]) -> None:
        """``ValidationException`` when a data file an added vector belongs to has a live vector
        this commit does not remove (another writer's, committed since the plan): a data file
        holds one vector at most, and the added one was merged with the old one only."""
        targets = {
            new.data_file[REFERENCED_DATA_FILE]
            for new in self._added_deletes
            if new.data_file.file_format == FileFormat.PUFFIN
        }
        if not targets:
            return
        for manifest in manifests:
            if manifest.content != ManifestContent.DELETES:
                continue
            for entry in read_entries(self._io, manifest):
                data_file = entry.data_file
                if (
                    entry.status != ManifestEntryStatus.DELETED
                    and data_file.file_format == FileFormat.PUFFIN
                    and data_file[REFERENCED_DATA_FILE] in targets
                    and dv_key(data_file) not in self._removed_dvs
                ):
                    raise ValidationException(
                        f"{data_file[REFERENCED_DATA_FILE]} got a deletion vector this commit does not replace"
                    )

    def _filter(
        self, manifest: ManifestFile, wanted: Collection[DVKey | str], found: set[DVKey | str]
    ) -> ManifestFile:
        """``manifest`` itself when it holds nothing to remove, else its rewrite (package docstring)."""
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
            key = data_file.file_path if data else delete_key(data_file)
            if key in wanted:
                found.add(key)
                removed.append(entry)
                if not data:
                    self._removed_delete_files.append(data_file)
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

    def _write_added_deletes(self) -> list[ManifestFile]:
        """One delete manifest per partition spec of the added delete files; an entry with a data
        sequence number carries it (else it inherits the snapshot's), its file sequence number is
        always inherited (the snapshot's)."""
        by_spec: dict[int, list[NewDeleteFile]] = defaultdict(list)
        for new in self._added_deletes:
            by_spec[new.data_file.spec_id].append(new)
        manifests = []
        for spec_id in sorted(by_spec):
            with self._writer(spec_id, ManifestContent.DELETES) as writer:
                for new in by_spec[spec_id]:
                    writer.add(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=self._snapshot_id,
                            sequence_number=new.data_sequence_number,
                            file_sequence_number=None,
                            data_file=new.data_file,
                        )
                    )
            manifests.append(writer.to_manifest_file())
        return manifests

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
        added_vectors = 0
        for new in self._added_deletes:
            added = new.data_file
            if added.file_format == FileFormat.PUFFIN:
                added_vectors += 1
                added = _dv_for_summary(added)
            collector.add_file(added, schema, specs[added.spec_id])
        vectors = 0
        for removed in self._removed_delete_files:
            if removed.file_format == FileFormat.PUFFIN:
                vectors += 1
                removed = _dv_for_summary(removed)
            collector.remove_file(removed, schema, specs[removed.spec_id])
        properties = collector.build()
        if vectors:
            properties["removed-dvs"] = str(vectors)
        if added_vectors:
            properties["added-dvs"] = str(added_vectors)
        parent = metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id else None
        # pyiceberg computes totals for append/overwrite/delete only; a replace's are the same sums
        totals = update_snapshot_summaries(
            Summary(Operation.OVERWRITE, **properties, **snapshot_properties),
            parent.summary if parent is not None else None,
        )
        return Summary(Operation.REPLACE, **totals.additional_properties)

    def _commit(self) -> UpdatesAndRequirements:
        metadata = self._transaction.table_metadata
        manifests = self._manifests()
        sequence = metadata.next_sequence_number()
        summary = self._summary(self.snapshot_properties)
        name = _new_manifest_list_file_name(
            snapshot_id=self._snapshot_id, attempt=0, commit_uuid=self.commit_uuid
        )
        path = self._transaction._table.location_provider().new_metadata_location(name)
        self._written_manifest_lists.append(path)
        first_row_id = (metadata.next_row_id or 0) if isinstance(metadata, TableMetadataV3) else None
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
        # pyiceberg's models take their fields' names (populate_by_name); mypy knows only the aliases.
        snapshot = Snapshot(  # type: ignore[call-arg]
            snapshot_id=self._snapshot_id,
            parent_snapshot_id=self._parent_snapshot_id,
            manifest_list=path,
            sequence_number=sequence,
            summary=summary,
            schema_id=metadata.current_schema_id,
            first_row_id=first_row_id,
            added_rows=writer.next_row_id - first_row_id
            if isinstance(writer, ManifestListWriterV3) and first_row_id is not None
            else None,
        )
        return self._updates_for(snapshot)

    def _updates_for(self, snapshot: Snapshot) -> UpdatesAndRequirements:
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
                SetSnapshotRefUpdate(  # type: ignore[call-arg]  # fields' names, as Snapshot
                    snapshot_id=self._snapshot_id,
                    ref_name=branch,
                    type=SnapshotRefType.BRANCH,
                ),
            ),
            (
                AssertRefSnapshotId(  # type: ignore[call-arg]  # fields' names, as Snapshot
                    snapshot_id=refs[branch].snapshot_id if branch in refs else None, ref=branch
                ),
            ),
        )


def _check_delete_files(
    metadata: TableMetadata, removed: Sequence[DataFile], added: Sequence[NewDeleteFile]
) -> None:
    """``ValueError`` for delete files this producer cannot move: any in a v1 table, a deletion
    vector among ``removed_deletes`` (``removed_dvs`` names those), a data file, an added file
    without its spec id or with a data sequence number beyond the table's next one, an added
    position delete file in a v3 table (the spec forbids new ones there: vectors replace them), or
    an added deletion vector outside a v3 table or without ``referenced_data_file``."""
    if not removed and not added:
        return
    if metadata.format_version < 2:
        raise ValueError("a v1 table has no delete files")
    for data_file in removed:
        if data_file.content == DataFileContent.DATA or data_file.file_format == FileFormat.PUFFIN:
            raise ValueError(f"{data_file.file_path} is not a delete file removed by path")
    next_sequence = metadata.next_sequence_number()
    for new in added:
        data_file, sequence = new.data_file, new.data_sequence_number
        if data_file.content == DataFileContent.DATA or not hasattr(data_file, "_spec_id"):
            raise ValueError(f"{data_file.file_path} is not a delete file with a partition spec id")
        if sequence is not None and not 0 <= sequence < next_sequence:
            raise ValueError(f"data sequence number {sequence} is not one of an earlier snapshot")
        vector = data_file.file_format == FileFormat.PUFFIN
        if vector and (
            metadata.format_version < 3
            or len(data_file) <= REFERENCED_DATA_FILE
            or data_file[REFERENCED_DATA_FILE] is None
        ):
            raise ValueError(f"{data_file.file_path}: a deletion vector needs a v3 table and its data file")
        if (
            metadata.format_version >= 3
            and data_file.content == DataFileContent.POSITION_DELETES
            and not vector
        ):
            raise ValueError("position delete files must not be added to a v3 table (spec: deletion vectors)")


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
