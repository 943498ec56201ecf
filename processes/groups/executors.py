"""What Spark the workers use and, when it can be read cheaply, its executors (cores, memory, tasks
running), for the capacity page (issue 31 item 7).

The target comes from the settings every process shares: ``LAKEWARDEN_SPARK_REMOTE`` (a Spark
Connect server), else ``LAKEWARDEN_SPARK_MASTER`` (``local[N]``: a driver with N cores inside each
worker process; ``spark://...``: a standalone cluster). The executors are read, in this order:

1. from a Spark session this process holds (a local or cluster driver; a worker, a test run):
   the driver's status tracker, no job started;
2. from Spark's status REST API at ``LAKEWARDEN_SPARK_STATUS_URL`` (a driver's or a Spark Connect
   server's UI, e.g. ``http://spark-connect:4040``, or a history server): the running applications
   and each one's ``/executors``, every request with a ``STATUS_TIMEOUT`` second timeout;
3. else: not reachable, with the reason (the web server holds no session: the workers do).

Never raises and never waits more than a few timeouts; the answer is shared through the cache for
``MAX_AGE`` seconds.
"""

from __future__ import annotations

import json
import logging
import os
import re
import urllib.error
import urllib.request
from typing import Any

from processes.groups.cached import shared_answer
from processes.spark.config import setting

logger = logging.getLogger(__name__)

CACHE_KEY = "lakewarden:groups:spark-executors"
MAX_AGE = 10.0
#: Seconds each request to the status REST API may take (connect and read).
STATUS_TIMEOUT = 1.0
#: Running applications read at most (each is one more request).
MAX_APPLICATIONS = 3


def spark_target() -> dict[str, Any]:
    """{"mode": connect | standalone | local | other, "url": the setting's value, "cores": the
    local driver's cores when the master says (None otherwise), "describe": in words}."""
    remote = setting("LAKEWARDEN_SPARK_REMOTE")
    master = setting("LAKEWARDEN_SPARK_MASTER", "local[*]") or "local[*]"
    if remote:
        return {"mode": "connect", "url": remote, "cores": None, "describe": f"Spark Connect server {remote}"}
    if master.startswith("spark://"):
        return {
            "mode": "standalone",
            "url": master,
            "cores": None,
            "describe": f"standalone cluster {master}",
        }
    local = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master)
    if local:
        count = local.group(1) or "1"
        cores = os.cpu_count() if count == "*" else int(count)
        where = "all cores of its host" if count == "*" else f"{cores} core{'s' if cores != 1 else ''}"
        return {
            "mode": "local",
            "url": master,
            "cores": cores,
            "describe": f"{master}: a Spark driver inside each worker process ({where})",
        }
    return {"mode": "other", "url": master, "cores": None, "describe": f"Spark master {master}"}


def _session_here():
    from processes.spark import session as spark_module

    current = spark_module._session
    if current is None or spark_module.is_connect(current) or spark_module._is_stopped(current):
        return None
    return current


def from_session(spark) -> list[dict[str, Any]]:
    """The executors of a classic (local or cluster) session, from its driver's status tracker."""
    context = spark.sparkContext
    conf = context.getConf()
    local = context.master.startswith("local")
    executor_cores = int(conf.get("spark.executor.cores", "0") or 0)
    memory = conf.get("spark.driver.memory" if local else "spark.executor.memory", "1g")
    executors = []
    for info in context._jsc.sc().statusTracker().getExecutorInfos():
        driver = local or info.host() == conf.get("spark.driver.host", "")
        if driver and not local:
            continue  # on a cluster the driver runs no tasks
        executors.append(
            {
                "id": "driver" if local else f"{info.host()}:{info.port()}",
                "host": f"{info.host()}:{info.port()}",
                "cores": context.defaultParallelism if local else executor_cores or None,
                "memory": memory,
                "storage_memory_bytes": int(info.totalOnHeapStorageMemory()),
                "active_tasks": int(info.numRunningTasks()),
            }
        )
    return executors


def _get_json(url: str) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=STATUS_TIMEOUT) as response:  # noqa: S310 - an operator's URL
        return json.loads(response.read(2_000_000))


def from_status_api(base: str) -> list[dict[str, Any]]:
    """The active executors of the running applications Spark's REST API at ``base`` lists."""
    base = base.rstrip("/")
    applications = _get_json(f"{base}/api/v1/applications?status=running")
    executors = []
    for application in applications[:MAX_APPLICATIONS]:
        app_id = application["id"]
        for item in _get_json(f"{base}/api/v1/applications/{app_id}/executors"):
            if not item.get("isActive", True):
                continue
            executors.append(
                {
                    "id": f"{application.get('name', app_id)} / {item.get('id')}",
                    "host": item.get("hostPort", ""),
                    "cores": item.get("totalCores"),
                    "memory": None,
                    "storage_memory_bytes": item.get("maxMemory"),
                    "active_tasks": item.get("activeTasks", 0),
                }
            )
    return executors


def read_executors() -> dict[str, Any]:
    """{"target": ``spark_target()``, "reachable": bool, "source": where read, "executors": [...],
    "reason": why not reachable}; never raises."""
    answer: dict[str, Any] = {"target": spark_target(), "reachable": False, "source": "", "executors": []}
    try:
        spark = _session_here()
        if spark is not None:
            return {
                **answer,
                "reachable": True,
                "source": "this process's Spark session",
                "executors": from_session(spark),
            }
    except Exception as error:  # noqa: BLE001 - a stopped JVM; the REST API may still answer
        logger.warning("could not read the executors of this process's Spark session: %s", error)
    url = setting("LAKEWARDEN_SPARK_STATUS_URL")
    if not url:
        answer["reason"] = (
            "not reachable: the workers hold their Spark sessions, not this process; set"
            " LAKEWARDEN_SPARK_STATUS_URL to a Spark UI (its status REST API) to list the executors"
        )
        return answer
    try:
        executors = from_status_api(str(url))
    except (OSError, ValueError, KeyError, TypeError, urllib.error.URLError) as error:
        reason = getattr(error, "reason", None) or error
        answer["reason"] = f"not reachable: Spark's status API at {url} did not answer ({reason})"
        return answer
    return {**answer, "reachable": True, "source": f"Spark's status API at {url}", "executors": executors}


def recent_executors(*, max_age: float = MAX_AGE) -> dict[str, Any]:
    """``read_executors``'s answer, shared through the cache for ``max_age`` seconds."""
    return shared_answer(CACHE_KEY, max_age, read_executors)
