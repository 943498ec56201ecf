"""The live delete files of a snapshot, the data files each one applies to, and the checks a plan
must pass again at a newer head before it is committed.

What a delete file applies to is taken from the spec file index (``storage.formats.iceberg``),
the same ``DeleteIndex`` our reader applies deletes with (the Iceberg spec's rules: a position
delete applies to data files of its spec and partition whose data sequence number is at most its
own, within its ``file_path`` bounds, unless the data file has a deletion vector; an equality
delete to data files of a smaller data sequence number in its partition, or in every partition
when its spec is unpartitioned; a deletion vector to its ``referenced_data_file``). So what the
maintenance removes, keeps or converts is what a reader would have applied, by construction.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntryStatus,
)

from processes.maintenance.iceberg.plan import spec_view
from processes.maintenance.retention import summary_list
from storage.formats.iceberg.commit import (
    REFERENCED_DATA_FILE,
    delete_key,
    encode_partition,
    read_entries,
    read_manifest_list,
)
from storage.spec.errors import CorruptTable, RewriteConflict
from storage.spec.models import FileContent, FileSlice

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

#: Field ids of a position delete file's columns (Iceberg spec, reserved ids).
FILE_PATH_ID = 2147483546
POS_ID = 2147483545

#: The formats of the position delete files whose contents are read (and rewritten).
READ_FORMATS = (FileFormat.PARQUET, FileFormat.ORC)

POSITION = "position"
EQUALITY = "equality"
VECTOR = "deletion-vector"


@dataclass(eq=False)
class LiveDelete:
    """A live delete file (or deletion vector) of a snapshot: its pyiceberg ``DataFile`` (v3
    fields, ``spec_id`` set), data sequence number, (spec id, partition key) scope, and the live
    data files the reader applies it to."""

    key: Any  # the path, or for a vector ``dv_key`` (see ``iceberg_commit.producer.delete_key``)
    data_file: DataFile
    sequence: int
    scope: tuple[int, str]
    everywhere: bool  # an equality delete of an unpartitioned spec: applies in every partition
    applies_to: set[str] = field(default_factory=set)

    @property
    def kind(self) -> str:
        if self.data_file.file_format == FileFormat.PUFFIN:
            return VECTOR
        return EQUALITY if self.data_file.content == DataFileContent.EQUALITY_DELETES else POSITION

    @property
    def path(self) -> str:
        return self.data_file.file_path

    def names_one_file(self) -> bool:
        """Whether it can only name one data file (``referenced_data_file``, or equal bounds of
        its ``file_path`` column): the index then attaches it to that file alone."""
        data_file = self.data_file
        if len(data_file) > REFERENCED_DATA_FILE and data_file[REFERENCED_DATA_FILE]:
            return True
        lower = (data_file.lower_bounds or {}).get(FILE_PATH_ID)
        return lower is not None and lower == (data_file.upper_bounds or {}).get(FILE_PATH_ID)


@dataclass
class DeleteState:
    """The live delete files of one snapshot and, when attached, what they apply to;
    ``equality_targets``: the data files equality deletes apply to, each with those deletes."""

    snapshot_id: int
    deletes: dict[Any, LiveDelete]
    equality_targets: list[FileSlice] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[LiveDelete]:
        return sorted((d for d in self.deletes.values() if d.kind == kind), key=lambda d: str(d.key))

    def for_spec_file(self, delete_file: Any) -> LiveDelete:
        """The live delete of a spec ``DataFile`` the index attached to a data file."""
        if delete_file.content is FileContent.DELETION_VECTOR:
            extra = delete_file.extra
            key: Any = (delete_file.path, extra.get("referenced_data_file"), extra.get("content_offset"))
        else:
            key = delete_file.path
        live = self.deletes.get(key)
        if live is None:
            raise CorruptTable(
                f"the index applies delete file {delete_file.path}, which no delete manifest holds"
            )
        return live


def read_state(
    table: Table, snapshot: Snapshot, *, attach: bool = True, equality_targets: bool = False
) -> DeleteState:
    """The live delete files of ``snapshot`` (its delete manifests), and with ``attach`` the data
    files each applies to (a listing of the snapshot's data files through the spec index)."""
    specs = table.metadata.specs()
    deletes: dict[Any, LiveDelete] = {}
    for manifest in read_manifest_list(table.io, snapshot):
        if manifest.content != ManifestContent.DELETES:
            continue
        if not (manifest.has_added_files() or manifest.has_existing_files()):
            continue
        for entry in read_entries(table.io, manifest):
            if entry.status == ManifestEntryStatus.DELETED:
                continue
            data_file = entry.data_file
            key = delete_key(data_file)
            deletes[key] = LiveDelete(
                key=key,
                data_file=data_file,
                sequence=int(entry.sequence_number or 0),
                scope=(data_file.spec_id, encode_partition(data_file.partition)),
                everywhere=data_file.content == DataFileContent.EQUALITY_DELETES
                and not specs[data_file.spec_id].fields,
            )
    state = DeleteState(snapshot.snapshot_id, deletes)
    if attach and deletes:
        _attach(table, state, equality_targets)
    return state


def _attach(table: Table, state: DeleteState, equality_targets: bool) -> None:
    for file_slice in spec_view(table).file_index().list_files_at(state.snapshot_id):
        equality = []
        for delete_file in file_slice.delete_files:
            state.for_spec_file(delete_file).applies_to.add(file_slice.base_file.path)
            if delete_file.content is FileContent.EQUALITY_DELETES:
                equality.append(delete_file)
        if equality_targets and equality:
            state.equality_targets.append(
                FileSlice(
                    file_slice.partition,
                    file_slice.base_file,
                    tuple(equality),
                    base_instant=file_slice.base_instant,
                )
            )


# --- dangling deletes --------------------------------------------------------------------------------


def find_dangling(io: FileIO, state: DeleteState, *, read_contents: bool) -> tuple[list[LiveDelete], int]:
    """The delete files that delete no row of a live data file: those the index applies to no
    live data file, and (``read_contents``) the position delete files whose ``file_path`` values
    name none of the data files it applies them to (read when their bounds span several files).
    Returns them and the number of delete files whose contents were read."""
    dangling = [d for d in state.deletes.values() if not d.applies_to]
    read = 0
    if read_contents:
        for live in state.of_kind(POSITION):
            if not live.applies_to or live.names_one_file() or live.data_file.file_format not in READ_FORMATS:
                continue
            read += 1
            if not named_paths(io, live) & live.applies_to:
                dangling.append(live)
    return sorted(dangling, key=lambda d: str(d.key)), read


def _read_columns(io: FileIO, live: LiveDelete, columns: list[str]) -> pa.Table:
    """``columns`` of a parquet or ORC position delete file (by name, as the spec fixes them)."""
    file_format = live.data_file.file_format
    if file_format not in READ_FORMATS:
        raise ValueError(f"position delete file {live.path} is {file_format}; only parquet and ORC are read")
    try:
        with io.new_input(live.path).open(seekable=True) as handle:
            if file_format == FileFormat.ORC:
                import pyarrow.orc as orc

                return orc.ORCFile(handle).read(columns=columns)
            return pq.read_table(handle, columns=columns)
    except FileNotFoundError:
        raise CorruptTable(f"delete file {live.path} is missing") from None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise CorruptTable(f"delete file {live.path} cannot be read: {error}") from None


def read_positions(io: FileIO, live: LiveDelete) -> pa.Table:
    """The ``file_path`` and ``pos`` columns of a parquet or ORC position delete file."""
    rows = _read_columns(io, live, ["file_path", "pos"])
    return pa.table({"file_path": rows["file_path"].cast(pa.string()), "pos": rows["pos"].cast(pa.int64())})


def named_paths(io: FileIO, live: LiveDelete) -> set[str]:
    """The data files a parquet or ORC position delete file names."""
    column = _read_columns(io, live, ["file_path"]).column("file_path")
    return set(column.unique().cast(pa.string()).to_pylist())


# --- checks at a newer head --------------------------------------------------------------------------


def validate_at_head(table: Table, planned_snapshot_id: int, removed: list[LiveDelete]) -> None:
    """``RewriteConflict`` when a plan made at ``planned_snapshot_id`` that removes ``removed``
    no longer holds at the table's (refreshed) head: the planned snapshot is no ancestor of it,
    one of the delete files is not live any more, or a data file committed since lies in the scope
    of one of them with a data sequence number it could apply to (a rewrite keeping old sequence
    numbers commits such files; an append's are newer and never conflict). Delete files committed
    since are no conflict: they stay live beside what the plan commits."""
    head = table.metadata.current_snapshot()
    if head is None:
        raise RewriteConflict("the table has no current snapshot any more")
    if head.snapshot_id == planned_snapshot_id:
        return  # the producer checks that every file it removes is live
    since = snapshots_since(table.metadata, head, planned_snapshot_id)
    manifests = read_manifest_list(table.io, head)
    live = {
        delete_key(entry.data_file)
        for manifest in manifests
        if manifest.content == ManifestContent.DELETES
        for entry in read_entries(table.io, manifest)
        if entry.status != ManifestEntryStatus.DELETED
    }
    gone = [d for d in removed if d.key not in live]
    if gone:
        raise RewriteConflict(
            f"{len(gone)} planned delete file(s) are not live any more, e.g. {gone[0].path}"
        )
    limits: dict[tuple[int, str], int] = defaultdict(lambda: -1)
    everywhere = -1
    for live_delete in removed:
        limits[live_delete.scope] = max(limits[live_delete.scope], live_delete.sequence)
        if live_delete.everywhere:
            everywhere = max(everywhere, live_delete.sequence)
    for manifest in manifests:
        if manifest.content != ManifestContent.DATA or manifest.added_snapshot_id not in since:
            continue
        for entry in read_entries(table.io, manifest):
            if entry.status == ManifestEntryStatus.DELETED or entry.snapshot_id not in since:
                continue
            data_file = entry.data_file
            scope = (data_file.spec_id, encode_partition(data_file.partition))
            if (entry.sequence_number or 0) <= max(limits.get(scope, -1), everywhere):
                raise RewriteConflict(
                    f"snapshot {entry.snapshot_id} added data file {data_file.file_path}, which a planned"
                    " delete file may apply to"
                )


def snapshots_since(metadata: TableMetadata, head: Any, planned_snapshot_id: int) -> set[int]:
    """The ids of the snapshots after ``planned_snapshot_id`` up to ``head``; ``RewriteConflict``
    when it is not an ancestor of the head."""
    since: set[int] = set()
    current = head
    while current is not None and current.snapshot_id != planned_snapshot_id:
        since.add(current.snapshot_id)
        parent = current.parent_snapshot_id
        current = metadata.snapshot_by_id(parent) if parent is not None else None
    if current is None:
        raise RewriteConflict(
            f"the planned snapshot {planned_snapshot_id} is no longer an ancestor of the head"
        )
    return since


def removed_summary(removed: list[LiveDelete]) -> dict[str, Any]:
    """The summary's facts about the delete files a plan removes, per kind."""
    kinds = {POSITION: 0, EQUALITY: 0, VECTOR: 0}
    for live in removed:
        kinds[live.kind] += 1
    return {
        "removed_delete_files": len(removed),
        "removed_position_delete_files": kinds[POSITION],
        "removed_equality_delete_files": kinds[EQUALITY],
        "removed_deletion_vectors": kinds[VECTOR],
        "removed_files": summary_list([live.path for live in removed]),
    }
