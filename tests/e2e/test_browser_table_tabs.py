"""The table tabs and the workbench in a real browser: a 390 px phone and the workbench's keyboard,
schema browser and export (headless Chromium, as tests/e2e/test_browser.py)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.test_browser import CHROMIUM, browser_page, demo_admin, workers  # noqa: F401 (fixtures)

pytestmark = pytest.mark.e2e

PHONE = 390
#: Every card's content fits its card (tables scroll inside their own box).
OVERFLOWING_CARDS = """(() => [...document.querySelectorAll('main .card, main .stat')]
  .filter(card => card.scrollWidth > card.clientWidth + 1 || card.getBoundingClientRect().right > innerWidth + 1)
  .map(card => (card.querySelector('h2')?.textContent || card.className).trim()))()"""
#: Characters per line of the first file name in the files list (wrapped every few: a handful).
FILE_NAME_LINE = """(() => {
  const name = document.querySelector('table.files td.path summary'), range = document.createRange();
  range.selectNodeContents(name);
  const lines = new Set([...range.getClientRects()].map(rect => Math.round(rect.top))).size;
  return name.textContent.trim().length / Math.max(lines, 1);
})()"""


#: The innermost elements reaching past the window's right edge, to say what overflows.
WIDE_ELEMENTS = """(() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > innerWidth + 1 && e.closest('.scroll-x, .tabs') === null)
  .filter(e => ![...e.children].some(c => c.getBoundingClientRect().right > innerWidth + 1))
  .slice(0, 8).map(e => `${e.tagName.toLowerCase()}.${e.className} ${Math.round(e.getBoundingClientRect().right)}px`))()"""


def _log_in(page, base_url: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", "a long enough password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")


@pytest.fixture
def orders_pk(demo_admin):
    from storage.models import Table

    return Table.objects.get(name="demo.orders").pk


def test_the_overview_table_tabs_and_workbench_fit_a_390_px_phone(
    orders_pk, live_server, browser_page, tmp_path
):
    page = browser_page
    page.set_viewport_size({"width": PHONE, "height": 844})
    _log_in(page, live_server.url)
    tabs = ["", "snapshots/", "files/", "partitions/", "splits/", "changes/"]
    for path in ["/", *(f"/tables/{orders_pk}/{tab}" for tab in tabs), "/queries/"]:
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE, (path, f"{width} px wide in a {PHONE} px window", page.evaluate(WIDE_ELEMENTS))
        assert page.evaluate(OVERFLOWING_CARDS) == [], path
    page.goto(f"{live_server.url}/tables/{orders_pk}/files/")
    assert page.evaluate(FILE_NAME_LINE) >= 20  # file names wrap at whole lines, not every 3 characters
    assert page.locator("table.files thead").is_hidden()  # stacked cards, each value labelled
    expect(page.locator("table.files td[data-label=Size]").first).to_be_visible()
    page.screenshot(path=str(tmp_path / "files-390.png"), full_page=True)
    assert page.console_errors == []


def test_the_workbench_runs_on_ctrl_enter_inserts_names_and_exports_csv(
    demo_admin, workers, live_server, browser_page
):
    page = browser_page
    _log_in(page, live_server.url)
    page.goto(f"{live_server.url}/queries/")
    page.uncheck("input[name=cache]")

    page.fill("#sql", "select region, count(*) as orders from ")
    page.click(".schema-browser button[data-insert='demo.orders']")
    page.click(".schema-browser li:has(> button[data-insert='demo.orders']) summary")
    expect(page.locator(".schema-browser button[data-insert='region']")).to_be_visible(timeout=30_000)
    page.locator("#sql").press("End")
    page.locator("#sql").press_sequentially(" group by ")
    page.click(".schema-browser button[data-insert='region']")
    page.locator("#sql").press_sequentially(" order by 1")
    assert page.input_value("#sql") == (
        "select region, count(*) as orders from demo.orders group by region order by 1"
    )
    page.locator("#sql").press("Control+Enter")
    page.wait_for_selector("#query-result .status-success", timeout=120_000)
    rows = page.locator("#query-result table.result tbody tr").all_inner_texts()
    assert [r.split("\t")[0] for r in rows] == ["apac", "eu", "latam", "us"]

    with page.expect_download() as download:
        page.click("#query-result .exports a:has-text('CSV')")
    text = open(download.value.path(), encoding="utf-8").read()
    assert text.splitlines()[0] == "region,orders"
    assert [line.split(",")[0] for line in text.splitlines()[1:]] == ["apac", "eu", "latam", "us"]
    assert page.console_errors == []
