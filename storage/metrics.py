"""Per-table metrics computed in the background (at registration and each refresh) and kept on the
table row, so the pages that draw them never read table metadata while a person waits.

- ``size_histogram``: live files per size bucket, with the small-file threshold;
- ``size_log2``: live files per power-of-two size (``log2_bucket``), which charts scale to the table;
- ``compactable_file_count``: small files in partitions holding at least
  ``storage.health.COMPACTABLE_MIN_FILES`` of them (what a compaction could merge);
- ``partitions``: the partitions with the most files, each with its own histogram;
- ``timeline``: records, files and bytes after each of the last instants, with the operation.
"""

from __future__ import annotations

from typing import Any

from storage.health import COMPACTABLE_MIN_FILES
from storage.spec import SpecTable

MIB = 1024 * 1024
# Bucket upper bounds in MiB; the last bucket is open-ended.
BUCKETS_MIB = (1, 4, 8, 16, 32, 64, 128, 256, 512)
TIMELINE_INSTANTS = 200
TOP_PARTITIONS = 50


def size_bucket(size: int) -> int:
    """The index of the bucket a file of ``size`` bytes falls in."""
    for index, bound in enumerate(BUCKETS_MIB):
        if size < bound * MIB:
            return index
    return len(BUCKETS_MIB)


def bucket_labels() -> list[str]:
    return [f"< {b} MiB" for b in BUCKETS_MIB] + [f"≥ {BUCKETS_MIB[-1]} MiB"]


def log2_bucket(size: int) -> int:
    """The power of two a file of ``size`` bytes falls under: bucket ``k`` holds ``[2**k, 2**(k+1))``
    bytes (empty files in bucket 0). Charts scale these to the table: a table of 100 KiB files
    draws 32-64-128 KiB bars, not one "< 1 MiB" bar."""
    return max(int(size).bit_length() - 1, 0)


def add_log2(counts: dict[str, int], size: int) -> None:
    """Count a file of ``size`` bytes in ``counts`` (bucket exponent as text: a JSON object's key)."""
    key = str(log2_bucket(size))
    counts[key] = counts.get(key, 0) + 1


def table_metrics(spec_table: SpecTable) -> dict[str, Any]:
    index = spec_table.file_index()
    small = index.small_file_bytes()
    latest = spec_table.timeline().latest()
    histogram = [0] * (len(BUCKETS_MIB) + 1)
    log2: dict[str, int] = {}
    partitions: dict[str, dict[str, Any]] = {}
    small_files = 0
    # A delete file may apply to many data files: each is counted once.
    delete_files: set[str] = set()
    if latest is not None:
        for file_slice in index.list_files_at(latest):
            delete_files.update(delete.path for delete in file_slice.delete_files)
            base = file_slice.base_file
            if base is None:
                continue
            bucket = size_bucket(base.size_bytes)
            histogram[bucket] += 1
            add_log2(log2, base.size_bytes)
            is_small = base.size_bytes < small
            small_files += is_small
            entry = partitions.setdefault(
                file_slice.partition.path,
                {
                    "path": file_slice.partition.path,
                    "files": 0,
                    "bytes": 0,
                    "small": 0,
                    "histogram": [0] * (len(BUCKETS_MIB) + 1),
                    "log2": {},
                },
            )
            entry["files"] += 1
            entry["bytes"] += base.size_bytes
            entry["small"] += is_small
            entry["histogram"][bucket] += 1
            add_log2(entry["log2"], base.size_bytes)
    top = sorted(partitions.values(), key=lambda p: (-p["files"], p["path"]))[:TOP_PARTITIONS]
    compactable = sum(p["small"] for p in partitions.values() if p["small"] >= COMPACTABLE_MIN_FILES)
    return {
        "small_file_bytes": small,
        "small_file_count": small_files,
        "compactable_file_count": compactable,
        "delete_file_count": len(delete_files),
        "partition_count": len(partitions),
        "size_histogram": histogram,
        "size_log2": log2,
        "partitions": top,
        "timeline": timeline_series(spec_table),
    }


def timeline_series(spec_table: SpecTable) -> list[dict[str, Any]]:
    """Records, files and bytes after each instant (the last ``TIMELINE_INSTANTS`` of them).

    Iceberg snapshots carry running totals in their summaries; other formats are replayed from
    their change stream once (files added and removed per instant).
    """
    instants = spec_table.timeline().instants()
    if not instants:
        return []
    totals_known = all(
        all(key in instant.summary for key in ("total-records", "total-data-files", "total-files-size"))
        for instant in instants
    )
    per_instant: dict[str, dict[str, int | None]] = {}
    if totals_known:
        for instant in instants:
            per_instant[str(instant.id)] = {
                "records": int(instant.summary["total-records"])
                - int(instant.summary.get("total-position-deletes", 0)),
                "files": int(instant.summary["total-data-files"]),
                "bytes": int(instant.summary["total-files-size"]),
            }
    else:
        per_instant = _replayed_totals(spec_table, instants)
    if not spec_table.file_rows_are_records():
        per_instant = {key: {**point, "records": None} for key, point in per_instant.items()}
    series = []
    for instant in instants[-TIMELINE_INSTANTS:]:
        point = per_instant[str(instant.id)]
        series.append(
            {
                "id": str(instant.id),
                "at": instant.timestamp.isoformat(),
                "operation": instant.operation,
                **point,
            }
        )
    return series


def _replayed_totals(spec_table: SpecTable, instants: list[Any]) -> dict[str, dict[str, int | None]]:
    """Records, files and bytes after each instant, replayed from the change stream."""
    changes: dict[str, list] = {}
    # A removal may carry no statistics (Delta's remove actions need not): it takes the records
    # and bytes its file was added with, seen earlier in the same stream.
    live: dict[str, tuple[int, int]] = {}
    for change in spec_table.file_index().list_files_between(None, instants[-1]):
        base = change.file_slice.base_file
        if base is None:
            continue
        if change.kind.value == "added":
            sign, records, size = 1, base.record_count, base.size_bytes
            live[base.path] = (records, size)
        else:
            sign = -1
            records, size = live.pop(base.path, (base.record_count, base.size_bytes))
        entry = changes.setdefault(str(change.instant_id), [0, 0, 0])
        entry[0] += sign * records
        entry[1] += sign
        entry[2] += sign * size
    running = {"records": 0, "files": 0, "bytes": 0}
    per_instant: dict[str, dict[str, int | None]] = {}
    for instant in instants:
        delta = changes.get(str(instant.id), [0, 0, 0])
        running = {
            "records": running["records"] + delta[0],
            "files": running["files"] + delta[1],
            "bytes": running["bytes"] + delta[2],
        }
        per_instant[str(instant.id)] = dict(running)
    return per_instant
