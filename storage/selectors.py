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
from types import TracebackType
from typing import Any, Literal

from django.db.models import (
    Case,
    CharField,
    Count,
    ExpressionWrapper,
    F,
    Func,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce, Concat

from storage.catalogs import is_catalog_error
from storage.errors import Conflict, InvalidInput
from storage.metrics import BUCKETS_MIB, add_log2, bucket_labels, size_bucket
from storage.models import Catalog, CatalogKind, Table, format_values
from storage.services import table_open
from storage.services.tables import table_error_text
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
from storage.spec.expressions.parser import Token, tokenize
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


MAX_PAGE = 1_000_000
MAX_BYTES = 2**63 - 1  # a long: what every format and Spark keep sizes in
#: Number literals in a filter with more digits than this, or an exponent beyond it, fit no column
#: type (long, decimal(38), double up to 1.8e308): refused before binding, which would otherwise
#: build a billion-digit integer for ``id = 1e999999999`` (issue 10).
MAX_NUMBER_DIGITS = 400


def shown(value: str, limit: int = 40) -> str:
    """``value`` quoted for an error message, control characters escaped, long values cut."""
    return repr(value if len(value) <= limit else value[:limit] + "…")


def text_param(value: str, name: str) -> str:
    """``value`` unless it holds a NUL character, which no Postgres text column can store."""
    if "\x00" in value:
        raise InvalidInput(f"{name} must not contain a NUL character (\\x00)", field=name)
    return value


def _whole_number(params: Mapping[str, str], name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = (params.get(name) or "").strip()
    if not raw:
        return default
    value = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= len(str(maximum)) else None
    if value is None or not minimum <= value <= maximum:
        kind = "a positive whole number" if minimum == 1 else "a whole number"
        raise InvalidInput(f"{name} must be {kind} from {minimum} to {maximum}, not {shown(raw)}", field=name)
    return value


def spec_query_parse(params: Mapping[str, str]) -> SpecQuery:
    """The query parameters every table read shares, validated."""
    return SpecQuery(
        at=(params.get("at") or "").strip() or None,
        filter=(params.get("filter") or "").strip(),
        page=_whole_number(params, "page", 1, minimum=1, maximum=MAX_PAGE),
        page_size=_whole_number(params, "page_size", 50, minimum=1, maximum=MAX_PAGE_SIZE),
        target_size=_whole_number(params, "target_size", 128 * MIB, minimum=1, maximum=MAX_BYTES),
        open_file_cost=_whole_number(params, "open_file_cost", 4 * MIB, minimum=0, maximum=MAX_BYTES),
        start=(params.get("from") or "").strip() or None,
        end=(params.get("to") or "").strip() or None,
    )


def _number_literals(text: str) -> list[tuple[Token, decimal.Decimal]]:
    try:
        tokens = tokenize(text)
    except FilterError:
        return []  # the parser reports it, with its position
    return [(token, decimal.Decimal(token.text)) for token in tokens if token.kind == "number"]


def _bind(text: str, schema):
    """The filter text bound to ``schema``; a number no column can hold is InvalidInput naming it."""
    if not text:
        return None
    numbers = _number_literals(text)
    for token, number in numbers:
        digits = len(number.as_tuple().digits)
        if number and (abs(number.adjusted()) > MAX_NUMBER_DIGITS or digits > MAX_NUMBER_DIGITS):
            raise InvalidInput(
                f"the number {shown(token.text)} at position {token.position} is out of range for every"
                f" column type (at most {MAX_NUMBER_DIGITS} digits and exponents up to {MAX_NUMBER_DIGITS})",
                field="filter",
            )
    try:
        return bind_filter(text, schema)
    except decimal.DecimalException as error:
        # Coercing to a decimal column can overflow the arithmetic context (binding.py, issue 10):
        # the largest number of the filter is the one that did not fit.
        largest: Token | None
        largest, _ = max(numbers, key=lambda pair: pair[1].adjusted(), default=(None, None))
        what = f"the number {shown(largest.text)} at position {largest.position}" if largest else "a number"
        raise InvalidInput(f"{what} is too large for its column", field="filter") from error


class _Reading:
    """Maps spec errors to service errors for the duration of one read."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __enter__(self) -> _Reading:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> Literal[False]:
        if error is None:
            return False
        if isinstance(error, FilterError):
            at = f"at position {error.position}"
            where = f" ({at})" if error.position is not None and at not in str(error) else ""
            raise InvalidInput(f"{error}{where}", field="filter") from error
        if isinstance(error, InstantNotFound):
            raise InvalidInput(str(error), field="at") from error
        if isinstance(error, (InvalidRange, NotSupported)):
            raise InvalidInput(str(error)) from error
        if is_catalog_error(error):  # the table's REST catalog refused (401, 404, 500...)
            raise Conflict(
                f"{self.table.name} cannot be read: {table_error_text(self.table, error)}"
            ) from error
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
        expression = _bind(query.filter, spec_table.schema)
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


def table_file_sizes(*, table: Table, query: SpecQuery) -> tuple[Instant | None, dict[str, Any]]:
    """Every data file at the instant that might hold rows matching the filter, summed (not a
    page of them): ``files``, ``bytes``, ``records`` and ``log2`` (files per power-of-two size,
    as ``storage.metrics.log2_bucket``). Streams the listing once."""
    totals: dict[str, Any] = {"files": 0, "bytes": 0, "records": 0, "log2": {}}
    with _Reading(table):
        spec_table = _open(table)
        instant = _instant(spec_table, query.at)
        expression = _bind(query.filter, spec_table.schema)
        if instant is None:
            return None, totals
        for file_slice in spec_table.file_index().list_files_at(instant, expression):
            base = file_slice.base_file
            if base is None:
                continue
            totals["files"] += 1
            totals["bytes"] += base.size_bytes
            totals["records"] += file_slice.record_count
            add_log2(totals["log2"], base.size_bytes)
    return instant, totals


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
        expression = _bind(query.filter, spec_table.schema)
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
            index.partitions_at(instant, _bind(query.filter, spec_table.schema)),
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
        start: Instant | None
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


def table_list(
    *, search: str = "", format: str = "", tables: QuerySet[Table] | None = None
) -> QuerySet[Table]:
    """``tables`` (default: every table; a surface passes what the user may see) searched and
    filtered by format."""
    text_param(search, "search")
    if format and format not in format_values():
        raise InvalidInput(
            f"format must be one of {', '.join(format_values())}, not {shown(format)}", field="format"
        )
    tables = (Table.objects.all() if tables is None else tables).select_related("catalog")
    if search:
        tables = tables.filter(
            Q(name__icontains=search) | Q(identifier__icontains=search) | Q(location__icontains=search)
        )
    if format:
        tables = tables.filter(format=format)
    return tables


def catalog_tables(catalog: Catalog) -> QuerySet[Table]:
    """The tables a catalog's page lists, as its sync counts them: those registered from it, and
    for a path root the tables registered by location under its root (a sync registers them so)."""
    return Table.objects.select_related("catalog").filter(catalog_tables_q(catalog))


def catalog_tables_q(catalog: Catalog) -> Q:
    """The condition on ``Table`` of ``catalog_tables`` (a team's grant on a catalog covers these)."""
    root = str((catalog.properties or {}).get("root") or "").rstrip("/")
    if catalog.kind != CatalogKind.PATH_ROOT or not root:
        return Q(catalog_id=catalog.pk)
    under_root = Q(catalog__isnull=True) & (Q(location=root) | Q(location__startswith=root + "/"))
    return Q(catalog_id=catalog.pk) | under_root


def catalog_list(*, tables: QuerySet[Table] | None = None) -> QuerySet[Catalog]:
    """Catalogs by name with ``table_count``: what ``catalog_tables`` lists for each (only those of
    ``tables`` when given: a surface passes what the user may see)."""
    root = Func(
        KeyTextTransform("root", OuterRef("properties")),
        Value("/"),
        function="RTRIM",
        output_field=CharField(),
    )
    under_root = (Table.objects.all() if tables is None else tables).filter(catalog__isnull=True)
    under_root = under_root.filter(Q(location=root) | Q(location__startswith=Concat(root, Value("/"))))
    counted_tables = Count("tables") if tables is None else Count("tables", filter=Q(tables__in=tables))
    # COUNT as a plain function: one row for the whole subquery, no GROUP BY.
    counted = under_root.order_by().annotate(n=Func(F("id"), function="COUNT")).values("n")
    path_root_count = Case(
        When(kind=CatalogKind.PATH_ROOT, then=Coalesce(Subquery(counted[:1]), 0)), default=Value(0)
    )
    return Catalog.objects.annotate(
        table_count=ExpressionWrapper(counted_tables + path_root_count, output_field=IntegerField())
    ).order_by("name")


def lakehouse_totals(*, tables: QuerySet[Table] | None = None) -> dict[str, int]:
    """Counts and sums over ``tables`` (default: every table)."""
    totals = (Table.objects.all() if tables is None else tables).aggregate(
        tables=Count("id"), files=Sum("file_count"), bytes=Sum("total_bytes"), records=Sum("record_count")
    )
    return {key: value or 0 for key, value in totals.items()}
