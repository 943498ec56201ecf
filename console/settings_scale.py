"""Scale-out settings: queue routing, worker concurrency, Spark cluster options.

Star-imported at the end of ``console/settings.py``, after ``CELERY_TASK_DEFAULT_QUEUE`` (the light
queue) and ``LAKEWARDEN_HEAVY_QUEUE`` are set there.
"""

from __future__ import annotations

import os
from typing import Any

from console.env import env_int, env_str

__all__ = [
    "CELERY_TASK_ROUTES",
    "CELERY_WORKER_PREFETCH_MULTIPLIER",
    "HEAVY_TASKS",
    "LAKEWARDEN_LIGHT_CONCURRENCY",
    "LAKEWARDEN_SPARK_CONF",
    "LAKEWARDEN_SPARK_EXECUTOR_MEMORY",
    "LAKEWARDEN_SPARK_PYTHON",
    "LAKEWARDEN_WEB_THREADS",
    "LAKEWARDEN_WEB_WORKERS",
    "LAKEWARDEN_WORKER_CONCURRENCY",
]

#: Tasks that run Spark (or may run for long): they go to the heavy queue; everything else
#: (scheduler tick, reaper, kills, metadata refresh) stays on the default, light queue.
HEAVY_TASKS = (
    "processes.tasks.run_process_task",
    "processes.tasks.run_query_task",
    "processes.tasks.test_storage_task",
)


def route_task(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> dict | None:
    """Celery router: heavy tasks to ``LAKEWARDEN_HEAVY_QUEUE``, read when the task is sent (so a
    changed setting, as in tests, is honoured); None leaves the rest on the default queue.
    A queue given to ``apply_async`` explicitly still wins over this."""
    from fnmatch import fnmatchcase

    from django.conf import settings

    if any(fnmatchcase(name, pattern) for pattern in HEAVY_TASKS):
        return {"queue": settings.LAKEWARDEN_HEAVY_QUEUE}
    return None


CELERY_TASK_ROUTES = ("console.settings_scale.route_task",)

#: Processes of the heavy queue each started in a worker (each holds one Spark driver or Spark
#: Connect client): ``manage.py lakewarden_serve`` and the deployment examples use it.
LAKEWARDEN_WORKER_CONCURRENCY = env_int("LAKEWARDEN_WORKER_CONCURRENCY", 2, minimum=1)
#: Processes of the light queue's worker (scheduler ticks, reaper, kills, refreshes).
LAKEWARDEN_LIGHT_CONCURRENCY = env_int("LAKEWARDEN_LIGHT_CONCURRENCY", 2, minimum=1)
# A worker reserves one task per free process: a long compaction never sits in the prefetch buffer
# of a busy worker while another worker idles.
CELERY_WORKER_PREFETCH_MULTIPLIER = env_int("LAKEWARDEN_PREFETCH_MULTIPLIER", 1, minimum=1)

#: Extra Spark settings for every session, ``key=value`` pairs separated by spaces or newlines
#: (``spark.cores.max=4 spark.hadoop.fs.s3a.endpoint=http://minio:9000``). With Spark Connect only
#: runtime SQL settings can be sent; the rest belong to the Connect server's own configuration.
LAKEWARDEN_SPARK_CONF = env_str("LAKEWARDEN_SPARK_CONF", "")
#: Executor memory asked of a standalone (``spark://``) cluster.
LAKEWARDEN_SPARK_EXECUTOR_MEMORY = env_str("LAKEWARDEN_SPARK_EXECUTOR_MEMORY", "1g")
#: The Python interpreter of the executors (it needs Lakewarden, pyarrow and the format libraries
#: installed); by default the one running the worker, so the same virtualenv path on every node.
LAKEWARDEN_SPARK_PYTHON = env_str("LAKEWARDEN_SPARK_PYTHON", "")


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, so a container's cpuset counts)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: Most gunicorn worker processes the default gives: each thread of each worker keeps its own
#: Postgres connection (``conn_max_age``), so 8 workers x 4 threads stay well inside Postgres's
#: default 100 connections next to the Celery workers.
MAX_DEFAULT_WEB_WORKERS = 8


def default_web_workers(cores: int) -> int:
    """One worker per core (at least two), capped at ``MAX_DEFAULT_WEB_WORKERS``: a page costs a
    few milliseconds of CPU, so more processes than cores only lengthen the tail under load
    (bench/RESULTS.md, "Served console under load")."""
    return min(max(2, cores), MAX_DEFAULT_WEB_WORKERS)


#: gunicorn worker processes started by ``manage.py lakewarden_serve`` (gthread workers).
LAKEWARDEN_WEB_WORKERS = env_int("LAKEWARDEN_WEB_WORKERS", default_web_workers(available_cores()), minimum=1)
#: Threads per gunicorn worker: a slow page (a big table's files) does not hold up the rest.
LAKEWARDEN_WEB_THREADS = env_int("LAKEWARDEN_WEB_THREADS", 1, minimum=1)
