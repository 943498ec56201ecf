"""The charts of a table page, drawn from the metrics kept on the table row and its process history."""

from __future__ import annotations

from console.charts import durations_svg, histogram_svg, timeline_svg
from processes.models import TERMINAL_STATUSES, Process
from storage.metrics import BUCKETS_MIB, bucket_labels
from storage.models import Table


def _small_bucket(small_file_bytes: int) -> int | None:
    """The last bucket whose files are all small (the threshold line is drawn after it)."""
    last = None
    for index, bound in enumerate(BUCKETS_MIB):
        if bound * 1024 * 1024 <= small_file_bytes:
            last = index
    return last


def table_charts(table: Table) -> dict:
    metrics = table.metrics or {}
    series = metrics.get("timeline", [])
    small = metrics.get("small_file_bytes", 0)
    marker = _small_bucket(small)
    marker_label = f"small < {small // (1024 * 1024)} MiB (target/8)" if small else ""
    histogram = metrics.get("size_histogram")
    partitions = [
        {
            **p,
            "chart": histogram_svg(
                bucket_labels(),
                p["histogram"],
                title=f"{p['path'] or '(unpartitioned)'}",
                marker_after=marker,
                marker_label=marker_label,
            ),
        }
        for p in metrics.get("partitions", [])[:6]
    ]
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
        "histogram": histogram_svg(
            bucket_labels(),
            histogram,
            title="File sizes (all live files)",
            marker_after=marker,
            marker_label=marker_label,
        )
        if histogram
        else None,
        "partitions": partitions,
        "partition_count": metrics.get("partition_count", 0),
        "durations": durations_svg(durations, title="Process durations"),
        "has_metrics": bool(metrics),
    }
