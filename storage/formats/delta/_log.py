"""The Delta transaction log, read directly and lazily.

A version's state is its newest checkpoint (parquet, multi-part parquet, or a v2 checkpoint with
sidecars) plus the JSON commits after it. Live files come from the log replay Delta readers do
(and delta-kernel does): commits newest first, remembering the key (path, deletion vector id) of
every add and remove seen, then the checkpoint's adds streamed in parquet batches, skipping keys
already seen. Memory holds the keys of the commits after the checkpoint, never the checkpoint's
file list.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import unquote

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from storage.formats.delta._dv import relative_path, unique_id
from storage.io import StoreOptions, filesystem, is_local, local_path
from storage.spec.errors import CorruptTable, InstantNotFound, TableNotFound

LOG_DIR = "_delta_log"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTI = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_V2 = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(json|parquet)$")
_BATCH_ROWS = 4096
#: Commits and JSON checkpoints are read through a buffer this large: on an object store every read
#: of the underlying file is a ranged GET, and line-by-line decoding reads 8 KiB at a time (a 1 MB
#: commit was 130 requests); with the buffer a commit is one request, memory stays bounded.
_JSON_BUFFER = 8 * 1024 * 1024


class Store:
    """The table's file system: a local folder or an object-store URI, through pyarrow.fs."""

    def __init__(self, location: str, storage: StoreOptions | None = None) -> None:
        self.storage = storage
        if is_local(location):
            self.fs, root = pafs.LocalFileSystem(), os.path.abspath(local_path(location))
            self.scheme = ""
        else:
            self.fs, root = filesystem(location, storage)
            self.scheme = location.split("://", 1)[0] + "://"
        self.root = root.rstrip("/") or "/"

    def uri(self, fs_path: str) -> str:
        """What callers see: a plain absolute path locally, a URI elsewhere."""
        return f"{self.scheme}{fs_path}"

    def fs_path(self, uri_or_path: str) -> str:
        if uri_or_path.startswith("file:"):  # file:///x and Spark's file:/x
            return str(local_path(uri_or_path))
        if self.scheme and uri_or_path.startswith(self.scheme):
            return uri_or_path[len(self.scheme) :]
        return uri_or_path

    def table_path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def data_path(self, action_path: str) -> str:
        """File system path of an add/remove ``path``: relative paths are URL-encoded."""
        if "://" in action_path or action_path.startswith("file:"):
            return self.fs_path(action_path)
        if action_path.startswith("/"):
            return unquote(action_path)
        return self.table_path(unquote(action_path))

    def exists(self, fs_path: str, *, directory: bool = False) -> bool:
        info = self.fs.get_file_info(fs_path)
        if directory:
            return info.type == pafs.FileType.Directory
        return info.type != pafs.FileType.NotFound

    def read_range(self, fs_path: str, offset: int, length: int) -> bytes:
        try:
            with self.fs.open_input_file(fs_path) as handle:
                handle.seek(offset)
                return handle.read(length)
        except (FileNotFoundError, OSError) as exc:
            raise CorruptTable(f"cannot read {self.uri(fs_path)}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Checkpoint:
    version: int
    paths: tuple[str, ...]  # file system paths: the parts, or the v2 top-level file
    v2: bool = False


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    version: int
    protocol: Mapping[str, Any]
    metadata: Mapping[str, Any]
    checkpoint: Checkpoint | None


class FileAction(NamedTuple):
    """An add or remove as vacuum compares it with the files in the table's folder: where the
    file (and its deletion vector's file) is, as ``Store.uri`` spells it."""

    version: int
    add: bool
    location: str
    deletion_vector: str | None
    deletion_timestamp: int | None  # of a remove, in milliseconds


def file_key(action: Mapping[str, Any]) -> tuple[str, str | None]:
    """Identity of a logical file in the replay: its path and deletion vector."""
    return action["path"], unique_id(action.get("deletionVector"))


class DeltaLog:
    """One listing of ``_delta_log``: the versions, commits and checkpoints at open time."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.log_path = store.table_path(LOG_DIR)
        location = store.uri(store.root)
        if not store.exists(store.root, directory=True):
            raise TableNotFound(f"no Delta table at {location}: the path does not exist")
        if not store.exists(self.log_path, directory=True):
            raise TableNotFound(f"no Delta table at {location}: there is no {LOG_DIR} folder")
        self.commits: dict[int, pafs.FileInfo] = {}
        parts: dict[int, dict[int, dict[int, str]]] = {}  # version -> part count -> part -> path
        self.checkpoints: dict[int, Checkpoint] = {}
        for info in store.fs.get_file_info(pafs.FileSelector(self.log_path)):
            name = info.base_name
            if match := _COMMIT.match(name):
                self.commits[int(match.group(1))] = info
            elif match := _CLASSIC.match(name):
                self.checkpoints.setdefault(
                    int(match.group(1)), Checkpoint(int(match.group(1)), (info.path,))
                )
            elif match := _MULTI.match(name):
                version, part, count = (int(g) for g in match.groups())
                parts.setdefault(version, {}).setdefault(count, {})[part] = info.path
            elif match := _V2.match(name):
                # A v2 checkpoint supersedes a classic one of the same version (they hold the same state).
                version = int(match.group(1))
                self.checkpoints[version] = Checkpoint(version, (info.path,), v2=True)
        for version, by_count in parts.items():
            for count, found in by_count.items():
                if len(found) == count and version not in self.checkpoints:
                    self.checkpoints[version] = Checkpoint(
                        version, tuple(found[i] for i in range(1, count + 1))
                    )
        if not self.commits and not self.checkpoints:
            raise TableNotFound(f"no Delta table at {location}: {LOG_DIR} holds no commits")
        self.latest = max(max(self.commits, default=-1), max(self.checkpoints, default=-1))
        self.earliest = self._earliest_readable()
        self._snapshots: dict[int, LogSnapshot] = {}

    def _earliest_readable(self) -> int:
        # Commits form a contiguous run ending at the latest version; below its start, a version
        # is readable only from a checkpoint (older commits may have been cleaned up).
        start = self.latest + 1
        while start - 1 in self.commits:
            start -= 1
        if start == 0:
            return 0
        usable = [v for v in self.checkpoints if start - 1 <= v <= self.latest]
        if not usable:
            missing = start - 1
            raise CorruptTable(
                f"Delta log {self.store.uri(self.log_path)} is missing commit {missing:020d}.json "
                "and has no checkpoint after it: the table state cannot be rebuilt"
            )
        return min(usable)

    # --- versions -------------------------------------------------------------------------------

    def check_version(self, version: int) -> None:
        if not self.earliest <= version <= self.latest:
            raise InstantNotFound(
                f"Delta table {self.store.uri(self.store.root)} has no version {version} "
                f"(readable versions {self.earliest}..{self.latest})"
            )

    def checkpoint_for(self, version: int) -> Checkpoint | None:
        usable = [v for v in self.checkpoints if self.earliest <= v <= version]
        return self.checkpoints[max(usable)] if usable else None

    def commit_path(self, version: int) -> str:
        return f"{self.log_path}/{version:020d}.json"

    def read_commit(self, version: int) -> Iterator[dict[str, Any]]:
        """The actions of one commit, streamed line by line."""
        return self._json_lines(self.commit_path(version), "commit")

    def commit_info(self, version: int) -> Mapping[str, Any] | None:
        for action in self.read_commit(version):
            if "commitInfo" in action:
                return action["commitInfo"]
        return None

    # --- snapshot state -------------------------------------------------------------------------

    def snapshot(self, version: int) -> LogSnapshot:
        self.check_version(version)
        if version not in self._snapshots:
            self._snapshots[version] = self._load_snapshot(version)
        return self._snapshots[version]

    def _load_snapshot(self, version: int) -> LogSnapshot:
        checkpoint = self.checkpoint_for(version)
        protocol = metadata = None
        first = checkpoint.version + 1 if checkpoint else 0
        for commit in range(version, first - 1, -1):
            for action in self.read_commit(commit):
                if protocol is None and "protocol" in action:
                    protocol = action["protocol"]
                if metadata is None and "metaData" in action:
                    metadata = action["metaData"]
            if protocol is not None and metadata is not None:
                break
        if (protocol is None or metadata is None) and checkpoint is not None:
            for action in self._checkpoint_state(checkpoint):
                if protocol is None and "protocol" in action:
                    protocol = action["protocol"]
                if metadata is None and "metaData" in action:
                    metadata = action["metaData"]
        if protocol is None or metadata is None:
            missing = "protocol" if protocol is None else "metaData"
            raise CorruptTable(
                f"Delta log {self.store.uri(self.log_path)} has no {missing} action up to version {version}"
            )
        return LogSnapshot(version, protocol, metadata, checkpoint)

    def _checkpoint_state(self, checkpoint: Checkpoint) -> Iterator[dict[str, Any]]:
        """Protocol and metadata actions of a checkpoint."""
        for path in checkpoint.paths:
            if path.endswith(".json"):
                for action in self._json_lines(path, "checkpoint"):
                    if "protocol" in action or "metaData" in action:
                        yield action
                continue
            for batch in self._parquet_batches(path, ("protocol", "metaData")):
                for column in ("protocol", "metaData"):
                    if column in batch.schema.names:
                        for row in batch.column(column).drop_null().to_pylist():
                            yield {column: _plain(row)}

    # --- replay ---------------------------------------------------------------------------------

    def live_adds(self, snapshot: LogSnapshot) -> Iterator[dict[str, Any]]:
        """Add actions of the files live at ``snapshot``, newest commits first, then the
        checkpoint's, streamed."""
        seen: set[tuple[str, str | None]] = set()
        first = snapshot.checkpoint.version + 1 if snapshot.checkpoint else 0
        for version in range(snapshot.version, first - 1, -1):
            for action in self.read_commit(version):
                if "add" in action:
                    add = action["add"]
                    key = file_key(add)
                    if key not in seen:
                        seen.add(key)
                        yield add
                elif "remove" in action:
                    seen.add(file_key(action["remove"]))
        if snapshot.checkpoint is not None:
            for add in self.checkpoint_adds(snapshot.checkpoint):
                if not seen or file_key(add) not in seen:
                    yield add

    def checkpoint_adds(self, checkpoint: Checkpoint) -> Iterator[dict[str, Any]]:
        return (action for _, action in self.checkpoint_actions(checkpoint, ("add",)))

    def checkpoint_actions(
        self, checkpoint: Checkpoint, kinds: tuple[str, ...] = ("add", "remove")
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(kind, action) of the checkpoint's actions of ``kinds`` (``add``, ``remove``), its
        sidecars' included, streamed in parquet batches."""
        for path in checkpoint.paths:
            if path.endswith(".json"):
                for action in self._json_lines(path, "checkpoint"):
                    for kind in kinds:
                        if kind in action:
                            yield kind, action[kind]
                    if "sidecar" in action:
                        yield from self._sidecar_actions(action["sidecar"], kinds)
                continue
            for batch in self._parquet_batches(path, (*kinds, "sidecar")):
                for kind in kinds:
                    if kind in batch.schema.names:
                        for row in batch.column(kind).drop_null().to_pylist():
                            yield kind, _plain(row)
                if "sidecar" in batch.schema.names:
                    for row in batch.column("sidecar").drop_null().to_pylist():
                        yield from self._sidecar_actions(row, kinds)

    def _sidecar_actions(
        self, sidecar: Mapping[str, Any], kinds: tuple[str, ...]
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        relative = sidecar["path"]
        path = self.store.fs_path(relative) if "://" in relative else f"{self.log_path}/_sidecars/{relative}"
        for batch in self._parquet_batches(path, kinds):
            for kind in kinds:
                if kind in batch.schema.names:
                    for row in batch.column(kind).drop_null().to_pylist():
                        yield kind, _plain(row)

    def file_actions(self, snapshot: LogSnapshot) -> Iterator[FileAction]:
        """Every add and remove that makes up ``snapshot``'s state, not reconciled: the
        checkpoint's (at its version), then each commit's after it, oldest first. The newest
        action of a path says whether it is live or a tombstone; a caller with more files than
        memory sorts them on disk to find it (vacuum does). Memory holds one batch or one line."""
        first = 0
        if snapshot.checkpoint is not None:
            first = snapshot.checkpoint.version + 1
            for kind, action in self.checkpoint_actions(snapshot.checkpoint):
                yield self._file_action(snapshot.checkpoint.version, kind, action)
        for version in range(first, snapshot.version + 1):
            for action in self.read_commit(version):
                for kind in ("add", "remove"):
                    if kind in action:
                        yield self._file_action(version, kind, action[kind])

    def _file_action(self, version: int, kind: str, action: Mapping[str, Any]) -> FileAction:
        descriptor = action.get("deletionVector")
        relative = relative_path(descriptor) if descriptor else None
        vector = None
        if relative is not None:
            inside = descriptor["storageType"] != "p"  # type: ignore[index]
            vector = self.store.uri(
                self.store.table_path(relative) if inside else self.store.fs_path(relative)
            )
        timestamp = action.get("deletionTimestamp")
        return FileAction(
            version,
            kind == "add",
            self.store.uri(self.store.data_path(action["path"])),
            vector,
            int(timestamp) if timestamp is not None else None,
        )

    def _parquet_batches(self, path: str, columns: tuple[str, ...]):
        uri = self.store.uri(path)
        try:
            handle = self.store.fs.open_input_file(path)
        except (FileNotFoundError, OSError) as exc:
            raise CorruptTable(f"Delta checkpoint {uri} cannot be read: {exc}") from exc
        with handle:
            try:
                parquet = pq.ParquetFile(handle)
                present = [c for c in columns if c in parquet.schema_arrow.names]
                if not present:
                    return
                yield from parquet.iter_batches(batch_size=_BATCH_ROWS, columns=present)
            except (OSError, ValueError) as exc:
                raise CorruptTable(f"Delta checkpoint {uri} is unreadable: {exc}") from exc

    def _json_lines(self, path: str, what: str) -> Iterator[dict[str, Any]]:
        """The JSON objects of a commit or JSON checkpoint, one a line; ``CorruptTable`` naming the
        file and the line that cannot be read."""
        uri = self.store.uri(path)
        try:
            buffer = _JSON_BUFFER if self.store.scheme else None  # local reads are cheap syscalls
            stream = self.store.fs.open_input_stream(path, buffer_size=buffer)
        except (FileNotFoundError, OSError) as exc:
            raise CorruptTable(f"Delta {what} {uri} cannot be read: {exc}") from exc
        with stream, io.TextIOWrapper(stream, encoding="utf-8") as lines:
            number = 0
            try:
                for line in lines:
                    number += 1
                    if not line.strip():
                        continue
                    try:
                        action = json.loads(line)
                    except ValueError as exc:
                        raise CorruptTable(
                            f"Delta {what} {uri} is unreadable at line {number}: {exc}"
                        ) from exc
                    if not isinstance(action, dict):
                        raise CorruptTable(f"Delta {what} {uri} line {number} is not a JSON object")
                    yield action
            except (UnicodeDecodeError, OSError) as exc:
                raise CorruptTable(f"Delta {what} {uri} is unreadable after line {number}: {exc}") from exc


def _plain(row: Any) -> Any:
    """A checkpoint row as the JSON log spells it: Arrow maps (lists of key/value pairs) become dicts."""
    if isinstance(row, dict):
        return {key: _plain_value(key, value) for key, value in row.items()}
    return row


_MAP_KEYS = {"partitionValues", "tags", "configuration", "options"}


def _plain_value(key: str, value: Any) -> Any:
    if key in _MAP_KEYS and isinstance(value, list):
        return dict(value)
    if isinstance(value, dict):
        return _plain(value)
    return value
