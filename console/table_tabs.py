"""What the table page's tabs show beyond the spec reads: a page of snapshots with summaries a
person reads ("+3 files, +120 rows"), the split planner's weight rule in words, the files
histogram of the whole snapshot.

Each format keeps its own summary keys (Iceberg's ``added-data-files``, Delta's
``numAddedFiles``, Hudi's ``numInserts``, Paimon's ``delta-record-count``); the console reads them
by key name (Delta's Spark writers and delta-rs spell them differently), never by format, so a plugin whose summaries use one of these names reads well too.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from console.chart_axes import binary_size, size_bars, size_range_label, small_bars
from console.charts import histogram_svg
from console.charts_context import cached, remember
from console.templatetags.lakewarden import fact_label
from storage import selectors
from storage.errors import InvalidInput
from storage.models import Table
from storage.selectors import SpecQuery
from storage.spec.models import Instant
from storage.wording import counted

#: Snapshots per page of the Snapshots tab.
SNAPSHOTS_PER_PAGE = 50

#: (what, direction) -> the summary keys that hold it, first present wins.
_SUMMARY_KEYS: dict[tuple[str, str], tuple[str, ...]] = {
    ("files", "+"): (
        "added-data-files",
        "numAddedFiles",
        "num_added_files",
        "numFiles",
        "numBaseFilesWritten",
    ),
    ("files", "-"): ("deleted-data-files", "numRemovedFiles", "num_removed_files"),
    ("rows", "+"): ("added-records", "numOutputRows", "num_added_rows", "numInserts", "delta-record-count"),
    ("rows", "-"): ("deleted-records", "numDeletedRows", "num_deleted_rows", "numDeletes"),
    ("bytes", "+"): ("added-files-size", "numAddedBytes", "numOutputBytes", "totalBytesWritten"),
    ("bytes", "-"): ("removed-files-size", "numRemovedBytes"),
}
_NOUNS = {"files": ("file", "files"), "rows": ("row", "rows")}


def _number(summary: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = summary.get(key)
        if value is None or isinstance(value, bool):
            continue
        try:
            return int(value)
        except (TypeError, ValueError):
            continue
    return None


def _counted(what: str, added: int | None, removed: int | None) -> str:
    one, many = _NOUNS[what]
    parts = []
    if added:
        parts.append(f"+{added:,}")
    if removed:
        parts.append(f"−{removed:,}")
    if not parts:
        return ""
    last = removed if removed else added
    return f"{' '.join(parts)} {one if last == 1 and len(parts) == 1 else many}"


def _sized(added: int | None, removed: int | None) -> str:
    parts = []
    if added:
        parts.append(f"+{binary_size(added)}")
    if removed:
        parts.append(f"−{binary_size(removed)}")
    return " ".join(parts)


@dataclass(frozen=True)
class SnapshotRow:
    """One snapshot as the tab shows it."""

    instant: Instant
    changes: str  # "+3 files, +120 rows", "" when the summary says nothing of them
    size: str  # "+4.5 KiB", "" when unknown
    size_exact: str  # "+4,608 bytes" for the hover
    details: str  # every summary value with its key in words ("added data files: 3"), for the hover


def snapshot_row(instant: Instant) -> SnapshotRow:
    summary = instant.summary or {}
    counts = {key: _number(summary, keys) for key, keys in _SUMMARY_KEYS.items()}
    changes = [
        _counted("files", counts[("files", "+")], counts[("files", "-")]),
        _counted("rows", counts[("rows", "+")], counts[("rows", "-")]),
    ]
    added_bytes, removed_bytes = counts[("bytes", "+")], counts[("bytes", "-")]
    exact = " ".join(
        f"{sign}{value:,} bytes" for sign, value in (("+", added_bytes), ("−", removed_bytes)) if value
    )
    return SnapshotRow(
        instant=instant,
        changes=", ".join(part for part in changes if part),
        size=_sized(added_bytes, removed_bytes),
        size_exact=exact,
        details="\n".join(f"{fact_label(key)}: {value}" for key, value in summary.items()),
    )


@dataclass(frozen=True)
class SnapshotPage:
    rows: list[SnapshotRow]
    number: int
    pages: int
    total: int
    first: int  # 1-based position of the first row shown, 0 when there is none
    last: int

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages


def snapshot_page(
    newest_first: Sequence[Instant], *, number: int, per_page: int = SNAPSHOTS_PER_PAGE
) -> SnapshotPage:
    """Page ``number`` (1-based) of the snapshots, newest first; a page past the last is bad input."""
    total = len(newest_first)
    pages = max(math.ceil(total / per_page), 1)
    if number > pages:
        raise InvalidInput(
            f"page {number} does not exist: {total} snapshot{'s' if total != 1 else ''} make "
            f"{pages} page{'s' if pages != 1 else ''} of {per_page}",
            field="page",
        )
    start = (number - 1) * per_page
    shown = newest_first[start : start + per_page]
    return SnapshotPage(
        rows=[snapshot_row(instant) for instant in shown],
        number=number,
        pages=pages,
        total=total,
        first=start + 1 if shown else 0,
        last=start + len(shown),
    )


#: A snapshot's files never change: their totals are kept a day (the key names the snapshot).
FILE_TOTALS_SECONDS = 24 * 3600


def file_totals(table: Table, query: SpecQuery, instant: Instant | None) -> dict[str, Any]:
    """Files, bytes, rows and the size histogram of the whole snapshot the Files tab shows (every
    file matching its filter, not the page), read once per (snapshot, filter)."""
    if instant is None:
        return {"files": 0, "bytes": 0, "records": 0, "chart": None}
    facts = (table.pk, table.location, str(instant.id), query.filter)
    key = "lakewarden:file-totals:v1:" + hashlib.sha256(repr(facts).encode()).hexdigest()
    totals = cached(key)
    if totals is None:
        _instant, totals = selectors.table_file_sizes(table=table, query=query)
        remember(key, totals, FILE_TOTALS_SECONDS)
    small = (table.metrics or {}).get("small_file_bytes", 0)
    bars = size_bars(totals["log2"])
    title = (
        f"File sizes at snapshot {instant.id}: {counted(totals['files'], 'file')}, "
        f"{binary_size(totals['bytes'])}, {counted(totals['records'], 'row')}"
    )
    chart = histogram_svg(
        [size_range_label(low, high) for low, high, _files in bars],
        [files for _low, _high, files in bars],
        title=title,
        marker_after=small_bars(bars, small),
        marker_label=f"small < {binary_size(small)}" if small else "",
    )
    return {**totals, "chart": chart if bars else None}
