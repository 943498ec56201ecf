"""Deletion vectors written by the delete-file actions on v3 tables (the spec forbids new position
delete files there: ``deletion-vector-v1`` blobs in Puffin files replace them).

``convert-equality-deletes`` on a v3 table writes, for every data file its equality deletes apply
to, one vector of the rows they delete, merged with the vector the data file had (a data file has
at most one live vector: the old one is removed by the same commit, ``plan_vectors``), all in one
Puffin file beside the first of them. Each vector is committed as Java commits one: a position
delete entry of the Puffin file with ``referenced_data_file``, ``content_offset`` and
``content_size_in_bytes`` of its blob and the number of deleted rows as ``record_count``, in the
data file's partition; its data sequence number is the new snapshot's (a vector names positions
of one data file, so it deletes exactly those whatever the sequence numbers). The blob is the
spec's: a 4-byte big-endian length, the magic, the portable 64-bit roaring bitmap, a big-endian
CRC-32 (``storage.formats.iceberg._puffin`` reads it).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyroaring import BitMap64

from processes.maintenance.iceberg.deletes.state import VECTOR, DeleteState, LiveDelete
from storage.formats.iceberg import DV_BLOB_TYPE, DV_MAGIC, decode_blob
from storage.formats.iceberg.commit import (
    CONTENT_OFFSET,
    CONTENT_SIZE,
    REFERENCED_DATA_FILE,
    NewDeleteFile,
)
from storage.spec.errors import CorruptTable

if TYPE_CHECKING:
    from pyiceberg.io import FileIO

#: The field id of the row position metadata column (the field a deletion vector covers).
ROW_POSITION_FIELD_ID = 2147483645


def dv_blob(positions: BitMap64) -> bytes:
    """A ``deletion-vector-v1`` blob of ``positions`` (module docstring)."""
    body = DV_MAGIC + positions.serialize()
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


def read_vector(io: FileIO, live: LiveDelete) -> BitMap64:
    """The positions a live deletion vector deletes (its blob read by offset and size)."""
    data_file = live.data_file
    offset, size = data_file[CONTENT_OFFSET], data_file[CONTENT_SIZE]
    if offset is None or size is None:
        raise CorruptTable(f"deletion vector in {live.path} has no content offset or size")
    try:
        with io.new_input(live.path).open(seekable=True) as handle:
            handle.seek(offset)
            blob = bytes(handle.read(size))
    except FileNotFoundError:
        raise CorruptTable(f"Puffin file {live.path} (deletion vectors) is missing") from None
    return decode_blob(blob, f"Puffin file {live.path} at offset {offset}")


def vectors_by_data_file(state: DeleteState) -> dict[str, LiveDelete]:
    """The live deletion vector of each data file that has one."""
    return {live.data_file[REFERENCED_DATA_FILE]: live for live in state.of_kind(VECTOR)}


def plan_vectors(state: DeleteState) -> list[LiveDelete]:
    """The vectors a v3 conversion replaces: those of the data files it writes a vector for."""
    by_file = vectors_by_data_file(state)
    targets = {t.base.path for t in state.equality_targets}
    return [by_file[path] for path in sorted(targets & by_file.keys())]


@dataclass(frozen=True)
class StagedVectors:
    """A Puffin file of vectors written and not yet published: (data file path, its partition and
    spec id, offset, length, cardinality) per blob."""

    location: str
    size: int
    beside: str
    blobs: list[tuple[str, Any, int, int, int, int]]

    def delete_files(self, path: str) -> list[NewDeleteFile]:
        """The vectors to commit once the Puffin file is published at ``path``."""
        return [NewDeleteFile(vector_file(path, self.size, *blob)) for blob in self.blobs]


def vector_file(
    path: str,
    size: int,
    data_path: str,
    partition: Any,
    spec_id: int,
    offset: int,
    length: int,
    cardinality: int,
) -> DataFile:
    """The pyiceberg ``DataFile`` of one deletion vector (of ``data_path``) in the Puffin file."""
    vector = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PUFFIN,
        partition=partition,
        record_count=cardinality,
        file_size_in_bytes=size,
    )
    vector[REFERENCED_DATA_FILE] = data_path
    vector[CONTENT_OFFSET], vector[CONTENT_SIZE] = offset, length
    vector.spec_id = spec_id
    return vector


def write_vectors(
    io: FileIO,
    replaced: Mapping[str, LiveDelete],
    homes: Mapping[str, tuple[Any, int]],
    found: Mapping[str, np.ndarray],
    writer: Any,
) -> list[StagedVectors]:
    """One Puffin file of a vector per data file: the positions ``found`` for it merged with
    those of the vector it had (``replaced``, by data file), staged through ``writer`` (a
    ``DeleteFileWriter``); none when no row is deleted. ``homes``: each data file's (partition,
    spec id)."""
    from storage.formats.iceberg.commit.puffin import puffin_file

    old = {path: read_vector(io, live) for path, live in replaced.items()}
    merged = {}
    for path in sorted(found.keys() | old.keys()):
        positions = old.get(path, BitMap64()) | BitMap64(found.get(path, np.empty(0, np.int64)).tolist())
        if positions:
            merged[path] = positions
    if not merged:
        return []
    blobs = [
        (
            {
                "type": DV_BLOB_TYPE,
                "fields": [ROW_POSITION_FIELD_ID],
                "snapshot-id": -1,
                "sequence-number": -1,
                "properties": {"referenced-data-file": path, "cardinality": str(len(positions))},
            },
            dv_blob(positions),
        )
        for path, positions in merged.items()
    ]
    content, _, written = puffin_file(blobs, compression="none")
    beside = next(iter(merged))
    location, size = writer.write_bytes(content, beside=beside, suffix=".puffin")
    entries = [
        (path, *homes[path], int(entry["offset"]), int(entry["length"]), len(merged[path]))
        for path, entry in zip(merged, written, strict=True)
    ]
    return [StagedVectors(location, size, beside, entries)]


def replaced_vectors(state: DeleteState) -> dict[str, LiveDelete]:
    """The vectors a v3 conversion replaces (``plan_vectors``) by the data file each belongs to."""
    return {live.data_file[REFERENCED_DATA_FILE]: live for live in plan_vectors(state)}
