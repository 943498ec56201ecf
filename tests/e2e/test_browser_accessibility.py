"""Every console page at 1440, 1024 and 390 px in one browser: no horizontal overflow of the
document and no axe-core violation of serious or critical impact (axe-core from npm, installed by
``scripts/setup.sh --test`` into tests/e2e/node_modules, git-ignored)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests.e2e.test_browser import browser_page, demo_admin  # noqa: F401 (fixtures)
from tests.e2e.test_browser_table_tabs import WIDE_ELEMENTS, _log_in

pytestmark = pytest.mark.e2e

AXE = Path(__file__).parent / "node_modules" / "axe-core" / "axe.min.js"
WIDTHS = (1440, 1024, 390)
#: The links of a table page's tabs (each tab is walked as its own page).
TAB_LINKS = "[...document.querySelectorAll('nav.tabs a')].map(a => a.getAttribute('href'))"
#: Two frames: the resize handlers (lakewarden.js) have run.
SETTLED = "new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
#: axe-core's violations of serious or critical impact, each as "rule: target (summary)".
AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
    .flatMap(v => v.nodes.slice(0, 3).map(n => `${v.id}: ${n.target.join(' ')} (${n.failureSummary.split('\\n')[1] || ''})`));
}"""
#: Pages whose screenshots the closing notes describe (LAKEWARDEN_SCREENSHOTS=<folder> keeps them).
SHOTS = {"overview": "/", "table": "table", "process": "process", "workbench": "/queries/"}


@pytest.fixture
def walk_targets(demo_admin):
    """The table of each format the demo has and one process (with its trash card) to open."""
    from processes.models import Process, ProcessStatus
    from storage.models import Table

    orders = Table.objects.get(name="demo.orders")
    tables = {"iceberg": orders.pk}  # the Iceberg table with the most to show, then one per format
    for table in Table.objects.order_by("name"):
        tables.setdefault(table.format, table.pk)
    process = Process.objects.create(
        table=orders,
        action="rewrite",
        factory="iceberg-rewrite",
        status=ProcessStatus.SUCCESS,
        params={"target_file_size": 134217728},
        summary={"files_rewritten": 12, "files_added": 1, "bytes_rewritten": 1_234_567},
        requested_by=demo_admin,
    )
    return {"tables": tables, "process": process.pk, "orders": orders.pk}


def _problems(page, path: str, width: int) -> list[str]:
    page.set_viewport_size({"width": width, "height": 900})
    page.evaluate(SETTLED)
    found = []
    document_width = page.evaluate("document.documentElement.scrollWidth")
    if document_width > width:
        found.append(f"{path} @ {width}: {document_width} px wide: {page.evaluate(WIDE_ELEMENTS)}")
    found += [f"{path} @ {width}: {v}" for v in page.evaluate(AXE_RUN)]
    return found


def test_every_page_fits_three_widths_without_serious_axe_violations(
    walk_targets, live_server, browser_page, tmp_path
):
    if not AXE.exists():
        pytest.skip("axe-core is not installed (scripts/setup.sh --test installs it with npm)")
    page = browser_page
    base = live_server.url
    shots = Path(os.environ.get("LAKEWARDEN_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)

    page.add_init_script(
        path=str(AXE)
    )  # in every page, before its own scripts (the CSP allows no inline tag)
    page.goto(f"{base}/accounts/login/")
    problems = [p for width in WIDTHS for p in _problems(page, "/accounts/login/", width)]
    _log_in(page, base)

    tables = walk_targets["tables"]
    plugins = {"lance": "lakewarden_lance", "paimon": "lakewarden_paimon"}
    formats = {"iceberg", "delta"} | {
        name for name, module in plugins.items() if importlib.util.find_spec(module)
    }
    assert formats <= set(tables), tables  # Lance and Paimon when their plugins are installed
    process = walk_targets["process"]
    # the process page loads its trash card and the Processes tab its overrides form (htmx, waited
    # for by "networkidle"): fragments, walked inside their pages
    paths = ["/", "/tables/", "/processes/", f"/processes/{process}/"]
    paths += ["/queries/", "/storages/", "/catalogs/", "/alerts/", "/audit/", "/capacity/"]
    for pk in tables.values():
        page.goto(f"{base}/tables/{pk}/")
        paths += page.evaluate(TAB_LINKS)
    named = {"table": f"/tables/{walk_targets['orders']}/", "process": f"/processes/{process}/"}
    for path in paths:
        response = page.goto(f"{base}{path}")
        if response is None or response.status != 200:
            problems.append(f"{path}: answered {response and response.status}")
            continue
        page.wait_for_load_state("networkidle")
        for width in WIDTHS:
            problems += _problems(page, path, width)
            for name, target in SHOTS.items():
                if named.get(target, target) == path and width in (1440, 390):
                    page.screenshot(path=str(shots / f"{name}-{width}.png"), full_page=True)
    assert problems == [], "\n".join(problems)
    assert {f"{name}-{width}.png" for name in SHOTS for width in (1440, 390)} <= {
        p.name for p in shots.glob("*.png")
    }
    assert page.console_errors == []
