"""Compaction shared by the Iceberg and Delta rewrite processes: settings and planning.

Planning (format-neutral, on ``FileSlice`` listings): per partition, files smaller than
``max(target / 8, min-file-size)`` (plus files carrying at least ``delete-file-threshold`` delete
files) are bin-packed, first fit by decreasing size, into groups of at most the target size. A
partition is only rewritten when it has ``min-input-files`` candidates, or candidates worth a whole
target file; a group of one file without deletes is dropped (rewriting it changes nothing).
Files the caller marks ``always`` (an Iceberg file of another partition spec than the output's)
are candidates whatever their size, and their partitions are rewritten whatever their count.

Writing the groups is ``group_writer``'s; committing them is each format's rewrite module.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage.io import local_path as io_local_path
from storage.spec.models import FileSlice, PartitionDescriptor

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
DEFAULT_TARGET_FILE_SIZE = 128 * MIB

#: Properties of both rewrite factories (admin-editable, overridable per table by the same name).
REWRITE_PROPERTIES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "interval": {"type": "integer", "minimum": 60, "description": "Seconds between evaluations"},
        "parallelism": {"type": "integer", "minimum": 1, "description": "Rewrites running at once"},
        "target-file-size": {"type": "integer", "minimum": 65536, "description": "Bytes per output file"},
        "min-file-size": {
            "type": "integer",
            "minimum": 0,
            "description": "Files below this size are rewritten even when above target/8",
        },
        "min-input-files": {"type": "integer", "minimum": 2},
        "delete-file-threshold": {
            "type": "integer",
            "minimum": 0,
            "description": "Rewrite files with at least this many delete files (0: off)",
        },
        "max-concurrent-groups": {
            "type": "integer",
            "minimum": 0,
            "description": "Groups written at once (0: as many as Spark has cores)",
        },
        "compression-codec": {"type": "string", "enum": ["", "snappy", "zstd", "gzip", "lz4", "none"]},
        "engine": {
            "type": "string",
            "enum": ["arrow", "spark-sql"],
            "description": "arrow: Spark tasks read with the spec reader and write with pyarrow; "
            "spark-sql: Spark's own parquet reader and writer for groups without deletes",
        },
    },
}
REWRITE_DEFAULTS: dict[str, Any] = {
    "interval": 3600,
    "parallelism": 1,
    "target-file-size": DEFAULT_TARGET_FILE_SIZE,
    "min-file-size": 0,
    "min-input-files": 5,
    "delete-file-threshold": 0,
    "max-concurrent-groups": 0,
    "compression-codec": "",
    "engine": "arrow",
}
REWRITE_PARAMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        key: REWRITE_PROPERTIES_SCHEMA["properties"][key]
        for key in ("target-file-size", "min-file-size", "min-input-files", "delete-file-threshold", "engine")
    },
    "additionalProperties": False,
}


class RewriteConflict(Exception):
    """The table changed under the rewrite in a way its plan cannot survive."""


@dataclass(frozen=True)
class CompactionSettings:
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    min_file_size: int = 0
    min_input_files: int = 5
    delete_file_threshold: int = 0
    max_concurrent_groups: int = 0
    compression_codec: str = ""
    engine: str = "arrow"

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> CompactionSettings:
        merged = {**REWRITE_DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
        return cls(
            target_file_size=int(merged["target-file-size"]),
            min_file_size=int(merged["min-file-size"]),
            min_input_files=max(2, int(merged["min-input-files"])),
            delete_file_threshold=int(merged["delete-file-threshold"]),
            max_concurrent_groups=int(merged["max-concurrent-groups"]),
            compression_codec=str(merged["compression-codec"] or ""),
            engine=str(merged["engine"] or "arrow"),
        )

    @property
    def small_file_size(self) -> int:
        return max(self.target_file_size // 8, self.min_file_size)


# --- planning ------------------------------------------------------------------------------------


@dataclass
class RewriteGroup:
    index: int
    partition: PartitionDescriptor
    slices: list[FileSlice]

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.slices)

    @property
    def record_count(self) -> int:
        return sum(s.record_count for s in self.slices)

    @property
    def has_deletes(self) -> bool:
        return any(s.delete_files for s in self.slices)

    @property
    def paths(self) -> list[str]:
        return [s.base_file.path for s in self.slices]


@dataclass
class CompactionPlan:
    instant: int | str | None
    groups: list[RewriteGroup] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.groups

    @property
    def files_in(self) -> int:
        return sum(len(g.slices) for g in self.groups)

    @property
    def bytes_in(self) -> int:
        return sum(g.size_bytes for g in self.groups)

    @property
    def partitions(self) -> int:
        return len({g.partition.path for g in self.groups})


def bin_pack(slices: Iterable[FileSlice], capacity: int) -> list[list[FileSlice]]:
    """First fit by decreasing size: few bins, each at most ``capacity`` (an item larger than the
    capacity gets a bin of its own)."""
    bins: list[tuple[int, list[FileSlice]]] = []
    for item in sorted(slices, key=lambda s: (-s.size_bytes, s.path)):
        size = item.size_bytes
        for position, (used, members) in enumerate(bins):
            if used + size <= capacity:
                members.append(item)
                bins[position] = (used + size, members)
                break
        else:
            bins.append((size, [item]))
    return [members for _, members in bins]


def plan_compaction(
    slices: Iterable[FileSlice],
    settings: CompactionSettings,
    *,
    instant: int | str | None,
    eligible: Callable[[FileSlice], bool] = lambda s: True,
    partition_key: Callable[[FileSlice], Any] = lambda s: s.partition.path,
    always: Callable[[FileSlice], bool] = lambda s: False,
) -> CompactionPlan:
    """The groups worth rewriting (see the module docstring for the rules)."""
    candidates: dict[Any, list[FileSlice]] = defaultdict(list)
    partitions: dict[Any, PartitionDescriptor] = {}
    threshold = settings.delete_file_threshold
    for file_slice in slices:
        base = file_slice.base_file
        if base is None or base.file_format != "parquet" or not eligible(file_slice):
            continue
        small = base.size_bytes < settings.small_file_size
        many_deletes = threshold > 0 and len(file_slice.delete_files) >= threshold
        if small or many_deletes or always(file_slice):
            key = partition_key(file_slice)
            candidates[key].append(file_slice)
            partitions.setdefault(key, file_slice.partition)
    plan = CompactionPlan(instant=instant)
    for key in sorted(candidates, key=str):
        members = candidates[key]
        total = sum(s.size_bytes for s in members)
        forced = any(always(s) for s in members)
        if (
            len(members) < settings.min_input_files
            and not forced
            and not (len(members) >= 2 and total >= settings.target_file_size)
        ):
            if not (threshold > 0 and any(len(s.delete_files) >= threshold for s in members)):
                continue
        for packed in bin_pack(members, settings.target_file_size):
            if len(packed) < 2 and not packed[0].delete_files and not forced:
                continue
            plan.groups.append(RewriteGroup(len(plan.groups), partitions[key], packed))
    return plan


# --- writing -------------------------------------------------------------------------------------


def local_path(path: str) -> str:
    """The filesystem path of a local path or ``file:`` URI (object stores are refused with
    ``PathNotAllowed``, a ``ValueError``). Like pyiceberg's file IO, the URI path is taken
    literally (not percent-decoded)."""
    return str(io_local_path(path, percent_decoded=False))


def publish(staged: Path, directory: str) -> str:
    """Move a staged file into the table's data folder under a fresh name; returns its path.
    A rename within the table location: cheap, and atomic on one filesystem."""
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(directory, f"{uuid.uuid4()}-compacted.parquet")
    os.replace(staged, target)
    return target


def unpublish(paths: Iterable[str]) -> None:
    """Delete published files that no commit references (after a failed commit)."""
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError:
            logger.warning("could not delete unreferenced file %s", path, exc_info=True)


def rewrite_summary(plan: CompactionPlan, written: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "files_in": plan.files_in,
        "bytes_in": plan.bytes_in,
        "files_out": sum(len(w.files) for w in written),
        "bytes_out": sum(w.size_bytes for w in written),
        "groups": len(plan.groups),
        "partitions": plan.partitions,
        "engines": {e: sum(1 for w in written if w.engine == e) for e in sorted({w.engine for w in written})},
        **extra,
    }
