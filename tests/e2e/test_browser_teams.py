"""Issue 32 on a served console, in a real browser: the demo's two teams (``manage.py
lakewarden_demo``: alice in team-iceberg, owner of catalog ``demo``; bob in team-delta, owner of
``warehouse-delta``). Signed in as alice, the tables list, the overview's count and the search show
only her team's tables, bob's table answers 404, and the workbench refuses a query that joins her
table with his, naming his table, before anything is planned. On the alerts page she adds a channel
and a rule for her team with the forms (a channel without its URL is refused beside the field) and
deletes them."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.db import connection
from playwright.sync_api import expect

from tests.e2e.test_browser import browser_page  # noqa: F401 (fixture)

pytestmark = pytest.mark.e2e


def _password(output: str, username: str) -> str:
    prefix = f"created user {username!r} with password: "
    (line,) = [line for line in output.splitlines() if line.startswith(prefix)]
    return line.removeprefix(prefix)


@pytest.fixture
def demo_teams(live_server, warehouse, settings, tmp_path, fast_passwords):
    """The demo with its teams, and what each user may see, read before the browser starts
    (Playwright's sync API runs an event loop in this thread, where Django refuses ORM calls)."""
    from storage.models import Catalog, Table
    from storage.selectors import catalog_tables_q

    settings.LAKEWARDEN_VAR_DIR = tmp_path / "var"
    with connection.cursor() as cursor:  # the SQL catalog's own tables are not Django's
        cursor.execute("select to_regclass('iceberg_tables') is not null")
        if cursor.fetchone()[0]:
            cursor.execute("delete from iceberg_tables where catalog_name = 'demo'")
            cursor.execute("delete from iceberg_namespace_properties where catalog_name = 'demo'")
    out = io.StringIO()
    call_command("lakewarden_demo", scale=2, warehouse=str(warehouse), storage="local", stdout=out)
    output = out.getvalue()

    def names(catalog: str) -> set[str]:
        return set(
            Table.objects.filter(catalog_tables_q(Catalog.objects.get(name=catalog))).values_list(
                "name", flat=True
            )
        )

    alice, bob = names("demo"), names("warehouse-delta")
    assert alice and bob and not alice & bob
    bobs = Table.objects.filter(name__in=bob).order_by("name").first()
    mine = Table.objects.filter(name__in=alice).order_by("name").first()
    return {
        "alice": _password(output, "alice"),
        "alice_tables": alice,
        "bob_tables": bob,
        "bob_table": (bobs.pk, bobs.name, bobs.identifier or bobs.name),
        "alice_sql": mine.identifier or mine.name,
    }


def test_a_team_user_sees_only_the_teams_tables_and_cannot_query_anothers(
    demo_teams, live_server, browser_page
):
    page = browser_page
    base = live_server.url
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", demo_teams["alice"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")

    page.goto(f"{base}/tables/")
    listed = set(page.locator("#table-rows tbody tr td:first-child a").all_inner_texts())
    assert listed == demo_teams["alice_tables"]
    assert not listed & demo_teams["bob_tables"]

    # the overview counts her tables only
    page.goto(f"{base}/")
    tables_stat = page.locator(".stat:has(.label:text-is('tables')) .value")
    assert tables_stat.inner_text() == str(len(demo_teams["alice_tables"]))

    # searching for his table's name finds nothing
    bob_pk, bob_name, bob_sql = demo_teams["bob_table"]
    page.goto(f"{base}/tables/?q={bob_name}")
    expect(page.locator("#table-rows tbody tr td:first-child a")).to_have_count(0)

    # his table's page is not there for her
    response = page.goto(f"{base}/tables/{bob_pk}/")
    assert response.status == 404

    # the workbench refuses a join of her table with his, naming his, on DuckDB and on Spark
    mine = demo_teams["alice_sql"]
    for engine in ("duckdb", "spark"):
        page.goto(f"{base}/queries/")
        if page.locator(f"select[name=engine] option[value={engine}]").count():
            page.select_option("select[name=engine]", engine)
        page.fill("#sql", f"with theirs as (select * from {bob_sql}) select count(*) from {mine}, theirs")
        page.locator("#sql").press("Control+Enter")
        refusal = page.locator(f"#query-result .error:has-text('you may not read {bob_sql}')")
        expect(refusal.first).to_be_visible(timeout=60_000)
    # on the alerts page she adds a channel and a rule for her team with the forms, and deletes them
    page.goto(f"{base}/alerts/")
    page.click("#new-channel")
    page.fill("input[name=name]", "iceberg-hook")
    page.select_option("select[name=kind]", "webhook")
    page.click("#alert-channel-form button[type=submit]")  # no URL: refused beside the field
    expect(page.locator("#alert-channel-form .errorlist")).to_contain_text("http")
    assert page.locator("select[name=team] option").all_inner_texts() == ["team-iceberg"]
    page.fill("input[name=url]", "https://hooks.example.org/iceberg")
    page.click("#alert-channel-form button[type=submit]")
    page.wait_for_url(f"{base}/alerts/")
    expect(page.locator("tr:has-text('iceberg-hook')").first).to_contain_text("team-iceberg")
    page.click("#new-rule")
    page.fill("input[name=name]", "iceberg-failures")
    page.select_option("select[name=kind]", "process_failed")
    page.check("label:has-text('iceberg-hook') input")
    page.click("#alert-rule-form button[type=submit]")
    page.wait_for_url(f"{base}/alerts/")
    expect(page.locator("tr:has-text('iceberg-failures')")).to_contain_text("iceberg-hook")
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("button[aria-label='Delete rule iceberg-failures']")
    expect(page.locator("tr:has-text('iceberg-failures')")).to_have_count(0)
    page.click("button[aria-label='Delete channel iceberg-hook']")
    expect(page.locator("tr:has-text('iceberg-hook')")).to_have_count(0)

    # the browser logs each refused response it was given, and nothing else went wrong
    failed = "Failed to load resource: the server responded with a status of"
    assert page.console_errors == [
        f"{failed} 404 (Not Found)",
        f"{failed} 403 (Forbidden)",
        f"{failed} 403 (Forbidden)",
        f"{failed} 400 (Bad Request)",
    ]
