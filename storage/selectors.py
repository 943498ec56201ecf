"""Reads shared by pages and the API: lists of tables and catalogs, and reads of one table through
the spec API, shared by the console tabs and the REST API.

Input is parsed once here (``SpecQuery``): a bad instant, filter, range or size becomes
``InvalidInput`` (400) with the parser's message; an unreadable table becomes ``Conflict`` (409)
naming the problem. Listings stream: a page of files costs the files before it, never the whole
table.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum

from storage.errors import Conflict, InvalidInput
from storage.metrics import BUCKETS_MIB, bucket_labels, size_bucket
from storage.models import Catalog, Table
from storage.services import table_open
from storage.spec import (
    CorruptTable,
    FilterError,
    InstantNotFound,
    InvalidRange,
    NotSupported,
    SpecError,
    SpecTable,
    TableNotFound,
    UnsupportedFeature,
)
from storage.spec.expressions import bind_filter
from storage.spec.models import FileSlice, Instant, Split
from storage.spec.splits import summarise_splits

MIB = 1024 * 1024
MAX_PAGE_SIZE = 500
MAX_SPLITS_SHOWN = 200


@dataclass(frozen=True)
class SpecQuery:
    at: str | None = None
    filter: str = ""
    page: int = 1
    page_size: int = 50
    target_size: int = 128 * MIB
    open_file_cost: int = 4 * MIB
    start: str | None = None
    end: str | None = None


def _positive_int(params: Mapping[str, str], name: str, default: int, *, maximum: int | None = None) -> int:
    raw = (params.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"{name} must be a whole number, not {raw!r}", field=name) from None
    if value <= 0:
        raise InvalidInput(f"{name} must be positive, not {value}", field=name)
    if maximum is not None and value > maximum:
        raise InvalidInput(f"{name} must be at most {maximum}", field=name)
    return value


def spec_query_parse(params: Mapping[str, str]) -> SpecQuery:
    """The query parameters every table read shares, validated."""
    open_cost_raw = (params.get("open_file_cost") or "").strip()
    if open_cost_raw:
        try:
            open_file_cost = int(open_cost_raw)
        except ValueError:
            raise InvalidInput(
                f"open_file_cost must be a whole number, not {open_cost_raw!r}", field="open_file_cost"
            ) from None
        if open_file_cost < 0:
            raise InvalidInput("open_file_cost must be zero or more", field="open_file_cost")
    else:
        open_file_cost = 4 * MIB
    return SpecQuery(
        at=(params.get("at") or "").strip() or None,
        filter=(params.get("filter") or "").strip(),
        page=_positive_int(params, "page", 1),
        page_size=_positive_int(params, "page_size", 50, maximum=MAX_PAGE_SIZE),
        target_size=_positive_int(params, "target_size", 128 * MIB),
        open_file_cost=open_file_cost,
        start=(params.get("from") or "").strip() or None,
        end=(params.get("to") or "").strip() or None,
    )


class _Reading:
    """Maps spec errors to service errors for the duration of one read."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __enter__(self) -> _Reading:
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        if error is None:
            return False
        if isinstance(error, FilterError):
            where = f" (at position {error.position})" if error.position is not None else ""
            raise InvalidInput(f"{error}{where}", field="filter") from error
        if isinstance(error, InstantNotFound):
            raise InvalidInput(str(error), field="at") from error
        if isinstance(error, (InvalidRange, NotSupported)):
            raise InvalidInput(str(error)) from error
        if isinstance(error, ValueError) and not isinstance(error, SpecError):
            raise InvalidInput(str(error)) from error
        if isinstance(error, (TableNotFound, CorruptTable, UnsupportedFeature, SpecError)):
            raise Conflict(f"{self.table.name} cannot be read: {error}") from error
        if isinstance(error, OSError):
            raise Conflict(
                f"{self.table.name} cannot be read: a file is missing or unreadable ({error})"
            ) from error
        return False


def _open(table: Table) -> SpecTable:
    with _Reading(table):
        return table_open(table)


def _instant(spec_table: SpecTable, instant_id: str | None) -> Instant | None:
    timeline = spec_table.timeline()
    return timeline.get(instant_id) if instant_id else timeline.latest()


def table_snapshots(*, table: Table) -> list[Instant]:
    """Newest first."""
    with _Reading(table):
        return list(reversed(_open(table).timeline().instants()))


@dataclass
class FilesPage:
    instant: Instant | None
    files: list[FileSlice]
    page: int
    page_size: int
    has_next: bool
    histogram: list[dict[str, Any]]


def table_files(*, table: Table, query: SpecQuery) -> FilesPage:
    with _Reading(table):
        spec_table = _open(table)
        instant = _instant(spec_table, query.at)
        expression = bind_filter(query.filter or None, spec_table.schema)
        if instant is None:
            return FilesPage(None, [], 1, query.page_size, False, [])
        listing = spec_table.file_index().list_files_at(instant, expression)
        skip = (query.page - 1) * query.page_size
        window = list(itertools.islice(listing, skip, skip + query.page_size + 1))
        return FilesPage(
            instant=instant,
            files=window[: query.page_size],
            page=query.page,
            page_size=query.page_size,
            has_next=len(window) > query.page_size,
            histogram=size_histogram(
                f.base_file.size_bytes for f in window[: query.page_size] if f.base_file
            ),
        )


@dataclass
class SplitPlan:
    instant: Instant | None
    splits: list[Split]
    summary: dict[str, Any]
    truncated: bool


def table_splits(*, table: Table, query: SpecQuery) -> SplitPlan:
    with _Reading(table):
        spec_table = _open(table)
        instant = _instant(spec_table, query.at)
        expression = bind_filter(query.filter or None, spec_table.schema)
        if instant is None:
            return SplitPlan(None, [], summarise_splits([]), False)
        shown: list[Split] = []

        def keep_first(splits: Iterator[Split]) -> Iterator[Split]:
            for split in splits:
                if len(shown) < MAX_SPLITS_SHOWN:
                    shown.append(split)
                yield split

        plan = spec_table.plan_splits(
            instant, expression, target_size=query.target_size, open_file_cost=query.open_file_cost
        )
        summary = summarise_splits(keep_first(plan))
        return SplitPlan(instant, shown, summary, summary["count"] > len(shown))


def table_partitions(*, table: Table, query: SpecQuery):
    with _Reading(table):
        spec_table = _open(table)
        instant = _instant(spec_table, query.at)
        if instant is None:
            return None, [], spec_table.file_index().small_file_bytes()
        index = spec_table.file_index()
        return (
            instant,
            index.partitions_at(instant, bind_filter(query.filter or None, spec_table.schema)),
            index.small_file_bytes(),
        )


def table_changes(*, table: Table, query: SpecQuery):
    """Per-partition changes and the first files changed between ``from`` and ``to``."""
    with _Reading(table):
        spec_table = _open(table)
        timeline = spec_table.timeline()
        end = timeline.get(query.end) if query.end else timeline.latest()
        if end is None:
            return None, None, [], []
        if query.start:
            start = timeline.get(query.start)
        else:
            start = next((i for i in timeline.instants() if str(i.id) == str(end.parent_id)), None)
        if start is not None and start.sequence > end.sequence:
            raise InvalidInput(f"from ({start.id}) is after to ({end.id})", field="from")
        index = spec_table.file_index()
        partitions = index.partition_changes_between(start, end)
        files = list(itertools.islice(index.list_files_between(start, end), MAX_PAGE_SIZE))
        return start, end, partitions, files


def size_histogram(sizes) -> list[dict[str, Any]]:
    """File counts per size bucket (the buckets of storage/metrics.py), for the files tab's bar chart."""
    counts = [0] * (len(BUCKETS_MIB) + 1)
    for size in sizes:
        counts[size_bucket(size)] += 1
    peak = max(counts) or 1
    return [
        {"label": label, "count": count, "percent": round(100 * count / peak)}
        for label, count in zip(bucket_labels(), counts, strict=True)
    ]


def jsonable(value: Any) -> Any:
    """Statistics, partition values and query rows as JSON (decimals, dates and bytes as text;
    Spark rows as objects)."""
    if hasattr(value, "asDict"):  # a Spark Row: a tuple whose field names matter
        return {k: jsonable(v) for k, v in value.asDict().items()}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, float) and value != value:
        return "NaN"
    if value is None or isinstance(value, (str, int, float)):
        return value
    return str(value)  # anything else (a path, an enum...) as its text


# --- lists shared by pages and the API --------------------------------------------------------


def table_list(*, search: str = "", format: str = "", catalog_id: int | None = None) -> QuerySet[Table]:
    tables = Table.objects.select_related("catalog")
    if search:
        tables = tables.filter(
            Q(name__icontains=search) | Q(identifier__icontains=search) | Q(location__icontains=search)
        )
    if format:
        tables = tables.filter(format=format)
    if catalog_id:
        tables = tables.filter(catalog_id=catalog_id)
    return tables


def catalog_list() -> QuerySet[Catalog]:
    return Catalog.objects.annotate(table_count=Count("tables")).order_by("name")


def lakehouse_totals() -> dict[str, int]:
    totals = Table.objects.aggregate(
        tables=Count("id"), files=Sum("file_count"), bytes=Sum("total_bytes"), records=Sum("record_count")
    )
    return {key: value or 0 for key, value in totals.items()}
