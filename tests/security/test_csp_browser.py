"""The Content-Security-Policy in a real browser (headless Chromium): the console and htmx work under
it without a console error, Swagger UI works under its page's override, and the browser does
enforce it (an injected inline script does not run)."""

from __future__ import annotations

import pytest

from tests.e2e.test_browser import browser_page  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery"


@pytest.fixture
def signed_in(lake, users, live_server, browser_page):  # noqa: F811
    """A viewer logged in through the login form (objects are made before the browser starts:
    Playwright's sync API runs an event loop in this thread, where Django refuses ORM calls)."""
    page = browser_page
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", users["viewer"].username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector(".topbar .user")
    return page


def test_console_pages_and_htmx_work_under_the_policy(signed_in, lake, live_server):
    page = signed_in
    for path in (
        "/",
        "/tables/",
        f"/tables/{lake.table.pk}/",
        f"/tables/{lake.table.pk}/files/",
        "/processes/",
    ):
        response = page.goto(f"{live_server.url}{path}")
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"], path

    # htmx: the table search swaps the rows in place (an XHR with the CSRF header from hx-headers).
    page.goto(f"{live_server.url}/tables/")
    page.fill("form.filters input[name=q]", "no-such-table")
    page.wait_for_selector("#table-rows >> text=No table matches this filter")
    assert page.console_errors == []


def test_swagger_ui_runs_under_its_override(signed_in, live_server):
    page = signed_in
    page.goto(f"{live_server.url}/api/docs/")
    page.wait_for_selector(".opblock", timeout=20_000)

    assert page.locator(".opblock").count() >= 20
    assert page.console_errors == []


def test_the_browser_enforces_the_policy(signed_in, live_server):
    page = signed_in
    page.goto(f"{live_server.url}/tables/")

    page.evaluate(
        """() => { const s = document.createElement('script');
                   s.textContent = 'window.injected = true';
                   document.head.appendChild(s); }"""
    )

    assert page.evaluate("() => window.injected === undefined")
    assert any("Content Security Policy" in error for error in page.console_errors)
