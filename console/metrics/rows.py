"""Metrics computed from Lakewarden's own rows at scrape time: a few aggregate queries whatever the
number of tables or processes, never a table's metadata.

- per table (``TABLE_GAUGES``): the facts a refresh keeps on the table row and the overview's
  health score, written straight to the text format (``table_lines``: 10,000 tables are 70,000
  samples, too many to build as prometheus-client objects within a scrape's budget);
- per (format, action): processes by status, durations, retries, failures (one query over the
  history) and the backlog: tables the scheduler would find due now, with the scheduler's rule;
- per storage: cache hits and misses (from the queries), bytes and results kept, evictions.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator

from django.db import connection
from django.db.models import Count, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from processes.health import format_remedies, remedies_of
from processes.models import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    Process,
    ProcessStatus,
    Query,
    QueryStatus,
    TableState,
)
from processes.registry import coordinators
from processes.scheduler import evaluated_key, seen_snapshot_key
from storage.health import TableFacts, table_health
from storage.models import CachedResult, CachedResultState, StorageBackend, Table

# name suffix, help; every one labelled catalog, table, format, table_id
TABLE_GAUGES = (
    ("files", "Live data files (kept on the table row by each refresh)"),
    ("small_files", "Live data files under the small-file threshold"),
    ("bytes", "Bytes of the live data files and the delete files that apply to them"),
    ("snapshots", "Snapshots (instants) kept in the table's timeline"),
    ("delete_files", "Live delete files (position, equality, deletion vectors)"),
    ("health_score", "The overview's health score: 0 healthy .. 100 needs attention now"),
    ("seconds_since_maintenance", "Seconds since the last successful process; +Inf when never"),
)
#: Failed processes counted into the health score, as the overview does.
FAILURE_WINDOW = dt.timedelta(days=7)
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600)
EVICTED_PREFIX = "evicted:"


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def table_rows(now: dt.datetime, tables: QuerySet[Table] | None = None) -> tuple[list[str], list[list]]:
    """The label string of every table (of ``tables``: a team's) and one column of values per
    ``TABLE_GAUGES``: two queries."""
    failures = dict(
        Process.objects.filter(created_at__gte=now - FAILURE_WINDOW, status=ProcessStatus.FAILED)
        .values_list("table_id")
        .annotate(n=Count("id"))
    )
    deletes = "delete_file_count"
    chosen = Table.objects.all() if tables is None else Table.objects.filter(pk__in=tables.values("pk"))
    rows = chosen.order_by().values_list(
        "pk",
        Coalesce("catalog__name", Value("")),
        "name",
        "format",
        "file_count",
        "small_file_count",
        "total_bytes",
        "instant_count",
        deletes,
        "last_maintenance_at",
        "compactable_file_count",
    )
    remedies = format_remedies()
    labels: list[str] = []
    columns: list[list] = [[] for _ in TABLE_GAUGES]
    files, small, size, instants, delete_files, scores, since = columns
    for (
        pk,
        catalog,
        name,
        fmt,
        file_count,
        small_count,
        total,
        instant_count,
        deleted,
        maintained,
        compactable,
    ) in rows:
        labels.append(f'catalog="{_escape(catalog)}",table="{_escape(name)}",format="{fmt}",table_id="{pk}"')
        files.append(file_count)
        small.append(small_count)
        size.append(total)
        instants.append(instant_count)
        delete_files.append(deleted)
        facts = TableFacts(file_count, small_count, instant_count, compactable)
        fixes = remedies_of(remedies, fmt)
        scores.append(table_health(facts, maintained, failures.get(pk, 0), now, fixes).score)
        since.append("+Inf" if maintained is None else max((now - maintained).total_seconds(), 0.0))
    return labels, columns


def table_lines(now: dt.datetime, tables: QuerySet[Table] | None = None) -> Iterator[str]:
    """The per-table families (of ``tables``; default every table) in the Prometheus text format."""
    labels, columns = table_rows(now, tables)
    for (suffix, help_text), column in zip(TABLE_GAUGES, columns, strict=True):
        name = f"lakewarden_table_{suffix}"
        yield f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"
        if column and column[0] is None:  # not kept on the rows: no number rather than a wrong one
            continue
        yield "".join([f"{name}{{{label}}} {value}\n" for label, value in zip(labels, column, strict=True)])


# --- processes ------------------------------------------------------------------------------------


def _process_sql() -> tuple[str, list]:
    """One row per (format, action, status, duration bucket); the bucket is null for a process
    that has not finished (or never started), else the index of the first bound it fits under."""
    finished = "p.started_at is not null and p.finished_at is not null and p.status = any(%s)"
    cases = " ".join(f"when seconds <= {float(bound)!r} then {i}" for i, bound in enumerate(DURATION_BUCKETS))
    sql = f"""
        select format, action, status,
               case when seconds is null then null {cases} else {len(DURATION_BUCKETS)} end,
               count(*), count(*) filter (where retried), coalesce(sum(seconds), 0)
        from (
            select t.format, p.action, p.status, p.retry_of_id is not null as retried,
                   case when {finished} then extract(epoch from p.finished_at - p.started_at) end as seconds
            from {Process._meta.db_table} p join {Table._meta.db_table} t on t.id = p.table_id
        ) d
        group by 1, 2, 3, 4
    """
    return sql, [[str(s) for s in TERMINAL_STATUSES]]


def process_families() -> list:
    """Processes by status; retries and failures; durations of finished processes (one query)."""
    pair_labels = ["format", "action"]
    by_status = GaugeMetricFamily(
        "lakewarden_processes", "Processes in the history by status", labels=[*pair_labels, "status"]
    )
    retries = CounterMetricFamily(
        "lakewarden_process_retries", "Processes that retried an earlier attempt", labels=pair_labels
    )
    failures = CounterMetricFamily(
        "lakewarden_process_failures", "Failed process attempts", labels=pair_labels
    )
    durations = HistogramMetricFamily(
        "lakewarden_process_duration_seconds",
        "Run time (start to finish) of finished processes, by final status",
        labels=[*pair_labels, "status"],
    )
    counts: dict[tuple[str, str, str], int] = {}
    pairs: dict[tuple[str, str], list[int]] = {}
    histograms: dict[tuple[str, str, str], list] = {}
    with connection.cursor() as cursor:
        cursor.execute(*_process_sql())
        rows = cursor.fetchall()
    for fmt, action, status, bucket, count, retried, seconds in rows:
        counts[(fmt, action, status)] = counts.get((fmt, action, status), 0) + count
        sums = pairs.setdefault((fmt, action), [0, 0])
        sums[0] += retried
        sums[1] += count if status == ProcessStatus.FAILED else 0
        if bucket is not None:
            histogram = histograms.setdefault((fmt, action, status), [[0] * (len(DURATION_BUCKETS) + 1), 0.0])
            histogram[0][bucket] += count
            histogram[1] += float(seconds)
    for key, count in sorted(counts.items()):
        by_status.add_metric(list(key), count)
    for key, (per_bucket, total) in sorted(histograms.items()):
        cumulative = list(itertools.accumulate(per_bucket))
        bounds = [*(repr(float(bound)) for bound in DURATION_BUCKETS), "+Inf"]
        durations.add_metric(list(key), list(zip(bounds, cumulative, strict=True)), total)
    for (fmt, action), (retried, failed) in sorted(pairs.items()):
        retries.add_metric([fmt, action], retried)
        failures.add_metric([fmt, action], failed)
    return [by_status, retries, failures, durations]


# --- backlog --------------------------------------------------------------------------------------


def _backlog_sql(pairs: list[tuple[str, str, float, bool]]) -> tuple[str, list]:
    """The scheduler's "due" rule (``processes.scheduler._due_table_ids``) as one query: no active
    process on (table, action), not evaluated within the interval, and, for pairs that wait for
    data, a snapshot the scheduler has not seen."""
    values = ", ".join("(%s, %s, %s::float8, %s, %s, %s)" for _ in pairs)
    state = TableState._meta.db_table
    sql = f"""
        with pair(format, action, interval_s, on_new, evaluated_key, seen_key) as (values {values})
        select pair.format, pair.action, count(t.id)
        from pair join {Table._meta.db_table} t on t.format = pair.format
        where not exists (
                select 1 from {Process._meta.db_table} p
                where p.table_id = t.id and p.action = pair.action and p.status = any(%s))
          and not exists (
                select 1 from {state} ev where ev.table_id = t.id and ev.key = pair.evaluated_key
                and %s - (ev.value #>> '{{}}')::float8 < pair.interval_s)
          and not (pair.on_new and exists (
                select 1 from {state} seen where seen.table_id = t.id and seen.key = pair.seen_key
                and seen.value = to_jsonb(t.current_instant)))
        group by 1, 2
    """
    params: list = []
    for fmt, action, interval, on_new in pairs:
        params += [fmt, action, interval, on_new, evaluated_key(action), seen_snapshot_key(action)]
    return sql, params


def backlog_counts(now: dt.datetime) -> dict[tuple[str, str], int]:
    """Tables due for each enabled (format, action) pair but not running: what the next scheduler
    ticks will evaluate (a factory may still find nothing to do on some)."""
    pairs = []
    for (fmt, action), configured in sorted(coordinators().items()):
        strategy = configured.factory.trigger_strategy(fmt, action)
        pairs.append((fmt, action, strategy.interval.total_seconds(), strategy.on_new_snapshot))
    if not pairs:
        return {}
    sql, params = _backlog_sql(pairs)
    params += [[str(s) for s in ACTIVE_STATUSES], now.timestamp()]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = {(fmt, action): count for fmt, action, count in cursor.fetchall()}
    return {(fmt, action): found.get((fmt, action), 0) for fmt, action, _, _ in pairs}


def backlog_family(now: dt.datetime) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "lakewarden_process_backlog",
        "Tables due for an enabled (format, action) pair and not running it yet",
        labels=["format", "action"],
    )
    for (fmt, action), count in backlog_counts(now).items():
        family.add_metric([fmt, action], count)
    return family


# --- result cache ---------------------------------------------------------------------------------


def cache_families() -> list:
    """Per storage: hits and misses (finished queries), bytes and results kept, evictions."""
    labels = ["storage"]
    hits = CounterMetricFamily(
        "lakewarden_cache_hits", "Queries answered from a cached result", labels=labels
    )
    misses = CounterMetricFamily(
        "lakewarden_cache_misses", "Cached queries that had to be computed", labels=labels
    )
    evictions = CounterMetricFamily(
        "lakewarden_cache_evictions", "Results cleaned because the storage was over its quota", labels=labels
    )
    size = GaugeMetricFamily("lakewarden_cache_bytes", "Bytes of the READY results kept", labels=labels)
    results = GaugeMetricFamily(
        "lakewarden_cache_results", "Cached results by state", labels=[*labels, "state"]
    )
    quota = GaugeMetricFamily(
        "lakewarden_cache_quota_bytes", "The storage's quota, when it has one", labels=labels
    )
    storage_name = Coalesce("cached_result__backend__name", "backend__name", Value(""))
    counted = (
        Query.objects.filter(status=QueryStatus.SUCCESS, cache=True)
        .order_by()
        .values_list(storage_name)
        .annotate(
            hit=Count("id", filter=Q(served_from_cache=True)),
            miss=Count("id", filter=Q(served_from_cache=False)),
        )
    )
    per_storage = {name: (hit, miss) for name, hit, miss in counted}
    kept = (
        CachedResult.objects.order_by()
        .values_list("backend__name", "state")
        .annotate(
            n=Count("id"),
            size=Sum("size_bytes", filter=Q(state=CachedResultState.READY)),
            evicted=Count("id", filter=Q(state_reason__startswith=EVICTED_PREFIX)),
        )
    )
    by_storage: dict[str, list[int]] = {}
    for name, state, n, kept_bytes, evicted in kept:
        results.add_metric([name, state], n)
        totals = by_storage.setdefault(name, [0, 0])
        totals[0] += kept_bytes or 0
        totals[1] += evicted
    for name, quota_bytes in StorageBackend.objects.order_by("name").values_list("name", "quota_bytes"):
        hit, miss = per_storage.get(name, (0, 0))
        kept_bytes, evicted = by_storage.get(name, (0, 0))
        hits.add_metric([name], hit)
        misses.add_metric([name], miss)
        size.add_metric([name], kept_bytes)
        evictions.add_metric([name], evicted)
        if quota_bytes:
            quota.add_metric([name], quota_bytes)
    return [hits, misses, evictions, size, results, quota]
