"""Class-data sharing for the local Spark driver's JVM: a faster start for every worker process.

A Spark driver loads some 20,000 classes before its first query. A dynamic CDS archive (Java 13+,
``-XX:ArchiveClassesAtExit``) keeps them parsed and verified in a file the JVM maps at start. Here
(2 cores, Java 17, Spark 4.3) a session and its first query took 7.6 s without it and 4.6 s with it.
Each Celery worker process starts its own driver, so this is paid per worker start.

``python -m processes.spark.cds`` (run by scripts/setup.sh) trains the archive once: a local session
runs a few typical queries, and the JVM writes what it loaded when it exits. The archive is named
after the Java binary and the Spark version, so a new JDK or PySpark simply finds none and starts
without it (``-Xshare:auto``: a JVM that cannot use an archive starts as if there were none).
``LAKEWARDEN_SPARK_CDS=0`` turns it off. It applies to drivers this process starts (local mode and
the standalone-cluster driver), not to Spark Connect servers or cluster daemons.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from processes.spark.config import setting as _setting


def _java() -> Path | None:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home, "bin", "java") if java_home else None
    found = str(candidate) if candidate and candidate.exists() else shutil.which("java")
    return Path(found).resolve() if found else None


def archive_path() -> Path | None:
    """Where the archive for this JVM and this Spark lives (whether or not it exists yet); None
    without a JVM or PySpark."""
    java = _java()
    if java is None:
        return None
    try:
        import pyspark
    except ImportError:
        return None
    stat = java.stat()
    key = f"{java}|{stat.st_size}|{stat.st_mtime_ns}|{pyspark.__version__}|{Path(pyspark.__file__).parent}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    var = Path(_setting("LAKEWARDEN_VAR_DIR", "var") or "var")
    return (var / "spark-cds" / f"driver-{pyspark.__version__}-{digest}.jsa").resolve()


def enabled() -> bool:
    # a bool from Django's settings, a string from the environment outside Django
    return str(_setting("LAKEWARDEN_SPARK_CDS", "1")).lower() not in ("0", "false", "no", "off")


def driver_java_options() -> str:
    """JVM options for a driver this process starts: the archive if there is one, else nothing."""
    if not enabled():
        return ""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto"


# The training run: the queries a worker typically runs first (SQL, an aggregate with a shuffle,
# Arrow in and out, parquet written and read, a Python worker), so their classes are archived.
_TRAINING = """
import sys, tempfile
from pyspark.sql import SparkSession
from processes.spark.session import session_config
builder = SparkSession.builder.master("local[2]").appName("lakewarden-cds")
for key, value in session_config(None, "local[2]").items():
    if key == "spark.driver.extraJavaOptions":
        value = value + " -XX:ArchiveClassesAtExit=" + sys.argv[1] + " -Xlog:cds=off -Xlog:cds+dynamic=off"
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.range(1000).selectExpr("id % 7 as k", "id").groupBy("k").count().collect()
import pyarrow as pa
frame = spark.createDataFrame(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]}).to_pandas())
frame.toArrow()
with tempfile.TemporaryDirectory() as folder:
    frame.write.parquet(folder + "/t")
    spark.read.parquet(folder + "/t").where("a > 1").collect()
spark.sparkContext.parallelize(range(10), 2).map(lambda x: x * 2).sum()
spark.stop()
"""


def build(force: bool = False) -> Path | None:
    """Trains the archive if it is missing (or ``force``); returns its path, or None when there is
    nothing to build for (no JVM, no PySpark, turned off)."""
    path = archive_path()
    if path is None or not enabled():
        return None
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env["LAKEWARDEN_SPARK_CDS"] = "0"
    try:
        subprocess.run(
            [sys.executable, "-c", _TRAINING, str(partial)],
            env=env,
            cwd=root,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=600,
        )
        if not partial.is_file():
            raise RuntimeError("the JVM wrote no archive")
        os.replace(partial, path)  # atomic: a starting driver sees the whole file or none
    finally:
        partial.unlink(missing_ok=True)
    for stale in path.parent.glob("driver-*.jsa"):
        if stale != path:
            stale.unlink(missing_ok=True)
    return path


if __name__ == "__main__":
    try:
        built = build(force="--force" in sys.argv)
    except (subprocess.SubprocessError, OSError, RuntimeError) as error:
        detail = getattr(error, "stderr", b"") or b""
        print(f"no Spark class-data archive ({error}): drivers start without it\n{detail.decode()[-2000:]}")
        sys.exit(1)
    print(f"Spark class-data archive: {built}" if built else "Spark class-data archive: not built")
