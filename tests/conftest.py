"""Shared fixtures: external tables from ../shared/fixtures, the Spark session, users per role."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_fixtures_root() -> Path | None:
    configured = os.environ.get("LAKEWARDEN_FIXTURES")
    root = Path(configured) if configured else REPO_ROOT.parent / "shared" / "fixtures"
    return root if root.is_dir() else None


@pytest.fixture(scope="session")
def external_tables() -> Path:
    """The folder of tables written by other engines; skips when it is absent (CI always has it)."""
    root = shared_fixtures_root()
    if root is None:
        pytest.skip("external table fixtures not found: set LAKEWARDEN_FIXTURES or put them at ../shared/fixtures")
    return root


@pytest.fixture(scope="session")
def hudi_fixture(external_tables, tmp_path_factory):
    """``hudi_fixture(name)`` unpacks ``hudi/<name>.zip`` once per run and returns the table path."""
    unpacked: dict[str, Path] = {}

    def unpack(name: str) -> Path:
        if name not in unpacked:
            target = tmp_path_factory.mktemp(f"hudi-{name}")
            with zipfile.ZipFile(external_tables / "hudi" / f"{name}.zip") as archive:
                archive.extractall(target)
            tables = [p for p in target.iterdir() if p.is_dir()]
            unpacked[name] = tables[0] if len(tables) == 1 and not (target / ".hoodie").exists() else target
        return unpacked[name]

    return unpack


@pytest.fixture(scope="session")
def iceberg_fixture(external_tables, tmp_path_factory):
    """``iceberg_fixture(name)`` copies ``iceberg/<name>`` with its paths relocated; returns the path."""
    relocated: dict[str, Path] = {}
    tool = external_tables.parent / "tools" / "relocate_iceberg.py"

    def relocate(name: str) -> Path:
        if name not in relocated:
            target = tmp_path_factory.mktemp(f"iceberg-{name}") / name
            subprocess.run(
                [sys.executable, str(tool), str(external_tables / "iceberg" / name), str(target)],
                check=True,
                capture_output=True,
            )
            relocated[name] = target
        return relocated[name]

    return relocate


@pytest.fixture(scope="session")
def delta_fixture(external_tables, tmp_path_factory):
    """``delta_fixture(name)`` returns a private copy of ``delta/<name>`` (readers never touch the original)."""
    copied: dict[str, Path] = {}

    def copy(name: str) -> Path:
        if name not in copied:
            target = tmp_path_factory.mktemp(f"delta-{name}") / name
            shutil.copytree(external_tables / "delta" / name, target)
            copied[name] = target
        return copied[name]

    return copy
