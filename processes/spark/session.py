"""One Spark session per worker process, created lazily, pointed where the settings say.

``LAKEWARDEN_SPARK_REMOTE`` (``sc://host:15002``) selects Spark Connect; otherwise
``LAKEWARDEN_SPARK_MASTER`` (``local[*]`` by default, or ``spark://host:7077``).
"""

from __future__ import annotations

import os
import sys
import threading

_lock = threading.Lock()
_session = None

# Settings every Lakewarden session needs: timestamps written as TIMESTAMP_MICROS so Iceberg and
# Delta statistics work (INT96 has none), UTC everywhere, no UI port to collide on shared hosts.
BASE_CONFIG = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    # The lakewarden data source takes pushed filters; Spark refuses that unless enabled.
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
}


def _target() -> tuple[str | None, str]:
    try:
        from django.conf import settings

        return settings.LAKEWARDEN_SPARK_REMOTE, settings.LAKEWARDEN_SPARK_MASTER
    except Exception:  # outside Django (a notebook, a Spark executor)
        return os.environ.get("LAKEWARDEN_SPARK_REMOTE") or None, os.environ.get(
            "LAKEWARDEN_SPARK_MASTER", "local[*]"
        )


def spark_session(app_name: str = "lakewarden", extra_config: dict[str, str] | None = None):
    """The process's Spark session, created on first use."""
    global _session
    with _lock:
        if _session is not None and not _is_stopped(_session):
            return _session
        from pyspark.sql import SparkSession

        # Python workers must run this interpreter (with pyarrow), not whatever python3 is first.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

        remote, master = _target()
        builder = SparkSession.builder.appName(app_name)
        builder = builder.remote(remote) if remote else builder.master(master)
        config = dict(BASE_CONFIG)
        if remote:
            # Spark Connect refuses static driver settings from the client; the server owns them.
            config = {k: v for k, v in config.items() if k.startswith("spark.sql.")}
        for key, value in {**config, **(extra_config or {})}.items():
            builder = builder.config(key, value)
        _session = builder.getOrCreate()
        return _session


def _is_stopped(session) -> bool:
    try:
        spark_context = getattr(session, "sparkContext", None)
        return spark_context is not None and spark_context._jsc is None
    except Exception:
        return False


def stop_spark_session() -> None:
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
