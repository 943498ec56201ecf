"""The periodic metadata refresh at scale (issue 17): a cheap pointer check per table, a full
refresh (``table_refresh``) only for tables whose pointer moved since their last refresh.

Two beats share it (issue 31): the long pass checks every table (``refresh_tables_task``, minutes
apart), the short one (``refresh_active_tables_task``, seconds apart) only the tables with recent
activity (``active_table_ids``: a commit, a registration or a maintenance within ``ACTIVE_WINDOW``,
at most ``ACTIVE_LIMIT`` of them), so another writer's commit to a busy table shows within seconds
while the cost of a tick stays bounded whatever the number of tables. The short beat refreshes a
table only when its pointer is readable and differs from the kept one (at most once per
``QUEUED_SECONDS``); tables whose format has no pointer are left to the long pass, which
refreshes them fully. A process that commits
refreshes its table itself (``refresh_facts``, from the executor).

A table is refreshed fully when its kept pointer is blank (never refreshed with one, or its last
refresh failed), when its format has no pointer, when the pointer cannot be read (the refresh
records why on the row), or when the pointer differs from the kept one. Every other table is left
untouched: no metadata read, no write, ``refreshed_at`` stays.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django.core.cache import cache
from django.db.models import Q
from django.db.models.functions import Greatest

from storage.catalogs import path_root_catalogs
from storage.io import is_object_store
from storage.models import Catalog, Table
from storage.pointers import table_pointer
from storage.services.tables import table_refresh

logger = logging.getLogger(__name__)

#: Tables one pointer-check task handles (one query loads them).
CHECK_BATCH = 500
#: What a pointer check needs of a row: not the metrics JSON.
POINTER_FIELDS = ("id", "format", "location", "identifier", "catalog", "metadata_pointer")


@dataclass
class RefreshPassReport:
    checked: int = 0
    unchanged: int = 0
    refreshed: list[int] = field(default_factory=list)
    unreadable_pointer: dict[int, str] = field(default_factory=dict)


class _Roots:
    """The path-root catalogs, read once per pass and only when an object-store table needs them
    (its credentials may be its root catalog's): a pass's queries stay bounded."""

    def __init__(self) -> None:
        self._catalogs: list[Catalog] | None = None

    def of(self, table: Table) -> list[Catalog] | None:
        if table.catalog_id is not None or not is_object_store(table.location):
            return None
        if self._catalogs is None:
            self._catalogs = path_root_catalogs()
        return self._catalogs


def needs_refresh(table: Table, report: RefreshPassReport, roots: _Roots | None = None) -> bool:
    """Whether ``table``'s metadata must be re-read: its pointer moved, or cannot be relied on."""
    if not table.metadata_pointer:
        return True
    try:
        pointer = table_pointer(table, roots=(roots or _Roots()).of(table))
    except Exception as error:  # noqa: BLE001 - the full refresh records the problem on the row
        report.unreadable_pointer[table.pk] = f"{type(error).__name__}: {error}"
        return True
    return pointer is None or pointer != table.metadata_pointer


def refresh_changed(
    table_ids: Iterable[int], *, refresh: Callable[[int], object] | None = None
) -> RefreshPassReport:
    """Check the pointers of ``table_ids`` (one query for their rows) and refresh the tables whose
    pointer moved: by ``refresh(table_id)`` when given (a task queues one), else in place."""
    report = RefreshPassReport()
    roots = _Roots()
    for table in _pointer_rows(table_ids):
        report.checked += 1
        if not needs_refresh(table, report, roots):
            report.unchanged += 1
            continue
        report.refreshed.append(table.pk)
        if refresh is not None:
            refresh(table.pk)
        else:
            _refresh_in_place(table.pk)
    return report


def _pointer_rows(table_ids: Iterable[int]) -> Iterable[Table]:
    """The rows of ``table_ids`` with what a pointer check reads (one query), by id."""
    rows = (
        Table.objects.filter(pk__in=list(table_ids))
        .select_related("catalog")
        .only(*POINTER_FIELDS, "catalog__kind", "catalog__name", "catalog__properties")
    )
    return rows.order_by("pk")


def _refresh_in_place(table_id: int) -> None:
    refresh_facts(table_id)


#: A table's facts as a process records them before and after its run (name: Table field).
FACTS = {
    "files": "file_count",
    "small_files": "small_file_count",
    "compactable_files": "compactable_file_count",
    "bytes": "total_bytes",
    "records": "record_count",
    "snapshots": "instant_count",
    "delete_files": "delete_file_count",
    "instant": "current_instant",
}


def table_facts(table: Table) -> dict[str, Any]:
    """The facts the table row keeps now (``FACTS``), with its refresh error when it has one."""
    facts = {name: getattr(table, column) for name, column in FACTS.items()}
    if table.refresh_error:
        facts["refresh_error"] = table.refresh_error
    return facts


def refresh_facts(table_id: int) -> dict[str, Any] | None:
    """Re-read the table's metadata now (``table_refresh``) and answer its facts (None: the table
    is no longer registered)."""
    table = Table.objects.select_related("catalog").filter(pk=table_id).first()
    if table is None:
        return None
    return table_facts(table_refresh(table=table))


#: A table with a commit, a registration or a maintenance within this window is active.
ACTIVE_WINDOW = dt.timedelta(hours=1)
#: At most this many active tables per short tick (the most recently active first): a tick's
#: pointer reads (one object-store request or catalog query each) stay bounded.
ACTIVE_LIMIT = 500
#: How long a queued refresh keeps the short beat from queueing the same table again.
QUEUED_SECONDS = 60


def active_table_ids(
    now: dt.datetime, *, window: dt.timedelta = ACTIVE_WINDOW, limit: int = ACTIVE_LIMIT
) -> list[int]:
    """The tables with recent activity, most recent first (one query)."""
    since = now - window
    recent = Q(last_commit_at__gte=since) | Q(registered_at__gte=since) | Q(last_maintenance_at__gte=since)
    rows = (
        Table.objects.filter(recent)
        .annotate(active_at=Greatest("last_commit_at", "registered_at", "last_maintenance_at"))
        .order_by("-active_at", "pk")
        .values_list("pk", flat=True)
    )
    return list(rows[:limit])


def refresh_moved(table_ids: Iterable[int], *, refresh: Callable[[int], object]) -> RefreshPassReport:
    """The short beat's check: ``refresh(table_id)`` for each table of ``table_ids`` whose pointer
    is readable and differs from the one its last refresh kept (blank: none kept yet, as after a
    registration or a failed refresh), unless one was queued within ``QUEUED_SECONDS`` (one query
    for the rows, one pointer read per table)."""
    report = RefreshPassReport()
    for table, pointer, error in _read_pointers(list(_pointer_rows(table_ids))):
        report.checked += 1
        if error:  # the long pass refreshes it and records why
            report.unreadable_pointer[table.pk] = error
            continue
        if pointer is None or pointer == table.metadata_pointer:
            report.unchanged += 1
            continue
        if cache.add(queued_key(table.pk), 1, timeout=QUEUED_SECONDS):
            report.refreshed.append(table.pk)
            refresh(table.pk)
    return report


#: Pointer reads at once in a short tick: an object store's listing waits on the network (about
#: 20 ms on a local SeaweedFS), so 500 of them one after the other would outlast the beat.
POINTER_THREADS = 8


def _read_pointers(tables: list[Table]) -> list[tuple[Table, str | None, str]]:
    """(table, pointer, error) for each of ``tables`` in their order. Tables by location are read
    on ``POINTER_THREADS`` threads (no database access there: the root catalogs are read first,
    here); an Iceberg catalog's tables one after the other, through their catalog."""
    roots = _Roots()
    jobs = [(table, roots.of(table)) for table in tables]

    def read(job: tuple[Table, list[Catalog] | None]) -> tuple[Table, str | None, str]:
        table, table_roots = job
        try:
            return table, table_pointer(table, roots=table_roots), ""
        except Exception as error:  # noqa: BLE001 - reported per table
            return table, None, f"{type(error).__name__}: {error}"

    by_location = [job for job in jobs if job[0].catalog_id is None]
    with ThreadPoolExecutor(max_workers=POINTER_THREADS) as pool:
        answers = {answer[0].pk: answer for answer in pool.map(read, by_location)}
    answers.update((job[0].pk, read(job)) for job in jobs if job[0].catalog_id is not None)
    return [answers[table.pk] for table in tables]


def queued_key(table_id: int) -> str:
    """The cache key saying a refresh of the table is queued (the refresh task deletes it)."""
    return f"lakewarden:refresh-queued:{table_id}"


def table_id_batches(size: int = CHECK_BATCH) -> Iterable[list[int]]:
    """Every registered table's id, in batches of ``size`` (one query)."""
    ids = list(Table.objects.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(ids), size):
        yield ids[start : start + size]
