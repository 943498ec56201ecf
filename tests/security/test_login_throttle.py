"""Login throttling: five failures for a username from an address within the window, and further
attempts from there are refused with 429 until it ends; a success clears the count."""

from __future__ import annotations

import time
import uuid

import pytest
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery"


def attempt(username: str, password: str, address: str = "10.0.0.1") -> object:
    return Client(REMOTE_ADDR=address).post(reverse("login"), {"username": username, "password": password})


def fail(username: str, times: int, address: str = "10.0.0.1") -> None:
    for _ in range(times):
        assert attempt(username, "wrong password", address).status_code == 200


def test_five_failures_lock_the_username_out_from_that_address(viewer):
    fail(viewer.username, 5)

    refused = attempt(viewer.username, PASSWORD)

    assert refused.status_code == 429
    page = refused.content.decode()
    assert "Too many failed login attempts" in page
    assert "Try again in 15 minutes" in page
    assert "didn&#x27;t match" not in page  # the refused attempt's password is not even checked
    assert 0 < int(refused["Retry-After"]) <= 15 * 60
    assert "_auth_user_id" not in refused.wsgi_request.session


def test_four_failures_still_let_the_right_password_in(viewer):
    fail(viewer.username, 4)

    assert attempt(viewer.username, PASSWORD).status_code == 302


def test_a_success_clears_the_count(viewer):
    fail(viewer.username, 4)
    assert attempt(viewer.username, PASSWORD).status_code == 302

    fail(viewer.username, 4)

    assert attempt(viewer.username, PASSWORD).status_code == 302


def test_the_lock_is_per_username_and_address(viewer, operator):
    fail(viewer.username, 5, address="10.0.0.1")

    assert attempt(viewer.username, PASSWORD, address="10.0.0.2").status_code == 302
    assert attempt(operator.username, PASSWORD, address="10.0.0.1").status_code == 302
    # The username's case does not open a second count.
    assert attempt(viewer.username.upper(), PASSWORD, address="10.0.0.1").status_code == 429


def test_the_lock_ends_with_the_window(viewer, settings):
    settings.LAKEWARDEN_LOGIN_WINDOW_SECONDS = 1
    fail(viewer.username, 5)
    assert attempt(viewer.username, PASSWORD).status_code == 429

    time.sleep(1.2)

    assert attempt(viewer.username, PASSWORD).status_code == 302


def test_unknown_usernames_are_throttled_the_same_way():
    """No difference that would tell an attacker which usernames exist."""
    fail("nobody-here", 5)

    assert attempt("nobody-here", "anything").status_code == 429


def test_throttling_works_on_the_redis_cache_it_uses_in_production(viewer, settings):
    from tests.conftest import TEST_BROKER_URL

    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": TEST_BROKER_URL,
            "KEY_PREFIX": f"throttle-test-{uuid.uuid4().hex}",
        }
    }
    fail(viewer.username, 5)

    assert attempt(viewer.username, PASSWORD).status_code == 429
    assert attempt(viewer.username, PASSWORD, address="10.0.0.9").status_code == 302


def test_a_cache_outage_does_not_lock_everyone_out(viewer, settings, caplog):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
            "OPTIONS": {"socket_connect_timeout": 0.2},
        }
    }

    assert attempt(viewer.username, "wrong").status_code == 200
    assert attempt(viewer.username, PASSWORD).status_code == 302
    assert "login throttling is off" in caplog.text


@pytest.mark.parametrize(
    "target", ["https://evil.example.com/", "//evil.example.com/", "/\\evil.example.com"]
)
def test_the_login_never_sends_the_user_off_site(viewer, target):
    response = Client().post(
        reverse("login"), {"username": viewer.username, "password": PASSWORD, "next": target}
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("console:overview")
