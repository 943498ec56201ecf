"""Security settings (imported at the end of console/settings.py): Django's deploy checklist,
Content-Security-Policy, the cache behind login throttling, secrets masked in logs.

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

from console.env import env_bool, env_int, env_str
from console.settings import CELERY_BROKER_URL, LOGGING, MIDDLEWARE

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
if env_bool("LAKEWARDEN_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Content-Security-Policy on every response (console.security.ContentSecurityPolicyMiddleware).
# The console has no inline script; Swagger UI (/api/docs/) starts itself with one.
LAKEWARDEN_CSP_OVERRIDES = {"/api/docs/": {"script-src": "'self' 'unsafe-inline'"}}
LAKEWARDEN_CSP_REPORT_ONLY = env_bool("LAKEWARDEN_CSP_REPORT_ONLY", False)

MIDDLEWARE = list(MIDDLEWARE)
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
    "console.security.ContentSecurityPolicyMiddleware",
)

# --- cache (login throttling counters) ----------------------------------------------------------

_default_cache_url = (
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else "locmem://"
)
LAKEWARDEN_CACHE_URL = env_str("LAKEWARDEN_CACHE_URL", _default_cache_url)
if LAKEWARDEN_CACHE_URL.startswith("locmem://"):
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "lakewarden"}
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": LAKEWARDEN_CACHE_URL,
            # Shares the broker's Redis: keys are prefixed so they never meet Celery's.
            "KEY_PREFIX": env_str("LAKEWARDEN_CACHE_PREFIX", "lakewarden-cache"),
            "TIMEOUT": 300,
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
    }

LAKEWARDEN_LOGIN_MAX_FAILURES = env_int("LAKEWARDEN_LOGIN_MAX_FAILURES", 5, minimum=1)
LAKEWARDEN_LOGIN_WINDOW_SECONDS = env_int("LAKEWARDEN_LOGIN_WINDOW_SECONDS", 15 * 60, minimum=1)

# --- API: the schema and its docs need the viewer role like every other read ---------------------

from console.settings import SPECTACULAR_SETTINGS  # noqa: E402

SPECTACULAR_SETTINGS = {
    **SPECTACULAR_SETTINGS,
    "SERVE_PERMISSIONS": ["console.permissions.RolePermission"],
    # Error responses ({"error", "field"}) on every operation, see console/api/schema.py.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "console.api.schema.postprocess_error_responses",
    ],
}

# --- logging: secrets never reach a handler ------------------------------------------------------

LOGGING = copy.deepcopy(LOGGING)
LOGGING.setdefault("filters", {})["mask_secrets"] = {"()": "console.security.SecretMaskingFilter"}
for _handler in LOGGING.get("handlers", {}).values():
    _handler["filters"] = [*_handler.get("filters", []), "mask_secrets"]
