"""The Delta adapter: ``DeltaAdapter`` opens a folder with a ``_delta_log`` as a ``DeltaSpecTable``.

Metadata comes from the log itself (``_log``), so listings stream and prune before building
objects; data is read with pyarrow (``_read``), deletion vectors and column mapping included. The
change data feed is read through deltalake's ``load_cdf``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from storage.formats.delta import _read
from storage.formats.delta._log import DeltaLog, LogSnapshot, Store
from storage.formats.delta._timeline import DeltaTimeline, commit_time
from storage.formats.delta._types import (
    DeltaSchema,
    SchemaError,
    millis_to_datetime,
    parse_partition_value,
    parse_stats,
    partition_path,
)
from storage.spec.errors import (
    CorruptTable,
    FilterError,
    InstantNotFound,
    InvalidRange,
    NotSupported,
    SpecError,
    UnsupportedFeature,
)
from storage.spec.expressions import (
    Expression,
    bind_filter,
    might_match_partition,
    might_match_stats,
    to_arrow,
)
from storage.spec.models import (
    ChangeKind,
    DataFile,
    FileChange,
    FileContent,
    FileSlice,
    Instant,
    PartitionDescriptor,
    PartitionField,
    PartitionSpec,
    ReadingMode,
    Split,
    TableDefinition,
    TableFormat,
    TableId,
    TableSummary,
)
from storage.spec.table import FileIndex, InstantRef, SpecTable, TableFormatAdapter

# Reader features this reader implements. Anything else (typeWidening, variantType, ...) is
# refused rather than read wrongly.
SUPPORTED_READER_FEATURES = frozenset(
    {"columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"}
)
MAX_READER_VERSION = 3
CDF_FIELDS = (
    pa.field("_change_type", pa.string()),
    pa.field("_commit_version", pa.int64()),
    pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC")),
)
CDF_COLUMNS = tuple(f.name for f in CDF_FIELDS)


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


class _State:
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
        self._states: dict[int, _State] = {}
        state = self._state(self._version)
        metadata = state.snapshot.metadata
        self._definition = TableDefinition(
            id=TableId(TableFormat.DELTA, self._store.uri(self._store.root)),
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
            self._timeline = DeltaTimeline(self._log, self._version)
        return self._timeline

    def file_index(self) -> DeltaFileIndex:
        return DeltaFileIndex(self)

    def summary(self) -> TableSummary:
        state = self._state(self._version)
        files = total_bytes = records = 0
        for add in self._log.live_adds(state.snapshot):
            files += 1
            total_bytes += int(add.get("size") or 0)
            stats = parse_stats(add.get("stats") or add.get("stats_parsed"), state.schema)
            rows = stats.record_count
            if rows is None:
                rows = self._footer_rows(add)
            deletion_vector = add.get("deletionVector") or {}
            records += rows - int(deletion_vector.get("cardinality") or 0)
            total_bytes += int(deletion_vector.get("sizeInBytes") or 0)  # counted like delete files
        info = self._log.commit_info(self._version) if self._version in self._log.commits else None
        return TableSummary(
            current_instant_id=self._version,
            file_count=files,
            total_bytes=total_bytes,
            record_count=records,
            instant_count=self._version - self._log.earliest + 1,
            last_updated=commit_time(info, self._log, self._version),
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
            return self._read_cdf(source, end_instant, columns, filters)
        if mode is ReadingMode.INCREMENTAL:
            start, end = self._range(source, end_instant)
            state = self._state(end)
            expr = self._bind(filters, state.schema)
            slices = self._added_rows_slices(start, end, state, expr)
            return self._read_slices(((s, None) for s in slices), state, columns, expr)
        if isinstance(source, Split):
            state = self._state(self._version)
            expr = self._bind(filters, state.schema)
            parts = ((p.file_slice, (p.start, p.length)) for p in source.parts)
            return self._read_slices(parts, state, columns, expr)
        if isinstance(source, FileSlice):
            state = self._state(self._version)
            expr = self._bind(filters, state.schema)
            return self._read_slices([(source, None)], state, columns, expr)
        if source is None or isinstance(source, Instant | int | str):
            version = self._resolve(source)
            state = self._state(version)
            expr = self._bind(filters, state.schema)
            slices = self._live_slices(state, expr)
            return self._read_slices(((s, None) for s in slices), state, columns, expr)
        state = self._state(self._version)
        expr = self._bind(filters, state.schema)
        return self._read_slices(((s, None) for s in source), state, columns, expr)

    def row_group_offsets(self, data_file) -> tuple[int, ...]:
        """From the footer: the Delta log records no row-group offsets."""
        import pyarrow.parquet as pq

        from storage.spec.splits import row_group_offsets

        path = self._store.fs_path(data_file.path)
        try:
            with self._store.fs.open_input_file(path) as handle:
                return tuple(row_group_offsets(pq.ParquetFile(handle).metadata))
        except (OSError, ValueError) as exc:
            raise CorruptTable(f"data file {data_file.path} cannot be read: {exc}") from exc

    # Spark and Celery ship tables to other processes: reopened there at the same version.
    def __getstate__(self) -> dict[str, Any]:
        return {"location": self.location_uri, "version": self._version}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(DeltaLog(Store(state["location"])), state["version"])

    # --- internals shared with the file index ----------------------------------------------------

    def _state(self, version: int) -> _State:
        if version not in self._states:
            snapshot = self._log.snapshot(version)
            where = f"Delta table {self.location_uri} at version {version}"
            check_protocol(snapshot.protocol, where)
            try:
                schema = DeltaSchema.from_metadata(snapshot.metadata)
            except SchemaError as exc:
                raise UnsupportedFeature(f"{where}: {exc}") from exc
            self._states[version] = _State(snapshot, schema)
        return self._states[version]

    @property
    def location_uri(self) -> str:
        return self._store.uri(self._store.root)

    def _resolve(self, instant: InstantRef) -> int:
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
        self._log.check_version(version)
        return version

    def _range(self, start: InstantRef, end: InstantRef) -> tuple[int, int]:
        """(exclusive start, inclusive end); start -1 means from the table's creation."""
        end_version = self._resolve(end)
        start_version = -1 if start is None else self._resolve(start)
        if start_version > end_version:
            raise InvalidRange(f"the range starts at version {start_version}, after its end {end_version}")
        return start_version, end_version

    @staticmethod
    def _bind(filters: Any, schema: DeltaSchema) -> Expression | None:
        if filters is None:
            return None
        return bind_filter(filters, schema.arrow)

    def _live_slices(self, state: _State, expr: Expression | None) -> Iterator[FileSlice]:
        for add in self._log.live_adds(state.snapshot):
            file_slice = self._slice(add, state, expr)
            if file_slice is not None:
                yield file_slice

    def _slice(self, action: Mapping[str, Any], state: _State, expr: Expression | None) -> FileSlice | None:
        """The file slice of an add (or remove) action, or None when ``expr`` rules it out:
        partition values first (cheap), statistics only for files that pass."""
        schema = state.schema
        raw_values = action.get("partitionValues")
        known = raw_values is not None or not schema.partition_columns
        # Remove actions of old writers carry no partition values: unknown, so never pruned.
        raw = {
            logical: (raw_values or {}).get(physical)
            for physical, logical in schema.logical_partition_keys().items()
            if known
        }
        try:
            values = {name: parse_partition_value(raw[name], schema.arrow.field(name).type) for name in raw}
        except (ValueError, ArithmeticError) as exc:
            raise CorruptTable(
                f"file {action.get('path')} of Delta table {self.location_uri} has an unreadable partition value: {exc}"
            ) from exc
        if expr is not None and known and state.spec.is_partitioned:
            if not might_match_partition(expr, state.spec, values):
                return None
        stats = parse_stats(action.get("stats") or action.get("stats_parsed"), schema)
        if expr is not None and not might_match_stats(
            expr,
            lower=stats.lower,
            upper=stats.upper,
            null_counts=stats.null_counts,
            record_count=stats.record_count,
        ):
            return None
        path = self._store.uri(self._store.data_path(action["path"]))
        descriptor = action.get("deletionVector")
        extra: dict[str, Any] = {
            "data_change": bool(action.get("dataChange", True)),
            "record_count_known": stats.record_count is not None,
        }
        if action.get("modificationTime") is not None:
            extra["modification_time"] = millis_to_datetime(action["modificationTime"])
        delete_files: tuple[DataFile, ...] = ()
        if descriptor:
            extra["deletion_vector"] = dict(descriptor)
            delete_files = (self._deletion_vector_file(descriptor, path),)
        base = DataFile(
            path=path,
            size_bytes=int(action.get("size") or 0),
            record_count=stats.record_count or 0,
            partition=values,
            lower_bounds=stats.lower,
            upper_bounds=stats.upper,
            null_counts=stats.null_counts,
            extra=extra,
        )
        partition = PartitionDescriptor(path=partition_path(schema.partition_columns, raw), values=values)
        return FileSlice(partition=partition, base_file=base, delete_files=delete_files)

    def _deletion_vector_file(self, descriptor: Mapping[str, Any], base_path: str) -> DataFile:
        from storage.formats.delta import _dv

        relative = _dv.relative_path(descriptor)
        if relative is None:
            path = f"{base_path}#inline-deletion-vector"
        elif descriptor["storageType"] == "p":
            path = relative
        else:
            path = self._store.uri(self._store.table_path(relative))
        return DataFile(
            path=path,
            size_bytes=int(descriptor.get("sizeInBytes") or 0),
            record_count=int(descriptor.get("cardinality") or 0),
            content=FileContent.DELETION_VECTOR,
            file_format="roaring-bitmap-array",
            extra={"deletion_vector": dict(descriptor)},
        )

    def _footer_rows(self, add: Mapping[str, Any]) -> int:
        import pyarrow.parquet as pq

        path = self._store.data_path(add["path"])
        try:
            with self._store.fs.open_input_file(path) as handle:
                return pq.ParquetFile(handle).metadata.num_rows
        except (OSError, ValueError) as exc:
            raise CorruptTable(f"data file {self._store.uri(path)} cannot be read: {exc}") from exc

    def _changes(self, start: int, end: int) -> Iterator[tuple[int, ChangeKind, Mapping[str, Any], bool]]:
        """(version, kind, action, from_commit) for the adds and removes of commits (start, end].

        From the table's creation (``start`` -1) on a log cleaned up below a checkpoint, the
        files live at the checkpoint come first, as added at the checkpoint's version.
        """
        first = start + 1
        if first < self._log.earliest:
            for add in self._log.live_adds(self._log.snapshot(self._log.earliest)):
                yield self._log.earliest, ChangeKind.ADDED, add, False
            first = self._log.earliest + 1
        for version in range(first, end + 1):
            for action in self._log.read_commit(version):
                if "add" in action:
                    yield version, ChangeKind.ADDED, action["add"], True
                elif "remove" in action:
                    yield version, ChangeKind.REMOVED, action["remove"], True

    def _added_rows_slices(
        self, start: int, end: int, state: _State, expr: Expression | None
    ) -> Iterator[FileSlice]:
        """Slices of the files that data-changing commits in (start, end] added and that are
        still live at ``end``, read with their deletion vectors at ``end`` (as the Iceberg
        adapter does): rows later deleted are not reported, rows an overwrite or copy-on-write
        delete rewrote into a new file are. An add re-adding a file its own commit removes only
        attaches a deletion vector: it adds no rows. Memory holds the paths added in the range.
        """
        first = start + 1
        added: set[str] | None = set()
        if first < self._log.earliest:
            added = None  # from the creation of a cleaned-up log: everything live was added
        else:
            for version in range(first, end + 1):
                removed: set[str] = set()
                adds: list[tuple[str, bool]] = []
                for action in self._log.read_commit(version):
                    if "add" in action and action["add"].get("dataChange", True):
                        adds.append((action["add"]["path"], bool(action["add"].get("deletionVector"))))
                    elif "remove" in action:
                        removed.add(action["remove"]["path"])
                added.update(path for path, has_vector in adds if not (has_vector and path in removed))
        if added is not None and not added:
            return
        for action in self._log.live_adds(state.snapshot):
            if added is None or action["path"] in added:
                file_slice = self._slice(action, state, expr)
                if file_slice is not None:
                    yield file_slice

    def _read_slices(
        self,
        slices: Iterable[tuple[FileSlice, tuple[int, int] | None]],
        state: _State,
        columns: list[str] | None,
        expr: Expression | None,
    ) -> Iterator[pa.RecordBatch]:
        output = self._columns(columns, state.schema)
        row_filter = None
        wanted = list(output)
        if expr is not None:
            row_filter = to_arrow(expr)
            for name in sorted(expr.columns()):
                top = name if name in state.schema.arrow.names else name.split(".", 1)[0]
                if top not in wanted:
                    wanted.append(top)
        return self._iter_slices(slices, state, wanted, output, row_filter)

    def _iter_slices(self, slices, state, wanted, output, row_filter) -> Iterator[pa.RecordBatch]:
        for file_slice, byte_range in slices:
            yield from _read.read_slice(
                self._store,
                state.schema,
                file_slice,
                wanted,
                row_filter=row_filter,
                output=output,
                byte_range=byte_range,
            )

    @staticmethod
    def _columns(columns: list[str] | None, schema: DeltaSchema) -> list[str]:
        if columns is None:
            return list(schema.arrow.names)
        unknown = [c for c in columns if c not in schema.arrow.names]
        if unknown:
            raise FilterError(
                f"unknown column {unknown[0]!r}; the table has {', '.join(schema.arrow.names)}",
                token=unknown[0],
            )
        return list(columns)

    def _read_cdf(self, start: InstantRef, end: InstantRef, columns, filters) -> Iterator[pa.RecordBatch]:
        start_version, end_version = self._range(start, end)
        state = self._state(end_version)
        if (state.snapshot.metadata.get("configuration") or {}).get(
            "delta.enableChangeDataFeed", ""
        ).lower() != "true":
            raise NotSupported(
                "delta", f"the cdc reading mode on {self.location_uri}: its change data feed is off"
            )
        expr = self._bind(filters, state.schema)
        output = self._columns(columns, state.schema) + list(CDF_COLUMNS)
        if start_version + 1 > end_version:
            return iter(())
        return self._cdf_batches(start_version + 1, end_version, state.schema, output, expr)

    def _cdf_batches(
        self, first: int, last: int, schema: DeltaSchema, output: list[str], expr
    ) -> Iterator[pa.RecordBatch]:
        from deltalake import DeltaTable

        # deltalake answers with string views and a naive millisecond commit time: cast to the
        # table's types and the spec's aware UTC timestamps, as snapshot reads give them.
        target = pa.schema([*schema.arrow, *CDF_FIELDS])
        row_filter = to_arrow(expr) if expr is not None else None
        try:
            table = DeltaTable(self.location_uri, version=self._version)
            reader = pa.RecordBatchReader.from_stream(
                table.load_cdf(starting_version=first, ending_version=last)
            )
            for raw in reader:
                batch = pa.RecordBatch.from_arrays(
                    [
                        raw.column(f.name).cast(f.type)
                        if f.name in raw.schema.names
                        else pa.nulls(raw.num_rows, f.type)
                        for f in target
                    ],
                    schema=target,
                )
                if row_filter is not None:
                    batch = batch.filter(row_filter)
                if batch.num_rows:
                    yield batch.select(output)
        except SpecError:
            raise
        except Exception as exc:  # deltalake raises its own error types for log and feed problems
            raise CorruptTable(f"change data feed of {self.location_uri} cannot be read: {exc}") from exc


class DeltaFileIndex(FileIndex):
    def __init__(self, table: DeltaSpecTable) -> None:
        self._table = table

    def list_files_at(self, instant: InstantRef = None, filters: Any = None) -> Iterator[FileSlice]:
        # Resolve and bind now so a bad instant or filter fails at the call, not at first next().
        table = self._table
        state = table._state(table._resolve(instant))
        return table._live_slices(state, table._bind(filters, state.schema))

    def list_files_between(
        self, start_exclusive: InstantRef, end_inclusive: InstantRef, filters: Any = None
    ) -> Iterator[FileChange]:
        table = self._table
        start, end = table._range(start_exclusive, end_inclusive)
        state = table._state(end)
        expr = table._bind(filters, state.schema)
        return self._changes(start, end, state, expr)

    def _changes(self, start: int, end: int, state: _State, expr) -> Iterator[FileChange]:
        for version, kind, action, _ in self._table._changes(start, end):
            file_slice = self._table._slice(action, state, expr)
            if file_slice is not None:
                yield FileChange(kind=kind, file_slice=file_slice, instant_id=version)


class DeltaAdapter(TableFormatAdapter):
    """Registered as ``delta``: a folder (or URI) holding a ``_delta_log``."""

    name = "delta"

    @classmethod
    def detect(cls, location: str) -> bool:
        try:
            store = Store(location)
            return store.exists(store.table_path("_delta_log"), directory=True)
        except Exception:  # detection must answer, never raise: any failure means "not Delta"
            return False

    @classmethod
    def open(
        cls, location_or_identifier: str, catalog: Any = None, *, version: int | None = None
    ) -> DeltaSpecTable:
        """Open the table as of its latest version, or as of ``version`` (time travel, e.g. to a
        version older than a protocol upgrade this reader does not support)."""
        try:
            log = DeltaLog(Store(location_or_identifier))
        except SpecError:
            raise
        except (OSError, ValueError) as exc:
            raise CorruptTable(f"Delta table {location_or_identifier} cannot be listed: {exc}") from exc
        if version is not None:
            log.check_version(int(version))
        return DeltaSpecTable(log, version)


__all__ = ["DeltaAdapter", "DeltaFileIndex", "DeltaSpecTable", "DeltaTimeline", "check_protocol"]
