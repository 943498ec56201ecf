"""Static files (WhiteNoise), login (and at least the viewer role) required everywhere but the
exempt paths; outbound HTTP bounded to a few seconds inside a request."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import render
from whitenoise.middleware import WhiteNoiseMiddleware

from console.roles import VIEWER, has_role
from storage import outbound

# The API authenticates itself (session or token) and answers 401/403 as JSON; /metrics takes its
# own bearer token or address allow-list (console/metrics/access.py).
EXEMPT_PREFIXES = ("/healthz", "/metrics", "/accounts/login/", "/api/", "/static/", "/favicon.ico")


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, with ``STATIC_ROOT`` (under the var folder) made on first use: WhiteNoise warns
    about a missing folder, and importing the settings makes none. ``collectstatic`` fills it."""

    def __init__(self, get_response=None, settings=settings):
        Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)
        super().__init__(get_response, settings)


class LoginRequiredMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith(EXEMPT_PREFIXES):
            return self.get_response(request)
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        if not has_role(request.user, VIEWER) and not request.path.startswith("/accounts/"):
            return render(
                request,
                "403.html",
                {
                    "reason": "Your account has no role yet: ask an admin to add you to the viewer, operator or admin group."
                },
                status=403,
            )
        return self.get_response(request)


class OutboundBoundsMiddleware:
    """A web worker waits at most a few seconds on each connect and read to a REST catalog or a
    webhook while it answers a request (``storage.outbound.web_request_bounds``): a silent target
    must not hold a worker for the target's full timeout."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with outbound.web_request_bounds():
            return self.get_response(request)
