"""What the front page and the API docs say a new user can do is what the code does (issue 29,
item 23): the README's maintenance table lists exactly the actions the installed factories offer
per format (no Hudi compaction, a Paimon row), and the API docs name every format."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from processes.registry import factory_classes
from storage.spec.registry import format_adapters

README = Path(__file__).resolve().parents[2] / "README.md"


def _maintenance_table() -> dict[str, set[str]]:
    """Format name (lower case, "(plugin)" dropped) -> the actions its README row names."""
    section = README.read_text().split("## Maintenance actions", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("Format", "---"):
            fmt = cells[0].replace("(plugin)", "").strip().lower()
            rows[fmt] = set(re.findall(r"`([a-z][a-z-]*)`", cells[1]))
    return rows


def _offered() -> dict[str, set[str]]:
    offered: dict[str, set[str]] = {}
    for cls in factory_classes().values():
        for fmt, actions in cls().supported_actions().items():
            offered.setdefault(fmt, set()).update(actions)
    return offered


@pytest.mark.django_db
def test_the_readme_maintenance_table_lists_what_the_factories_offer_for_every_format():
    rows = _maintenance_table()
    offered = _offered()

    assert set(rows) == set(format_adapters()), rows  # one row per format, Hudi and Paimon included
    for fmt in rows:
        assert rows[fmt] == offered.get(fmt, set()), fmt
    assert (
        "Hudi" not in README.read_text().split("\n\n", 2)[1].split("healthy")[0]
    )  # not "keeps Hudi healthy"


@pytest.mark.django_db
def test_the_api_docs_name_every_format(api_as, viewer):
    schema = api_as(viewer).get("/api/schema/", HTTP_ACCEPT="application/json").json()

    description = schema["info"]["description"]
    for label in ("Iceberg", "Delta", "Hudi", "Lance", "Paimon"):
        assert label in description
