"""New position delete files: the compaction of a partition's position deletes, and the position
deletes equivalent to the equality deletes of a snapshot.

Files are written where the run's outputs say (``outputs``: staged and renamed into the data
folder beside the files they replace on a local table; written in place under a name unique to
the attempt on an object store) and described for the manifest like Java's position delete
writer does: ``file_path`` and ``pos`` (reserved field ids), sorted by both, with value counts
and exact (untruncated) lower and upper bounds, so a reader can tell from the bounds which data
files a file may name (a file naming one data file has equal ``file_path`` bounds).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent, ManifestEntryStatus
from pyiceberg.types import LongType, StringType

from processes.maintenance.iceberg.deletes.state import (
    FILE_PATH_ID,
    POS_ID,
    POSITION,
    READ_FORMATS,
    DeleteState,
    LiveDelete,
    read_positions,
)
from processes.maintenance.orc_output import ORC, PARQUET, write_orc
from processes.maintenance.outputs import RewriteOutputs
from storage.formats.iceberg.commit import (
    NewDeleteFile,
    encode_partition,
    read_entries,
    read_manifest_list,
)
from storage.formats.iceberg.read import SliceReader, equality_hits
from storage.io import filesystem, is_local, uri
from storage.spec.errors import CorruptTable
from storage.spec.models import FileSlice

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

_FIELD_ID = b"PARQUET:field_id"
POSITION_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={_FIELD_ID: str(FILE_PATH_ID).encode()}),
        pa.field("pos", pa.int64(), nullable=False, metadata={_FIELD_ID: str(POS_ID).encode()}),
    ]
)


@dataclass(frozen=True)
class _Target:
    """What ``outputs.target`` reads of a group: an index and the file to write beside."""

    index: int
    paths: list[str]


@dataclass(frozen=True)
class StagedDeleteFile:
    """A position delete file written and not yet published: where it lies, what to write it
    beside, its manifest fields and the data sequence number it is committed with."""

    location: str
    size: int
    beside: str
    partition: Any
    spec_id: int
    metrics: dict[str, Any]
    data_sequence_number: int
    file_format: str = PARQUET

    def delete_files(self, path: str) -> list[NewDeleteFile]:
        """The delete files to commit once the file is published at ``path``."""
        data_file = position_delete_file(
            path, self.size, self.metrics, self.partition, self.spec_id, self.file_format
        )
        return [NewDeleteFile(data_file, self.data_sequence_number)]


class DeleteFileWriter:
    """Writes the position delete files of one attempt through its ``outputs``, as parquet or,
    with ``file_format`` orc, ORC (``orc_output``; ``compression`` an ORC codec then);
    ``publish`` moves them into the table (just before the commit, as the data rewrite does)."""

    def __init__(
        self, outputs: RewriteOutputs, compression: str = "zstd", file_format: str = PARQUET
    ) -> None:
        self.outputs = outputs
        self.compression = compression
        self.file_format = file_format
        self.written = 0
        self.bytes_written = 0
        outputs.prepare()

    def write(
        self, rows: pa.Table, *, beside: str, partition: Any, spec_id: int, data_sequence_number: int
    ) -> StagedDeleteFile:
        """A position delete file of ``rows`` (sorted, unique), to be published in the folder of
        ``beside`` as a file of partition ``partition`` of spec ``spec_id``."""
        self.written += 1
        out, prefix = self.outputs.target(_Target(self.written, [beside]))
        fs, root = filesystem(out, self.outputs.storage)
        if is_local(out):
            os.makedirs(root, exist_ok=True)
        fs_path = f"{root}/{prefix}position-deletes-{self.written:05d}.{self.file_format}"
        if self.file_format == ORC:
            write_orc(fs, fs_path, rows, self.compression)
        else:
            pq.write_table(rows, fs_path, filesystem=fs, compression=self.compression)
        size = int(fs.get_file_info(fs_path).size)
        self.bytes_written += size
        metrics = position_metrics(rows)
        return StagedDeleteFile(
            uri(out, fs_path),
            size,
            beside,
            partition,
            spec_id,
            metrics,
            data_sequence_number,
            self.file_format,
        )

    def write_bytes(self, content: bytes, *, beside: str, suffix: str) -> tuple[str, int]:
        """A file of ``content`` (a Puffin file of deletion vectors), to be published in the
        folder of ``beside``: (location, size)."""
        self.written += 1
        out, prefix = self.outputs.target(_Target(self.written, [beside]))
        fs, root = filesystem(out, self.outputs.storage)
        if is_local(out):
            os.makedirs(root, exist_ok=True)
        fs_path = f"{root}/{prefix}deletes-{self.written:05d}{suffix}"
        with fs.open_output_stream(fs_path) as stream:
            stream.write(content)
        self.bytes_written += len(content)
        return uri(out, fs_path), len(content)

    def publish(self, staged: list[Any]) -> list[NewDeleteFile]:
        """Move the staged files (``StagedDeleteFile``, ``vectors.StagedVectors``) into the table;
        the delete files to commit."""
        published = []
        for file in staged:
            published += file.delete_files(self.outputs.publish(file.location, file.beside))
        return published


def position_metrics(rows: pa.Table) -> dict[str, Any]:
    """Value counts and exact bounds of a position delete file's columns, by field id."""
    paths = pc.min_max(rows["file_path"])
    positions = pc.min_max(rows["pos"])
    count = rows.num_rows
    return {
        "record_count": count,
        "value_counts": {FILE_PATH_ID: count, POS_ID: count},
        "null_value_counts": {FILE_PATH_ID: 0, POS_ID: 0},
        "lower_bounds": {
            FILE_PATH_ID: to_bytes(StringType(), paths["min"].as_py()),
            POS_ID: to_bytes(LongType(), positions["min"].as_py()),
        },
        "upper_bounds": {
            FILE_PATH_ID: to_bytes(StringType(), paths["max"].as_py()),
            POS_ID: to_bytes(LongType(), positions["max"].as_py()),
        },
    }


def position_delete_file(
    path: str, size: int, metrics: dict[str, Any], partition: Any, spec_id: int, file_format: str = PARQUET
) -> DataFile:
    """The pyiceberg ``DataFile`` of a position delete file (``position_metrics``)."""
    data_file = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.ORC if file_format == ORC else FileFormat.PARQUET,
        partition=partition,
        file_size_in_bytes=size,
        **metrics,
    )
    data_file.spec_id = spec_id
    return data_file


def unique_sorted(parts: list[pa.Table]) -> pa.Table:
    """The (file_path, pos) pairs of ``parts`` once each, sorted by path then position."""
    if not parts:
        return POSITION_SCHEMA.empty_table()
    merged = pa.concat_tables([p.select(["file_path", "pos"]).cast(POSITION_SCHEMA) for p in parts])
    unique = merged.group_by(["file_path", "pos"]).aggregate([])
    ordered = unique.sort_by([("file_path", "ascending"), ("pos", "ascending")])
    return pa.Table.from_arrays([ordered["file_path"], ordered["pos"]], schema=POSITION_SCHEMA)


# --- rewrite-position-deletes --------------------------------------------------------------------------


@dataclass
class PositionGroup:
    """The position delete files of one (spec, partition), compacted into one file."""

    scope: tuple[int, str]
    deletes: list[LiveDelete]


def position_groups(state: DeleteState, min_files: int) -> list[PositionGroup]:
    """The partitions holding at least ``min_files`` parquet or ORC position delete files."""
    by_scope: dict[tuple[int, str], list[LiveDelete]] = defaultdict(list)
    for live in state.of_kind(POSITION):
        if live.data_file.file_format in READ_FORMATS:
            by_scope[live.scope].append(live)
    return [
        PositionGroup(scope, found) for scope, found in sorted(by_scope.items()) if len(found) >= min_files
    ]


@dataclass
class GroupResult:
    staged: Any  # StagedDeleteFile, vectors.StagedVectors or None
    entries_in: int
    entries_out: int


def rewrite_group(
    io: FileIO, group: PositionGroup, writer: DeleteFileWriter, *, vectors: bool = False
) -> GroupResult:
    """One file of the group's entries that still delete a row: an entry of a delete file naming
    a data file the index applies that file to (a live data file of its partition, of a data
    sequence number at most the delete's, without a deletion vector), once, sorted. Its data
    sequence number is the greatest of the group's files (Java's ``RewritePositionDeletesGroup.
    maxRewrittenDataSequenceNumber``): every kept entry names a data file of a sequence number at
    most its own file's, so the new file applies to exactly the data files its entries name.
    With ``vectors`` (a v3 table) the entries become one deletion vector per data file instead,
    in one Puffin file (the data files named have no vector: it would shadow the entries)."""
    parts, entries_in = [], 0
    for live in group.deletes:
        rows = read_positions(io, live)
        entries_in += rows.num_rows
        if live.applies_to and rows.num_rows:
            wanted = pa.array(sorted(live.applies_to), pa.string())
            parts.append(rows.filter(pc.is_in(rows["file_path"], value_set=wanted)))
    rows = unique_sorted(parts)
    if not rows.num_rows:
        return GroupResult(None, entries_in, 0)
    first = group.deletes[0].data_file
    if vectors:
        from processes.maintenance.iceberg.deletes.vectors import write_vectors

        paths = rows["file_path"].to_numpy(zero_copy_only=False)
        positions = rows["pos"].to_numpy()
        found = {path: positions[paths == path] for path in dict.fromkeys(paths.tolist())}
        homes = {path: (first.partition, first.spec_id) for path in found}
        return GroupResult(write_vectors(io, {}, homes, found, writer)[0], entries_in, rows.num_rows)
    staged = writer.write(
        rows,
        beside=first.file_path,
        partition=first.partition,
        spec_id=first.spec_id,
        data_sequence_number=max(d.sequence for d in group.deletes),
    )
    return GroupResult(staged, entries_in, rows.num_rows)


# --- convert-equality-deletes --------------------------------------------------------------------------


def deleted_positions(io: FileIO, schema: pa.Schema, target: FileSlice) -> np.ndarray:
    """The positions of the rows of ``target``'s data file that its equality deletes delete.

    The data file is read by our reader without deletes (only the equality columns, by field id,
    types widened, a missing column filled as the reader fills it), every row in file order, and
    each equality delete is matched the way the reader matches it (``SliceReader._equality_set``
    and ``read.equality_hits``: nulls equal to nulls), so the positions are exactly the rows a
    read drops for those deletes."""
    for delete_file in target.delete_files:
        if not delete_file.extra.get("equality_ids"):
            raise CorruptTable(f"equality delete file {delete_file.path} names no equality columns")
    columns = sorted({c.split(".", 1)[0] for d in target.delete_files for c in d.equality_columns})
    reader = SliceReader(io, schema, columns, None)
    base = target.base
    fields = [f for f in schema if f.name in columns]
    matchers = [reader._equality_set(d, fields) for d in target.delete_files]
    found: list[np.ndarray] = []
    offset = 0
    for batch in reader.read(FileSlice(target.partition, base, ())):
        hit = None
        for names, values in matchers:
            matched = equality_hits(batch, names, values)
            hit = matched if hit is None else pc.or_(hit, matched)
        if hit is not None:
            found.append(np.flatnonzero(hit.to_numpy(zero_copy_only=False)) + offset)
        offset += batch.num_rows
    if offset != base.record_count:
        raise CorruptTable(
            f"data file {base.path} holds {offset} rows; its manifest entry says {base.record_count}"
        )
    return np.concatenate(found).astype(np.int64) if found else np.empty(0, np.int64)


@dataclass
class Conversion:
    staged: list[Any]  # StagedDeleteFile, or vectors.StagedVectors
    data_files_read: int
    positions: int


def convert_equality(
    table: Table,
    schema: pa.Schema,
    state: DeleteState,
    writer: DeleteFileWriter,
    progress: Callable[[int, int], None],
) -> Conversion:
    """Position delete files deleting exactly the rows the snapshot's equality deletes delete:
    per (spec, partition) of the data files they apply to, one file naming each deleted row, of
    the greatest data sequence number of the equality deletes behind it (each named data file's
    is smaller than those deletes', so the file applies to exactly the rows it names). A v3 table
    gets deletion vectors instead (``vectors.write_vectors``: one per data file, merged with the
    vector the file had)."""
    targets = state.equality_targets
    data_files = live_data_files(
        table.io, _snapshot(table, state.snapshot_id), {t.base.path for t in targets}
    )
    found: dict[str, np.ndarray] = {}
    sequences: dict[tuple[int, str], int] = {}
    for done, target in enumerate(targets):
        progress(done, len(targets))
        path = target.base.path
        data_file = data_files[path]
        scope = (data_file.spec_id, encode_partition(data_file.partition))
        sequence = max(state.for_spec_file(d).sequence for d in target.delete_files)
        sequences[scope] = max(sequences.get(scope, 0), sequence)
        found[path] = deleted_positions(table.io, schema, target)
    if table.metadata.format_version >= 3:
        from processes.maintenance.iceberg.deletes.vectors import replaced_vectors, write_vectors

        homes = {path: (data_file.partition, data_file.spec_id) for path, data_file in data_files.items()}
        staged = write_vectors(table.io, replaced_vectors(state), homes, found, writer)
        return Conversion(staged, len(targets), sum(int(p.size) for p in found.values()))
    parts: dict[tuple[int, str], list[pa.Table]] = defaultdict(list)
    home_files: dict[tuple[int, str], DataFile] = {}
    for path, positions in found.items():
        if positions.size:
            data_file = data_files[path]
            scope = (data_file.spec_id, encode_partition(data_file.partition))
            parts[scope].append(
                pa.table({"file_path": pa.array([path] * positions.size, pa.string()), "pos": positions})
            )
            home_files.setdefault(scope, data_file)
    added: list[Any] = []
    total = 0
    for scope in sorted(parts):
        rows = unique_sorted(parts[scope])
        total += rows.num_rows
        home = home_files[scope]
        added.append(
            writer.write(
                rows,
                beside=home.file_path,
                partition=home.partition,
                spec_id=home.spec_id,
                data_sequence_number=sequences[scope],
            )
        )
    return Conversion(added, len(targets), total)


def _snapshot(table: Table, snapshot_id: int) -> Snapshot:
    """The snapshot of ``table`` a delete state was read from."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise RuntimeError(f"snapshot {snapshot_id} is not a snapshot of the table any more")
    return snapshot


def live_data_files(io: FileIO, snapshot: Snapshot, wanted: set[str]) -> dict[str, DataFile]:
    """The pyiceberg ``DataFile`` of each of the ``wanted`` live data files of ``snapshot``."""
    found: dict[str, DataFile] = {}
    if not wanted:
        return found
    for manifest in read_manifest_list(io, snapshot):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in read_entries(io, manifest):
            if entry.status != ManifestEntryStatus.DELETED and entry.data_file.file_path in wanted:
                found[entry.data_file.file_path] = entry.data_file
    missing = wanted - found.keys()
    if missing:
        raise CorruptTable(
            f"{len(missing)} data file(s) the index listed are not live, e.g. {sorted(missing)[0]}"
        )
    return found
