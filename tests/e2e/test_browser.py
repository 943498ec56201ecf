"""An operator in a real browser: headless Chromium (Debian's) driven by Playwright."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright.sync_api import expect

from devtools.demo import demo_lakehouse_build

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def browser_page(tmp_path):
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.console_errors = errors
        yield page
        browser.close()


@pytest.fixture
def demo_admin(live_server, warehouse, django_user_model, fast_passwords):
    """The demo lakehouse and an admin user, made before the browser starts (Playwright's sync API
    runs an event loop in this thread, where Django refuses ORM calls)."""
    from django.contrib.auth.models import Group
    from django.db import connection

    # The SQL catalog's own tables are not Django's, so test flushes leave an earlier test's demo
    # entries (pointing into its deleted warehouse) behind: start from an empty catalog.
    with connection.cursor() as cursor:
        cursor.execute("select to_regclass('iceberg_tables') is not null")
        if cursor.fetchone()[0]:
            cursor.execute("delete from iceberg_tables where catalog_name = 'demo'")
            cursor.execute("delete from iceberg_namespace_properties where catalog_name = 'demo'")
    demo_lakehouse_build(warehouse=warehouse, scale=4)
    user = django_user_model.objects.create_user("ada", password="a long enough password")
    user.groups.add(Group.objects.get_or_create(name="admin")[0])
    return user


def test_an_admin_logs_in_sees_the_demo_tables_and_opens_one(demo_admin, live_server, browser_page, tmp_path):
    page = browser_page

    page.goto(f"{live_server.url}/tables/")
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", "a long enough password")
    page.click("button[type=submit]")
    page.wait_for_selector("text=demo.orders")

    names = page.locator("#table-rows tbody tr td:first-child a").all_inner_texts()
    assert {"demo.orders", "demo.events", "demo.customers", "sales", "sensor_readings"} <= set(names)
    page.screenshot(path=str(tmp_path / "tables.png"), full_page=True)

    page.fill("form.filters input[name=q]", "demo.orders")
    expect(page.locator("#table-rows tbody tr")).to_have_count(1)

    page.click("text=demo.orders")
    page.wait_for_selector("h2:has-text('Schema')")
    assert "identity(region)" in page.content()
    assert "day(order_ts)" in page.content()
    page.screenshot(path=str(tmp_path / "table.png"), full_page=True)
    assert page.console_errors == []


@pytest.fixture
def demo_orders(demo_admin):
    from storage.models import Table

    return Table.objects.get(name="demo.orders")


def test_an_operator_filters_files_plans_splits_and_runs_a_process(
    demo_orders, live_server, browser_page, tmp_path
):
    table = demo_orders
    page = browser_page
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", "a long enough password")
    page.click("button[type=submit]")

    page.goto(f"{live_server.url}/tables/{table.pk}/files/")
    page.fill("input[name=filter]", "region = 'eu'")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**filter=*")
    page.wait_for_selector(".files-chart svg")  # the whole snapshot's sizes (test_table_tabs.py)
    partitions = page.locator("#tab-body tbody tr td:nth-child(2)").all_inner_texts()
    assert partitions and all(p.startswith("region=eu") for p in partitions)
    page.locator("#tab-body details summary").first.click()
    assert page.locator("#tab-body details[open] dl").count() == 1
    page.screenshot(path=str(tmp_path / "files.png"), full_page=True)

    assert page.console_errors == []
    page.fill("input[name=filter]", "regoin = 'eu'")
    page.click("form.filters button[type=submit]")
    page.wait_for_selector("text=unknown column 'regoin'")
    # The browser logs the deliberate 400 answer; nothing else may appear.
    assert all("400 (Bad Request)" in error for error in page.console_errors)
    page.console_errors.clear()

    page.goto(f"{live_server.url}/tables/{table.pk}/splits/?target_size=65536")
    page.wait_for_selector("text=splits over")
    page.screenshot(path=str(tmp_path / "splits.png"), full_page=True)

    page.goto(f"{live_server.url}/tables/{table.pk}/processes/")
    assert page.locator("select[name=action]").input_value() == "rewrite"  # the form starts on rewrite
    assert page.locator("#run-rewrite-target-file-size").is_visible()
    page.select_option("select[name=action]", "expire-snapshots")
    assert not page.locator("#run-rewrite-target-file-size").is_visible()  # only the picked action's fields
    page.check("#run-expire-snapshots-dry-run")  # the generated form: a checkbox, not JSON
    page.click("#tab-body form button[type=submit]")
    page.wait_for_url("**/processes/*/")
    assert page.locator(".status").first.inner_text() == "PENDING"
    assert "expire-snapshots" in page.content()  # its params: tests/console/test_run_form.py
    page.screenshot(path=str(tmp_path / "process.png"), full_page=True)
    assert page.console_errors == []


@pytest.fixture
def two_tables_processes(demo_orders):
    """A finished process on demo.orders and one on demo.events (made before the browser starts)."""
    from processes.models import Process
    from storage.models import Table

    events = Table.objects.get(name="demo.events")
    return {
        table.name: Process.objects.create(
            table=table, action="rewrite", factory="iceberg-rewrite", status="SUCCESS"
        ).pk
        for table in (demo_orders, events)
    }


def test_a_keyboard_user_skips_to_the_content_and_presses_slash_to_search(
    two_tables_processes, live_server, browser_page
):
    page = browser_page
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", "a long enough password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")

    page.goto(f"{live_server.url}/processes/")
    page.keyboard.press("Tab")  # the first Tab stop: the skip link, shown while it has focus
    skip = page.locator(".skip-link")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("main#content")).to_be_focused()

    # "/" typed into a field stays a "/" there; outside a field it goes to the search box
    name_box = page.locator("form.filters input[name=table_name]")
    name_box.click()
    page.keyboard.type("demo/x")
    expect(name_box).to_have_value("demo/x")
    expect(name_box).to_be_focused()
    name_box.fill("")
    page.locator("h1").click()
    page.keyboard.press("/")
    search = page.locator("header input[name=q]")
    expect(search).to_be_focused()
    expect(search).to_have_value("")  # the "/" itself is not typed
    page.keyboard.type("demo.orders")
    page.keyboard.press("Enter")
    page.wait_for_url("**/tables/?q=demo.orders")
    expect(page.locator("#table-rows tbody tr")).to_have_count(1)

    # the processes list, filtered by (part of) a table's name
    page.goto(f"{live_server.url}/processes/")
    expect(page.locator("#process-rows tbody tr")).to_have_count(len(two_tables_processes))
    name_box.fill("ORDERS")
    name_box.press("Enter")
    page.wait_for_url("**table_name=ORDERS*")
    rows = page.locator("#process-rows tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(f"#{two_tables_processes['demo.orders']}")
    expect(rows.first).to_contain_text("demo.orders")
    assert page.console_errors == []


@pytest.fixture
def workers(celery_processes):
    celery_processes.start_worker(concurrency=1)
    celery_processes.wait_for_workers()
    return celery_processes


def test_an_operator_registers_a_storage_runs_a_query_twice_and_sees_it_served_from_cache(
    demo_admin, workers, live_server, browser_page, warehouse, tmp_path
):
    page = browser_page
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", "a long enough password")
    page.click("button[type=submit]")

    page.goto(f"{live_server.url}/storages/")
    page.fill("input[name=name]", "scratch")
    page.select_option("select[name=type]", "filesystem")
    assert not page.locator("#storage-postgres-dsn").is_visible()  # only the picked type's fields
    page.fill("#storage-filesystem-root", str(warehouse / "scratch-cache"))  # generated, not JSON
    page.fill("#storage-storage-quota", "2")
    page.select_option("select[name='u:storage:quota']", "GiB")
    page.click("#storage-form button[type=submit]")
    page.wait_for_selector("text=Storage scratch registered")
    expect(page.locator("tr", has_text="scratch").locator("td.num")).to_have_text("2.0 GiB")

    sql = "select region, count(*) as orders from demo.orders group by region order by region"
    page.goto(f"{live_server.url}/queries/")
    for expected in ("computed, now cached", "served from cache"):
        page.fill("textarea[name=sql]", sql)
        page.select_option("select[name=storage]", "scratch")
        page.click("#query-form button[type=submit]")
        page.wait_for_selector(f"#query-result .badge:has-text('{expected}')", timeout=120_000)
        rows = page.locator("#query-result table.result tbody tr").all_inner_texts()
        assert [r.split("\t")[0] for r in rows] == ["apac", "eu", "latam", "us"]
    # the list of recent queries follows without a reload: both runs, finished, the last first
    history = page.locator("#query-history tbody tr")
    expect(history).to_have_count(2, timeout=30_000)
    expect(history.first).to_contain_text("SUCCESS", timeout=30_000)
    expect(history.first.locator("td").nth(4)).to_have_text("yes")  # from cache
    expect(history.nth(1).locator("td").nth(4)).to_have_text("no")
    page.screenshot(path=str(tmp_path / "workbench.png"), full_page=True)

    page.goto(f"{live_server.url}/cached-results/")
    assert page.locator("#cached-rows tbody tr").count() == 1
    assert "READY" in page.locator("#cached-rows").inner_text()
    assert page.console_errors == []


@pytest.fixture
def console_pages(demo_admin, django_user_model):
    """Every console page (by URL) over the demo lakehouse, and a user per role."""
    from django.contrib.auth.models import Group

    from processes.models import Process
    from storage.models import Catalog, Table

    table = Table.objects.get(name="demo.orders")
    process = Process.objects.create(
        table=table,
        action="rewrite",
        factory="iceberg-rewrite",
        status="FAILED",
        failure="an example failure",
    )
    tabs = ["", "snapshots/", "files/", "partitions/", "splits/", "changes/", "processes/"]
    pages = [
        "/",
        "/tables/",
        "/catalogs/",
        f"/catalogs/{Catalog.objects.first().pk}/",
        "/processes/",
        f"/processes/{process.pk}/",
        "/queries/",
        "/cached-results/",
        "/storages/",
        "/teams/",
    ]
    pages += [f"/tables/{table.pk}/{tab}" for tab in tabs]
    users = {}
    for role in ("viewer", "operator", "admin"):
        user = django_user_model.objects.create_user(f"{role}-browser", password="a long enough password")
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        users[role] = user
    from processes.models import PluginConfig
    from processes.registry import configured_factories

    configured_factories()  # a configuration row per factory
    plugin = PluginConfig.objects.order_by("name").first()
    # pages only admins open: the generated forms of issue 34 (the admin's one too)
    admin_pages = [
        f"/catalogs/{Catalog.objects.first().pk}/edit/",
        f"/admin/processes/pluginconfig/{plugin.pk}/change/",
    ]
    return pages, users, admin_pages


ADMIN_PAGES = (
    "/admin/",
    "/admin/processes/process/",
    "/admin/storage/table/",
    "/admin/auth/user/add/",
    "/api/docs/",
)
# the focused element's class, text, and whether it is on screen
FOCUSED = """(() => {
  const element = document.activeElement, box = element.getBoundingClientRect();
  return [element.className, element.textContent, box.top >= 0 && box.bottom <= innerHeight && box.width > 0];
})()"""
# a laptop's width: every console page fits it without scrolling sideways (the run form's long
# action names and the top bar once pushed the page wider than the window)
WALK_WIDTH = 1024


async def _walk_every_page(
    browser, base_url: str, role: str, pages: list[str], shots: Path | None, admin_pages: list[str]
) -> None:
    """One role's walk in a context of its own: logs in, opens every page, checks each; with
    ``shots`` also photographs three pages after."""
    context = await browser.new_context(viewport={"width": WALK_WIDTH, "height": 900})
    page = await context.new_page()
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    await page.goto(f"{base_url}/accounts/login/")
    await page.fill("input[name=username]", f"{role}-browser")
    await page.fill("input[name=password]", "a long enough password")
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base_url}/")
    for path in pages:
        response = await page.goto(f"{base_url}{path}")
        assert response.status == 200, (role, path, response.status)
        await page.wait_for_load_state("networkidle")
        assert await page.locator("main").count() == 1, (role, path)
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= WALK_WIDTH, (role, path, f"{width} px wide in a {WALK_WIDTH} px window")
        await page.keyboard.press("Tab")  # the skip link comes first, and shows itself
        assert await page.evaluate(FOCUSED) == ["skip-link", "Skip to content", True], (role, path)
        await page.keyboard.press("/")  # then "/" reaches the search box
        assert await page.evaluate("document.activeElement.name") == "q", (role, path)
    admin_link = await page.locator("nav.mainnav a", has_text="Admin").count()
    assert admin_link == (1 if role == "admin" else 0), role
    if role == "admin":  # the Django admin (a missing icon there was a 404 on every page) and the API docs
        for path in (*ADMIN_PAGES, *admin_pages):
            response = await page.goto(f"{base_url}{path}")
            assert response.status == 200, (role, path, response.status)
            await page.wait_for_load_state("networkidle")
            if path in admin_pages:
                width = await page.evaluate("document.documentElement.scrollWidth")
                assert width <= WALK_WIDTH, (role, path, f"{width} px wide in a {WALK_WIDTH} px window")
    assert errors == [], (role, errors)
    if shots is not None:
        for path, name in (("/", "overview"), (pages[-7], "table"), ("/processes/", "processes")):
            await page.goto(f"{base_url}{path}")
            await page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    await context.close()


def test_every_console_page_renders_for_every_role_without_browser_errors(
    console_pages, live_server, tmp_path
):
    """The roles walk at once, each in a browser context of its own (most of a walk is waiting for
    each page's network to go quiet)."""
    import asyncio

    from playwright.async_api import async_playwright

    if not shutil.which(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    pages, users, admin_pages = console_pages

    async def walk_all() -> None:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            try:
                await asyncio.gather(
                    *(
                        _walk_every_page(
                            browser,
                            live_server.url,
                            role,
                            pages,
                            tmp_path if role == "admin" else None,
                            admin_pages,
                        )
                        for role in users
                    )
                )
            finally:
                await browser.close()

    asyncio.run(walk_all())
