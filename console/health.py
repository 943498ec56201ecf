"""Liveness checks of the parts Lakewarden runs on: database, broker, Celery workers, Java/Spark.
The worker ping itself (``check_workers``) is processes/health.py's, which the alert rules use too."""

from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connection

from processes.health import check_workers


def check_database() -> dict[str, Any]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("select version()")
            version = cursor.fetchone()[0]
        return {"ok": True, "detail": version.split(",")[0]}
    except Exception as error:
        return {"ok": False, "detail": f"database unreachable: {error}"}


def check_broker() -> dict[str, Any]:
    from console.celery import app

    try:
        with app.connection_for_write(url=settings.CELERY_BROKER_URL) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return {"ok": True, "detail": settings.CELERY_BROKER_URL.split("@")[-1]}
    except Exception as error:
        return {"ok": False, "detail": f"broker unreachable: {error}"}


#: The last worker ping of any console process, in the cache: ``(epoch seconds, check_workers answer)``.
WORKERS_CACHE_KEY = "lakewarden:workers-ping"


def recent_workers(
    *, timeout: float = 0.8, refresh_after: float = 10.0, max_age: float = 60.0
) -> dict[str, Any]:
    """``check_workers``'s answer without waiting for it when a recent one is known.

    A ping waits its whole timeout (on Redis whole seconds: about 1.1 s), and the overview polls
    liveness every 15 s from every open tab: each poll held a web worker for that second. So the
    answer is shared by every console process through the cache. One younger than ``max_age`` is
    returned at once, and one older than ``refresh_after`` is also refreshed on a background
    thread (one refresh at a time across processes), so a poll shows what the previous poll's
    refresh found. Only with no answer that recent does the caller wait for a ping. The answer's
    ``checked_at`` (epoch seconds) says when it was taken."""
    from django.core.cache import cache

    now = time.time()
    try:
        cached = cache.get(WORKERS_CACHE_KEY)
    except Exception:  # the cache is down: ask the workers directly
        cached = None
    if cached is not None and 0 <= now - cached[0] <= max_age:
        checked_at, answer = cached
        if now - checked_at > refresh_after and _claim_refresh(cache, timeout):
            threading.Thread(
                target=_refresh_workers, args=(timeout,), name="workers-ping", daemon=True
            ).start()
        return {**answer, "checked_at": checked_at}
    return _refresh_workers(timeout)


def _claim_refresh(cache, timeout: float) -> bool:
    try:
        return bool(cache.add(f"{WORKERS_CACHE_KEY}:refreshing", 1, timeout=int(timeout) + 5))
    except Exception:
        return False


def _refresh_workers(timeout: float) -> dict[str, Any]:
    from django.core.cache import cache

    answer = check_workers(timeout=timeout)
    checked_at = time.time()
    try:
        cache.set(WORKERS_CACHE_KEY, (checked_at, answer), timeout=3600)
        cache.delete(f"{WORKERS_CACHE_KEY}:refreshing")
    except Exception:  # nothing shared this time; the next poll pings again
        pass
    return {**answer, "checked_at": checked_at}


@functools.lru_cache(maxsize=1)
def check_spark() -> dict[str, Any]:
    """Java present and recent enough, and pyspark importable: what a Spark session needs to start.

    Cached per process: starting a real session costs seconds, and Java does not come and go.
    """
    if importlib.util.find_spec("pyspark") is None:
        return {"ok": False, "detail": "pyspark is not installed"}
    java = shutil.which("java")
    if java is None:
        return {
            "ok": False,
            "detail": "java not found on PATH: install a Java 17 runtime (openjdk-17-jre-headless)",
        }
    try:
        output = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=10).stderr
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"ok": False, "detail": f"java does not run: {error}"}
    match = re.search(r'version "(\d+)', output)
    major = int(match.group(1)) if match else 0
    if major < 17:
        return {
            "ok": False,
            "detail": f"Spark 4 needs Java 17 or newer, found: {output.splitlines()[0] if output else 'nothing'}",
        }
    import pyspark

    remote = settings.LAKEWARDEN_SPARK_REMOTE
    target = remote or settings.LAKEWARDEN_SPARK_MASTER
    return {"ok": True, "detail": f"Java {major}, pyspark {pyspark.__version__}, Spark at {target}"}


def health_report() -> tuple[bool, dict[str, Any]]:
    checks = {
        "database": check_database(),
        "broker": check_broker(),
        "worker": check_workers(),
        "spark": check_spark(),
    }
    healthy = all(check["ok"] for check in checks.values())
    return healthy, {"status": "ok" if healthy else "degraded", "checks": checks}
