"""Where a process stages: under a local table's folder; for a table on an object store, in a
scratch folder of its own under the var folder (never a relative ``s3:/...`` path in the worker's
working folder)."""

from __future__ import annotations

from pathlib import Path

from processes.models import Process
from processes.services import clean_staging, staging_dir
from storage.models import Table


def test_a_local_table_stages_under_its_own_folder(tmp_path):
    process = Process(pk=7, table=Table(location=str(tmp_path / "t")))
    assert staging_dir(process) == tmp_path / "t" / ".lakewarden-staging" / "process-7"


def test_an_object_store_table_stages_in_the_var_folder_and_cleaning_removes_it(
    settings, tmp_path, monkeypatch
):
    settings.LAKEWARDEN_VAR_DIR = tmp_path / "var"
    monkeypatch.chdir(tmp_path)
    process = Process(pk=8, table=Table(location="s3://lake/demo/orders"))

    folder = staging_dir(process)
    assert folder == tmp_path / "var" / "staging" / "process-8" and folder.is_absolute()
    folder.mkdir(parents=True)
    (folder / "scratch").write_bytes(b"x")
    clean_staging(process)

    assert not folder.exists()
    assert not Path(tmp_path, "s3:").exists()
