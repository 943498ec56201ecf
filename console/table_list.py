"""The tables list (issue 34): sorted, filtered and paged in the database, a fixed number of
queries per page whatever the number of tables, each sort an index walk from the nearer end. The
health score is the overview's, stored on the table row (processes/health.py ``health_store``); a
row shows catalog, namespace, last maintenance and status."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db import connection, transaction
from django.db.models import CharField, Count, F, Func, QuerySet, Value
from django.db.models.functions import Substr

from processes.health import BEST_FIRST, WORST_FIRST
from processes.models import Process, ProcessStatus
from storage.models import Table

PAGE_SIZE = 50
#: At most this many entries in the namespace tree's one level (the largest first).
TREE_LIMIT = 100

#: Sort keys of ``?sort=`` (``-key`` reverses) and the columns they order by in the database;
#: ``health`` is the stored score (processes/health.py). Name, then id, break ties.
SORT_FIELDS: dict[str, tuple[str, ...]] = {
    "name": (),
    "format": ("format",),
    "catalog": ("catalog__name", "identifier"),
    "health": (),
    "files": ("file_count",),
    "small_files": ("small_file_count",),
    "size": ("total_bytes",),
    "last_maintenance": ("last_maintenance_at",),
}
#: Columns whose first click sorts largest first (the worst tables on top).
DESCENDING_FIRST = frozenset({"health", "files", "small_files", "size"})

#: What a row shows, read as plain values (not the metrics JSON).
ROW_FIELDS = (
    "id",
    "name",
    "identifier",
    "format",
    "location",
    "catalog__name",
    "file_count",
    "small_file_count",
    "total_bytes",
    "last_maintenance_at",
    "refresh_error",
    "health_score",
)


def parse_sort(value: str) -> str:
    """``value`` when it names a sort key (``-`` in front reverses), else "" (the default order,
    by name): an unknown key from an old link or a typo is no error."""
    return value if value.removeprefix("-") in SORT_FIELDS else ""


def filtered(tables: QuerySet[Table], *, catalog: str = "", namespace: str = "") -> QuerySet[Table]:
    """``tables`` of the catalog named ``catalog`` and in ``namespace`` or one below it (the
    identifier ``namespace.…``); a table registered by location has no namespace."""
    if catalog:
        tables = tables.filter(catalog__name=catalog)
    if namespace:
        tables = tables.filter(identifier__startswith=namespace + ".")
    return tables


def namespace_of(identifier: str) -> str:
    """``demo.sales`` of ``demo.sales.orders``; "" for a bare name or no identifier."""
    return identifier.rpartition(".")[0]


#: A filtered list of at most this many tables is sorted after it is found (the search's trigram
#: index finds it; walking a sort's index would visit every table the filter skips first).
SORT_FOUND_AT_MOST = 5000


def _order(key: str, descending: bool) -> tuple[Any, ...]:
    """The ``order_by`` of sort ``key``, each matching an index of storage/models.py (read
    backwards for the other direction; counts are never null, so their nulls' place is free)."""
    if key == "health":
        return BEST_FIRST if not descending else WORST_FIRST
    columns = SORT_FIELDS.get(key, ())
    if key in ("files", "small_files", "size"):
        order = [F(c).desc(nulls_last=True) if descending else F(c).asc(nulls_first=True) for c in columns]
    else:
        order = [F(c).desc(nulls_last=True) if descending else F(c).asc(nulls_last=True) for c in columns]
    tie = ("-name", "-id") if descending and key in ("", "name") else ("name", "id")
    return (*order, *tie)


def _page_ids(ids: QuerySet[Table], page: Page) -> list[int]:
    """The ids of ``page`` of the ordered ``ids``, read from the nearer end: a page past the
    middle is the reversed order's page (an index walk is as long as its offset). A filtered list
    short enough (``SORT_FOUND_AT_MOST``) is found first and sorted, not walked in index order."""
    count = page.paginator.count
    if not count:
        return []
    start, stop = page.start_index() - 1, page.end_index()
    forward = start <= count - stop
    window = ids[start:stop] if forward else ids.reverse()[count - stop : count - start]
    if ids.query.where and count <= SORT_FOUND_AT_MOST:
        # one transaction: the planner's settings are back at its end
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off")
            found = list(window)
    else:
        found = list(window)
    return found if forward else found[::-1]


def table_page(tables: QuerySet[Table], *, sort: str, number: Any) -> Page:
    """Page ``number`` of ``tables`` in ``sort`` order, its ``object_list`` the rows as dicts
    with ``health`` (the stored score), ``namespace`` and ``status`` (``process_status``). The
    page's ids are read first (an index walk: every sort has its index), then those rows alone:
    five queries in all."""
    key = sort.removeprefix("-")
    ids = (
        tables.select_related(None).order_by(*_order(key, sort.startswith("-"))).values_list("id", flat=True)
    )
    page = Paginator(ids, PAGE_SIZE).get_page(number)
    page_ids = _page_ids(ids, page)
    found = {row["id"]: row for row in Table.objects.filter(pk__in=page_ids).values(*ROW_FIELDS)}
    statuses = process_status(page_ids)
    rows = []
    for pk in page_ids:
        if pk not in found:
            continue
        row = found[pk]
        row["health"] = row.pop("health_score")
        row["namespace"] = namespace_of(row["identifier"])
        row["status"] = statuses.get(pk, ("ok", ""))
        rows.append(row)
    page.object_list = rows
    return page


def process_status(ids: list[int]) -> dict[int, tuple[str, str]]:
    """(status, detail) per table of ``ids`` from its latest process (one query): "running" (or
    "queued") with the action, "failed" with the action, else "ok"."""
    latest = (
        Process.objects.filter(table_id__in=ids)
        .order_by("table_id", "-id")
        .distinct("table_id")
        .values_list("table_id", "status", "action")
    )
    result = {}
    for table_id, status, action in latest:
        if status in (ProcessStatus.RUNNING, ProcessStatus.CANCELING):
            result[table_id] = ("running", action)
        elif status == ProcessStatus.PENDING:
            result[table_id] = ("queued", action)
        elif status in (ProcessStatus.FAILED, ProcessStatus.KILLED):
            result[table_id] = ("failed", action)
        else:
            result[table_id] = ("ok", "")
    return result


#: The list's columns: (label, sort key or "", numeric).
COLUMNS = (
    ("Table", "name", False),
    ("Format", "format", False),
    ("Catalog / namespace", "catalog", False),
    ("Health", "health", True),
    ("Files", "files", True),
    ("Small files", "small_files", True),
    ("Size", "size", True),
    ("Last maintenance", "last_maintenance", False),
    ("Status", "", False),
)


def sort_headers(filters: dict[str, str], sort: str) -> list[dict[str, Any]]:
    """The head of the list: per column its label, the link that sorts by it (the current order
    reversed when it already does; largest first for counts and health) and ``aria-sort``."""
    current = sort or "name"
    headers = []
    for label, key, numeric in COLUMNS:
        header: dict[str, Any] = {"label": label, "numeric": numeric, "href": "", "aria_sort": ""}
        if key:
            if current.removeprefix("-") == key:
                target = key if current.startswith("-") else "-" + key
                header["aria_sort"] = "descending" if current.startswith("-") else "ascending"
            else:
                target = "-" + key if key in DESCENDING_FIRST else key
            header["href"] = "?" + urlencode({**filters, "sort": target})
        headers.append(header)
    return headers


def list_query(filters: dict[str, str], sort: str) -> str:
    """The query string of the current filters and order (the pager adds ``page``)."""
    return urlencode({**filters, **({"sort": sort} if sort else {})})


def namespace_crumbs(namespace: str) -> list[tuple[str, str]]:
    """(label, namespace) of each level of ``namespace``: ``a.b`` is ``a``, then ``a.b``."""
    parts = [part for part in namespace.split(".") if part]
    return [(part, ".".join(parts[: i + 1])) for i, part in enumerate(parts)]


def namespace_tree(
    tables: QuerySet[Table], *, catalog: str, namespace: str, filters: dict[str, str], catalogs: list[str]
) -> dict[str, Any]:
    """One level of the catalog > namespace > table tree below the current filter. With no catalog
    chosen: ``catalogs`` (the ones the user may see, already read for the filter's menu; no count,
    so the first page never scans every table). Below a catalog: the namespaces one level below
    ``namespace``, each with the tables in it and below it, counted in one grouped query over
    ``tables`` (already filtered, so the counts follow the search, the format and the user's
    teams). ``entries`` are (label, link, count or None), the largest first, at most
    ``TREE_LIMIT``; ``more`` says some were left off."""
    base = {key: value for key, value in filters.items() if value and key not in ("catalog", "namespace")}
    if not catalog:
        grouped: list[tuple[str, dict[str, str], int | None]] = [
            (name, {"catalog": name}, None) for name in catalogs[: TREE_LIMIT + 1]
        ]
        more = len(catalogs) > TREE_LIMIT
    else:
        prefix = f"{namespace}." if namespace else ""
        below = (
            tables.select_related(None)
            .annotate(rest=Substr("identifier", len(prefix) + 1))
            .filter(rest__contains=".")  # a namespace below this one, not a table in it
            .annotate(
                child=Func(F("rest"), Value("."), Value(1), function="split_part", output_field=CharField())
            )
            .values_list("child")
            .annotate(n=Count("id"))
            .order_by("-n", "child")[: TREE_LIMIT + 1]
        )
        grouped = [
            (child, {"catalog": catalog, "namespace": prefix + child}, n) for child, n in below if child
        ]
        more = len(grouped) > TREE_LIMIT
    entries = [(label, "?" + urlencode({**base, **where}), n) for label, where, n in grouped[:TREE_LIMIT]]
    return {"level": "namespaces" if catalog else "catalogs", "entries": entries, "more": more}
