"""``LanceSpecTable``: a Lance dataset through Lakewarden's table spec API.

- **Timeline**: the dataset's versions (``LanceDataset.versions()``), oldest first; an instant's id
  is the version number, its operation the version's transaction (``append``, ``delete``,
  ``overwrite``, ``rewrite``, ``update``, ``merge``, ...), its summary Lance's own version summary
  plus ``tags`` (the tags naming the version). A tag name is accepted wherever an instant is.
- **Partitions**: Lance has none. A dataset is a list of fragments with no partition values, so
  every slice is in the one partition ``""`` and ``partition_spec`` is empty.
- **Reads**: through Lance's own scanner, deletion files applied; ``schema_at`` is the version's
  own schema. Reading modes: SNAPSHOT and INCREMENTAL (rows of fragments added after the start
  version, read at the end version; a compaction's rewritten fragments count as added).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import pyarrow as pa

from lakewarden_lance._dataset import Files, LanceFormat, live_rows, open_dataset, version_time
from lakewarden_lance.index import LanceFileIndex
from lakewarden_lance.read import read
from storage.io import StoreOptions
from storage.spec.errors import InvalidRange
from storage.spec.models import (
    FileSlice,
    Instant,
    ReadingMode,
    Split,
    TableDefinition,
    TableId,
    TableSummary,
)
from storage.spec.table import InstantRef, SpecTable, Timeline


def _operation(dataset: Any, version: int) -> str:
    try:
        transaction = dataset.read_transaction(version)
    except (OSError, ValueError):  # the transaction file of an old version may be cleaned up
        transaction = None
    except TypeError as error:
        # pylance 14 cannot build its own Python object of a compaction that remapped an index
        # (LanceOperation.RewrittenIndex lacks arguments it is given): a commit of ``compact_files``
        # on an indexed dataset, such as the rewrite process makes. Only a Rewrite carries one.
        return "rewrite" if "RewrittenIndex" in str(error) else "unknown"
    if transaction is None:
        return "unknown"
    name = type(transaction.operation).__name__.lower()
    # pylance has no class for some operations (a compaction's fragment-id reservation)
    return "other" if name == "baseoperation" else name


class LanceTimeline(Timeline):
    """Versions of the dataset up to the table object's version, with their tags."""

    def __init__(self, table: LanceSpecTable) -> None:
        self._table = table
        self._instants: list[Instant] | None = None

    def instants(self) -> list[Instant]:
        if self._instants is None:
            self._instants = self._load()
        return self._instants

    def _load(self) -> list[Instant]:
        dataset = self._table.dataset()
        tags: dict[int, list[str]] = {}
        for name, tag in dataset.tags.list().items():
            tags.setdefault(int(tag["version"]), []).append(name)
        versions = sorted(
            (v for v in dataset.versions() if v["version"] <= dataset.version), key=lambda v: v["version"]
        )
        instants, parent = [], None
        for sequence, version in enumerate(versions):
            number = int(version["version"])
            summary: dict[str, Any] = dict(version.get("metadata") or {})
            if number in tags:
                summary["tags"] = sorted(tags[number])
            instants.append(
                Instant(
                    id=number,
                    timestamp=version_time(version),
                    operation=_operation(dataset, number),
                    parent_id=parent,
                    summary=summary,
                    sequence=sequence,
                )
            )
            parent = number
        return instants

    def get(self, instant_id: Instant | int | str) -> Instant:
        if isinstance(instant_id, str) and not instant_id.lstrip("-").isdigit():
            tagged = [i for i in self.instants() if instant_id in i.summary.get("tags", ())]
            if tagged:
                return tagged[0]
        return super().get(instant_id)


class LanceSpecTable(SpecTable):
    """A Lance dataset as of one version (the latest at open time unless opened at a version)."""

    format: ClassVar[Any] = LanceFormat.LANCE
    supported_modes = frozenset({ReadingMode.SNAPSHOT, ReadingMode.INCREMENTAL})

    def __init__(self, location: str, storage: StoreOptions | None = None, version: int | None = None):
        self._location = location.rstrip("/")
        self.storage = storage
        self.files = Files(self._location, storage)
        self._datasets: dict[int, Any] = {}
        latest = open_dataset(self._location, storage, version)
        self.version = int(latest.version)
        self._datasets[self.version] = latest
        self._definition = TableDefinition(
            id=TableId(LanceFormat.LANCE, self._location),  # type: ignore[arg-type]
            schema=latest.schema,
            properties={str(k): str(v) for k, v in (latest.config() or {}).items()},
        )
        self._timeline: LanceTimeline | None = None

    @property
    def definition(self) -> TableDefinition:
        return self._definition

    def dataset(self, version: int | None = None) -> Any:
        """The ``lance.LanceDataset`` at ``version`` (this table's version when None), cached."""
        version = self.version if version is None else int(version)
        if version not in self._datasets:
            self._datasets[version] = open_dataset(self._location, self.storage, version)
        return self._datasets[version]

    def resolve(self, instant: InstantRef) -> int:
        """The version an instant reference names (None: this table's version)."""
        if instant is None:
            return self.version
        return int(self.timeline().get(instant).id)

    def version_range(self, start: InstantRef, end: InstantRef) -> tuple[int | None, int]:
        """(exclusive start or None, inclusive end), checked against the timeline."""
        end_version = self.resolve(end)
        start_version = None if start is None else self.resolve(start)
        if start_version is not None and start_version > end_version:
            raise InvalidRange(f"the range starts at version {start_version}, after its end {end_version}")
        return start_version, end_version

    def schema_at(self, instant: InstantRef = None) -> pa.Schema:
        return self.dataset(self.resolve(instant)).schema

    def timeline(self) -> LanceTimeline:
        if self._timeline is None:
            self._timeline = LanceTimeline(self)
        return self._timeline

    def file_index(self) -> LanceFileIndex:
        return LanceFileIndex(self)

    def summary(self) -> TableSummary:
        dataset = self.dataset()
        files = total_bytes = records = 0
        for file_slice in self.file_index().list_files_at(self.version):
            files += 1
            total_bytes += file_slice.size_bytes
        for fragment in dataset.get_fragments():
            records += live_rows(fragment.metadata)
        instants = self.timeline().instants()
        last: dt.datetime | None = instants[-1].timestamp if instants else None
        return TableSummary(
            current_instant_id=self.version,
            file_count=files,
            total_bytes=total_bytes,
            record_count=records,
            instant_count=len(instants),
            last_updated=last,
        )

    def read(
        self,
        source: Split | FileSlice | Iterable[FileSlice] | InstantRef = None,
        columns: list[str] | None = None,
        filters: Any = None,
        mode: ReadingMode = ReadingMode.SNAPSHOT,
        *,
        end_instant: InstantRef = None,
    ) -> Iterator[pa.RecordBatch]:
        mode = ReadingMode(mode)
        self.check_mode(mode)
        return read(self, source, columns, filters, mode, end_instant)
