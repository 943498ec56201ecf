"""Delete files of a snapshot, matched to the data files they apply to (``DeleteIndex``).

The delete manifests of a snapshot (few, small) are read into the index before its data
manifests are streamed, so that each data file can be given its deletes as it is listed.
"""

from __future__ import annotations

from typing import Any

from storage.formats.iceberg._values import stats_map
from storage.spec.errors import CorruptTable
from storage.spec.models import DataFile, FileContent

POS_DELETE_PATH_ID = 2147483546


def _path_bounds(record: dict[str, Any]) -> tuple[str | None, str | None]:
    """The data file path range a position delete file covers (from its file_path bounds)."""
    data = record["data_file"]
    if data.get("referenced_data_file"):
        return data["referenced_data_file"], data["referenced_data_file"]
    found: list[str | None] = [None, None]
    for i, key in enumerate(("lower_bounds", "upper_bounds")):
        stats = data.get(key)
        raw = stats_map(stats).get(POS_DELETE_PATH_ID) if stats is not None else None
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
