"""Login with throttling: after ``LAKEWARDEN_LOGIN_MAX_FAILURES`` failed attempts for one username
from one address within ``LAKEWARDEN_LOGIN_WINDOW_SECONDS``, further attempts are refused (429)
until the window ends. A successful login clears the count.

Counts live in Django's cache (Redis in production, so every web process shares them). When the
cache is unreachable the login still works, unthrottled, and a warning is logged: locking every
user out because Redis is down would be worse.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

logger = logging.getLogger(__name__)


def max_failures() -> int:
    return getattr(settings, "LAKEWARDEN_LOGIN_MAX_FAILURES", 5)


def window_seconds() -> int:
    return getattr(settings, "LAKEWARDEN_LOGIN_WINDOW_SECONDS", 15 * 60)


def client_address(request: HttpRequest) -> str:
    # REMOTE_ADDR only: X-Forwarded-For is whatever the client says unless a proxy rewrites it.
    return request.META.get("REMOTE_ADDR", "") or "unknown"


def _keys(username: str, address: str) -> tuple[str, str]:
    # Hashed: usernames are user input and cache keys must be short and printable.
    digest = hashlib.sha256(f"{username.strip().lower()}\x00{address}".encode()).hexdigest()[:32]
    return f"login-failures:{digest}", f"login-window:{digest}"


def login_failures(username: str, address: str) -> tuple[int, float]:
    """(failed attempts in the current window, seconds until the window ends)."""
    count_key, window_key = _keys(username, address)
    try:
        values = cache.get_many([count_key, window_key])
    except Exception:
        logger.warning("login throttling is off: the cache is unreachable", exc_info=True)
        return 0, 0.0
    started = values.get(window_key)
    remaining = max(0.0, started + window_seconds() - time.time()) if started else 0.0
    return int(values.get(count_key) or 0), remaining


def login_failure_record(username: str, address: str) -> int:
    """Count one failed attempt; the window starts at the first failure."""
    count_key, window_key = _keys(username, address)
    try:
        cache.add(window_key, time.time(), timeout=window_seconds())
        cache.add(count_key, 0, timeout=window_seconds())
        return cache.incr(count_key)
    except ValueError:  # the key expired between add and incr: this failure starts a new window
        cache.set(count_key, 1, timeout=window_seconds())
        return 1
    except Exception:
        logger.warning("login throttling is off: the cache is unreachable", exc_info=True)
        return 0


def login_failures_clear(username: str, address: str) -> None:
    try:
        cache.delete_many(list(_keys(username, address)))
    except Exception:
        logger.warning("could not clear failed logins: the cache is unreachable", exc_info=True)


class ThrottledLoginView(LoginView):
    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        username = request.POST.get("username", "")
        failures, remaining = login_failures(username, client_address(request))
        if username and failures >= max_failures():
            return self.refuse(remaining)
        return super().post(request, *args, **kwargs)

    def form_valid(self, form):
        login_failures_clear(form.get_user().get_username(), client_address(self.request))
        login_failures_clear(self.request.POST.get("username", ""), client_address(self.request))
        return super().form_valid(form)

    def form_invalid(self, form):
        username = self.request.POST.get("username", "")
        if username:
            login_failure_record(username, client_address(self.request))
        return super().form_invalid(form)

    def refuse(self, remaining: float) -> HttpResponse:
        minutes = max(1, math.ceil(remaining / 60))
        logger.warning(
            "login refused for %r from %s: too many failed attempts",
            self.request.POST.get("username", ""),
            client_address(self.request),
        )
        messages.error(
            self.request,
            f"Too many failed login attempts for this account from your address. "
            f"Try again in {minutes} minute{'s' if minutes != 1 else ''}, or ask an admin to reset your password.",
        )
        # A fresh form: the refused attempt's password is not checked, so no "didn't match" either.
        response = self.render_to_response(self.get_context_data(form=self.get_form_class()(self.request)))
        response.status_code = 429
        response["Retry-After"] = str(max(1, math.ceil(remaining)))
        return response
