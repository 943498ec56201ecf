"""Our own Delta commit writer: the remove + add actions of a rewrite, written as the next
``_delta_log/NNNNNNNNNNNNNNNNNNNN.json`` with the put-if-absent semantics every Delta writer uses.

Why our own: deltalake's ``RemoveAction`` cannot name a deletion vector, and a remove must carry
the ``deletionVector`` of the add it removes (PROTOCOL.md, "Add File and Remove File": the file's
identity is its path *and* its vector), else the old file stays live next to its rewritten copy;
and deltalake commits a transaction as ``WRITE``, where a compaction is an ``OPTIMIZE`` (Delta
Spark, delta-rs) and a purge of deletion vectors a ``REORG`` (Delta Spark's ``REORG TABLE ...
APPLY (PURGE)``). Every action here has ``dataChange: false``: no row changes, so change-feed and
streaming readers skip the commit.

Put-if-absent (``storage.io.put_if_absent``): on a file system the commit is written to a temporary
file in the log folder, flushed, then hard-linked to its final name, which fails atomically when
the name exists; on S3 it is one ``PUT`` with ``If-None-Match: *`` through object_store (what
deltalake's own commit sends). So a version another writer took is never overwritten and a reader
never sees half a commit. Other object stores are refused (``CommitUnsupported``).

Conflicts: before each try the latest version is read. The commit goes to latest + 1 only if
every file it removes is still live there with the same deletion vector, and the table's protocol
and metadata are those the files were written for; else ``RewriteConflict`` (the process plans
again). Losing the race for latest + 1 (another writer created it after the check) checks again at
the new latest, ``MAX_RACES`` times at most.

Writer features: a table whose protocol needs a writer feature this writer does not implement
(row tracking, Iceberg compatibility, clustering...) is refused with its name (``CommitRefused``).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from storage.formats.delta import unique_id
from storage.io import PutUnsupported, StoreOptions, filesystem, put_if_absent
from storage.io.guard import PathGuard
from storage.spec.errors import RewriteConflict

logger = logging.getLogger(__name__)

MAX_RACES = 10
MAX_WRITER_VERSION = 7
#: Writer features whose rules a rewrite (same rows, new files, dataChange false) keeps.
SUPPORTED_WRITER_FEATURES = frozenset(
    {
        "appendOnly",  # removes with dataChange false are allowed
        "invariants",
        "checkConstraints",
        "changeDataFeed",  # no data change: no change files
        "generatedColumns",
        "allowColumnDefaults",
        "identityColumns",
        "columnMapping",  # files written with physical names and field ids
        "deletionVectors",  # removes carry the vector of the add they remove
        "timestampNtz",
        "domainMetadata",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "inCommitTimestamp",  # commitInfo first, with a timestamp after the previous one
        "typeWidening",  # files are written with the current types
        "typeWidening-preview",
        "variantType",  # tables holding a variant column are refused by the rewrite
        "variantType-preview",
    }
)


class CommitRefused(Exception):
    """The table needs something this commit writer does not do; nothing was changed."""


class CommitUnsupported(CommitRefused):
    """No put-if-absent primitive for this location (object stores)."""


def open_version(location: str, version: int | None = None, storage: StoreOptions | None = None) -> Any:
    """The Delta table through the spec API (its log read afresh) at ``version`` or the latest."""
    from storage.formats.delta import DeltaAdapter

    return DeltaAdapter.open(location, storage=storage, version=version)


def table_shape(snapshot: Any) -> tuple:
    """What files are written for: protocol, schema, partitioning and configuration (spelt the
    same whether read from a commit or a checkpoint)."""
    protocol, metadata = snapshot.protocol, snapshot.metadata
    return (
        int(protocol.get("minReaderVersion", 1)),
        int(protocol.get("minWriterVersion", 1)),
        tuple(sorted(protocol.get("readerFeatures") or ())),
        tuple(sorted(protocol.get("writerFeatures") or ())),
        metadata.get("id"),
        json.loads(metadata.get("schemaString") or "{}"),
        tuple(metadata.get("partitionColumns") or ()),
        sorted((metadata.get("configuration") or {}).items()),
    )


def engine_info() -> str:
    try:
        version = importlib.metadata.version("lakewarden")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return f"Lakewarden/{version}"


def check_writable(protocol: Mapping[str, Any], where: str) -> None:
    """Refuse a protocol whose writer features this writer does not implement."""
    version = int(protocol.get("minWriterVersion", 1))
    if version > MAX_WRITER_VERSION:
        raise CommitRefused(
            f"{where} needs Delta writer version {version}; Lakewarden writes versions up to "
            f"{MAX_WRITER_VERSION}: the table is left as it is"
        )
    if version == MAX_WRITER_VERSION:
        missing = sorted(set(protocol.get("writerFeatures") or ()) - SUPPORTED_WRITER_FEATURES)
        if missing:
            raise CommitRefused(
                f"{where} needs the Delta writer feature {', '.join(missing)}, which Lakewarden's "
                "commit writer does not implement: the table is left as it is"
            )


# --- actions -------------------------------------------------------------------------------------

#: Fields of an add that its remove repeats (the file's identity, size, partition, vector...).
_REMOVE_FIELDS = (
    "path",
    "partitionValues",
    "size",
    "tags",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
)


def remove_action(add: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
    """The remove of a live add: same path *and* deletion vector (the file's identity)."""
    remove: dict[str, Any] = {
        key: add[key] for key in _REMOVE_FIELDS if add.get(key) is not None and add.get(key) != {}
    }
    remove["partitionValues"] = dict(add.get("partitionValues") or {})
    remove.update(deletionTimestamp=now_ms, dataChange=False, extendedFileMetadata=True)
    return {"remove": remove}


def add_action(
    path: str, size: int, partition_values: Mapping[str, str | None], stats: str, now_ms: int
) -> dict[str, Any]:
    return {
        "add": {
            "path": path,
            "partitionValues": dict(partition_values),
            "size": int(size),
            "modificationTime": now_ms,
            "dataChange": False,
            "stats": stats,
        }
    }


def file_key(uri: str, add: Mapping[str, Any]) -> tuple[str, str | None]:
    """A live file's identity: its location (as the spec API spells it) and deletion vector."""
    return uri, unique_id(add.get("deletionVector"))


def live_files(spec: Any) -> dict[tuple[str, str | None], dict[str, Any]]:
    """The add actions live at the spec table's version, by ``file_key``."""
    store = spec.store
    return {
        file_key(store.uri(store.data_path(add["path"])), add): add
        for add in spec.log.live_adds(spec.state(spec.version).snapshot)
    }


# --- statistics ----------------------------------------------------------------------------------


def _stat_value(value: Any, arrow_type: pa.DataType) -> Any:
    """A footer min/max as a Delta stats JSON value, or None to leave it out (unknown is safe;
    timestamps, floats and decimals are left out rather than risk a rounded bound)."""
    if pa.types.is_integer(arrow_type) and isinstance(value, int):
        return value
    if (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)) and isinstance(value, str):
        return value
    if pa.types.is_date32(arrow_type) and isinstance(value, dt.date):
        return value.isoformat()
    return None


def _leaves(schema: pa.Schema) -> dict[str, pa.DataType]:
    """Dotted leaf names (as the file names them) of the columns that can carry statistics."""
    leaves: dict[str, pa.DataType] = {}

    def collect(prefix: str, fields: Any) -> None:
        for field_ in fields:
            name = f"{prefix}{field_.name}"
            if pa.types.is_struct(field_.type):
                collect(f"{name}.", list(field_.type))
            elif not (
                pa.types.is_list(field_.type)
                or pa.types.is_map(field_.type)
                or pa.types.is_large_list(field_.type)
            ):
                leaves[name] = field_.type

    collect("", schema)
    return leaves


@dataclass
class _Bounds:
    minimum: dict[str, Any] = field(default_factory=dict)
    maximum: dict[str, Any] = field(default_factory=dict)
    nulls: dict[str, int] = field(default_factory=dict)
    complete: dict[str, bool] = field(default_factory=dict)

    def take(self, name: str, stats: Any, rows: int, arrow_type: pa.DataType) -> None:
        if stats is None or not stats.has_null_count:
            self.complete[name] = False
            return
        self.nulls[name] = self.nulls.get(name, 0) + stats.null_count
        if not stats.has_min_max:
            if stats.null_count < rows:
                self.complete[name] = False
            return
        low, high = _stat_value(stats.min, arrow_type), _stat_value(stats.max, arrow_type)
        if low is None or high is None:
            self.complete[name] = False
            return
        self.minimum[name] = low if name not in self.minimum else min(self.minimum[name], low)
        self.maximum[name] = high if name not in self.maximum else max(self.maximum[name], high)


def delta_stats(path: str, schema: pa.Schema, storage: StoreOptions | None = None) -> str:
    """Delta add-action statistics from a parquet footer (a ranged read on an object store),
    keyed by the names the file uses (physical names under column mapping)."""
    fs, fs_path = filesystem(path, storage)
    with fs.open_input_file(fs_path) as stream:
        metadata = pq.read_metadata(stream)
    leaves = _leaves(schema)
    bounds = _Bounds()
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for column in range(row_group.num_columns):
            chunk = row_group.column(column)
            if chunk.path_in_schema in leaves:
                name = chunk.path_in_schema
                bounds.take(name, chunk.statistics, row_group.num_rows, leaves[name])
    result: dict[str, Any] = {
        "numRecords": metadata.num_rows,
        "minValues": {},
        "maxValues": {},
        "nullCount": {},
    }
    for name in leaves:
        if name in bounds.nulls and bounds.complete.get(name, True):
            _put(result["nullCount"], name, bounds.nulls[name])
            if name in bounds.minimum:
                _put(result["minValues"], name, bounds.minimum[name])
                _put(result["maxValues"], name, bounds.maximum[name])
    return json.dumps(result)


def _put(target: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for parent in parents:
        target = target.setdefault(parent, {})
    target[leaf] = value


# --- committing ----------------------------------------------------------------------------------


@dataclass
class RewriteCommit:
    """What a rewrite commits: the files it removes (by ``file_key``, listed at the version the
    plan read, ``read_spec``), the add actions of its new files, and its commitInfo."""

    read_spec: Any
    removed: list[tuple[str, str | None]]
    adds: list[dict[str, Any]]
    operation: str = "OPTIMIZE"
    parameters: dict[str, str] = field(default_factory=dict)
    custom: dict[str, str] = field(default_factory=dict)

    def commit_info(self, read_version: int, removes: list[dict], previous_ict: int | None) -> dict:
        now_ms = int(time.time() * 1000)
        info: dict[str, Any] = {"timestamp": now_ms}
        if previous_ict is not None:
            info["inCommitTimestamp"] = max(now_ms, previous_ict + 1)
        removed_vectors = sum(1 for r in removes if r["remove"].get("deletionVector"))
        info.update(
            operation=self.operation,
            operationParameters=dict(self.parameters),
            readVersion=read_version,
            isolationLevel="SnapshotIsolation",
            isBlindAppend=False,
            operationMetrics={
                "numRemovedFiles": str(len(removes)),
                "numAddedFiles": str(len(self.adds)),
                "numRemovedBytes": str(sum(int(r["remove"].get("size") or 0) for r in removes)),
                "numAddedBytes": str(sum(int(a["add"]["size"]) for a in self.adds)),
                "numDeletionVectorsRemoved": str(removed_vectors),
            },
            engineInfo=engine_info(),
            txnId=str(uuid.uuid4()),
        )
        info.update(self.custom)
        return {"commitInfo": info}


def commit(
    location: str, request: RewriteCommit, storage: StoreOptions | None = None, guard: PathGuard | None = None
) -> int:
    """Commit ``request`` at the next free version after checking it against the latest one
    (module docstring); returns the version. ``RewriteConflict`` when the table changed in a way
    the rewrite cannot survive, ``CommitRefused`` when this writer cannot commit to it; with a
    ``guard`` (a running process's), ``OutsideTable`` when the commit file is a place it refuses
    (a ``_delta_log`` that is a link out of the table, say), before anything is written."""
    for _ in range(MAX_RACES):
        latest = open_version(location, storage=storage)
        actions = _checked_actions(latest, request)
        content = "\n".join(json.dumps(a, separators=(",", ":")) for a in actions).encode()
        if put_commit(latest.store, latest.version + 1, content, guard):
            return latest.version + 1
        logger.info(
            "commit of %s: version %s was taken meanwhile; checking again", location, latest.version + 1
        )
    raise RewriteConflict(f"other writers took the next version {MAX_RACES} times in a row")


def _checked_actions(latest: Any, request: RewriteCommit) -> list[dict[str, Any]]:
    """commitInfo, removes and adds for a commit after ``latest``; raises when they conflict."""
    where = f"Delta table {latest.location_uri} at version {latest.version}"
    planned = request.read_spec.state(request.read_spec.version).snapshot
    now = latest.state(latest.version).snapshot
    check_writable(now.protocol, where)
    if table_shape(now) != table_shape(planned):
        raise RewriteConflict(
            f"the table's protocol or metadata changed after version {request.read_spec.version}"
        )
    live = live_files(latest)
    by_location = {uri: key for (uri, key) in live}
    now_ms = int(time.time() * 1000)
    removes = []
    for key in request.removed:
        add = live.get(key)
        if add is None:
            if key[0] in by_location:
                raise RewriteConflict(f"{key[0]} got a new deletion vector")
            raise RewriteConflict(f"{key[0]} is no longer live")
        removes.append(remove_action(add, now_ms))
    previous_ict = None
    if (now.metadata.get("configuration") or {}).get("delta.enableInCommitTimestamps", "") == "true":
        info = latest.log.commit_info(latest.version) if latest.version in latest.log.commits else None
        previous_ict = int((info or {}).get("inCommitTimestamp") or 0)
    info = request.commit_info(latest.version, removes, previous_ict)
    return [info, *removes, *request.adds]


def put_commit(store: Any, version: int, content: bytes, guard: PathGuard | None = None) -> bool:
    """Create ``_delta_log/<version>.json`` with ``content`` unless it exists (then False), through
    ``storage.io.put_if_absent``; ``CommitUnsupported`` where the store has no put-if-absent,
    ``OutsideTable`` where ``guard`` refuses the commit file."""
    target = store.uri(store.table_path(f"_delta_log/{version:020d}.json"))
    if guard is not None:
        guard.check(target, "write the commit")
    try:
        return put_if_absent(target, content, store.storage)
    except PutUnsupported as error:
        raise CommitUnsupported(
            f"{store.uri(store.root)}: Lakewarden's Delta commit writer has a put-if-absent for local"
            f" files and S3 stores only, so this commit cannot be written safely ({error})"
        ) from error
