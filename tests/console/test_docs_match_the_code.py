"""What the docs and the API docs say a new user can do is what the code does (issue 29, item 23;
the docs moved to a site in issue 30): the maintenance table of docs/using/maintenance.md lists
exactly the actions the installed factories offer per format (no Hudi compaction, a Paimon row), the
front page does not claim Hudi tables are kept healthy, and the API docs name every format."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from processes.registry import factory_classes
from storage.spec.registry import format_adapters

ROOT = Path(__file__).resolve().parents[2]
MAINTENANCE_PAGE = ROOT / "docs" / "using" / "maintenance.md"
FRONT_PAGES = (ROOT / "README.md", ROOT / "docs" / "index.md")


def _maintenance_table() -> dict[str, set[str]]:
    """Format name (lower case, "(plugin)" dropped) -> the actions its row of the page's
    "| Format | Actions |" table names."""
    lines = MAINTENANCE_PAGE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.replace(" ", "") == "|Format|Actions|")
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        fmt = cells[0].replace("(plugin)", "").strip().lower()
        rows[fmt] = set(re.findall(r"`([a-z][a-z-]*)`", cells[1]))
    return rows


def _first_paragraph(page: Path) -> str:
    """The page's first paragraph of prose (after its title)."""
    return page.read_text().split("\n\n", 2)[1]


def _offered() -> dict[str, set[str]]:
    offered: dict[str, set[str]] = {}
    for cls in factory_classes().values():
        for fmt, actions in cls().supported_actions().items():
            offered.setdefault(fmt, set()).update(actions)
    return offered


@pytest.mark.django_db
def test_the_docs_maintenance_table_lists_what_the_factories_offer_for_every_format():
    rows = _maintenance_table()
    offered = _offered()

    assert set(rows) == set(format_adapters()), rows  # one row per format, Hudi and Paimon included
    for fmt in rows:
        assert rows[fmt] == offered.get(fmt, set()), fmt


def test_the_front_pages_do_not_claim_hudi_tables_are_kept_healthy():
    for page in FRONT_PAGES:
        paragraph = _first_paragraph(page)
        claim = paragraph.split("healthy")[0]
        assert "healthy" in paragraph and "Iceberg" in claim, page  # the paragraph that says it
        assert "Hudi" not in claim, page  # not "keeps Hudi healthy"


@pytest.mark.django_db
def test_the_api_docs_name_every_format(api_as, viewer):
    schema = api_as(viewer).get("/api/schema/", HTTP_ACCEPT="application/json").json()

    description = schema["info"]["description"]
    for label in ("Iceberg", "Delta", "Hudi", "Lance", "Paimon"):
        assert label in description
