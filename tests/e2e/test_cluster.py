"""Scale-out on real clusters started by the tests: a Spark Connect server (``sc://``) and a
standalone master with a worker (``spark://``) run compactions and cached queries for real Celery
workers, cancel and kill reach their Spark jobs; two heavy workers share many due tables without
running a process twice while the light queue keeps ticking.

No Spark session is created in the test process itself (one process holds one kind of session):
every Spark use happens in the Celery workers, pointed at the cluster by their environment.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pyarrow as pa
import pytest

from processes.models import PluginConfig, Process, ProcessStatus, ServiceHeartbeat
from processes.registry import configured_factories
from processes.spark.cds import driver_java_options
from tests.conftest import REPO_ROOT
from tests.e2e.conftest import wait_for
from tests.processes.conftest import (  # noqa: F401  (fixtures)
    delta_files,
    delta_read,
    iceberg_catalog,
    iceberg_files,
    iceberg_rows,
    make_delta,
    make_iceberg,
    multiset,
)

pytestmark = pytest.mark.e2e

# A CPU-bound predicate (a fraction of a second a row here): Spark checks for a cancel between
# rows, so a query built on it stops within a row's time of an interrupt and otherwise holds both
# cores of the test cluster for a minute or more. (``reflect``/``java_method``, which could sleep in
# the JVM, are refused by the workbench's SQL policy and by every session's reflect allow-list.)
BUSY_ROW = "aggregate(sequence(1, 200000), 0L, (acc, x) -> acc + x + k) > 0"


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


class Daemon:
    """A Spark daemon run in the foreground in its own process group (stopped with the group)."""

    def __init__(self, label: str, command: list[str], log: Path, env: dict[str, str]) -> None:
        self.label, self.log = label, log
        self._handle = log.open("ab")
        self.child = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=env,
            stdout=self._handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_until(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            if self.child.poll() is not None:
                raise AssertionError(f"{self.label} exited early:\n{self.tail()}")
            time.sleep(0.3)
        raise AssertionError(f"{self.label}: {what} not within {timeout} s:\n{self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """kill -9 of the daemon's process group (with the executors it started): no test looks at
        how a daemon stops, and a graceful stop took seconds."""
        try:
            os.killpg(self.child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.child.wait()
        self._handle.close()


def _spark_env(folder: Path) -> dict[str, str]:
    """The environment of the Spark daemons: this pyspark as SPARK_HOME, logs and work folders
    private to the test, executors running this interpreter."""
    conf = folder / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SPARK_", "PYSPARK_", "LAKEWARDEN_SPARK_"))
    }
    env.update(
        SPARK_HOME=str(_spark_home()),
        SPARK_CONF_DIR=str(conf),
        SPARK_LOG_DIR=str(folder / "logs"),
        SPARK_PID_DIR=str(folder),
        SPARK_WORKER_DIR=str(folder / "work"),
        SPARK_NO_DAEMONIZE="1",
        PYSPARK_PYTHON=sys.executable,
        # The standalone master's REST submission server listens on a fixed port otherwise.
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
    )
    return env


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """A Spark Connect server (``start-connect-server.sh`` of the installed pyspark) on a free
    port, local[2] inside; yields its ``sc://`` URL."""
    folder = tmp_path_factory.mktemp("spark-connect")
    port = _free_port()
    command = [
        "bash",
        str(_spark_home() / "sbin" / "start-connect-server.sh"),
        "--wait",
        "--master",
        "local[2]",
        "--driver-memory",
        "1g",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        # The class-data archive scripts/setup.sh trained for local drivers fits this driver too.
        f"spark.driver.extraJavaOptions=-Duser.timezone=UTC {driver_java_options()}".strip(),
        "--conf",
        "spark.sql.reflect.allowList=(?!)",  # as docs/operating/spark.md tells deployments to start it
        # Task kills are cooperative: a task notices one when it asks its input for the next row
        # (or batch). The slow queries below spend ~1 s of CPU per input row, and the vectorized
        # reader hands a whole 60-row file over as one batch, so a killed task ran on for up to a
        # minute, holding the cores. The row reader lets it notice the kill within a row.
        "--conf",
        "spark.sql.parquet.enableVectorizedReader=false",
    ]
    server = Daemon("Spark Connect server", command, folder / "server.log", _spark_env(folder))
    started = time.monotonic()
    try:
        server.wait_until(lambda: _accepts(port), timeout=120, what="accepting connections")
        print(f"Spark Connect server up in {time.monotonic() - started:.1f} s")
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.stop()


@dataclass(frozen=True)
class Standalone:
    url: str
    work_dir: Path


@pytest.fixture
def standalone_cluster(tmp_path):
    """A standalone master and one worker (2 cores, 1 GiB) on free ports."""
    env = _spark_env(tmp_path / "standalone")
    spark_class = str(_spark_home() / "bin" / "spark-class")
    port = _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    master = Daemon(
        "Spark master",
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
        + ["--webui-port", "0"],
        tmp_path / "standalone" / "master.log",
        env,
    )
    worker = None
    try:
        master.wait_until(lambda: _accepts(port), timeout=90, what="accepting connections")
        worker = Daemon(
            "Spark worker",
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"]
            + ["--webui-port", "0", "--cores", "2", "--memory", "1g", master_url],
            tmp_path / "standalone" / "worker.log",
            env,
        )
        master.wait_until(
            lambda: "Registering worker" in master.tail(), timeout=90, what="a registered worker"
        )
        yield Standalone(master_url, Path(env["SPARK_WORKER_DIR"]))
    finally:
        if worker is not None:
            worker.stop()
        master.stop()


# --- helpers ---------------------------------------------------------------------------------------


# Factories the workers discover on their PYTHONPATH (tests/plugins) but this process does not:
# their rows are made here, disabled, or the workers would enable them on first sight.
WORKER_ONLY_FACTORIES = ("test-touch", "test-touch-twin")


def _nothing_scheduled() -> None:
    configured_factories()
    for name in WORKER_ONLY_FACTORIES:
        PluginConfig.objects.update_or_create(name=name, defaults={"enabled": False})
    PluginConfig.objects.update(enabled=False)


def _only(factories: dict[str, dict]) -> None:
    """Only ``factories`` schedule, each with the given properties over its own."""
    _nothing_scheduled()
    for name, properties in factories.items():
        config = PluginConfig.objects.get(name=name)
        config.enabled = True
        config.properties = {**config.properties, **properties}
        config.save()


def _finished(pk: int, celery_processes, timeout: float = 120) -> Process:
    return wait_for(
        lambda: (p := Process.objects.get(pk=pk)).status in ("SUCCESS", "FAILED", "CANCELED", "KILLED") and p,
        timeout=timeout,
        message=f"process {pk} to finish\n" + celery_processes.logs(),
    )


def _query_done(pk: int, celery_processes, timeout: float = 120):
    from processes.models import Query

    return wait_for(
        lambda: (q := Query.objects.get(pk=pk)).status in ("SUCCESS", "FAILED", "CANCELED") and q,
        timeout=timeout,
        message=f"query {pk} to finish\n" + celery_processes.logs(),
    )


def _aggregate(rows: pa.Table) -> list[list]:
    """[[region, count, sum(id)]] by region, computed with pyarrow (what the SQL must answer)."""
    grouped = rows.group_by("region").aggregate([("id", "count"), ("id", "sum")]).sort_by("region")
    return [[r["region"], r["id_count"], r["id_sum"]] for r in grouped.to_pylist()]


def _aggregate_sql(name: str) -> str:
    return f"select region, count(*) as n, sum(id) as total from {name} group by region order by region"


def _slow_sql(name: str) -> str:
    return (
        f"select count(*) as n from {name} lateral view explode(sequence(1, 200)) busy as k where {BUSY_ROW}"
    )


def _compact_and_query(celery_processes, table, rows_before: Counter, read_rows, files_after) -> None:
    """Compaction by a worker, then the aggregate query twice (the second served from the cache)."""
    from processes import queries
    from processes.services import process_create

    process = process_create(table=table, action="rewrite", params={"min-input-files": 2})
    done = _finished(process.pk, celery_processes, timeout=180)
    assert done.status == ProcessStatus.SUCCESS, done.failure
    assert multiset(read_rows()) == rows_before
    assert done.summary["files_out"] == files_after < done.summary["files_in"]

    name = table.identifier or table.name
    first = _query_done(queries.query_submit(sql=_aggregate_sql(name)).pk, celery_processes)
    second = _query_done(queries.query_submit(sql=_aggregate_sql(name)).pk, celery_processes)
    assert first.status == "SUCCESS", first.error
    assert second.status == "SUCCESS", second.error
    assert not first.served_from_cache and second.served_from_cache
    assert first.rows == second.rows == _aggregate(read_rows())


def _cancel_slow_query(celery_processes, name: str) -> float:
    """Submit a query that takes a minute, cancel it once it runs; returns seconds to CANCELED."""
    from processes import queries
    from processes.models import Query

    slow = queries.query_submit(sql=_slow_sql(name), cache=False)
    wait_for(lambda: Query.objects.get(pk=slow.pk).status == "RUNNING", timeout=60, message="the slow query")
    time.sleep(2)  # inside its Spark job by now
    asked = time.monotonic()
    queries.query_cancel(query=Query.objects.get(pk=slow.pk))
    cancelled = _query_done(slow.pk, celery_processes, timeout=90)
    assert cancelled.status == "CANCELED", cancelled.error
    return time.monotonic() - asked


# --- Spark Connect ----------------------------------------------------------------------------------


def test_a_spark_connect_server_runs_a_compaction_and_cached_queries_through_the_data_source(
    celery_processes, connect_server, make_delta
):
    # Partitioned Delta keeps partition values in paths: reads go through the lakewarden data source.
    table, path = make_delta(files=20, rows_per_file=5, partitioned=True)
    rows_before = multiset(delta_read(path))
    _nothing_scheduled()
    PluginConfig.objects.filter(name="delta-rewrite").update(enabled=True)
    celery_processes.start_worker(
        name="connect", queues="both", concurrency=2, extra_env={"LAKEWARDEN_SPARK_REMOTE": connect_server}
    )
    celery_processes.wait_for_workers(count=1)

    _compact_and_query(celery_processes, table, rows_before, lambda: delta_read(path), files_after=2)

    assert len(delta_files(path)) == 2


def test_on_spark_connect_cancel_and_kill_interrupt_running_spark_jobs(
    celery_processes, connect_server, make_delta
):
    from processes import queries
    from processes.services import process_create, process_kill

    # Two files of 300 rows: both server cores busy five minutes (a row costs about a second), so
    # whatever ends within a minute was interrupted, however loaded the machine is.
    slow_table, _ = make_delta(files=2, rows_per_file=300)
    table, path = make_delta(files=6, rows_per_file=5)
    rows_before, files_before = multiset(delta_read(path)), delta_files(path)
    _nothing_scheduled()
    PluginConfig.objects.filter(name="delta-rewrite").update(enabled=True)
    celery_processes.start_worker(
        name="connect", queues="both", concurrency=3, extra_env={"LAKEWARDEN_SPARK_REMOTE": connect_server}
    )
    celery_processes.wait_for_workers(count=1)

    # A cached query's cancel interrupts its Spark job on the server.
    assert _cancel_slow_query(celery_processes, slow_table.name) < 60

    # A compaction whose Spark job waits behind a slow query (both server cores taken) is killed:
    # the kill's cancel interrupts the job by tag at the next heartbeat, long before the grace
    # period would terminate the worker's task.
    from processes.models import Query

    hog = queries.query_submit(sql=_slow_sql(slow_table.name), cache=False)
    wait_for(lambda: Query.objects.get(pk=hog.pk).status == "RUNNING", timeout=60, message="the slow query")
    time.sleep(2)
    process = process_create(table=table, action="rewrite", params={"min-input-files": 2})
    wait_for(
        lambda: Process.objects.get(pk=process.pk).status == "RUNNING", timeout=60, message="the rewrite"
    )
    time.sleep(4)  # planned and waiting for cores inside its Spark job
    assert Process.objects.get(pk=process.pk).status == "RUNNING"
    asked = time.monotonic()
    process_kill(process=Process.objects.get(pk=process.pk), grace_seconds=120)
    ended = _finished(process.pk, celery_processes, timeout=150)

    # CANCELED, not KILLED: the heartbeat's interrupt gave the worker its thread back from Spark and
    # it cleaned up itself, before the grace period ran out (the kill would record KILLED).
    assert ended.status == ProcessStatus.CANCELED, ended.failure
    assert time.monotonic() - asked < 120
    queries.query_cancel(query=Query.objects.get(pk=hog.pk))
    assert _query_done(hog.pk, celery_processes, timeout=30).status == "CANCELED"
    time.sleep(2)  # an uninterrupted job would now get the cores and write its files
    assert multiset(delta_read(path)) == rows_before and delta_files(path) == files_before
    staging = Path(path) / ".lakewarden-staging"
    assert not staging.exists() or not any(staging.rglob("*.parquet"))

    # The server is free again: a fresh query answers at once.
    started = time.monotonic()
    quick = _query_done(
        queries.query_submit(sql=_aggregate_sql(table.name), cache=False).pk, celery_processes
    )
    assert quick.status == "SUCCESS", quick.error
    assert quick.rows == _aggregate(delta_read(path)) and time.monotonic() - started < 60


# --- standalone cluster -----------------------------------------------------------------------------


def test_a_standalone_cluster_runs_the_compaction_and_queries_and_a_cancelled_query_stops(
    celery_processes, standalone_cluster, make_iceberg, make_delta
):
    table, iceberg = make_iceberg(files=40, rows_per_file=5, partitioned=True)
    rows_before = multiset(iceberg_rows(iceberg))
    partitioned_delta, delta_path = make_delta(files=4, rows_per_file=5, partitioned=True)
    _nothing_scheduled()
    PluginConfig.objects.filter(name="iceberg-rewrite").update(enabled=True)
    celery_processes.start_worker(
        name="standalone",
        queues="both",
        concurrency=1,
        extra_env={
            "LAKEWARDEN_SPARK_MASTER": standalone_cluster.url,
            "LAKEWARDEN_SPARK_EXECUTOR_MEMORY": "512m",
            "LAKEWARDEN_SPARK_CONF": "spark.driver.memory=512m spark.cores.max=2",
        },
    )
    celery_processes.wait_for_workers(count=1)

    _compact_and_query(celery_processes, table, rows_before, lambda: iceberg_rows(iceberg), files_after=2)
    assert len(iceberg_files(iceberg)) == 2
    # The work ran in an executor the cluster's worker started for the Lakewarden application.
    assert any((standalone_cluster.work_dir).glob("app-*/*/stderr"))
    # A table the lakewarden data source reads (its Python runs in the cluster's executors).
    from processes import queries

    through_source = queries.query_submit(sql=_aggregate_sql(partitioned_delta.name), cache=False)
    answered = _query_done(through_source.pk, celery_processes)
    assert answered.status == "SUCCESS", answered.error
    assert answered.rows == _aggregate(delta_read(delta_path))

    # Two files of 100 rows: each of the two executor cores would compute 100 s uninterrupted.
    assert _cancel_slow_query(celery_processes, table.identifier) < 30


# --- many workers, many tables ----------------------------------------------------------------------


def test_two_heavy_workers_run_every_due_compaction_once_and_the_light_queue_keeps_ticking(
    celery_processes, connect_server, make_delta
):
    from deltalake import DeltaTable

    from storage.models import Table

    tables = [make_delta(files=3, rows_per_file=4) for _ in range(20)]
    rows_before = {table.pk: multiset(delta_read(path)) for table, path in tables}
    # Rewrites re-evaluated every minute (a compacted table must not be compacted again), and a
    # vacuum of every table scheduled at the same time, racing the rewrite for the table lock.
    _only(
        {
            "delta-rewrite": {"interval": 60, "parallelism": 4, "min-input-files": 2},
            "delta-vacuum": {"interval": 3600, "parallelism": 4},
        }
    )
    heavy_env = {
        "LAKEWARDEN_SPARK_REMOTE": connect_server,
        # Each compaction holds its table (and its worker slot) two seconds after writing.
        "LAKEWARDEN_FAILPOINTS": "after-write=sleep:2",
    }
    celery_processes.start_worker(name="light", queues="light", concurrency=1)
    celery_processes.start_worker(name="heavy-a", queues="heavy", concurrency=2, extra_env=heavy_env)
    celery_processes.start_worker(name="heavy-b", queues="heavy", concurrency=2, extra_env=heavy_env)
    celery_processes.start_beat(extra_env={"LAKEWARDEN_REFRESH_SECONDS": "2"})
    celery_processes.wait_for_workers(count=3)

    # While compactions run, the beat's scheduler ticks and table refreshes keep completing.
    beats, refreshes, busy_samples = set(), set(), 0
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        statuses = Counter(Process.objects.filter(action="rewrite").values_list("status", flat=True))
        if statuses["RUNNING"] >= 2:
            busy_samples += 1
            beats.update(ServiceHeartbeat.objects.filter(name="beat").values_list("last_seen", flat=True))
            refreshes.update(Table.objects.exclude(refreshed_at=None).values_list("refreshed_at", flat=True))
        if statuses["SUCCESS"] + statuses["FAILED"] == len(tables) and not statuses["RUNNING"]:
            break
        time.sleep(0.25)
    else:
        raise AssertionError(f"compactions did not finish: {statuses}\n" + celery_processes.logs())

    active = ["PENDING", "RUNNING", "CANCELING"]
    deadline = time.monotonic() + 60
    # The scheduler creates the last vacuums as slots free up: wait for one per table, all done.
    while Process.objects.filter(status__in=active).exists() or Process.objects.filter(
        action="vacuum"
    ).count() < len(tables):
        if time.monotonic() > deadline:
            left = list(
                Process.objects.filter(status__in=active).values("pk", "action", "status", "table_id")
            )
            raise AssertionError(f"processes still active: {left}\n" + celery_processes.logs())
        time.sleep(0.5)
    vacuums = list(Process.objects.filter(action="vacuum"))
    assert sorted(p.table_id for p in vacuums) == sorted(t.pk for t, _ in tables)
    assert {p.status for p in vacuums} == {"SUCCESS"}, [p.failure for p in vacuums]
    processes = list(Process.objects.filter(action="rewrite").order_by("table_id"))
    assert [p.status for p in processes] == ["SUCCESS"] * len(tables), [p.failure for p in processes]
    # One process per table, each run once: one compaction commit in each table's log.
    assert sorted(p.table_id for p in processes) == sorted(t.pk for t, _ in tables)
    for table, path in tables:
        commits = [c for c in DeltaTable(str(path)).history() if c.get("lakewarden.operation") == "rewrite"]
        assert len(commits) == 1, commits
        assert multiset(delta_read(path)) == rows_before[table.pk]
        assert len(delta_files(path)) == 1
    logs = celery_processes.full_logs()
    assert "not claimed" not in logs
    # Both heavy workers took a share.
    workers = Counter(p.worker.split("@")[0].split("-test-")[0] for p in processes)
    assert set(workers) == {"heavy-a", "heavy-b"}, workers
    # The per-table lock: no two processes of one table overlap in time.
    by_table: dict[int, list[Process]] = {}
    for process in [*processes, *vacuums]:
        by_table.setdefault(process.table_id, []).append(process)
    for runs in by_table.values():
        runs.sort(key=lambda p: p.started_at)
        for earlier, later in pairwise(runs):
            assert later.started_at >= earlier.finished_at
    # The light queue was not starved by the heavy one.
    assert busy_samples > 10
    assert len(beats) >= 3, f"the scheduler ticked {len(beats)} times while compactions ran"
    assert len(refreshes) >= 3, "table refreshes stalled while compactions ran"


# --- classic Spark: interrupts from another thread -------------------------------------------------


@pytest.mark.spark
def test_a_process_context_interrupts_its_spark_jobs_from_the_heartbeat_thread_on_classic_spark(
    spark, make_delta, monkeypatch
):
    """Classic Spark's ``interruptTag`` only sees tags its own thread added; the heartbeat thread
    interrupts a job that a group-writer thread (tags inherited) runs, as with a kill."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.util import inheritable_thread_target

    from processes import services
    from processes.executor import local_context
    from processes.runtime import TableRuntime
    from processes.spark.session import untag_jobs

    monkeypatch.setattr(services, "process_enqueue", lambda process: None)
    _nothing_scheduled()
    PluginConfig.objects.filter(name="delta-rewrite").update(enabled=True)
    table, _ = make_delta(files=2, rows_per_file=5)
    process = services.process_create(table=table, action="rewrite", params={})
    context = local_context(process, TableRuntime(table, {}))
    session = context.spark  # tags this thread, as the worker does

    # 6,000 busy rows: uninterrupted, each of the two tasks computes for many minutes on any machine,
    # so a job that ends within a minute of the interrupt was interrupted (no wall-clock guess on
    # how fast a loaded machine is).
    def slow_job() -> float:
        with pytest.raises(Exception, match="cancel"):
            session.sql(
                "select count(*) from range(0, 6000, 1, 2) lateral view explode(sequence(1, 1)) busy as k "
                f"where {BUSY_ROW}"
            ).collect()
        return time.monotonic()

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            job = pool.submit(inheritable_thread_target(session)(slow_job))
            tracker = session.sparkContext.statusTracker()

            def running_tasks() -> int:
                stages = (tracker.getStageInfo(s) for s in tracker.getActiveStageIds())
                return sum(stage.numActiveTasks for stage in stages if stage is not None)

            wait_for(lambda: running_tasks() > 0, timeout=60, message="the slow job's tasks to run")
            heartbeat = threading.Thread(target=context.interrupt_spark)
            interrupted = time.monotonic()
            heartbeat.start()
            heartbeat.join()
            assert job.result(timeout=60) - interrupted < 60
            # The cores are free again (running tasks were interrupted, not left to finish: they
            # would hold both cores for many minutes).
            count = pool.submit(
                inheritable_thread_target(session)(lambda: session.range(0, 100, 1, 2).count())
            )
            assert count.result(timeout=60) == 100
    finally:
        untag_jobs(session, context.spark_tag)  # the shared session's thread runs other tests next


# --- settings: modes, routing, worker commands -----------------------------------------------------


def test_each_spark_mode_gets_the_settings_it_needs(settings):
    from processes.spark.session import BASE_CONFIG, STATIC_SQL_PREFIXES, session_config

    settings.LAKEWARDEN_SPARK_CONF = (
        "spark.cores.max=4,spark.sql.shuffle.partitions=16 spark.driver.memory=2g"
    )
    settings.LAKEWARDEN_SPARK_EXECUTOR_MEMORY = "768m"
    settings.LAKEWARDEN_SPARK_PYTHON = ""

    local = session_config(None, "local[*]")
    standalone = session_config(None, "spark://master:7077")
    connect = session_config("sc://spark:15002", "local[*]", {"spark.sql.warehouse.dir": "/w"})

    assert local.items() >= BASE_CONFIG.items() - {("spark.sql.shuffle.partitions", "8")}
    assert local["spark.sql.shuffle.partitions"] == "16" and "spark.executor.memory" not in local
    assert standalone["spark.executor.memory"] == "768m"
    assert standalone["spark.pyspark.python"] == sys.executable  # executors need pyarrow and Lakewarden
    assert standalone["spark.cores.max"] == "4" and standalone["spark.driver.memory"] == "2g"
    # A Connect client may only send session-level SQL settings: the server owns the rest.
    assert set(connect) == {
        k
        for k in {**BASE_CONFIG, "spark.sql.shuffle.partitions": ""}
        if k.startswith("spark.sql.") and not k.startswith(STATIC_SQL_PREFIXES)
    }
    assert connect["spark.sql.session.timeZone"] == "UTC"
    # The reflect allow-list is static: the Connect server must start with it (docs/operating/spark.md).
    assert local["spark.sql.reflect.allowList"] == "(?!)" and "spark.sql.reflect.allowList" not in connect
    assert (
        connect["spark.sql.variable.substitute"] == "false" and connect["spark.sql.runSQLOnFiles"] == "false"
    )


def test_heavy_tasks_are_routed_to_the_heavy_queue_and_the_rest_stay_on_the_default_one(settings):
    from console.celery import app

    settings.LAKEWARDEN_HEAVY_QUEUE = "elsewhere.heavy"  # read when a task is sent
    queue = lambda name, **options: app.amqp.router.route(options, name)["queue"].name  # noqa: E731

    assert queue("processes.tasks.run_process_task") == "elsewhere.heavy"
    assert queue("processes.tasks.run_query_task") == "elsewhere.heavy"
    assert queue("processes.tasks.test_storage_task") == "elsewhere.heavy"
    for light in (
        "processes.tasks.schedule_processes_task",
        "processes.tasks.reap_processes_task",
        "processes.tasks.kill_process_task",
        "storage.tasks.refresh_tables_task",
        "storage.tasks.refresh_table_task",
    ):
        assert queue(light) == app.conf.task_default_queue
    assert queue("processes.tasks.run_process_task", queue="chosen") == "chosen"  # explicit wins


def test_lakewarden_serve_starts_one_light_and_one_heavy_worker_and_one_beat(settings):
    from console.management.commands.lakewarden_serve import Command

    commands = Command().commands(host="127.0.0.1", port=8000, concurrency=3, light_concurrency=1)

    def option(command: list[str], name: str) -> str:
        return command[command.index(name) + 1]

    assert sorted(commands) == ["beat", "heavy worker", "light worker", "web"]
    assert option(commands["light worker"], "--queues") == settings.CELERY_TASK_DEFAULT_QUEUE
    assert option(commands["light worker"], "--concurrency") == "1"
    assert option(commands["heavy worker"], "--queues") == settings.LAKEWARDEN_HEAVY_QUEUE
    assert option(commands["heavy worker"], "--concurrency") == "3"
    assert option(commands["light worker"], "--hostname") != option(commands["heavy worker"], "--hostname")
