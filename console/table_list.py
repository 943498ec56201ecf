"""The tables list (issue 34): sorted, filtered and paged in the database, a fixed number of
queries per page whatever the number of tables. Next and previous carry a row's sort key and id
(``?after=``/``?before=``), so any page is a few ranges of the sort's index; a numbered page is an
index walk from the nearer end. The health score is the overview's, stored on the table row
(processes/health.py ``health_store``); a row shows catalog, namespace, last maintenance and
status."""

from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import CharField, Count, F, Field, Func, IntegerField, OrderBy, Q, QuerySet, Value
from django.db.models.functions import Collate, Substr

from processes.health import BEST_FIRST, WORST_FIRST
from processes.models import Process, ProcessStatus
from storage.errors import InvalidInput
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
#: index finds it; walking a sort's index would visit every table the filter skips first). A search
#: counts its matches up to this many and says "more than" past it: counting every match of a
#: common string costs a scan of every table, and a page of them is a short walk of the sort's index.
SORT_FOUND_AT_MOST = 5000


@dataclass(frozen=True)
class SortKey:
    """One column of a sort: its name in the page's queries (``alias``), the row field holding its
    value, its direction and where its nulls go (PostgreSQL's default when the order says none)."""

    alias: str
    field: str
    expression: Any
    descending: bool
    nulls_first: bool
    nullable: bool

    def order(self, reverse: bool = False) -> OrderBy:
        descending, nulls_first = self.descending != reverse, self.nulls_first != reverse
        nulls = {"nulls_first": True} if nulls_first else {"nulls_last": True}
        return F(self.alias).desc(**nulls) if descending else F(self.alias).asc(**nulls)


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


def sort_keys(sort: str) -> list[SortKey]:
    """The columns of ``sort`` (``-key`` reverses; "" is by name) in order, the last one the id."""
    keys = []
    for i, item in enumerate(_order(sort.removeprefix("-"), sort.startswith("-"))):
        if isinstance(item, str):
            item = F(item[1:]).desc() if item.startswith("-") else F(item).asc()
        elif not isinstance(item, OrderBy):
            item = item.asc()
        expression = item.expression
        field = (
            expression.get_source_expressions()[0] if isinstance(expression, Collate) else expression
        ).name
        nulls_first = True if item.nulls_first else False if item.nulls_last else item.descending
        nullable = _key_field(field)[1]
        keys.append(SortKey(f"sort_{i}", field, expression, item.descending, nulls_first, nullable))
    return keys


# --- keyset positions: ?after= and ?before= carry a row's sort key and id ---------------------


def _key_field(path: str) -> tuple[Field, bool]:
    """The model field of a row field (``catalog__name`` through its relation) and whether a row
    may hold null there."""
    model, nullable = Table, False
    *relations, name = path.split("__")
    for relation in relations:
        link = model._meta.get_field(relation)
        nullable, model = nullable or link.null, link.related_model
    field = model._meta.get_field(name)
    return field, nullable or field.null


def cursor_of(keys: list[SortKey], row: dict[str, Any]) -> str:
    """The position just past ``row`` (a dict holding each key's field) as URL-safe text."""
    values = [row[key.field] for key in keys]
    text = json.dumps(
        [v.isoformat() if isinstance(v, dt.datetime) else v for v in values], separators=(",", ":")
    )
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def cursor_values(keys: list[SortKey], cursor: str, *, name: str) -> list[Any]:
    """The key values ``cursor_of`` wrote, each checked against its column; InvalidInput (a 400)
    for anything else: a link of another sort, or edited by hand."""
    problem = InvalidInput(f"{name} is not a position in this list: follow the list's own links", field=name)
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except ValueError as error:
        raise problem from error
    if not isinstance(values, list) or len(values) != len(keys):
        raise problem
    checked = []
    for key, value in zip(keys, values, strict=True):
        field, nullable = _key_field(key.field)
        kind = int if isinstance(field, IntegerField) else str  # text, or a time as ISO text
        if (value is None and not nullable) or (value is not None and type(value) is not kind):
            raise problem
        try:
            checked.append(field.to_python(value))
        except ValidationError as error:
            raise problem from error
    return checked


def _segments(keys: list[SortKey], values: list[Any], *, reverse: bool) -> list[list[tuple[str, str, Any]]]:
    """The rows past ``values`` (before them when ``reverse``) as a union of conditions, each a list
    of (alias, operator, value) on the leading keys: equal to the position's first ``i`` keys and
    past it on key ``i``. Each is one range of the sort's index, so a deep page costs what the
    first does (an OR of them would be a walk from the index's start)."""
    segments = []
    for i, (key, value) in enumerate(zip(keys, values, strict=True)):
        ties = [
            (k.alias, "isnull", None) if v is None else (k.alias, "=", v)
            for k, v in zip(keys[:i], values[:i], strict=True)
        ]
        descending, nulls_first = key.descending != reverse, key.nulls_first != reverse
        if value is None:
            beyond = [[(key.alias, "notnull", None)]] if nulls_first else []
        else:
            past = [(key.alias, "<" if descending else ">", value)]
            beyond = [past] if nulls_first or not key.nullable else [past, [(key.alias, "isnull", None)]]
        segments += [ties + condition for condition in beyond]
    return segments


_LOOKUPS = {"=": "exact", "<": "lt", ">": "gt", "isnull": "isnull", "notnull": "isnull"}


def _q(segment: list[tuple[str, str, Any]]) -> Q:
    return Q(
        *(
            Q(**{f"{alias}__{_LOOKUPS[op]}": (op == "isnull") if op in ("isnull", "notnull") else value})
            for alias, op, value in segment
        )
    )


def _sql(segments: list[list[tuple[str, str, Any]]]) -> tuple[str, list[Any]]:
    """``segments`` as a WHERE condition on the columns named by their aliases."""
    parts, params = [], []
    for segment in segments:
        terms = []
        for alias, op, value in segment:
            if op in ("isnull", "notnull"):
                terms.append(f'"{alias}" IS {"" if op == "isnull" else "NOT "}NULL')
            else:
                terms.append(f'"{alias}" {op} %s')
                params.append(value)
        parts.append("(" + " AND ".join(terms) + ")")
    return ("(" + " OR ".join(parts) + ")") if parts else "FALSE", params


def _keyed(tables: QuerySet[Table], keys: list[SortKey]) -> QuerySet[Table]:
    return tables.select_related(None).order_by().annotate(**{key.alias: key.expression for key in keys})


def _walk(
    tables: QuerySet[Table], keys: list[SortKey], values: list[Any] | None, *, reverse: bool
) -> list[int]:
    """The ids of up to a page and one row past ``values`` (before them when ``reverse``, then
    returned nearest first): one query, each segment of ``_segments`` an index range of at most a
    page, merged in order."""
    keyed = _keyed(tables, keys)
    order = [key.order(reverse) for key in keys]
    limit = PAGE_SIZE + 1
    if values is None:
        return list(keyed.order_by(*order).values_list("id", flat=True)[:limit])
    parts = [
        keyed.filter(_q(segment)).order_by(*order).values_list(*(key.alias for key in keys))[:limit]
        for segment in _segments(keys, values, reverse=reverse)
    ]
    if not parts:
        return []
    merged = parts[0].union(*parts[1:], all=True).order_by(*order) if len(parts) > 1 else parts[0]
    return [row[-1] for row in merged[:limit]]


def _found(
    tables: QuerySet[Table], keys: list[SortKey], values: list[Any] | None, *, reverse: bool, offset: int
) -> tuple[list[int], int]:
    """A search's page found by its trigram index and sorted, and its number of matches, in one
    query: the ids of up to a page and one row (past ``values``, or from ``offset``) and the
    count, at most ``SORT_FOUND_AT_MOST`` + 1 (more: the page is not this one; walk the index)."""
    found = _keyed(tables, keys).values_list(*(key.alias for key in keys))[: SORT_FOUND_AT_MOST + 1]
    inner, params = found.query.sql_with_params()
    where, where_params = (
        _sql(_segments(keys, values, reverse=reverse)) if values is not None else ("TRUE", [])
    )
    order = ", ".join(
        f'"{key.alias}" {"DESC" if (key.descending != reverse) else "ASC"}'
        f" NULLS {'FIRST' if (key.nulls_first != reverse) else 'LAST'}"
        for key in keys
    )
    sql = (
        f'SELECT "{keys[-1].alias}", n FROM (SELECT *, count(*) OVER () AS n FROM ({inner}) found) counted'
        f" WHERE {where} ORDER BY {order} LIMIT %s OFFSET %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *where_params, PAGE_SIZE + 1, offset])
        rows = cursor.fetchall()
    if rows:
        return [pk for pk, _ in rows], rows[0][1]
    # past the end: nothing to count in that query
    return [], tables.order_by().values("id")[: SORT_FOUND_AT_MOST + 1].count()


@dataclass
class TablePage:
    """A page of the tables list: ``object_list`` its rows; ``count`` the tables in the list (more
    than that when ``more``: a search past ``SORT_FOUND_AT_MOST``); ``number`` and ``num_pages``
    when known (a page reached by ``?page=``; ``num_pages`` not when ``more``); ``next`` and
    ``previous`` the positions for ``?after=`` and ``?before=`` ("" at an end)."""

    object_list: list[dict[str, Any]]
    count: int
    more: bool
    number: int | None
    num_pages: int | None
    next: str = ""
    previous: str = ""

    @property
    def nearby(self) -> list[int]:
        """The page numbers linked around a numbered page (two each side)."""
        if self.number is None:
            return []
        last = self.num_pages if self.num_pages is not None else self.number + (2 if self.next else 0)
        return list(range(max(1, self.number - 2), min(last, self.number + 2) + 1))


def _number(number: Any) -> int:
    """The page number of ``?page=`` (1 for anything but a positive whole number)."""
    try:
        return max(1, int(number))
    except (TypeError, ValueError):
        return 1


def _numbered(
    tables: QuerySet[Table], keys: list[SortKey], number: Any, count: int, more: bool
) -> tuple[list[int], int]:
    """The ids of page ``number`` ("last": the last) in order and its number, read from the nearer
    end (an index walk is as long as its offset); with ``more`` from the start, a row past the page
    with it. A filtered list short enough (``SORT_FOUND_AT_MOST``) is found first and sorted, not
    walked in index order."""
    pages = max(1, -(-count // PAGE_SIZE))
    number = pages if str(number) == "last" and not more else _number(number)
    number = number if more else min(number, pages)
    keyed = _keyed(tables, keys)
    start, stop = (number - 1) * PAGE_SIZE, number * PAGE_SIZE + (1 if more else 0)
    forward = more or start <= count - stop
    if forward:
        window = keyed.order_by(*(key.order() for key in keys))[start:stop]
    else:
        window = keyed.order_by(*(key.order(reverse=True) for key in keys))[
            max(0, count - stop) : count - start
        ]
    ids = window.values_list("id", flat=True)
    if tables.query.where and not more and count <= SORT_FOUND_AT_MOST:
        # one transaction: the planner's settings are back at its end
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off")
            found = list(ids)
    else:
        found = list(ids)
    return (found if forward else found[::-1]), number


def table_page(
    tables: QuerySet[Table],
    *,
    sort: str,
    number: Any = None,
    after: str = "",
    before: str = "",
    searched: bool = False,
) -> TablePage:
    """A page of ``tables`` in ``sort`` order, its ``object_list`` the rows as dicts with
    ``health`` (the stored score), ``namespace`` and ``status`` (``process_status``). The page is
    the one past ``after`` or before ``before`` (a row's sort key and id, ``cursor_of``: ranges of
    the sort's index however deep), else page ``number``. A search (``searched``) is found by its
    trigram index, counted and sorted in one query while it finds at most ``SORT_FOUND_AT_MOST``
    tables, else walked in the sort's index and counted as "more than". Then those rows alone are
    read: four or five queries in all."""
    keys = sort_keys(sort)
    cursor, reverse = (after, False) if after else (before, True) if before else ("", False)
    values = cursor_values(keys, cursor, name="after" if after else "before") if cursor else None
    ids: list[int] | None = None
    page_number: int | None = None
    if searched:
        offset = 0 if values is not None or str(number) == "last" else (_number(number) - 1) * PAGE_SIZE
        found, count = _found(tables, keys, values, reverse=reverse, offset=offset)
        more, count = count > SORT_FOUND_AT_MOST, min(count, SORT_FOUND_AT_MOST)
        if not more and values is not None:
            ids = found
        elif not more and str(number) != "last" and offset < max(count, 1):
            ids, page_number = found, offset // PAGE_SIZE + 1
    else:
        count, more = tables.order_by().count(), False
    if values is not None:
        ids = _walk(tables, keys, values, reverse=reverse) if ids is None else ids
        if (len(ids) <= PAGE_SIZE) if reverse else not ids:
            # before the first page: the first page; past the last one: the last
            number = 1 if reverse else "last"
            values, ids, reverse = None, None, False
    if ids is None and more and str(number) == "last":
        ids, reverse = _walk(tables, keys, None, reverse=True), True
    elif ids is None:
        ids, page_number = _numbered(tables, keys, number, count, more)
    num_pages = None if more else max(1, -(-count // PAGE_SIZE))
    if page_number is not None:
        has_previous = page_number > 1
        has_next = len(ids) > PAGE_SIZE if more or values is not None else page_number < (num_pages or 1)
    elif reverse:
        has_previous, has_next = len(ids) > PAGE_SIZE, values is not None
    else:
        has_previous, has_next = True, len(ids) > PAGE_SIZE
    page = TablePage([], count, more, page_number, num_pages)
    return _filled(page, ids[:PAGE_SIZE][::-1] if reverse else ids[:PAGE_SIZE], keys, has_previous, has_next)


def _filled(
    page: TablePage, ids: list[int], keys: list[SortKey], has_previous: bool, has_next: bool
) -> TablePage:
    """``page`` with the rows of ``ids`` (two queries) and the positions of its first and last."""
    rows = {row["id"]: row for row in Table.objects.filter(pk__in=ids).values(*ROW_FIELDS)}
    ids = [pk for pk in ids if pk in rows]
    if ids:
        page.next = cursor_of(keys, rows[ids[-1]]) if has_next else ""
        page.previous = cursor_of(keys, rows[ids[0]]) if has_previous else ""
    statuses = process_status(ids)
    for pk in ids:
        row = rows[pk]
        row["health"] = row.pop("health_score")
        row["namespace"] = namespace_of(row["identifier"])
        row["status"] = statuses.get(pk, ("ok", ""))
        page.object_list.append(row)
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
