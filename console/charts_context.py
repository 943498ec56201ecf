"""The charts of a table page, drawn from the metrics kept on the table row and its process history."""

from __future__ import annotations

import hashlib
import logging

from django.core.cache import cache
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL
from django.utils.safestring import SafeString

from console.chart_axes import binary_size, size_bars, size_range_label, small_bars
from console.charts import durations_svg, histogram_svg, timeline_svg
from processes.models import ACTIVE_STATUSES, TERMINAL_STATUSES, Process
from storage.metrics import BUCKETS_MIB, bucket_labels
from storage.models import Table

logger = logging.getLogger(__name__)

#: Drawn charts are kept this long at most; any change they show changes their key sooner.
CHARTS_SECONDS = 24 * 3600


def _small_bucket(small_file_bytes: int) -> int | None:
    """The last bucket whose files are all small (the threshold line is drawn after it)."""
    last = None
    for index, bound in enumerate(BUCKETS_MIB):
        if bound * 1024 * 1024 <= small_file_bytes:
            last = index
    return last


def with_chart_facts(tables: QuerySet[Table]) -> QuerySet[Table]:
    """``tables`` with what the charts' cache key needs beyond the row, read in the same query
    through indexes: the newest process of the table (a new process changes it) and how many are
    active (a process finishing lowers it). The metrics JSON is left to a cache miss."""
    process, table = Process._meta.db_table, Table._meta.db_table
    mine = f'FROM "{process}" p WHERE p.table_id = "{table}".id'
    active = ", ".join(["%s"] * len(ACTIVE_STATUSES))
    return tables.defer("metrics").annotate(
        # Plain SQL: the ORM spends more CPU composing two subqueries than Postgres answering them.
        chart_newest_process=RawSQL(f"SELECT max(p.id) {mine}", ()),
        chart_active_processes=RawSQL(
            f"SELECT count(*) {mine} AND p.status IN ({active})",
            tuple(str(status) for status in ACTIVE_STATUSES),
        ),
    )


def _charts_key(table: Table) -> str:
    """Everything the charts are drawn from: the row's metrics (replaced with ``refreshed_at`` by
    every refresh) and its finished processes (for the durations chart)."""
    if not hasattr(table, "chart_newest_process"):
        table = with_chart_facts(Table.objects.filter(pk=table.pk)).get()
    facts = (
        table.pk,
        table.location,
        table.current_instant,
        table.refreshed_at.isoformat() if table.refreshed_at else "",
        table.chart_newest_process,
        table.chart_active_processes,
    )
    return "lakewarden:table-charts:v3:" + hashlib.sha256(repr(facts).encode()).hexdigest()


def cached(key: str):
    """``cache.get(key)``, None when the cache cannot answer: it only saves work, an outage must
    not break a page."""
    try:
        return cache.get(key)
    except Exception:
        logger.warning("cache unavailable", exc_info=True)
        return None


def remember(key: str, value, seconds: int) -> None:
    """``cache.set``, skipped when the cache cannot answer."""
    try:
        cache.set(key, value, seconds)
    except Exception:
        logger.warning("cache unavailable", exc_info=True)


def table_charts(table: Table) -> dict:
    """The charts of a table page, drawn once per change of what they show (Django's cache)."""
    key = _charts_key(table)
    charts = cached(key)
    if charts is None:
        charts = _draw(table)
        remember(key, charts, CHARTS_SECONDS)
    return charts


def _files(count: int) -> str:
    return f"{count:,} file{'' if count == 1 else 's'}"


def _size_charts(metrics: dict, table: Table) -> tuple[SafeString | None, list[dict]]:
    """The table's file-size histogram and those of its busiest partitions, on one scale: the
    power-of-two sizes from the table's smallest to its largest file. Metrics kept before
    ``size_log2`` existed draw the fixed buckets until the next refresh."""
    small = metrics.get("small_file_bytes", 0)
    marker_label = f"small < {small // (1024 * 1024)} MiB (target/8)" if small else ""
    log2 = metrics.get("size_log2")
    if log2 is not None:
        bars = size_bars(log2)
        labels = [size_range_label(low, high) for low, high, _files in bars]
        marker = small_bars(bars, small)

        def counts(of: dict) -> list[int]:
            return [
                sum(int(of["log2"].get(str(e), 0)) for e in range(low, high)) for low, high, _files in bars
            ]
    else:
        labels, marker = bucket_labels(), _small_bucket(small)

        def counts(of: dict) -> list[int]:
            return of["histogram"]

    def chart(of: dict, title: str) -> SafeString:
        return histogram_svg(labels, counts(of), title=title, marker_after=marker, marker_label=marker_label)

    whole = {"log2": log2, "histogram": metrics.get("size_histogram")}
    files = sum(whole["histogram"] or []) if log2 is None else sum(int(v) for v in log2.values())
    histogram = (
        chart(whole, f"File sizes (all live files): {_files(files)}, {binary_size(table.total_bytes or 0)}")
        if files
        else None
    )
    partitions = [
        {**p, "chart": chart(p, f"{p['path'] or '(unpartitioned)'}: {_files(p['files'])}")}
        for p in metrics.get("partitions", [])[:6]
        if log2 is None or "log2" in p
    ]
    return histogram, partitions


def _draw(table: Table) -> dict:
    metrics = table.metrics or {}
    series = metrics.get("timeline", [])
    histogram, partitions = _size_charts(metrics, table)
    finished = (
        Process.objects.filter(
            table=table, status__in=TERMINAL_STATUSES, started_at__isnull=False, finished_at__isnull=False
        )
        .order_by("-finished_at")
        .values_list("finished_at", "started_at", "status", "action")[:100]
    )
    durations = [
        (finished_at.isoformat(), (finished_at - started_at).total_seconds(), status, action)
        for finished_at, started_at, status, action in reversed(list(finished))
    ]
    return {
        "records": timeline_svg(series, "records", "Records after each snapshot"),
        "files": timeline_svg(series, "files", "Live data files after each snapshot"),
        "bytes": timeline_svg(series, "bytes", "Bytes after each snapshot", as_bytes=True),
        "histogram": histogram,
        "partitions": partitions,
        "partition_count": metrics.get("partition_count", 0),
        "durations": durations_svg(durations, title="Process durations"),
        "has_metrics": bool(metrics),
    }
