"""What the landing page shows: tables needing attention (with why), processes now, recent failures,
liveness, totals. Reads only Lakewarden's own database: bounded queries, no table metadata. The
health ranking and beat's liveness are the domain's (processes/health.py, which the alert rules
read too); what is here is the page's own lists and its shared worker ping."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from console.health import recent_workers
from processes import health
from processes.models import ACTIVE_STATUSES, Process, ProcessStatus
from storage.models import Table


def _of(tables: QuerySet[Table] | None) -> QuerySet[Process]:
    """Processes of ``tables`` (None: of every table)."""
    processes = Process.objects.all()
    return processes if tables is None else processes.filter(table__in=tables.values("pk"))


def running_processes(tables: QuerySet[Table] | None = None):
    return (
        _of(tables)
        .select_related("table")
        .defer("table__metrics")
        .filter(status__in=ACTIVE_STATUSES)
        .order_by("created_at")[:20]
    )


def recent_failures(hours: int = 24, tables: QuerySet[Table] | None = None):
    since = timezone.now() - dt.timedelta(hours=hours)
    return (
        _of(tables)
        .select_related("table")
        .defer("table__metrics")
        .filter(status=ProcessStatus.FAILED, finished_at__gte=since)
        .order_by("-finished_at")[:20]
    )


def liveness(*, ping_timeout: float = 0.8, shared: bool = False) -> dict[str, Any]:
    """Workers answering a ping and beat's last tick (``processes.health.liveness``). ``shared``:
    the console's polled fragment takes the last ping any console process made when it is recent
    (``recent_workers``)."""
    ping = recent_workers if shared else health.check_workers
    return health.liveness(ping_timeout=ping_timeout, ping=ping)
