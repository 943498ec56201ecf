"""The periodic metadata refresh at scale (issue 17): a cheap pointer check per table, a full
refresh (``table_refresh``) only for tables whose pointer moved since their last refresh.

A table is refreshed fully when its kept pointer is blank (never refreshed with one, or its last
refresh failed), when its format has no pointer, when the pointer cannot be read (the refresh
records why on the row), or when the pointer differs from the kept one. Every other table is left
untouched: no metadata read, no write, ``refreshed_at`` stays.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from storage.models import Table
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


def needs_refresh(table: Table, report: RefreshPassReport) -> bool:
    """Whether ``table``'s metadata must be re-read: its pointer moved, or cannot be relied on."""
    if not table.metadata_pointer:
        return True
    try:
        pointer = table_pointer(table)
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
    rows = (
        Table.objects.filter(pk__in=list(table_ids))
        .select_related("catalog")
        .only(*POINTER_FIELDS, "catalog__kind", "catalog__name", "catalog__properties")
    )
    for table in rows.order_by("pk"):
        report.checked += 1
        if not needs_refresh(table, report):
            report.unchanged += 1
            continue
        report.refreshed.append(table.pk)
        if refresh is not None:
            refresh(table.pk)
        else:
            _refresh_in_place(table.pk)
    return report


def _refresh_in_place(table_id: int) -> None:
    table = Table.objects.select_related("catalog").filter(pk=table_id).first()
    if table is not None:
        table_refresh(table=table)


def table_id_batches(size: int = CHECK_BATCH) -> Iterable[list[int]]:
    """Every registered table's id, in batches of ``size`` (one query)."""
    ids = list(Table.objects.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(ids), size):
        yield ids[start : start + size]
