"""Observability settings: who may scrape ``/metrics``, and where the web processes keep their
request-latency samples (prometheus-client's multiprocess mode).

Star-imported on the last lines of ``console/settings.py``. It reads the two values it builds on
(``LAKEWARDEN_VAR_DIR`` and ``MIDDLEWARE``) from that half-built module and exports ``MIDDLEWARE``
with the request-latency middleware first (outermost, so the latency covers every other
middleware). Everything else comes from the environment through ``console.env``.

Environment:
  LAKEWARDEN_METRICS_TOKEN        a bearer token (at least 16 characters) a scrape must send as
                                  ``Authorization: Bearer <token>``
  LAKEWARDEN_METRICS_ALLOWED_IPS  addresses or networks (``10.0.0.5, 10.1.0.0/16, ::1``) allowed
                                  to scrape, compared with the connection's address (REMOTE_ADDR)
  PROMETHEUS_MULTIPROC_DIR        where each web process writes its samples (default
                                  ``<var dir>/prometheus``); wipe it before the web server starts

Neither set: ``/metrics`` answers 403 saying how to turn it on. Both set: a scrape needs both.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from console.env import env_str

__all__ = [
    "LAKEWARDEN_METRICS_ALLOWED_IPS",
    "LAKEWARDEN_METRICS_TOKEN",
    "MIDDLEWARE",
    "PROMETHEUS_MULTIPROC_DIR",
]

METRICS_TOKEN_MIN_LENGTH = 16
REQUEST_LATENCY_MIDDLEWARE = "console.metrics.http.RequestLatencyMiddleware"


def metrics_token(name: str = "LAKEWARDEN_METRICS_TOKEN") -> str | None:
    token = env_str(name)
    if token is None:
        return None
    token = token.strip()
    if len(token) < METRICS_TOKEN_MIN_LENGTH or any(c.isspace() for c in token):
        raise ImproperlyConfigured(
            f"{name} must be at least {METRICS_TOKEN_MIN_LENGTH} characters without spaces "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return token


def allowed_networks(name: str = "LAKEWARDEN_METRICS_ALLOWED_IPS") -> list[str]:
    """Normalised networks (``10.0.0.5/32``); a value that is no address or network stops start-up."""
    networks = []
    for part in (env_str(name) or "").replace(",", " ").split():
        try:
            networks.append(str(ipaddress.ip_network(part, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {part!r} is not an IP address or network (use 10.0.0.5 or 10.0.0.0/24)"
            ) from None
    return networks


def with_latency_middleware(middleware: list[str]) -> list[str]:
    return [REQUEST_LATENCY_MIDDLEWARE, *(m for m in middleware if m != REQUEST_LATENCY_MIDDLEWARE)]


def multiprocess_dir(var_dir: Path) -> str:
    """The samples folder, made now: prometheus-client picks multiprocess mode from this variable
    when it is first imported, so it is set before any module imports it."""
    path = Path(env_str("PROMETHEUS_MULTIPROC_DIR") or var_dir / "prometheus")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ImproperlyConfigured(f"cannot create PROMETHEUS_MULTIPROC_DIR {path}: {error}") from None
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    return str(path)


_base = sys.modules["console.settings"]  # the module star-importing this one, built up to here

LAKEWARDEN_METRICS_TOKEN = metrics_token()
LAKEWARDEN_METRICS_ALLOWED_IPS = allowed_networks()
PROMETHEUS_MULTIPROC_DIR = multiprocess_dir(_base.LAKEWARDEN_VAR_DIR)
MIDDLEWARE = with_latency_middleware(_base.MIDDLEWARE)
