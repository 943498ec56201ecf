"""mypy over storage and processes (pyproject.toml's [tool.mypy] names the files) passes, so a
type error is a failing test and not only a pre-commit hook someone may not have installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_finds_no_error_in_storage_and_processes():
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "error:" not in done.stdout
