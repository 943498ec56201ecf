"""The Spark driver's JVM class-data archive (processes/spark/cds.py): named per JVM and Spark,
used when present, harmless when missing, unusable or turned off."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from processes.spark import cds


def test_the_driver_options_name_the_archive_only_when_it_exists_and_is_wanted(settings, tmp_path):
    settings.LAKEWARDEN_VAR_DIR = tmp_path
    settings.LAKEWARDEN_SPARK_CDS = True
    path = cds.archive_path()
    assert path is not None and path.parent == (tmp_path / "spark-cds").resolve()
    import pyspark

    assert pyspark.__version__ in path.name
    assert cds.driver_java_options() == ""  # nothing trained yet: the JVM starts as it always did

    path.parent.mkdir()
    path.write_bytes(b"archive")
    assert cds.driver_java_options() == f"-XX:SharedArchiveFile={path} -Xshare:auto"

    settings.LAKEWARDEN_SPARK_CDS = False
    assert cds.driver_java_options() == ""


def test_a_new_jvm_or_spark_finds_no_archive_of_an_old_one(settings, tmp_path, monkeypatch):
    settings.LAKEWARDEN_VAR_DIR = tmp_path
    before = cds.archive_path()
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", "9.9.9")
    assert cds.archive_path() != before


def test_a_jvm_given_an_archive_it_cannot_use_starts_without_it(tmp_path):
    """-Xshare:auto: a truncated or foreign file costs the speed-up, never the start."""
    java = cds._java()
    if java is None:
        pytest.skip("no JVM on this machine")
    garbage = tmp_path / "broken.jsa"
    garbage.write_bytes(b"\x00not an archive" * 100)
    run = subprocess.run(
        [str(java), f"-XX:SharedArchiveFile={garbage}", "-Xshare:auto", "-version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "OpenJDK" in run.stderr or "version" in run.stderr


@pytest.mark.spark
def test_the_suites_driver_maps_the_archive_setup_trained(spark):
    """scripts/setup.sh trains the archive; the session of this very suite started with it mapped
    (the mapped size includes the archive's own, far above the JDK's base archive alone)."""
    path = cds.archive_path()
    assert path is not None and path.is_file(), "scripts/setup.sh trains var/spark-cds/: run it"
    if shutil.which("jcmd") is None:
        pytest.skip("no jcmd to ask the JVM")
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    assert f"-XX:SharedArchiveFile={path}" in options
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    info = subprocess.run(["jcmd", str(pid), "VM.info"], capture_output=True, text=True, timeout=60).stdout
    mapped = re.search(r"CDS archive\(s\) mapped at: .*?size (\d+)", info)
    assert mapped, info[:2000]
    assert int(mapped.group(1)) > path.stat().st_size
