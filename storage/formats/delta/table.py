"""``DeltaSpecTable``: a Delta table as of one version, its timeline, summary and hooks.

Metadata comes from the log itself (``_log``), so listings (``index``) stream and prune before
building objects; data is read with pyarrow (``read``), deletion vectors and column mapping
included. The change data feed is read through deltalake's ``load_cdf``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

import pyarrow as pa

from storage.formats.delta._evolve import (
    READ_TIME_FEATURES,
    TYPE_WIDENING_FEATURES,
    VARIANT_FEATURES,
    has_variant,
)
from storage.formats.delta._log import DeltaLog, LogSnapshot, Store
from storage.formats.delta._types import DeltaSchema, SchemaError, millis_to_datetime, parse_stats
from storage.formats.delta.index import DeltaFileIndex
from storage.formats.delta.read import positional_deletes, read_cdf, read_slices
from storage.io.stores import StoreOptions
from storage.spec.errors import CorruptTable, InstantNotFound, InvalidRange, UnsupportedFeature
from storage.spec.expressions import Expression, bind_filter
from storage.spec.models import (
    DataFile,
    FileSlice,
    Instant,
    PartitionField,
    PartitionSpec,
    ReadingMode,
    Split,
    TableDefinition,
    TableFormat,
    TableId,
    TableSummary,
)
from storage.spec.table import InstantRef, SpecTable, Timeline

# Reader features this reader implements. Anything else is refused rather than read wrongly;
# READ_TIME_FEATURES open (timeline, listings, splits) and are refused when an affected column is
# read, naming it.
SUPPORTED_READER_FEATURES = (
    frozenset({"columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"})
    | TYPE_WIDENING_FEATURES
    | VARIANT_FEATURES
    | READ_TIME_FEATURES
)
MAX_READER_VERSION = 3
_APPEND_MODES = {"append", "errorifexists", "ignore", ""}


def check_protocol(protocol: Mapping[str, Any], where: str) -> None:
    """Refuse a table whose protocol needs a reader capability this reader lacks."""
    version = int(protocol.get("minReaderVersion", 1))
    if version > MAX_READER_VERSION:
        raise UnsupportedFeature(
            f"{where} needs Delta reader version {version}: unsupported feature "
            f"(this reader implements reader versions 1 to {MAX_READER_VERSION})"
        )
    if version == MAX_READER_VERSION:
        missing = sorted(set(protocol.get("readerFeatures") or ()) - SUPPORTED_READER_FEATURES)
        if missing:
            names = ", ".join(missing)
            raise UnsupportedFeature(
                f"{where} needs the Delta reader feature {names}: unsupported feature "
                f"(this reader supports {', '.join(sorted(SUPPORTED_READER_FEATURES))})"
            )


# --- timeline ------------------------------------------------------------------------------------


class DeltaTimeline(Timeline):
    """Versions from the commits in ``_delta_log``, oldest first; below a checkpoint whose older
    commits were cleaned up, the timeline starts at the checkpoint."""

    def __init__(self, log: DeltaLog, latest: int) -> None:
        self._log = log
        self._latest = latest
        self._instants: list[Instant] | None = None

    def instants(self) -> list[Instant]:
        if self._instants is None:
            self._instants = [
                self._instant(v, i) for i, v in enumerate(range(self._log.earliest, self._latest + 1))
            ]
        return self._instants

    def get(self, instant_id: Instant | int | str) -> Instant:
        if isinstance(instant_id, Instant):
            return instant_id
        try:
            version = int(instant_id)
        except (TypeError, ValueError):
            raise InstantNotFound(
                f"{instant_id!r} is not a Delta version (versions are whole numbers)"
            ) from None
        if not self._log.earliest <= version <= self._latest:
            raise InstantNotFound(f"no version {version} in this table's timeline")
        return self.instants()[version - self._log.earliest]

    def _instant(self, version: int, sequence: int) -> Instant:
        info = self._log.commit_info(version) if version in self._log.commits else None
        info = info or {}
        summary: dict[str, Any] = {}
        for key in ("operationParameters", "operationMetrics"):
            for name, value in (info.get(key) or {}).items():
                summary[name] = value if isinstance(value, str | int | float | bool) else json.dumps(value)
        if info.get("operation"):
            summary["delta.operation"] = info["operation"]
        if info.get("engineInfo"):
            summary["engineInfo"] = info["engineInfo"]
        return Instant(
            id=version,
            timestamp=commit_time(info, self._log, version),
            operation=_operation(info)
            if info
            else ("checkpoint" if version not in self._log.commits else "unknown"),
            parent_id=version - 1 if version > self._log.earliest else None,
            summary=summary,
            sequence=sequence,
        )


def _operation(info: Mapping[str, Any]) -> str:
    """Delta's operation name in the spec's vocabulary: a WRITE is an append or an overwrite."""
    operation = str(info.get("operation") or "unknown")
    mode = str((info.get("operationParameters") or {}).get("mode") or "").lower()
    if operation.upper() == "WRITE":
        return "append" if mode in _APPEND_MODES else "overwrite"
    return operation.lower().replace(" ", "_")


def commit_time(info: Mapping[str, Any] | None, log: DeltaLog, version: int) -> dt.datetime:
    info = info or {}
    millis = info.get("inCommitTimestamp") or info.get("timestamp")
    if isinstance(millis, int) and not isinstance(millis, bool):
        return millis_to_datetime(millis)
    # Without a commit timestamp Delta uses the commit file's modification time.
    file_info = log.commits.get(version)
    if file_info is None and version in log.checkpoints:
        file_info = log.store.fs.get_file_info(log.checkpoints[version].paths[0])
    mtime = getattr(file_info, "mtime", None)
    if mtime is None:
        return dt.datetime.fromtimestamp(0, dt.UTC)
    return mtime if mtime.tzinfo else mtime.replace(tzinfo=dt.UTC)


# --- the table -----------------------------------------------------------------------------------


class VersionState:
    """What reading one version needs: its log snapshot and its schema."""

    __slots__ = ("snapshot", "schema", "spec")

    def __init__(self, snapshot: LogSnapshot, schema: DeltaSchema) -> None:
        self.snapshot = snapshot
        self.schema = schema
        self.spec = PartitionSpec(
            tuple(PartitionField(name=c, source_column=c) for c in schema.partition_columns)
        )


class DeltaSpecTable(SpecTable):
    """A Delta table as of one version (the latest at open time unless opened at a version)."""

    format = TableFormat.DELTA
    supported_modes = frozenset({ReadingMode.SNAPSHOT, ReadingMode.INCREMENTAL, ReadingMode.CDC})

    def __init__(self, log: DeltaLog, version: int | None = None) -> None:
        self._log = log
        self._store = log.store
        self._version = log.latest if version is None else version
        self._states: dict[int, VersionState] = {}
        state = self.state(self._version)
        metadata = state.snapshot.metadata
        self._definition = TableDefinition(
            id=TableId(TableFormat.DELTA, self.store.uri(self.store.root)),
            schema=state.schema.arrow,
            partition_spec=state.spec,
            properties={str(k): str(v) for k, v in (metadata.get("configuration") or {}).items()},
        )
        self._timeline: DeltaTimeline | None = None

    # --- SpecTable ------------------------------------------------------------------------------

    @property
    def definition(self) -> TableDefinition:
        return self._definition

    @property
    def version(self) -> int:
        """The version this table object reads by default."""
        return self._version

    def timeline(self) -> DeltaTimeline:
        if self._timeline is None:
            self._timeline = DeltaTimeline(self.log, self._version)
        return self._timeline

    def file_index(self) -> DeltaFileIndex:
        return DeltaFileIndex(self)

    def summary(self) -> TableSummary:
        state = self.state(self._version)
        files = total_bytes = records = 0
        for add in self.log.live_adds(state.snapshot):
            files += 1
            total_bytes += int(add.get("size") or 0)
            stats = parse_stats(add.get("stats") or add.get("stats_parsed"), state.schema)
            rows = stats.record_count
            if rows is None:
                rows = self._footer_rows(add)
            deletion_vector = add.get("deletionVector") or {}
            records += rows - int(deletion_vector.get("cardinality") or 0)
            total_bytes += int(deletion_vector.get("sizeInBytes") or 0)  # counted like delete files
        info = self.log.commit_info(self._version) if self._version in self.log.commits else None
        return TableSummary(
            current_instant_id=self._version,
            file_count=files,
            total_bytes=total_bytes,
            record_count=records,
            instant_count=self._version - self.log.earliest + 1,
            last_updated=commit_time(info, self.log, self._version),
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
        if mode is ReadingMode.CDC:
            return read_cdf(self, cast(InstantRef, source), end_instant, columns, filters)
        index = self.file_index()
        parts: Iterable[tuple[FileSlice, tuple[int, int] | None]]
        if mode is ReadingMode.INCREMENTAL:
            start, end = self.version_range(cast(InstantRef, source), end_instant)
            state = self.state(end)
            expr = self.bind(filters, state.schema)
            parts = ((s, None) for s in index.added_rows_slices(start, end, state, expr))
        elif isinstance(source, Split):
            state = self.state(self.slice_version(p.file_slice for p in source.parts))
            expr = self.bind(filters, state.schema)
            parts = ((p.file_slice, (p.start, p.length)) for p in source.parts)
        elif isinstance(source, FileSlice):
            state = self.state(self.slice_version([source]))
            expr = self.bind(filters, state.schema)
            parts = [(source, None)]
        elif source is None or isinstance(source, Instant | int | str):
            state = self.state(self.resolve(source))
            expr = self.bind(filters, state.schema)
            parts = ((s, None) for s in index.live_slices(state, expr))
        else:
            slices = iter(source)
            first = next(slices, None)
            state = self.state(self.slice_version([] if first is None else [first]))
            expr = self.bind(filters, state.schema)
            rest = slices if first is None else itertools.chain([first], slices)
            parts = ((s, None) for s in rest)
        return read_slices(self.store, parts, state.schema, columns, expr)

    def row_group_offsets(self, data_file: DataFile) -> tuple[int, ...]:
        """From the footer: the Delta log records no row-group offsets."""
        import pyarrow.parquet as pq

        from storage.spec.splits import row_group_offsets

        path = self.store.fs_path(data_file.path)
        try:
            with self.store.fs.open_input_file(path) as handle:
                return tuple(row_group_offsets(pq.ParquetFile(handle).metadata))
        except (OSError, ValueError) as exc:
            raise CorruptTable(f"data file {data_file.path} cannot be read: {exc}") from exc

    def positional_deletes(self, file_slices: Iterable[FileSlice]) -> dict[str, Any]:
        """Deletion vectors, as row positions by data file path."""
        return positional_deletes(self.store, file_slices)

    def plain_parquet_layout(self) -> bool:
        """Files store the table's columns under their names and types unless column mapping or
        type widening is on (or was: a field records a type change), or a column is a variant;
        partition columns live in the paths, not the files."""
        return self.parquet_partition_columns() == ()

    def parquet_partition_columns(self) -> tuple[str, ...] | None:
        """The partition columns (in the log's partition values, not in the files) when the
        files store every other column under its name and type (see ``plain_parquet_layout``)."""
        properties = self.definition.properties
        schema = self.state(self._version).schema
        if schema.mapped:
            return None
        if str(properties.get("delta.enableTypeWidening", "false")).lower() == "true":
            return None
        if schema.type_widened or any(has_variant(f["type"]) for f in schema.fields):
            return None
        return tuple(schema.partition_columns)

    def schema_at(self, instant: InstantRef = None) -> pa.Schema:
        """The schema of the metadata at ``instant`` (this table's version when None): what
        ``read(instant)`` returns, with the columns of that version under their names then."""
        return self.state(self.resolve(instant)).schema.arrow

    def slice_version(self, slices: Iterable[FileSlice]) -> int:
        """The version file slices were listed at (``DataFile.extra["delta_version"]``), whose
        schema reads them; this table's version for slices made elsewhere."""
        for file_slice in slices:
            base = file_slice.base_file
            version = None if base is None else base.extra.get("delta_version")
            if isinstance(version, int) and not isinstance(version, bool):
                return version
        return self._version

    # Spark and Celery ship tables to other processes: reopened there at the same version.
    def __getstate__(self) -> dict[str, Any]:
        storage = self.log.store.storage
        return {
            "location": self.location_uri,
            "version": self._version,
            "storage": storage.to_json() if storage is not None else "",
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        storage = StoreOptions.from_json(state["storage"]) if state.get("storage") else None
        DeltaSpecTable.__init__(self, DeltaLog(Store(state["location"], storage)), state["version"])

    # --- shared with the file index and the reader ------------------------------------------------

    def state(self, version: int) -> VersionState:
        """The log snapshot and schema of ``version`` (protocol checked), kept once read."""
        if version not in self._states:
            snapshot = self.log.snapshot(version)
            where = f"Delta table {self.location_uri} at version {version}"
            check_protocol(snapshot.protocol, where)
            try:
                schema = DeltaSchema.from_metadata(snapshot.metadata, snapshot.protocol)
            except SchemaError as exc:
                raise UnsupportedFeature(f"{where}: {exc}") from exc
            self._states[version] = VersionState(snapshot, schema)
        return self._states[version]

    @property
    def log(self) -> DeltaLog:
        return self._log

    @property
    def store(self) -> Store:
        return self._store

    @property
    def location_uri(self) -> str:
        return self.store.uri(self.store.root)

    def resolve(self, instant: InstantRef) -> int:
        """The version of an instant reference (this table's version when None)."""
        if instant is None:
            return self._version
        value = instant.id if isinstance(instant, Instant) else instant
        if isinstance(value, bool):
            raise InstantNotFound(f"{value!r} is not a Delta version")
        try:
            version = int(value)
        except (TypeError, ValueError):
            raise InstantNotFound(f"{value!r} is not a Delta version (versions are whole numbers)") from None
        if version > self._version:
            raise InstantNotFound(
                f"Delta table {self.location_uri} has no version {version} (latest is {self._version})"
            )
        self.log.check_version(version)
        return version

    def version_range(self, start: InstantRef, end: InstantRef) -> tuple[int, int]:
        """(exclusive start, inclusive end); start -1 means from the table's creation."""
        end_version = self.resolve(end)
        start_version = -1 if start is None else self.resolve(start)
        if start_version > end_version:
            raise InvalidRange(f"the range starts at version {start_version}, after its end {end_version}")
        return start_version, end_version

    @staticmethod
    def bind(filters: Any, schema: DeltaSchema) -> Expression | None:
        """``filters`` bound to the schema of one version; None for no filter."""
        return bind_filter(filters, schema.arrow)

    def _footer_rows(self, add: Mapping[str, Any]) -> int:
        import pyarrow.parquet as pq

        path = self.store.data_path(add["path"])
        try:
            with self.store.fs.open_input_file(path) as handle:
                return pq.ParquetFile(handle).metadata.num_rows
        except (OSError, ValueError) as exc:
            raise CorruptTable(f"data file {self.store.uri(path)} cannot be read: {exc}") from exc


__all__ = ["DeltaSpecTable", "DeltaTimeline", "VersionState", "check_protocol", "commit_time"]
