"""One Spark session per worker process, created lazily, pointed where the settings say.

Three modes, chosen by one setting:

- ``LAKEWARDEN_SPARK_REMOTE=sc://host:15002``: a Spark Connect client. The server owns the driver
  and its static configuration; only runtime SQL settings are sent from here.
- ``LAKEWARDEN_SPARK_MASTER=spark://host:7077``: a driver in this process on a standalone cluster.
  Executors get ``LAKEWARDEN_SPARK_EXECUTOR_MEMORY`` and run ``LAKEWARDEN_SPARK_PYTHON`` (this
  interpreter by default, so the same virtualenv must exist at the same path on every node).
- ``LAKEWARDEN_SPARK_MASTER=local[*]`` (the default): everything in this process.

``LAKEWARDEN_SPARK_CONF`` adds ``key=value`` settings to every session (object store credentials,
``spark.cores.max``...). In every mode the table files must be reachable under the same path (or
object store URI) by this process and by every executor.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading

from processes.spark.cds import driver_java_options
from processes.spark.config import setting as _setting
from processes.sql_policy import SPARK_QUERY_CONF, SPARK_STATIC_CONF

logger = logging.getLogger(__name__)

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
    # Workbench queries must not reach the JVM, the environment or files by path (the parser check
    # in processes/sql_policy.py is the first guard; these settings the second).
    **SPARK_QUERY_CONF,
    **SPARK_STATIC_CONF,
}

# spark.sql.* settings that are static (fixed when the server's driver starts): a Connect client
# cannot set them, the server's own configuration must.
STATIC_SQL_PREFIXES = (
    "spark.sql.reflect.allowList",
    "spark.sql.warehouse.dir",
    "spark.sql.extensions",
    "spark.sql.catalogImplementation",
    "spark.sql.catalog.spark_catalog",
    "spark.sql.hive.",
    "spark.sql.legacy.sessionInitWithConfigDefaults",
    "spark.sql.connect.",
    "spark.sql.streaming.ui.",
    "spark.sql.ui.",
    "spark.sql.event.",
    "spark.sql.queryExecutionListeners",
    "spark.sql.streaming.streamingQueryListeners",
    "spark.sql.cache.serializer",
    "spark.sql.sources.disabledJdbcConnProviderList",
)


def _target() -> tuple[str | None, str]:
    return _setting("LAKEWARDEN_SPARK_REMOTE"), _setting("LAKEWARDEN_SPARK_MASTER", "local[*]") or "local[*]"


def parse_conf(text: str | None) -> dict[str, str]:
    """``key=value`` pairs separated by whitespace, commas or newlines (values without spaces)."""
    pairs: dict[str, str] = {}
    for item in (text or "").replace(",", " ").split():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"LAKEWARDEN_SPARK_CONF: {item!r} is not key=value")
        pairs[key.strip()] = value.strip()
    return pairs


def runtime_sql_conf(config: dict[str, str]) -> dict[str, str]:
    """The settings a Spark Connect client may send: session-level SQL settings only."""
    return {
        key: value
        for key, value in config.items()
        if key.startswith("spark.sql.") and not key.startswith(STATIC_SQL_PREFIXES)
    }


def session_config(
    remote: str | None, master: str, extra_config: dict[str, str] | None = None
) -> dict[str, str]:
    """Everything the session is built with, for the chosen mode."""
    config = dict(BASE_CONFIG)
    if not remote and master.startswith("spark://"):
        python = _setting("LAKEWARDEN_SPARK_PYTHON") or sys.executable
        config.update(
            {
                "spark.executor.memory": _setting("LAKEWARDEN_SPARK_EXECUTOR_MEMORY", "1g"),
                # Executors' Python workers read tables with pyarrow and the format libraries.
                "spark.pyspark.python": python,
                "spark.executorEnv.PYSPARK_PYTHON": python,
            }
        )
    config.update(parse_conf(_setting("LAKEWARDEN_SPARK_CONF")))
    config.update(extra_config or {})
    if remote:
        # Spark Connect refuses static driver settings from the client; the server owns them.
        dropped = sorted(set(config) - set(runtime_sql_conf(config)) - set(BASE_CONFIG))
        if dropped:
            logger.warning(
                "Spark Connect: not sending %s (set them on the Connect server)", ", ".join(dropped)
            )
        config = runtime_sql_conf(config)
    return config


# PySpark logs every analysis error, with its whole JVM stack, to stderr through loggers of its own
# (JSON formatted, outside Lakewarden's logging and its secret masking). The error is raised to the
# caller all the same, and Lakewarden records it (masked) where it belongs: those loggers are
# silenced. They also restyle any handler attached to them with their JSON formatter (which
# formats exceptions from exc_info, past the masking filter); a handler someone else attaches
# (a log shipper, pytest's capture) keeps its own formatter.
PYSPARK_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def _quiet_query_context_loggers() -> None:
    from pyspark.logger import PySparkLogger

    for name in PYSPARK_CONTEXT_LOGGERS:
        context_logger = PySparkLogger.getLogger(name)
        context_logger.setLevel(logging.CRITICAL)
        context_logger.addHandler = functools.partial(logging.Logger.addHandler, context_logger)  # type: ignore[method-assign]


def spark_session(app_name: str = "lakewarden", extra_config: dict[str, str] | None = None):
    """The process's Spark session, created on first use."""
    global _session
    with _lock:
        if _session is not None and not _is_stopped(_session) and _answers(_session):
            return _session
        if _session is not None:
            _discard(_session)
            _session = None
        from pyspark.sql import SparkSession

        remote, master = _target()
        if not remote:
            # Python workers must run this interpreter (with pyarrow), not whatever python3 is first.
            os.environ.setdefault("PYSPARK_PYTHON", _setting("LAKEWARDEN_SPARK_PYTHON") or sys.executable)
        builder = SparkSession.builder.appName(app_name)
        builder = builder.remote(remote) if remote else builder.master(master)
        config = session_config(remote, master, extra_config)
        if not remote:  # the driver's JVM starts here: with the class-data archive if there is one
            options = driver_java_options()
            if options:
                current = config.get("spark.driver.extraJavaOptions", "")
                config["spark.driver.extraJavaOptions"] = f"{current} {options}".strip()
        for key, value in config.items():
            builder = builder.config(key, value)
        _session = builder.getOrCreate()
        _quiet_query_context_loggers()
        return _session


def is_connect(session) -> bool:
    """Whether ``session`` is a Spark Connect client session."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def tag_jobs(spark, tag: str) -> None:
    """Tag the Spark jobs this thread starts from now on (and threads it starts through
    ``pyspark.util.inheritable_thread_target``) so ``interrupt_jobs`` can stop them from any thread.

    Classic Spark (local, standalone): a SparkContext job tag, and running tasks are interrupted
    on cancel. ``SparkSession.addTag`` would not do: classic ``interruptTag`` only finds tags added
    by the calling thread, so a watcher thread could never interrupt them. Spark Connect: a
    session operation tag, which an interrupt from any thread of the session matches (the server
    interrupts the tasks' threads itself).
    """
    if is_connect(spark):
        spark.addTag(tag)
    else:
        context = spark.sparkContext
        context.addJobTag(tag)
        context.setInterruptOnCancel(True)


def untag_jobs(spark, tag: str) -> None:
    """Stop tagging this thread's jobs with ``tag`` (a pooled worker thread runs other work next)."""
    if is_connect(spark):
        spark.removeTag(tag)
    else:
        spark.sparkContext.removeJobTag(tag)


def interrupt_jobs(spark, tag: str) -> None:
    """Cancel every running Spark job tagged ``tag`` (see ``tag_jobs``); callable from any thread."""
    if is_connect(spark):
        spark.interruptTag(tag)
    else:
        spark.sparkContext.cancelJobsWithTag(tag)


def _is_stopped(session) -> bool:
    try:
        if is_connect(session):
            return bool(session.is_stopped)
        spark_context = getattr(session, "sparkContext", None)
        return spark_context is not None and spark_context._jsc is None
    except Exception:
        return False


def _answers(session) -> bool:
    """A Spark Connect session still known to its server (a restarted server forgets sessions and
    refuses their next request): one cheap round trip. A local driver is in this process: yes."""
    if not is_connect(session):
        return True
    try:
        return bool(session.version)
    except Exception as error:
        logger.warning("Spark Connect session lost (%s); opening a new one", str(error).splitlines()[0][:200])
        return False


def _discard(session) -> None:
    try:
        session.stop()
    except Exception:
        logger.debug("stopping a lost Spark session failed", exc_info=True)


def stop_spark_session() -> None:
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
