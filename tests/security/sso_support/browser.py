"""Drive an OpenID Connect sign-in as a browser would: Lakewarden through Django's test client, the
provider (a real server) through ``requests``, following redirects and submitting its login form."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import requests
from django.urls import reverse


def sign_in_start(client, next_url: str | None = None) -> str:
    """Press "Sign in with ...": the provider's authorize URL Lakewarden redirects to."""
    start = client.get(reverse("oidc_authentication_init"), {"next": next_url} if next_url else {})
    assert start.status_code == 302, start
    return start["Location"]


def state_of(authorize_url: str) -> str:
    return parse_qs(urlsplit(authorize_url).query)["state"][0]


def provider_sign_in(authorize_url: str, username: str, password: str) -> str:
    """Sign in at the provider; the callback URL (on Lakewarden) it finally redirects the browser to."""
    provider = urlsplit(authorize_url).netloc
    with requests.Session() as browser:
        page = _follow(browser, browser.get(authorize_url, allow_redirects=False, timeout=30), provider)
        assert page.status_code == 200 and 'name="password"' in page.text, page.text[:500]
        answer = browser.post(
            page.url,
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": browser.cookies["csrftoken"],
            },
            allow_redirects=False,
            timeout=30,
        )
        last = _follow(browser, answer, provider)
    assert last.is_redirect, (
        f"the provider did not send the browser back: {last.status_code} {last.text[:500]}"
    )
    return last.headers["Location"]


def _follow(browser: requests.Session, response: requests.Response, provider: str) -> requests.Response:
    """Follow redirects while they stay on the provider; stop at a page or a redirect elsewhere."""
    for _ in range(10):
        if not response.is_redirect:
            return response
        target = requests.compat.urljoin(response.url, response.headers["Location"])
        if urlsplit(target).netloc != provider:
            return response
        response = browser.get(target, allow_redirects=False, timeout=30)
    raise AssertionError("the provider redirected more than 10 times")
