"""Security settings: Django's deploy checklist, Content-Security-Policy, the cache behind login
throttling, secrets masked in logs, and the persistent secret key.

Imports only ``console.env``: ``console/settings.py`` star-imports the constants below (``__all__``)
and calls the helpers with its own values (middleware, logging, the broker URL...), so the import
graph goes one way (settings -> settings_security -> env) and this module never reads a half-built
settings module.

Environment:
  LAKEWARDEN_HTTPS=1            the console is served over HTTPS (production): secure cookies, HSTS,
                                HTTP -> HTTPS redirect. Off by default: the local demo runs over http.
  LAKEWARDEN_BEHIND_PROXY=1     trust X-Forwarded-Proto from the reverse proxy that terminates TLS
  LAKEWARDEN_HSTS_SECONDS       HSTS max-age when HTTPS (default one year)
  LAKEWARDEN_HSTS_PRELOAD=0     leave ``preload`` out of the HSTS header
  LAKEWARDEN_CACHE_URL          redis://... for the cache (default: the broker's Redis when it is
                                Redis), or locmem:// for a per-process cache
  LAKEWARDEN_LOGIN_MAX_FAILURES / LAKEWARDEN_LOGIN_WINDOW_SECONDS   login throttling (5 per 15 min)
"""

from __future__ import annotations

import copy
import errno
import os
import secrets
import time
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from console.env import env_bool, env_int, env_str

__all__ = [
    "CSRF_COOKIE_HTTPONLY",
    "CSRF_COOKIE_SAMESITE",
    "CSRF_COOKIE_SECURE",
    "LAKEWARDEN_CSP_OVERRIDES",
    "LAKEWARDEN_CSP_REPORT_ONLY",
    "LAKEWARDEN_HTTPS",
    "LAKEWARDEN_LOGIN_MAX_FAILURES",
    "LAKEWARDEN_LOGIN_WINDOW_SECONDS",
    "SECURE_CONTENT_TYPE_NOSNIFF",
    "SECURE_CROSS_ORIGIN_OPENER_POLICY",
    "SECURE_REFERRER_POLICY",
    "SESSION_COOKIE_HTTPONLY",
    "SESSION_COOKIE_SAMESITE",
    "SESSION_COOKIE_SECURE",
    "X_FRAME_OPTIONS",
]

# --- the secret key ------------------------------------------------------------------------------

SECRET_KEY_FILE_NAME = "secret_key"


def persistent_secret_key(path: Path, *, wait_seconds: float = 10.0) -> str:
    """The secret key kept in ``path``, made on first use: one key for every process of the
    installation (each gunicorn worker, Celery, manage.py), surviving restarts.

    The file is written once, mode 0600, atomically and race-free when several processes start at
    once: each writes a complete key to a private temporary file and links it to ``path``
    (``link`` fails when ``path`` exists, like ``O_CREAT|O_EXCL``, but the name only ever appears
    with the whole key in it); whoever loses the race reads the winner's key. On a filesystem
    without hard links the file is created with ``O_CREAT|O_EXCL`` and readers wait for its
    content.
    """
    path = Path(path)
    key = _read_key(path)
    if key:
        return key
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _create_key_file(path, secrets.token_urlsafe(50))
    except OSError as error:
        raise ImproperlyConfigured(
            f"cannot create the secret key file {path}: {error} (set SECRET_KEY or LAKEWARDEN_VAR_DIR)"
        ) from None
    deadline = time.monotonic() + wait_seconds
    while True:  # the winner's key, ours or another process's
        key = _read_key(path)
        if key:
            return key
        if time.monotonic() > deadline:
            raise ImproperlyConfigured(f"{path} is empty: delete it or set SECRET_KEY")
        time.sleep(0.05)


def _read_key(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ImproperlyConfigured(f"cannot read the secret key file {path}: {error}") from None


def _create_key_file(path: Path, key: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(key + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return  # another process won: its key is the one
        except OSError as error:
            if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            _create_key_file_exclusively(path, key)
    finally:
        temporary.unlink(missing_ok=True)


def _create_key_file_exclusively(path: Path, key: str) -> None:
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(descriptor, "w") as handle:
        handle.write(key + "\n")
        handle.flush()
        os.fsync(handle.fileno())


# --- cookies and headers (Django's deploy checklist) --------------------------------------------

LAKEWARDEN_HTTPS = env_bool("LAKEWARDEN_HTTPS", False)

SESSION_COOKIE_SECURE = LAKEWARDEN_HTTPS
CSRF_COOKIE_SECURE = LAKEWARDEN_HTTPS
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
# htmx takes the CSRF token from the page (base.html's hx-headers), so no script reads the cookie;
# as Django's docs say, HttpOnly on the CSRF cookie would add no protection.
CSRF_COOKIE_HTTPONLY = False
CSRF_COOKIE_SAMESITE = "Lax"

SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

if LAKEWARDEN_HTTPS:
    SECURE_SSL_REDIRECT = True
    # Load balancers probe health over plain http.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SECURE_HSTS_SECONDS = env_int("LAKEWARDEN_HSTS_SECONDS", 365 * 24 * 3600, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("LAKEWARDEN_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("LAKEWARDEN_HSTS_PRELOAD", True)
    __all__ += [
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SECURE_HSTS_PRELOAD",
        "SECURE_HSTS_SECONDS",
        "SECURE_REDIRECT_EXEMPT",
        "SECURE_SSL_REDIRECT",
    ]
if env_bool("LAKEWARDEN_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    __all__ += ["SECURE_PROXY_SSL_HEADER"]

# Content-Security-Policy on every response (console.security.ContentSecurityPolicyMiddleware).
# The console has no inline script; Swagger UI (/api/docs/) starts itself with one.
LAKEWARDEN_CSP_OVERRIDES = {"/api/docs/": {"script-src": "'self' 'unsafe-inline'"}}
LAKEWARDEN_CSP_REPORT_ONLY = env_bool("LAKEWARDEN_CSP_REPORT_ONLY", False)


def with_security_middleware(middleware: list[str]) -> list[str]:
    """``middleware`` with the Content-Security-Policy middleware right after Django's own."""
    middleware = list(middleware)
    middleware.insert(
        middleware.index("django.middleware.security.SecurityMiddleware") + 1,
        "console.security.ContentSecurityPolicyMiddleware",
    )
    return middleware


# --- cache (login throttling counters) ----------------------------------------------------------


def cache_settings(broker_url: str) -> dict[str, Any]:
    """``CACHES``: ``LAKEWARDEN_CACHE_URL``, by default the broker's Redis (or locmem)."""
    default = broker_url if broker_url.startswith(("redis://", "rediss://")) else "locmem://"
    url = env_str("LAKEWARDEN_CACHE_URL", default)
    if url.startswith("locmem://"):
        return {
            "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "lakewarden"}
        }
    return {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
            # Shares the broker's Redis: keys are prefixed so they never meet Celery's.
            "KEY_PREFIX": env_str("LAKEWARDEN_CACHE_PREFIX", "lakewarden-cache"),
            "TIMEOUT": 300,
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
    }


LAKEWARDEN_LOGIN_MAX_FAILURES = env_int("LAKEWARDEN_LOGIN_MAX_FAILURES", 5, minimum=1)
LAKEWARDEN_LOGIN_WINDOW_SECONDS = env_int("LAKEWARDEN_LOGIN_WINDOW_SECONDS", 15 * 60, minimum=1)

# --- API: the schema and its docs need the viewer role like every other read ---------------------


def with_role_protected_schema(spectacular_settings: dict[str, Any]) -> dict[str, Any]:
    return {
        **spectacular_settings,
        "SERVE_PERMISSIONS": ["console.permissions.RolePermission"],
        # Error responses ({"error", "field"}) on every operation, see console/api/schema.py.
        "POSTPROCESSING_HOOKS": [
            "drf_spectacular.hooks.postprocess_schema_enums",
            "console.api.schema.postprocess_error_responses",
        ],
    }


# --- logging: secrets never reach a handler ------------------------------------------------------


def with_masked_secrets(logging: dict[str, Any]) -> dict[str, Any]:
    logging = copy.deepcopy(logging)
    logging.setdefault("filters", {})["mask_secrets"] = {"()": "console.security.SecretMaskingFilter"}
    for handler in logging.get("handlers", {}).values():
        handler["filters"] = [*handler.get("filters", []), "mask_secrets"]
    return logging
