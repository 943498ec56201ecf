"""Hudi timeline and commit metadata, and parquet footer statistics of base files.

Instant times are ``yyyyMMddHHmmss[SSS]`` strings in the writer's timeline timezone
(``hoodie.table.timeline.timezone``: ``UTC`` or, by default, the JVM's local zone, which the table
does not record). Like hudi-rs, we read them as UTC; a table written with a non-UTC local zone
shows instants shifted by that zone's offset.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from storage.spec.models import Instant

# Actions that change the table's data. Cleans, rollbacks, savepoints and indexing do not.
DATA_ACTIONS = ("commit", "deltacommit", "replacecommit", "clustering")
_COUNTERS = ("numWrites", "numInserts", "numUpdateWrites", "numDeletes")


def instant_timestamp(instant_time: str) -> dt.datetime:
    """The UTC time of an instant id (``20240418172802262`` -> 2024-04-18 17:28:02.262 UTC)."""
    digits = instant_time[:17]
    parsed = dt.datetime.strptime(digits[:14], "%Y%m%d%H%M%S")
    millis = int(digits[14:17]) if len(digits) >= 17 else 0
    return parsed.replace(microsecond=millis * 1000, tzinfo=dt.UTC)


def is_log_file(relative_path: str) -> bool:
    name = relative_path.rsplit("/", 1)[-1]
    return name.startswith(".") and ".log." in name


def base_file_instant(relative_path: str) -> str:
    """The commit time in a base file name ``<fileId>_<writeToken>_<instant>.parquet``."""
    name = relative_path.rsplit("/", 1)[-1]
    return name.rsplit("_", 1)[-1].split(".", 1)[0]


def log_file_base_instant(relative_path: str) -> str:
    """The base instant in a log file name ``.<fileId>_<baseInstant>.log.<version>_<writeToken>``."""
    name = relative_path.rsplit("/", 1)[-1]
    return name.split(".log.", 1)[0].rsplit("_", 1)[-1]


def is_null_commit(value: Any) -> bool:
    return value in (None, "", "null")


class CommitMetadata:
    """Reads instants' commit metadata through hudi-rs, keeping the last few parsed.

    A bounded LRU: listing a table looks up each base file's record count in the commit that
    wrote it, and files tend to come in runs of the same commit; memory stays bounded by a few
    commits whatever the number of files listed.
    """

    def __init__(self, hudi_timeline: Any, hudi_instants: Mapping[str, Any], capacity: int = 8) -> None:
        self._timeline = hudi_timeline
        self._instants = hudi_instants
        self._capacity = capacity
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._write_index: OrderedDict[str, dict[str, dict[str, Any]]] = OrderedDict()

    def get(self, instant_id: str) -> dict[str, Any]:
        """The parsed metadata of a completed instant ({} when it is not in the active timeline)."""
        if instant_id in self._cache:
            self._cache.move_to_end(instant_id)
            return self._cache[instant_id]
        hudi_instant = self._instants.get(instant_id)
        metadata: dict[str, Any] = {}
        if hudi_instant is not None:
            metadata = json.loads(self._timeline.get_instant_metadata_in_json(hudi_instant) or "{}") or {}
        self._cache[instant_id] = metadata
        if len(self._cache) > self._capacity:
            self._cache.popitem(last=False)
        return metadata

    def write_stat(self, instant_id: str, relative_path: str) -> dict[str, Any] | None:
        """The write stat of ``relative_path`` in the commit ``instant_id``, if recorded there."""
        index = self._write_index.get(instant_id)
        if index is None:
            stats = iter_write_stats(self.get(instant_id))
            index = {stat["path"]: stat for stat in stats if stat.get("path") is not None}
            self._write_index[instant_id] = index
            if len(self._write_index) > self._capacity:
                self._write_index.popitem(last=False)
        else:
            self._write_index.move_to_end(instant_id)
        return index.get(relative_path)


def iter_write_stats(metadata: Mapping[str, Any]) -> Iterable[dict[str, Any]]:
    for partition_path, stats in (metadata.get("partitionToWriteStats") or {}).items():
        for stat in stats or ():
            if stat.get("partitionPath") is None:
                stat = {**stat, "partitionPath": partition_path}
            yield stat


def build_instant(
    hudi_instant: Any,
    metadata: Mapping[str, Any],
    parent_id: str | None,
    sequence: int,
    completion_time: str | None = None,
) -> Instant:
    action = hudi_instant.action
    totals = dict.fromkeys(_COUNTERS, 0)
    total_bytes = 0
    files = log_files = 0
    partitions = set()
    for stat in iter_write_stats(metadata):
        for counter in _COUNTERS:
            totals[counter] += int(stat.get(counter) or 0)
        total_bytes += int(stat.get("totalWriteBytes") or 0)
        partitions.add(stat.get("partitionPath"))
        if is_log_file(stat.get("path") or ""):
            log_files += 1
        else:
            files += 1
    replaced = sum(len(ids or ()) for ids in (metadata.get("partitionToReplaceFileIds") or {}).values())
    summary: dict[str, Any] = {
        "action": action,
        **totals,
        "totalBytesWritten": total_bytes,
        "numBaseFilesWritten": files,
        "numLogFilesWritten": log_files,
        "numPartitionsWritten": len(partitions),
    }
    if replaced:
        summary["numReplacedFileGroups"] = replaced
    if completion_time:
        summary["completionTime"] = completion_time
    operation = metadata.get("operationType")
    if not operation:
        operation = {"replacecommit": "replace", "clustering": "cluster"}.get(action, action)
    return Instant(
        id=hudi_instant.timestamp,
        timestamp=_timestamp_of(hudi_instant),
        operation=str(operation).lower(),
        parent_id=parent_id,
        summary=summary,
        sequence=sequence,
    )


def _timestamp_of(hudi_instant: Any) -> dt.datetime:
    try:
        return instant_timestamp(hudi_instant.timestamp)
    except ValueError:
        return dt.datetime.fromtimestamp(hudi_instant.epoch_mills / 1000, tz=dt.UTC)


_COMPLETED_V8 = re.compile(r"^(\d+)_(\d+)\.(" + "|".join(DATA_ACTIONS) + r")$")


def completion_times(filesystem: pafs.FileSystem, root: str, properties: Mapping[str, str]) -> dict[str, str]:
    """Requested instant time -> completion time, from table version 8 timeline file names
    (``<requested>_<completed>.<action>``); empty for older tables, which record none.

    hudi-rs reads incremental ranges of version 8 tables by completion time, so an instant's
    completion time is what an incremental read must pass for it.
    """
    if int(properties.get("hoodie.table.version", "0") or 0) < 8:
        return {}
    folder = f"{root}/.hoodie/{properties.get('hoodie.timeline.path', 'timeline')}"
    try:
        entries = filesystem.get_file_info(pafs.FileSelector(folder))
    except OSError:
        return {}
    found = {}
    for entry in entries:
        match = _COMPLETED_V8.match(entry.base_name)
        if match:
            found[match[1]] = match[2]
    return found


# --- parquet footers --------------------------------------------------------------------------


def read_footer(filesystem: pafs.FileSystem, path: str) -> pq.FileMetaData:
    with filesystem.open_input_file(path) as handle:
        return pq.ParquetFile(handle).metadata


def column_stats(
    footer: pq.FileMetaData, columns: Iterable[str], schema: pa.Schema
) -> tuple[dict[str, Any], dict[str, Any], dict[str, int]]:
    """Lower and upper bounds and null counts of ``columns`` over all row groups.

    A column is left out (unknown: might match) when any non-empty row group lacks its
    statistics, when a bound is NaN, or when it is not a primitive column of the table.
    """
    wanted = {name for name in columns if _is_primitive(schema, name)}
    lower: dict[str, Any] = {}
    upper: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    if not wanted or footer.num_row_groups == 0:
        return lower, upper, nulls
    positions = {}
    first = footer.row_group(0)
    for j in range(first.num_columns):
        path = first.column(j).path_in_schema
        if path in wanted:
            positions[path] = j
    for name, j in positions.items():
        low = high = None
        null_count = 0
        bounds_known = nulls_known = True
        for i in range(footer.num_row_groups):
            row_group = footer.row_group(i)
            if row_group.num_rows == 0:
                continue
            chunk = row_group.column(j)
            stats = chunk.statistics if chunk.is_stats_set else None
            if stats is None:
                bounds_known = nulls_known = False
                break
            if stats.has_null_count:
                null_count += stats.null_count
            else:
                nulls_known = False
            if stats.num_values == 0 and stats.has_null_count:
                continue  # all nulls: no bounds to merge
            if not stats.has_min_max:
                bounds_known = False
                continue
            mn, mx = _python_value(stats.min), _python_value(stats.max)
            if _is_nan(mn) or _is_nan(mx):
                bounds_known = False
                continue
            low = mn if low is None or mn < low else low
            high = mx if high is None or mx > high else high
        if bounds_known and low is not None:
            lower[name], upper[name] = low, high
        if nulls_known:
            nulls[name] = null_count
    return lower, upper, nulls


def _is_primitive(schema: pa.Schema, dotted: str) -> bool:
    parts = dotted.split(".")
    try:
        field = schema.field(parts[0])
    except KeyError:
        return False
    for part in parts[1:]:
        if not pa.types.is_struct(field.type):
            return False
        index = field.type.get_field_index(part)
        if index < 0:
            return False
        field = field.type.field(index)
    return not pa.types.is_nested(field.type)


def _python_value(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
