"""Real Celery worker (and beat) processes on the real Redis broker, against the test database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


def _database_url(settings_dict) -> str:
    user = settings_dict.get("USER") or ""
    password = f":{settings_dict['PASSWORD']}" if settings_dict.get("PASSWORD") else ""
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgresql://{user}{password}@{host}:{port}/{settings_dict['NAME']}"


class CeleryProcesses:
    """Starts worker/beat subprocesses on a queue private to this test, so no other worker on the
    machine can take its tasks; stops them (and reports their logs) at the end."""

    def __init__(self, tmp_path: Path, settings) -> None:
        from django.db import connection

        from console.celery import app

        self.queue = f"test-{uuid.uuid4().hex[:10]}"
        self.app = app
        self.tmp_path = tmp_path
        self.settings = settings
        self.children: list[tuple[str, subprocess.Popen, Path]] = []
        self.nodes: list[str] = []  # the workers' node names
        self.env = {
            **os.environ,
            "DATABASE_URL": _database_url(connection.settings_dict),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "CELERY_RESULT_BACKEND": settings.CELERY_BROKER_URL,
            "LAKEWARDEN_DEFAULT_QUEUE": self.queue,
            "LAKEWARDEN_WAREHOUSE": str(settings.LAKEWARDEN_WAREHOUSE),
            "LAKEWARDEN_ALLOWED_ROOTS": os.pathsep.join(str(r) for r in settings.LAKEWARDEN_ALLOWED_ROOTS),
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests" / "plugins")]),
            "LAKEWARDEN_HEARTBEAT_SECONDS": "1",
            "LAKEWARDEN_SCHEDULER_SECONDS": "1",
            "LAKEWARDEN_RETRY_BACKOFF_SECONDS": "1",
            "LAKEWARDEN_KILL_GRACE_SECONDS": "2",
        }
        self.heavy_queue = f"{self.queue}.heavy"
        self._previous_queue = app.conf.task_default_queue
        app.conf.task_default_queue = self.queue
        settings.LAKEWARDEN_HEAVY_QUEUE = self.heavy_queue
        settings.LAKEWARDEN_HEARTBEAT_SECONDS = 1
        settings.LAKEWARDEN_KILL_GRACE_SECONDS = 2
        settings.LAKEWARDEN_RETRY_BACKOFF_SECONDS = 1

    def start_worker(
        self, *, name: str = "w1", concurrency: int = 2, queues: str = "both", extra_env: dict | None = None
    ) -> subprocess.Popen:
        log = self.tmp_path / f"worker-{name}.log"
        queue_names = {
            "both": f"{self.queue},{self.heavy_queue}",
            "light": self.queue,
            "heavy": self.heavy_queue,
        }
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "console",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            str(concurrency),
            "--queues",
            queue_names.get(queues, queues),  # or a queue named as it is (a resource group's)
            "--hostname",
            self._node_name(name),
            "--without-gossip",
            "--without-mingle",
        ]
        return self._spawn(f"worker {name}", command, log, extra_env)

    def start_with_doomed_heavy_worker(self, failpoints: str) -> subprocess.Popen:
        """A light worker, beat, and a heavy worker that holds at ``failpoints``
        (``LAKEWARDEN_FAILPOINTS``), all answering; the heavy worker, for ``kill_hard``."""
        self.start_worker(name="light", queues="light", concurrency=1)
        doomed = self.start_worker(
            name="doomed", queues="heavy", concurrency=1, extra_env={"LAKEWARDEN_FAILPOINTS": failpoints}
        )
        self.start_beat()
        self.wait_for_workers(count=2)
        return doomed

    def _node_name(self, name: str) -> str:
        node = f"{name}-{self.queue}@{socket.gethostname()}"  # what %h gives
        self.nodes.append(node)
        return node

    def start_beat(self, *, extra_env: dict | None = None) -> subprocess.Popen:
        log = self.tmp_path / "beat.log"
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "console",
            "beat",
            "--loglevel",
            "INFO",
            "--schedule",
            str(self.tmp_path / "beat-schedule"),
        ]
        return self._spawn("beat", command, log, extra_env)

    def _where_tables_live(self) -> dict[str, str]:
        """The warehouse and allowed roots as the test has them when a child starts (a fixture
        such as ``warehouse`` may set them after this object was made): the child's path guard
        then allows the test's tables."""
        return {
            "LAKEWARDEN_WAREHOUSE": str(self.settings.LAKEWARDEN_WAREHOUSE),
            "LAKEWARDEN_ALLOWED_ROOTS": os.pathsep.join(
                str(r) for r in self.settings.LAKEWARDEN_ALLOWED_ROOTS
            ),
        }

    def _spawn(self, label, command, log: Path, extra_env) -> subprocess.Popen:
        handle = log.open("a")
        child = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env={**self.env, **self._where_tables_live(), **(extra_env or {})},
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # kill_hard() takes the whole worker (pool, Spark JVM) down
        )
        self.children.append((label, child, log))
        return child

    def kill_hard(self, child: subprocess.Popen) -> None:
        """kill -9 of a worker and everything it started, as when its machine dies."""
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()

    def pool_processes(self, child: subprocess.Popen) -> list[int]:
        """The pids of a worker's pool processes (the main process's children)."""
        children = Path(f"/proc/{child.pid}/task/{child.pid}/children").read_text().split()
        return [int(pid) for pid in children]

    def wait_for_workers(self, count: int = 1, timeout: float = 60) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # Asked by name, the ping returns once that many answer instead of after its timeout.
            replies = self.app.control.ping(destination=self.nodes, limit=count, timeout=1) or []
            names = [n for reply in replies for n in reply if self.queue in n]
            if len(names) >= count:
                return names
            for label, child, log in self.children:
                if child.poll() is not None:
                    raise AssertionError(f"{label} exited early:\n{log.read_text()[-3000:]}")
        raise AssertionError("workers did not answer a ping in time:\n" + self.logs())

    def full_logs(self) -> str:
        return "\n".join(log.read_text() for _, _, log in self.children)

    def logs(self) -> str:
        return "\n".join(f"--- {label} ---\n{log.read_text()[-3000:]}" for label, _, log in self.children)

    def stop(self) -> None:
        """kill -9 of every child's process group (pool, Spark JVM and its Python workers): a warm
        shutdown took seconds a worker (and minutes a task stuck in a failpoint), and nothing after
        a test depends on it. Their queues are the test's own; what they held dies with them."""
        for _, child, _ in self.children:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for _, child, _ in self.children:
            child.wait()
        self.app.conf.task_default_queue = self._previous_queue
        # Their liveness records would make them look alive to the next test for a while.
        from processes.workers import forget_worker

        for node in self.nodes:
            forget_worker(node)


def wait_for(condition, *, timeout: float = 60, interval: float = 0.2, message: str = "condition"):
    """Poll until ``condition()`` returns something truthy; returns it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"{message} not met within {timeout} s")


@pytest.fixture
def celery_processes(tmp_path, settings, transactional_db):
    processes = CeleryProcesses(tmp_path, settings)
    yield processes
    processes.stop()


def only_factory(factory: str, **properties) -> None:
    """Only ``factory`` schedules (interval 1 s unless given), so a test sees just its own work."""
    from processes.models import PluginConfig
    from processes.registry import configured_factories

    configured_factories()
    PluginConfig.objects.exclude(name=factory).update(enabled=False)
    config = PluginConfig.objects.get(name=factory)
    config.enabled = True
    config.properties = {**config.properties, "interval": 1, **properties}
    config.save()


def assert_lost_in_time(failed) -> None:
    """``failed`` was failed as "worker lost" by the product's rule (processes/workers.py): not
    before its tolerance of silence, and within the time the reaper promises after it."""
    from processes.workers import lost_after_seconds, lost_noticed_within

    assert failed.failure.startswith("worker lost: no heartbeat since"), failed.failure
    silent = (failed.finished_at - failed.heartbeat_at).total_seconds()
    assert lost_after_seconds() <= silent <= lost_noticed_within(), silent


def process_status(pk: int):
    """The Process row as it is now."""
    from processes.models import Process

    return Process.objects.get(pk=pk)
