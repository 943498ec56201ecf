"""A simulated platform: benefit-ranked scheduling against the older interval order, side by side.

Issue 31's benchmark. ``--tables`` Iceberg and Delta tables (half each) receive small files from
writers at different rates (a few hot, some warm, most cold), the same seeded workload for both
orders; one resource group (one heavy worker: ``--slots`` processes at once, ``--budget``
worker-seconds per rolling hour) runs compactions. The real scheduler tick decides
(``processes.scheduler.schedule_tick`` on Postgres, with the group's budgets and the decisions it
records), once with ``LAKEWARDEN_SCHEDULER_RANKING`` on and once off.

**The compactions are simulated**: a bench factory (``BenchRewriteFactory``) offers ``rewrite`` on
both formats and triggers a process when a table holds at least 5 compactable small files (the
real rewrite's ``min-input-files``); the bench starts each process at once and, after the time a
run of that size takes (``RUN_OVERHEAD`` + bytes read and written at ``RUN_THROUGHPUT``), marks it
SUCCESS with its measured cost and applies its effect to the table's facts in the database (small
files merged into 128 MiB files, a new snapshot). No table files are written, read or listed; the
writers' appends are facts too. What is measured is the scheduler's choice, not Spark.

Reported: small-file debt (small files over all tables, the time average and the end; the 95th
percentile per table) and worker-seconds spent, per order; then, on the same number of tables and
in real time, the time from another writer's commit to the console showing it, through the short
pointer beat (bench/_commit_visibility.py; the beat's cost at 10,000 tables is
bench/fresh_figures.py's). A process's own commit needs no beat: it refreshes its table's facts in
its task (processes/executor.py), so the console shows it when the process shows SUCCESS.

Runs in its own database (``lakewarden_bench_platform``; ``LAKEWARDEN_BENCH_DATABASE_URL`` names
another), since it deletes every table row first.

    .venv/bin/python bench/platform_sim.py --tables 200 --hours 6
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault(
    "LAKEWARDEN_BENCH_DATABASE_URL",
    "postgresql://lakewarden:lakewarden@127.0.0.1:5432/lakewarden_bench_platform",
)

MIB = 1024 * 1024
SMALL_FILE = 1 * MIB
TARGET = 128 * MIB
#: What a simulated compaction costs: a fixed start (Spark job, planning, commit) plus the bytes.
RUN_OVERHEAD = 20.0
RUN_THROUGHPUT = 40 * MIB
TICK = dt.timedelta(seconds=60)
#: Small files per hour a writer adds, by kind, and the share of tables of each kind.
RATES = {"hot": 240.0, "warm": 20.0, "cold": 2.0}
SHARES = {"hot": 0.02, "warm": 0.18, "cold": 0.80}
BACKLOG = {"hot": 300, "warm": 100, "cold": 30}


@dataclass
class Facts:
    small: int
    large: int
    instant: int = 1

    @property
    def compactable(self) -> int:
        return self.small if self.small >= 5 else 0


@dataclass
class Outcome:
    debt: list[int] = field(default_factory=list)
    p95: list[float] = field(default_factory=list)
    worker_seconds: float = 0.0
    runs: int = 0
    small_files_removed: int = 0
    tick_seconds: list[float] = field(default_factory=list)
    below_minimum: int = 0


def workload(tables: int, hours: float, seed: int):
    """Each table's kind and initial facts, and per tick the small files each table's writer adds."""
    import numpy as np

    rng = np.random.default_rng(seed)
    kinds = []
    for kind, share in SHARES.items():
        kinds += [kind] * round(tables * share)
    kinds = (kinds + ["cold"] * tables)[:tables]
    rng.shuffle(kinds)
    initial = [Facts(int(rng.integers(0, BACKLOG[k] + 1)), int(rng.integers(5, 60))) for k in kinds]
    ticks = int(hours * 3600 / TICK.total_seconds())
    per_tick = np.array([RATES[k] * TICK.total_seconds() / 3600 for k in kinds])
    appends = rng.poisson(per_tick, size=(ticks, tables))
    return kinds, initial, appends


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=200)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--budget", type=int, default=1800, help="worker-seconds per rolling hour")
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--rank-tables", type=int, default=20_000, help="due tables ranked at once (0: skip)")
    parser.add_argument(
        "--writers", type=int, default=8, help="tables another writer commits to (visibility)"
    )
    parser.add_argument("--commits", type=int, default=30, help="commits waited for in the console (0: skip)")
    parser.add_argument("--no-record", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()

    import logging

    from common import django_on_bench_database, write_section

    django_on_bench_database()
    logging.getLogger("processes").setLevel(logging.WARNING)  # a line per tick otherwise
    kinds, initial, appends = workload(args.tables, args.hours, args.seed)
    results = {}
    for ranking in (False, True):
        results[ranking] = simulate(args, initial, appends, ranking=ranking)
        print(_line("benefit-ranked" if ranking else "interval order", results[ranking]), flush=True)
    body = _report(args, kinds, results)
    if args.commits:
        body += visibility(args)
    if args.rank_tables:
        body += rank_scale(args.rank_tables)
    print(body)
    if not args.no_record:
        write_section("Simulated platform: benefit ranking vs interval order (bench/platform_sim.py)", body)


def simulate(args, initial: list[Facts], appends, *, ranking: bool) -> Outcome:
    from django.conf import settings
    from django.utils import timezone

    from processes.decisions import Decision, DecisionKind
    from processes.groups.models import DEFAULT_GROUP, ResourceGroup
    from processes.models import Process, ProcessStatus, TableState
    from processes.scheduler import schedule_tick
    from storage.models import Table

    settings.LAKEWARDEN_SCHEDULER_RANKING = ranking
    _install_bench_factory()
    Process.objects.all().delete()
    TableState.objects.all().delete()
    Decision.objects.all().delete()
    Table.objects.all().delete()
    ResourceGroup.objects.exclude(name=DEFAULT_GROUP).delete()
    ResourceGroup.objects.update_or_create(
        name=DEFAULT_GROUP,
        defaults={"max_concurrency": args.slots, "compute_budget_seconds": args.budget, "held": {}},
    )
    facts = [Facts(f.small, f.large) for f in initial]
    start = timezone.now().replace(microsecond=0)
    tables = Table.objects.bulk_create(
        Table(
            name=f"t{i}",
            identifier=f"platform.t{i}",
            format="iceberg" if i % 2 else "delta",
            location=f"/bench/platform/t{i}",
            current_instant="1",
            refreshed_at=start,
        )
        for i in range(len(facts))
    )
    ids = [t.pk for t in tables]
    index = {pk: i for i, pk in enumerate(ids)}
    _save_facts(ids, facts, range(len(facts)), start)
    Table.objects.update(registered_at=start)
    outcome = Outcome()
    running: dict[int, tuple[dt.datetime, int, float]] = {}  # process -> (finish, small files, seconds)
    for tick, added in enumerate(appends):
        now = start + tick * TICK
        changed = set()
        for pk, (finish, merged, seconds) in list(running.items()):
            if finish > now:
                continue
            process = Process.objects.get(pk=pk)
            i = index[process.table_id]
            facts[i].small -= merged
            facts[i].large += math.ceil(merged * SMALL_FILE / TARGET)
            facts[i].instant += 1
            changed.add(i)
            moved = merged * SMALL_FILE
            Process.objects.filter(pk=pk).update(
                status=ProcessStatus.SUCCESS,
                finished_at=finish,
                measured={"cost": {"worker_seconds": seconds, "bytes_read": moved, "bytes_written": moved}},
            )
            Table.objects.filter(pk=process.table_id).update(last_maintenance_at=finish)
            outcome.worker_seconds += seconds
            outcome.runs += 1
            outcome.small_files_removed += merged - math.ceil(merged * SMALL_FILE / TARGET)
            del running[pk]
        for i, n in enumerate(added):
            if n:
                facts[i].small += int(n)
                facts[i].instant += 1
                changed.add(i)
        _save_facts(ids, facts, changed, now)
        began = time.perf_counter()
        report = schedule_tick(now=now)
        outcome.tick_seconds.append(time.perf_counter() - began)
        for process in Process.objects.filter(pk__in=report.triggered):
            merged = facts[index[process.table_id]].compactable
            seconds = RUN_OVERHEAD + 2 * merged * SMALL_FILE / RUN_THROUGHPUT
            running[process.pk] = (now + dt.timedelta(seconds=seconds), merged, seconds)
            Process.objects.filter(pk=process.pk).update(status=ProcessStatus.RUNNING, started_at=now)
        smalls = [f.small for f in facts]
        outcome.debt.append(sum(smalls))
        outcome.p95.append(_percentile(smalls, 0.95))
    end = start + len(appends) * TICK
    for finish, _, seconds in running.values():  # the part of the runs still going at the end
        outcome.worker_seconds += seconds - max(0.0, (finish - end).total_seconds())
    outcome.below_minimum = Decision.objects.filter(kind=DecisionKind.BELOW_BENEFIT).count()
    return outcome


def visibility(args) -> str:
    """The time from another writer's commit to the console showing it (bench/_commit_visibility.py)."""
    from _commit_visibility import GIVE_UP, POLL, TARGET_SECONDS, measure

    result = measure(tables=args.tables, writers=args.writers, commits=args.commits, seed=args.seed)
    print(result.line(), flush=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    met = (
        "met" if not result.missed and max(result.latencies, default=GIVE_UP) <= TARGET_SECONDS else "NOT met"
    )
    return (
        f"\nTime from a commit to the console showing it (real time, on the same {args.tables} tables;"
        f" another writer appends to {args.writers} real Delta tables at random moments of the short"
        f" beat's cycle, the console read through the API every {POLL} s; load average {load} when it"
        f" ended): {result.line().split(': ', 1)[1]}. Target, commits visible within"
        f" {TARGET_SECONDS:.0f} s: **{met}**.\n"
    )


def rank_scale(n: int) -> str:
    """How long ranking takes when ``n`` tables are due at once (after a configuration change
    wakes every table), and its queries, as a tick runs it (decisions kept for the tick's end)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from processes.decisions import Decision, DecisionLog, recording
    from processes.models import Process, TableState
    from processes.ranking import rank_due
    from processes.registry import configured_factories
    from processes.scheduler import evaluated_key
    from storage.models import Table

    _install_bench_factory()
    Process.objects.all().delete()
    TableState.objects.all().delete()
    Decision.objects.all().delete()
    Table.objects.all().delete()
    now = timezone.now()
    tables = Table.objects.bulk_create(
        (
            Table(
                name=f"s{i}",
                format="delta",
                location=f"/bench/rank/{i}",
                current_instant="1",
                file_count=100 + i % 900,
                small_file_count=i % 300,
                compactable_file_count=i % 300 if i % 300 >= 5 else 0,
                total_bytes=(100 + i % 900) * 8 * MIB,
                refreshed_at=now,
            )
            for i in range(n)
        ),
        batch_size=5000,
    )
    ids = [t.pk for t in tables]
    configured = configured_factories()[0]
    timings = []
    for _ in range(3):
        with recording(DecisionLog(now)), CaptureQueriesContext(connection) as queries:
            began = time.perf_counter()
            ranked = rank_due(configured, "rewrite", ids, now=now, evaluated_key=evaluated_key("rewrite"))
            timings.append(time.perf_counter() - began)
    Table.objects.all().delete()
    return (
        f"\nRanking {n:,} due tables at once (every table woken, e.g. after a configuration change): "
        f"median {statistics.median(timings) * 1000:,.0f} ms of 3 ({len(queries.captured_queries)} queries; "
        f"{len(ranked.order):,} ranked, {len(ranked.below_minimum):,} below the minimum).\n"
    )


def _install_bench_factory() -> None:
    """The bench factory is the only one the scheduler and process creation see; processes are
    not sent to a broker (the bench plays the worker)."""
    from processes import registry, services
    from processes.registry import ConfiguredFactory

    factory = BenchRewriteFactory()
    registry.configured_factories = lambda include_disabled=False: [
        ConfiguredFactory(name=factory.name, factory=factory, enabled=True, priority=0)
    ]
    services.process_enqueue = lambda process: None


def _save_facts(ids, facts: list[Facts], changed, now) -> None:
    from django.db import connection

    from storage.models import Table

    rows = sorted(changed)
    if not rows:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Table._meta.db_table} t SET small_file_count = v.small, compactable_file_count = v.compactable,"
            " file_count = v.small + v.large, total_bytes = v.small * %s + v.large * %s,"
            " current_instant = v.instant, instant_count = v.instants, last_commit_at = %s"
            " FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::text[], %s::int[])"
            " AS v(id, small, compactable, large, instant, instants) WHERE t.id = v.id",
            [
                SMALL_FILE,
                TARGET,
                now,
                [ids[i] for i in rows],
                [facts[i].small for i in rows],
                [facts[i].compactable for i in rows],
                [facts[i].large for i in rows],
                [str(facts[i].instant) for i in rows],
                [min(facts[i].instant, 100) for i in rows],
            ],
        )


def _percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def _line(name: str, outcome: Outcome) -> str:
    return (
        f"{name}: mean debt {statistics.mean(outcome.debt):,.0f} small files, end {outcome.debt[-1]:,}, "
        f"mean p95 {statistics.mean(outcome.p95):,.0f}, {outcome.worker_seconds:,.0f} worker-seconds, "
        f"{outcome.runs} runs"
    )


def _report(args, kinds: list[str], results: dict[bool, Outcome]) -> str:
    old, new = results[False], results[True]
    counts = {kind: kinds.count(kind) for kind in RATES}
    rows = []
    for name, o in (("interval order (ranking off)", old), ("benefit-ranked", new)):
        rows.append(
            f"| {name} | {statistics.mean(o.debt):,.0f} | {o.debt[-1]:,} | {statistics.mean(o.p95):,.0f} | "
            f"{o.p95[-1]:,.0f} | {o.worker_seconds:,.0f} | {o.runs} | {o.small_files_removed:,} | "
            f"{o.below_minimum} | {statistics.median(o.tick_seconds) * 1000:,.0f} / "
            f"{max(o.tick_seconds) * 1000:,.0f} ms |"
        )
    ratio = statistics.mean(old.debt) / max(1.0, statistics.mean(new.debt))
    half = len(old.debt) // 2
    late = statistics.mean(old.debt[half:]) / max(1.0, statistics.mean(new.debt[half:]))
    end = old.debt[-1] / max(1, new.debt[-1])
    p95_ratio = statistics.mean(old.p95) / max(1.0, statistics.mean(new.p95))
    spent = new.worker_seconds / max(1.0, old.worker_seconds)
    return (
        f"{args.tables} tables (half Iceberg, half Delta; {counts['hot']} hot writers adding "
        f"{RATES['hot']:.0f} small files an hour, {counts['warm']} warm at {RATES['warm']:.0f}, "
        f"{counts['cold']} cold at {RATES['cold']:.0f}; seed {args.seed}), {args.hours:g} simulated hours in "
        f"{TICK.seconds} s ticks, one group of {args.slots} slots and {args.budget:,} worker-seconds per rolling "
        f"hour. A run costs {RUN_OVERHEAD:.0f} s + its bytes read and written at "
        f"{RUN_THROUGHPUT // MIB} MiB/s. **Compactions are simulated**: the real scheduler tick decides on "
        "Postgres; the bench applies each run's effect to the table facts (no files written or listed).\n\n"
        "| order | mean small-file debt | at the end | mean p95 per table | p95 at the end | worker-seconds "
        "| runs | small files removed | below-minimum decisions | tick median / max |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        f"Benefit ranking: **{ratio:.1f}x less small-file debt** on average over the run ({late:.1f}x over its "
        f"second half, {end:.1f}x at the end; both start from the same backlog), p95 per table "
        f"{p95_ratio:.1f}x less, for {spent:.2f}x the worker-seconds (target: at least 2x less debt for the "
        "same or fewer).\n"
    )


def _factory_class():
    """The bench factory class, built after Django is set up (it imports the plugin API)."""
    from processes.plugin import REWRITE, ProcessFactory, TableProcess, TriggerStrategy

    class BenchRewrite(TableProcess):
        def run(self, context):  # the bench plays the worker; never run
            raise NotImplementedError

    class Factory(ProcessFactory):
        name = "bench-rewrite"
        default_properties = {"interval": 600, "parallelism": 2, "target-file-size": TARGET}

        def supported_actions(self):
            return {"iceberg": {REWRITE}, "delta": {REWRITE}}

        def trigger_strategy(self, format, action):
            return TriggerStrategy(interval=dt.timedelta(seconds=600), on_new_snapshot=True, parallelism=2)

        def trigger(self, runtime, action):
            if runtime.table.compactable_file_count < 5:
                return None
            return BenchRewrite(action, {})

        def recover(self, runtime, record):
            return BenchRewrite(record.action, record.params)

    return Factory


def BenchRewriteFactory():  # noqa: N802 - reads as the class it builds
    return _factory_class()()


if __name__ == "__main__":
    main()
