"""The docs build as a site with no warning (issue 30, item 7): ``mkdocs build --strict`` over
``docs/`` (mkdocs.yml makes a broken link or anchor, and a page left out of the nav, a warning), and
the front page (README.md) links only to files that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_the_docs_build_with_mkdocs_strict_and_no_warning(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor, not ours
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml")]
        + ["--site-dir", str(tmp_path / "site")],
        cwd=ROOT,  # the changelog and contributing pages include ../CHANGELOG.md, ../CONTRIBUTING.md
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr

    assert result.returncode == 0, output
    assert not [line for line in output.splitlines() if line.startswith(("WARNING", "ERROR"))], output
    site = tmp_path / "site"
    assert (site / "index.html").is_file()
    assert "Keep a Changelog" in (site / "development" / "changelog" / "index.html").read_text()
    assert "make test" in (site / "development" / "contributing" / "index.html").read_text()


def test_the_front_page_links_only_to_files_that_exist_and_shows_a_small_screenshot():
    text = README.read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [
        target.split("#", 1)[0] for target in targets if "://" not in target and not target.startswith("#")
    ]

    assert local, "the front page links to the docs"
    assert [target for target in local if not (ROOT / target).exists()] == []
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    assert images, "the front page shows a screenshot"
    for image in images:
        assert (ROOT / image).stat().st_size < 200 * 1024, image
