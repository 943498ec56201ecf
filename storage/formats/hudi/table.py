"""``HudiSpecTable``: a Hudi table (copy-on-write or merge-on-read) read through hudi-rs."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.fs as pafs

from storage.formats.hudi._layout import (
    PARTITION_FIELDS,
    PartitionLayout,
    hudi_storage_options,
    open_filesystem,
)
from storage.formats.hudi._metadata import (
    DATA_ACTIONS,
    CommitMetadata,
    base_file_instant,
    build_instant,
    column_stats,
    completion_times,
    is_log_file,
    iter_write_stats,
    read_footer,
)
from storage.io.stores import StoreOptions
from storage.spec.errors import CorruptTable, SpecError, UnsupportedFeature
from storage.spec.models import (
    DataFile,
    FileContent,
    FileSlice,
    Instant,
    PartitionDescriptor,
    ReadingMode,
    Split,
    TableDefinition,
    TableFormat,
    TableId,
    TableSummary,
)
from storage.spec.splits import row_group_offsets
from storage.spec.table import InstantRef, SpecTable, Timeline

META_COLUMNS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)
READ_OPTIMIZED_OPTION = "hoodie.read.use.read_optimized.mode"
_UNSUPPORTED_WORDS = ("unsupported", "not supported", "not yet supported", "not implemented")


@contextlib.contextmanager
def hudi_errors(location: str, doing: str) -> Iterator[None]:
    """Turns hudi-rs and I/O errors into ``UnsupportedFeature`` or ``CorruptTable`` naming the table."""
    try:
        yield
    except SpecError:
        raise
    except (OSError, ValueError, RuntimeError, pa.ArrowException) as exc:
        raise _translate(exc, location, doing) from exc
    except Exception as exc:  # hudi-rs raises HudiCoreError, which the package does not export
        if type(exc).__name__ != "HudiCoreError":
            raise
        raise _translate(exc, location, doing) from exc


def _translate(exc: Exception, location: str, doing: str) -> SpecError:
    message = f"Hudi table {location}: {doing} failed: {exc}"
    if any(word in str(exc).lower() for word in _UNSUPPORTED_WORDS):
        return UnsupportedFeature(message)
    return CorruptTable(message)


class HudiTimeline(Timeline):
    """Completed commits, delta commits and replace commits, oldest first."""

    def __init__(self, instants: list[Instant]) -> None:
        self._instants = instants

    def instants(self) -> list[Instant]:
        return list(self._instants)

    def latest(self) -> Instant | None:
        return self._instants[-1] if self._instants else None

    def resolve(self, ref: InstantRef) -> Instant | None:
        """``ref`` as an instant of this table; None stays None (the caller's default)."""
        if ref is None:
            return None
        return self.get(ref.id if isinstance(ref, Instant) else ref)

    def after(self, start: Instant | None, end: Instant) -> list[Instant]:
        first = start.sequence + 1 if start is not None else 0
        return self._instants[first : end.sequence + 1]


class HudiSpecTable(SpecTable):
    format: ClassVar[TableFormat] = TableFormat.HUDI
    # READ_OPTIMIZED on copy-on-write equals SNAPSHOT (there are no logs); allowed for both.
    supported_modes: ClassVar[frozenset[ReadingMode]] = frozenset(
        {ReadingMode.SNAPSHOT, ReadingMode.READ_OPTIMIZED, ReadingMode.INCREMENTAL}
    )

    def __init__(
        self,
        location: str,
        properties: Mapping[str, str],
        hudi_table: Any = None,
        storage: StoreOptions | None = None,
        read_options: Mapping[str, str] | None = None,
    ) -> None:
        """``read_options``: hudi-rs options beside the storage's (``_layout.legacy_read_options``
        and, for a partitioned legacy table, a partition field so that hudi-rs lists folders)."""
        self._storage = storage
        self._read_options = dict(read_options or {})
        self._filesystem, self._root, self._location = open_filesystem(location, storage)
        self._properties = dict(properties)
        self._hudi_table = hudi_table
        self._log_exclusions: dict[int | str, frozenset[str]] = {}
        self._readers: dict[tuple[str | None, bool], Any] = {}

    # Spark and Celery ship tables to other processes: the hudi-rs handle is reopened there.
    def __getstate__(self) -> dict[str, Any]:
        storage = self._storage.to_json() if self._storage is not None else ""
        return {
            "location": self._location,
            "properties": self._properties,
            "storage": storage,
            "read_options": self._read_options,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        storage = StoreOptions.from_json(state["storage"]) if state.get("storage") else None
        HudiSpecTable.__init__(
            self,
            state["location"],
            state["properties"],
            storage=storage,
            read_options=state.get("read_options"),
        )

    # --- hudi-rs handles -----------------------------------------------------------------------

    @property
    def hudi(self) -> Any:
        """The hudi-rs ``HudiTable``."""
        if self._hudi_table is None:
            import hudi

            with hudi_errors(self._location, "opening the table"):
                self._hudi_table = hudi.HudiTable(
                    self._location,
                    {**hudi_storage_options(self._location, self._storage), **self._read_options},
                )
        return self._hudi_table

    def errors(self, doing: str) -> contextlib.AbstractContextManager[None]:
        return hudi_errors(self._location, doing)

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._filesystem

    @property
    def root(self) -> str:
        return self._root

    @property
    def properties(self) -> Mapping[str, str]:
        return self._properties

    @property
    def is_merge_on_read(self) -> bool:
        return self._properties.get("hoodie.table.type") == "MERGE_ON_READ"

    # --- definition ----------------------------------------------------------------------------

    @functools.cached_property
    def definition(self) -> TableDefinition:
        with self.errors("reading the schema"):
            schema = self.hudi.get_schema()
        record_key = self._properties.get("hoodie.table.recordkey.fields", "")
        return TableDefinition(
            id=TableId(format=TableFormat.HUDI, location=self._location),
            schema=schema,
            partition_spec=self.layout.spec,
            properties=dict(self._properties),
            sort_columns=tuple(c.strip() for c in record_key.split(",") if c.strip()),
            table_type=self._properties.get("hoodie.table.type"),
        )

    @functools.cached_property
    def read_schema(self) -> pa.Schema:
        """The schema of what ``read`` returns: Hudi's meta columns, then the table's columns."""
        with self.errors("reading the schema"):
            return self.hudi.get_schema_with_meta_fields()

    @functools.cached_property
    def layout(self) -> PartitionLayout:
        with self.errors("reading the schema"):
            schema = self.hudi.get_schema()
        unnamed = PARTITION_FIELDS in self._read_options and not self._properties.get(PARTITION_FIELDS)
        return PartitionLayout.from_properties(self._properties, schema, unnamed_folders=unnamed)

    def bind(self, filters: Any) -> Any:
        """Filters bound to the readable schema (meta columns included); None for no filter."""
        from storage.spec.expressions import bind_filter

        return bind_filter(filters, self.read_schema)

    # --- timeline ------------------------------------------------------------------------------

    @functools.cached_property
    def _timeline_state(self) -> tuple[HudiTimeline, CommitMetadata]:
        with self.errors("reading the timeline"):
            hudi_timeline = self.hudi.get_timeline()
            found: dict[str, Any] = {}
            for fetch in (
                hudi_timeline.get_completed_commits,
                hudi_timeline.get_completed_deltacommits,
                hudi_timeline.get_completed_replacecommits,
                hudi_timeline.get_completed_clustering_commits,
            ):
                for hudi_instant in fetch():
                    if hudi_instant.action in DATA_ACTIONS:
                        found.setdefault(hudi_instant.timestamp, hudi_instant)
            ordered = [found[key] for key in sorted(found)]
            metadata = CommitMetadata(hudi_timeline, found)
            completed = completion_times(self._filesystem, self._root, self._properties)
            instants = []
            for sequence, hudi_instant in enumerate(ordered):
                parent = ordered[sequence - 1].timestamp if sequence else None
                commit = metadata.get(hudi_instant.timestamp)
                completion = completed.get(hudi_instant.timestamp)
                instants.append(build_instant(hudi_instant, commit, parent, sequence, completion))
        return HudiTimeline(instants), metadata

    def timeline(self) -> HudiTimeline:
        return self._timeline_state[0]

    @property
    def commit_metadata(self) -> CommitMetadata:
        return self._timeline_state[1]

    def file_index(self):
        from storage.formats.hudi.index import HudiFileIndex

        return HudiFileIndex(self)

    def summary(self) -> TableSummary:
        latest = self.timeline().latest()
        files = total_bytes = records = 0
        for file_slice in self.file_index().list_files_at(latest):
            files += 1
            total_bytes += file_slice.size_bytes
            records += file_slice.record_count
        return TableSummary(
            current_instant_id=latest.id if latest else None,
            file_count=files,
            total_bytes=total_bytes,
            record_count=records,
            instant_count=len(self.timeline().instants()),
            last_updated=latest.timestamp if latest else None,
        )

    # --- file slices ---------------------------------------------------------------------------

    def absolute(self, relative_path: str) -> str:
        return f"{self._location}/{relative_path}"

    def relative(self, data_file: DataFile) -> str:
        prefix = f"{self._location}/"
        if data_file.path.startswith(prefix):
            return data_file.path[len(prefix) :]
        return str(data_file.extra.get("relative_path", data_file.path))

    def logs_written_after(self, instant: Instant) -> frozenset[str]:
        """Log files first written after ``instant``: hudi-rs lists them in an older slice
        (a log file is named after its base instant, not the delta commit that wrote it)."""
        timeline = self.timeline()
        latest = timeline.latest()
        if latest is None or instant.sequence >= len(timeline.instants()) - 1:
            return frozenset()
        if instant.id not in self._log_exclusions:
            later = timeline.after(instant, latest)
            after = self._log_paths(i for i in later if i.summary.get("action") == "deltacommit")
            if after:
                # A log file appended to by commits on both sides of the instant existed then.
                earlier = timeline.after(None, instant)
                after -= self._log_paths(i for i in earlier if i.summary.get("action") == "deltacommit")
            if len(self._log_exclusions) > 8:
                self._log_exclusions.clear()
            self._log_exclusions[instant.id] = frozenset(after)
        return self._log_exclusions[instant.id]

    def _log_paths(self, instants: Iterable[Instant]) -> set[str]:
        paths = set()
        for instant in instants:
            for stat in iter_write_stats(self.commit_metadata.get(str(instant.id))):
                if is_log_file(stat.get("path") or ""):
                    paths.add(stat["path"])
        return paths

    def to_file_slice(
        self, hudi_slice: Any, partition: PartitionDescriptor, as_of: Instant, excluded_logs: frozenset[str]
    ) -> FileSlice:
        """Our ``FileSlice`` of a hudi-rs ``HudiFileSlice`` listed as of ``as_of``."""
        extra = {"as_of_instant": as_of.id}
        base = None
        if hudi_slice.base_file_name:
            relative = hudi_slice.base_file_relative_path()
            stat = self.commit_metadata.write_stat(base_file_instant(relative), relative)
            records = stat.get("numWrites") if stat else None
            base = DataFile(
                path=self.absolute(relative),
                size_bytes=int(hudi_slice.base_file_size),
                record_count=int(records) if records is not None else -1,
                file_format=self._properties.get("hoodie.table.base.file.format", "PARQUET").lower(),
                partition=partition.values,
                extra=extra,
            )
            if records is None:  # the writing commit was archived: the footer knows
                base = self.with_footer(base, ())
        logs = tuple(
            DataFile(
                path=self.absolute(relative),
                size_bytes=int(size),
                record_count=0,  # per-log record counts are in the commits, not worth a scan here
                content=FileContent.LOG,
                file_format="hudi_log",
                partition=partition.values,
                extra=extra,
            )
            for relative, size in zip(
                hudi_slice.log_files_relative_paths(), hudi_slice.log_file_sizes, strict=True
            )
            if relative not in excluded_logs
        )
        return FileSlice(
            partition=partition,
            base_file=base,
            delete_files=logs,
            file_group_id=hudi_slice.file_id,
            base_instant=hudi_slice.creation_instant_time,
        )

    def with_footer(self, data_file: DataFile, columns: Iterable[str]) -> DataFile:
        """``data_file`` with its exact record count, row-group offsets and ``columns``' stats."""
        with self.errors(f"reading the footer of {data_file.path}"):
            footer = read_footer(self._filesystem, f"{self._root}/{self.relative(data_file)}")
        data_file = replace(data_file, record_count=footer.num_rows, split_offsets=row_group_offsets(footer))
        columns = tuple(columns)
        if not columns:
            return data_file
        lower, upper, nulls = column_stats(footer, columns, self.read_schema)
        return replace(data_file, lower_bounds=lower, upper_bounds=upper, null_counts=nulls)

    def hudi_slices(
        self, as_of: str, partition_filter: list[tuple[str, str, str]] | None, read_optimized: bool
    ):
        from hudi import HudiReadOptions

        options = HudiReadOptions().with_as_of_timestamp(as_of)
        if read_optimized:
            options = options.with_hudi_option(READ_OPTIMIZED_OPTION, "true")
        if partition_filter:
            options = options.with_filters(partition_filter)
        with self.errors(f"listing file slices as of {as_of}"):
            return self.hudi.get_file_slices(options)

    def row_group_offsets(self, data_file) -> tuple[int, ...] | None:
        """From the footer: Hudi metadata has no row-group offsets."""
        return self.with_footer(data_file, ()).split_offsets

    def plain_parquet_layout(self) -> bool:
        """Base files hold every column under its name, unless the writer dropped the partition
        columns from them (``hoodie.datasource.write.drop.partition.columns``)."""
        properties = self.definition.properties
        drops = str(properties.get("hoodie.datasource.write.drop.partition.columns", "false")).lower()
        return not (drops == "true" and self.partition_spec.is_partitioned)

    def record_index(self, key_columns=None):
        """The Hudi record index (``storage/formats/hudi/record_index.py``)."""
        from storage.formats.hudi.record_index import HudiRecordIndex

        return HudiRecordIndex(self, key_columns)

    # --- reading -------------------------------------------------------------------------------

    def file_group_reader(self, as_of: str | None, read_optimized: bool = False) -> Any:
        key = (as_of, read_optimized)
        if key not in self._readers:
            from hudi import HudiReadOptions

            options = HudiReadOptions()
            if as_of is not None:
                options = options.with_as_of_timestamp(as_of)
            if read_optimized:
                options = options.with_hudi_option(READ_OPTIMIZED_OPTION, "true")
            with self.errors("creating a file group reader"):
                self._readers[key] = self.hudi.create_file_group_reader_with_options(options)
        return self._readers[key]

    def read(
        self,
        source: Split | FileSlice | Iterable[FileSlice] | InstantRef = None,
        columns: list[str] | None = None,
        filters: Any = None,
        mode: ReadingMode = ReadingMode.SNAPSHOT,
        *,
        end_instant: InstantRef = None,
    ) -> Iterator[pa.RecordBatch]:
        from storage.formats.hudi.read import read_table

        return read_table(self, source, columns, filters, mode, end_instant)
