"""Lakewarden settings: everything configurable comes from environment variables (see README).

One module, read top to bottom: each setting is assigned here by name, from a typed helper of
``console.env`` that stops start-up naming the variable when its value is bad. The larger rules
live beside what they configure and never import this module: the secret key file
(``console.secret_key``), single sign-on (``console.sso.config``), who may scrape metrics
(``console.metrics.access``), web workers (``console.gunicorn_conf``), the database URL
(``console.database_url``), the heavy-task router (``console.celery``).

Importing it has no side effect: it creates no folder and sets no environment variable. The var
folder's contents are made by ``scripts/setup.sh``, ``manage.py lakewarden_serve`` or on first
use (the secret key when Django first signs, ``STATIC_ROOT`` when WhiteNoise starts, the metrics
samples when the latency middleware starts; ``ConsoleConfig.ready()`` exports
``PROMETHEUS_MULTIPROC_DIR`` for prometheus-client).
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from console.database_url import database_url
from console.env import env_bool, env_int, env_networks, env_path, env_roots, env_str, env_url
from console.gunicorn_conf import available_cores, default_web_workers
from console.metrics.access import allowed_networks, metrics_token
from console.secret_key import secret_key_on_first_use
from console.sso.config import authentication_backends, ldap_settings, oidc_settings

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
#: Local state of this installation: the secret key file, static files, the demo warehouse, beat's
#: schedule, the admin password, the metrics samples.
LAKEWARDEN_VAR_DIR = env_path("LAKEWARDEN_VAR_DIR", "./var", base=BASE_DIR)
SECRET_KEY = env_str("SECRET_KEY")
if SECRET_KEY is None:
    if not DEBUG and env_bool("LAKEWARDEN_REQUIRE_SECRET_KEY", False):
        raise ImproperlyConfigured("SECRET_KEY must be set (LAKEWARDEN_REQUIRE_SECRET_KEY is on)")
    # One key for every process of this installation (each gunicorn worker, the Celery workers,
    # manage.py), made once and kept in var/secret_key: sessions stay valid across workers and
    # restarts. Production may rely on it too (one machine, var/ kept); several web hosts need the
    # same SECRET_KEY set on each. Read (or made) the first time Django signs something.
    SECRET_KEY = secret_key_on_first_use(LAKEWARDEN_VAR_DIR / "secret_key")

ALLOWED_HOSTS = [
    h.strip() for h in env_str("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",")
]
CSRF_TRUSTED_ORIGINS = [o for o in env_str("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "console.admin_site.LakewardenAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "console",
    "processes",
    "storage",
    # The audit trail (console/audit): its signal handlers and admin page.
    "console.audit.apps.AuditConfig",
    # Teams and grants (console/teams, issue 32): who sees and operates which tables.
    "console.teams.apps.TeamsConfig",
]

MIDDLEWARE = [
    # Outermost, so the request latency it measures covers every other middleware (console/metrics).
    "console.metrics.http.RequestLatencyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy right after Django's own security headers (console/security.py).
    "console.security.ContentSecurityPolicyMiddleware",
    # WhiteNoise, making STATIC_ROOT when it starts.
    "console.middleware.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "console.middleware.LoginRequiredMiddleware",
    "console.middleware.OutboundBoundsMiddleware",
    # Last: inside the authentication (the session's and, through DRF, the API token's) so it sees
    # who acted, and around the view so it sees the answer (console/audit).
    "console.audit.middleware.AuditMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context_processors.roles",
            ],
        },
    },
]

# Unset: built from LAKEWARDEN_DB_NAME/_USER/_PASSWORD on 127.0.0.1:5432, as scripts/setup.sh makes it.
DATABASE_URL = env_url("DATABASE_URL", database_url(), schemes=("postgres", "postgresql"))
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)}
DATABASES["default"]["TEST"] = {"NAME": env_str("LAKEWARDEN_TEST_DATABASE", "test_lakewarden")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console:overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = LAKEWARDEN_VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve static files from the app folders without collectstatic in development and tests.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- Security: Django's deploy checklist, Content-Security-Policy -------------------------------
# LAKEWARDEN_HTTPS=1: the console is served over HTTPS (production): secure cookies, HSTS,
# HTTP -> HTTPS redirect. Off by default: the local demo runs over http.
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
# LAKEWARDEN_BEHIND_PROXY=1: trust X-Forwarded-Proto from the reverse proxy that terminates TLS.
if env_bool("LAKEWARDEN_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Content-Security-Policy on every response (console.security.ContentSecurityPolicyMiddleware).
# The console has no inline script; Swagger UI (/api/docs/) starts itself with one.
LAKEWARDEN_CSP_OVERRIDES = {"/api/docs/": {"script-src": "'self' 'unsafe-inline'"}}
LAKEWARDEN_CSP_REPORT_ONLY = env_bool("LAKEWARDEN_CSP_REPORT_ONLY", False)

# Login throttling: this many failures per window (counted in the cache below).
LAKEWARDEN_LOGIN_MAX_FAILURES = env_int("LAKEWARDEN_LOGIN_MAX_FAILURES", 5, minimum=1)
LAKEWARDEN_LOGIN_WINDOW_SECONDS = env_int("LAKEWARDEN_LOGIN_WINDOW_SECONDS", 15 * 60, minimum=1)

# --- Single sign-on: OpenID Connect and LDAP (console/sso/config.py lists their variables) -------
# Both inert unless LAKEWARDEN_OIDC_CLIENT_ID / LAKEWARDEN_LDAP_SERVER_URI are set; local accounts
# keep working beside them (Django's ModelBackend stays first).
_oidc = oidc_settings()
_ldap = ldap_settings()
LAKEWARDEN_OIDC_ENABLED = bool(_oidc)
LAKEWARDEN_LDAP_ENABLED = bool(_ldap)
AUTHENTICATION_BACKENDS = authentication_backends(oidc=LAKEWARDEN_OIDC_ENABLED, ldap=LAKEWARDEN_LDAP_ENABLED)
if LAKEWARDEN_OIDC_ENABLED:
    OIDC_OP_AUTHORIZATION_ENDPOINT = _oidc["OIDC_OP_AUTHORIZATION_ENDPOINT"]
    OIDC_OP_TOKEN_ENDPOINT = _oidc["OIDC_OP_TOKEN_ENDPOINT"]
    OIDC_OP_USER_ENDPOINT = _oidc["OIDC_OP_USER_ENDPOINT"]
    OIDC_OP_JWKS_ENDPOINT = _oidc["OIDC_OP_JWKS_ENDPOINT"]
    OIDC_RP_CLIENT_ID = _oidc["OIDC_RP_CLIENT_ID"]
    OIDC_RP_CLIENT_SECRET = _oidc["OIDC_RP_CLIENT_SECRET"]
    OIDC_RP_SIGN_ALGO = _oidc["OIDC_RP_SIGN_ALGO"]
    OIDC_RP_SCOPES = _oidc["OIDC_RP_SCOPES"]
    OIDC_USE_PKCE = _oidc["OIDC_USE_PKCE"]
    OIDC_TIMEOUT = _oidc["OIDC_TIMEOUT"]
    OIDC_VERIFY_SSL = _oidc["OIDC_VERIFY_SSL"]
    OIDC_CREATE_USER = _oidc["OIDC_CREATE_USER"]
    LAKEWARDEN_OIDC_ISSUER = _oidc["LAKEWARDEN_OIDC_ISSUER"]
    LAKEWARDEN_OIDC_USERNAME_CLAIM = _oidc["LAKEWARDEN_OIDC_USERNAME_CLAIM"]
    LAKEWARDEN_OIDC_GROUPS_CLAIM = _oidc["LAKEWARDEN_OIDC_GROUPS_CLAIM"]
    LAKEWARDEN_OIDC_PROVIDER_NAME = _oidc["LAKEWARDEN_OIDC_PROVIDER_NAME"]
    LAKEWARDEN_OIDC_ROLE_GROUPS = _oidc["LAKEWARDEN_OIDC_ROLE_GROUPS"]
if LAKEWARDEN_LDAP_ENABLED:
    AUTH_LDAP_SERVER_URI = _ldap["AUTH_LDAP_SERVER_URI"]
    AUTH_LDAP_BIND_DN = _ldap["AUTH_LDAP_BIND_DN"]
    AUTH_LDAP_BIND_PASSWORD = _ldap["AUTH_LDAP_BIND_PASSWORD"]
    AUTH_LDAP_START_TLS = _ldap["AUTH_LDAP_START_TLS"]
    AUTH_LDAP_CONNECTION_OPTIONS = _ldap["AUTH_LDAP_CONNECTION_OPTIONS"]
    AUTH_LDAP_USER_ATTR_MAP = _ldap["AUTH_LDAP_USER_ATTR_MAP"]
    AUTH_LDAP_ALWAYS_UPDATE_USER = _ldap["AUTH_LDAP_ALWAYS_UPDATE_USER"]
    AUTH_LDAP_GROUP_SEARCH = _ldap["AUTH_LDAP_GROUP_SEARCH"]
    AUTH_LDAP_GROUP_TYPE = _ldap["AUTH_LDAP_GROUP_TYPE"]
    LAKEWARDEN_LDAP_ROLE_GROUPS = _ldap["LAKEWARDEN_LDAP_ROLE_GROUPS"]
    # Users are bound directly by a DN template, or searched for.
    if "AUTH_LDAP_USER_DN_TEMPLATE" in _ldap:
        AUTH_LDAP_USER_DN_TEMPLATE = _ldap["AUTH_LDAP_USER_DN_TEMPLATE"]
    else:
        AUTH_LDAP_USER_SEARCH = _ldap["AUTH_LDAP_USER_SEARCH"]

# --- Lakewarden ---------------------------------------------------------------------------------
LAKEWARDEN_WAREHOUSE = env_path("LAKEWARDEN_WAREHOUSE", str(LAKEWARDEN_VAR_DIR / "warehouse"), base=BASE_DIR)
#: Folders (``Path``) and object-store URI prefixes (normalised ``str``, e.g. ``s3://lake/prod``).
LAKEWARDEN_ALLOWED_ROOTS = env_roots("LAKEWARDEN_ALLOWED_ROOTS", [LAKEWARDEN_WAREHOUSE], base=BASE_DIR)
LAKEWARDEN_SPARK_MASTER = env_str("LAKEWARDEN_SPARK_MASTER", "local[*]")
LAKEWARDEN_SPARK_REMOTE = env_str("LAKEWARDEN_SPARK_REMOTE")
if LAKEWARDEN_SPARK_REMOTE is not None and not LAKEWARDEN_SPARK_REMOTE.startswith("sc://"):
    raise ImproperlyConfigured(f"LAKEWARDEN_SPARK_REMOTE={LAKEWARDEN_SPARK_REMOTE!r} must be an sc:// URL")
#: Drivers started here map the JVM class-data archive scripts/setup.sh trains (processes/spark/cds.py).
LAKEWARDEN_SPARK_CDS = env_bool("LAKEWARDEN_SPARK_CDS", True)
#: Extra Spark settings for every session, ``key=value`` pairs separated by spaces or newlines
#: (``spark.cores.max=4 spark.hadoop.fs.s3a.endpoint=http://minio:9000``). With Spark Connect only
#: runtime SQL settings can be sent; the rest belong to the Connect server's own configuration.
LAKEWARDEN_SPARK_CONF = env_str("LAKEWARDEN_SPARK_CONF", "")
#: Executor memory asked of a standalone (``spark://``) cluster.
LAKEWARDEN_SPARK_EXECUTOR_MEMORY = env_str("LAKEWARDEN_SPARK_EXECUTOR_MEMORY", "1g")
#: The Python interpreter of the executors (it needs Lakewarden, pyarrow and the format libraries
#: installed); by default the one running the worker, so the same virtualenv path on every node.
LAKEWARDEN_SPARK_PYTHON = env_str("LAKEWARDEN_SPARK_PYTHON", "")
LAKEWARDEN_PAGE_SIZE = env_int("LAKEWARDEN_PAGE_SIZE", 50, minimum=1)
LAKEWARDEN_QUERY_ROW_LIMIT = env_int("LAKEWARDEN_QUERY_ROW_LIMIT", 1000, minimum=1)
# DuckDB query engine: engine=auto runs a query on DuckDB when it scans at most this many bytes.
LAKEWARDEN_DUCKDB_MAX_SCAN_BYTES = env_int("LAKEWARDEN_DUCKDB_MAX_SCAN_BYTES", 256 * 1024 * 1024, minimum=0)

# --- Serving: worker processes ------------------------------------------------------------------
#: Processes of the heavy queue each started in a worker (each holds one Spark driver or Spark
#: Connect client): ``manage.py lakewarden_serve`` and the deployment examples use it.
LAKEWARDEN_WORKER_CONCURRENCY = env_int("LAKEWARDEN_WORKER_CONCURRENCY", 2, minimum=1)
#: Processes of the light queue's worker (scheduler ticks, reaper, kills, refreshes).
LAKEWARDEN_LIGHT_CONCURRENCY = env_int("LAKEWARDEN_LIGHT_CONCURRENCY", 2, minimum=1)
#: gunicorn worker processes started by ``manage.py lakewarden_serve``: one per core, 2 to 8.
LAKEWARDEN_WEB_WORKERS = env_int("LAKEWARDEN_WEB_WORKERS", default_web_workers(available_cores()), minimum=1)
#: Threads per gunicorn worker: a slow page (a big table's files) does not hold up the rest.
LAKEWARDEN_WEB_THREADS = env_int("LAKEWARDEN_WEB_THREADS", 1, minimum=1)

# --- Alerts (issue 16): channel delivery (processes/alerts) and the evaluation tick -------------
#: Webhooks to private, loopback or link-local addresses (on-premises receivers are common): on.
LAKEWARDEN_ALERT_ALLOW_PRIVATE = env_bool("LAKEWARDEN_ALERT_ALLOW_PRIVATE", True)
#: With private targets off, these networks (``10.1.2.0/24,192.0.2.7``) are still allowed.
LAKEWARDEN_ALERT_ALLOWED_NETWORKS = env_networks("LAKEWARDEN_ALERT_ALLOWED_NETWORKS")
LAKEWARDEN_ALERT_TIMEOUT_SECONDS = env_int("LAKEWARDEN_ALERT_TIMEOUT_SECONDS", 10, minimum=1)
#: Attempts per delivery; the n-th retry waits BACKOFF * 2**(n-1) seconds.
LAKEWARDEN_ALERT_MAX_ATTEMPTS = env_int("LAKEWARDEN_ALERT_MAX_ATTEMPTS", 5, minimum=1)
LAKEWARDEN_ALERT_BACKOFF_SECONDS = env_int("LAKEWARDEN_ALERT_BACKOFF_SECONDS", 30, minimum=1)
LAKEWARDEN_ALERT_SECONDS = env_int("LAKEWARDEN_ALERT_SECONDS", 60, minimum=5)

# --- Celery -------------------------------------------------------------------------------------
CELERY_BROKER_URL = env_url(
    "CELERY_BROKER_URL", "redis://127.0.0.1:6379/0", schemes=("redis", "rediss", "amqp")
)
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", CELERY_BROKER_URL)
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_TIME_LIMIT = env_int("LAKEWARDEN_TASK_TIME_LIMIT", 6 * 3600, minimum=60)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 30
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Light work (scheduler, reaper, kills, metadata refresh) and Spark-heavy processes have their own
# queues so a long compaction never delays the scheduler.
CELERY_TASK_DEFAULT_QUEUE = env_str("LAKEWARDEN_DEFAULT_QUEUE", "lakewarden")
LAKEWARDEN_HEAVY_QUEUE = env_str("LAKEWARDEN_HEAVY_QUEUE", f"{CELERY_TASK_DEFAULT_QUEUE}.heavy")
#: Tasks that run Spark (or may run for long): ``console.celery.route_task`` sends them to the heavy
#: queue; everything else (scheduler tick, reaper, kills, metadata refresh) stays on the light one.
HEAVY_TASKS = (
    "processes.tasks.run_process_task",
    "processes.tasks.run_query_task",
    "processes.tasks.test_storage_task",
)
CELERY_TASK_ROUTES = ("console.celery.route_task",)
# A worker takes a task only into a free process: a long compaction never sits in the buffer of a
# busy worker while another worker idles. A prefetch multiplier of 1 alone does not do it: a task
# is acknowledged as it starts, so a worker running N tasks still reserved N more. On Redis,
# ``worker_disable_prefetch`` stops the consumer while every process is taken (RabbitMQ keeps the
# multiplier's bound; Celery ignores the option there, so it is set only for Redis).
CELERY_WORKER_PREFETCH_MULTIPLIER = env_int("LAKEWARDEN_PREFETCH_MULTIPLIER", 1, minimum=1)
CELERY_WORKER_DISABLE_PREFETCH = CELERY_BROKER_URL.startswith(("redis:", "rediss:")) and env_bool(
    "LAKEWARDEN_DISABLE_PREFETCH", True
)
LAKEWARDEN_HEARTBEAT_SECONDS = env_int("LAKEWARDEN_HEARTBEAT_SECONDS", 5, minimum=1)
# A running process or query silent for three heartbeats and this many seconds at least has lost
# its worker, unless the worker says it still runs it (processes/workers.py); the reapers ask the
# workers and wait LAKEWARDEN_INSPECT_TIMEOUT_SECONDS at most for an answer (only a worker that
# does not answer costs the whole wait).
LAKEWARDEN_WORKER_LOST_SECONDS = env_int("LAKEWARDEN_WORKER_LOST_SECONDS", 10, minimum=1)
LAKEWARDEN_INSPECT_TIMEOUT_SECONDS = env_int("LAKEWARDEN_INSPECT_TIMEOUT_SECONDS", 5, minimum=1)
LAKEWARDEN_SCHEDULER_SECONDS = env_int("LAKEWARDEN_SCHEDULER_SECONDS", 30, minimum=1)
# Due tables asked in order of benefit per cost, below the minimum benefit skipped (processes/ranking.py);
# false: the older order (longest since its last evaluation first), nothing skipped.
LAKEWARDEN_SCHEDULER_RANKING = env_bool("LAKEWARDEN_SCHEDULER_RANKING", True)
LAKEWARDEN_KILL_GRACE_SECONDS = env_int("LAKEWARDEN_KILL_GRACE_SECONDS", 30, minimum=0)
LAKEWARDEN_RETRY_BACKOFF_SECONDS = env_int("LAKEWARDEN_RETRY_BACKOFF_SECONDS", 30, minimum=0)
LAKEWARDEN_MAX_RETRIES = env_int("LAKEWARDEN_MAX_RETRIES", 3, minimum=0)
# Redis hands a message a dead worker had taken (reserved, or held for a countdown) to another
# worker after this long. It must outlast the longest countdown (a retry's backoff, a kill's grace)
# or held messages are delivered twice; the reaper re-sends lost process tasks long before it.
_LONGEST_COUNTDOWN = max(
    LAKEWARDEN_RETRY_BACKOFF_SECONDS * 2 ** max(LAKEWARDEN_MAX_RETRIES - 1, 0),
    LAKEWARDEN_KILL_GRACE_SECONDS,
    10,
)
LAKEWARDEN_BROKER_VISIBILITY_SECONDS = env_int(
    "LAKEWARDEN_BROKER_VISIBILITY_SECONDS", max(900, 2 * _LONGEST_COUNTDOWN), minimum=2 * _LONGEST_COUNTDOWN
)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": LAKEWARDEN_BROKER_VISIBILITY_SECONDS}
# The one beat schedule (the Celery app reads it as ``beat_schedule``); every tick is light work.
# LAKEWARDEN_ACTIVE_REFRESH_SECONDS: how often the pointers of recently active tables are read.
LAKEWARDEN_ACTIVE_REFRESH_SECONDS = env_int("LAKEWARDEN_ACTIVE_REFRESH_SECONDS", 5, minimum=1)
CELERY_BEAT_SCHEDULE = {
    "refresh-tables": {
        "task": "storage.tasks.refresh_tables_task",
        "schedule": env_int("LAKEWARDEN_REFRESH_SECONDS", 300, minimum=1),
    },
    # Fresh figures (issue 31): pointer checks of the tables with recent activity, seconds apart,
    # so another writer's commit shows within 15 s; a tick not started in time is dropped.
    "refresh-active-tables": {
        "task": "storage.tasks.refresh_active_tables_task",
        "schedule": LAKEWARDEN_ACTIVE_REFRESH_SECONDS,
        "options": {"expires": LAKEWARDEN_ACTIVE_REFRESH_SECONDS},
    },
    "schedule-processes": {
        "task": "processes.tasks.schedule_processes_task",
        "schedule": LAKEWARDEN_SCHEDULER_SECONDS,
    },
    # The stored health scores brought to now (issue 34: what time changes in a score; every
    # other change stores the score at once). One statement writing only the scores that moved.
    "store-health": {
        "task": "processes.tasks.store_health_task",
        "schedule": env_int("LAKEWARDEN_HEALTH_SECONDS", 600, minimum=10),
    },
    # Twice per heartbeat: a lost worker's process is failed half a heartbeat after it is known lost.
    "reap-processes": {
        "task": "processes.tasks.reap_processes_task",
        "schedule": LAKEWARDEN_HEARTBEAT_SECONDS / 2,
    },
    # Workbench queries whose worker or message was lost (issue 29): failed or sent again.
    "reap-queries": {
        "task": "processes.tasks.reap_queries_task",
        "schedule": LAKEWARDEN_HEARTBEAT_SECONDS,
    },
    # Trash (issue 14): purge trash batches whose retention has passed.
    "purge-trash": {
        "task": "storage.tasks.purge_trash_task",
        "schedule": env_int("LAKEWARDEN_TRASH_PURGE_SECONDS", 3600, minimum=60),
    },
    # Alerts (issue 16): evaluate the rules, deliver to their channels.
    "evaluate-alerts": {
        "task": "processes.alerts.tasks.evaluate_alerts_task",
        "schedule": LAKEWARDEN_ALERT_SECONDS,
    },
}
# Task modules outside an app's tasks.py (which the Celery app finds itself) that workers must
# register: the alerts' tasks live in their package, processes/alerts/tasks.py.
CELERY_IMPORTS = ["processes.alerts.tasks"]

# --- Cache: login throttling counters, among others -----------------------------------------------
# LAKEWARDEN_CACHE_URL: redis://... (default: the broker's Redis when it is Redis), or locmem://
# for a per-process cache.
_cache_url = env_str(
    "LAKEWARDEN_CACHE_URL",
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else "locmem://",
)
if _cache_url.startswith("locmem://"):
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "lakewarden"}
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": _cache_url,
            # Shares the broker's Redis: keys are prefixed so they never meet Celery's.
            "KEY_PREFIX": env_str("LAKEWARDEN_CACHE_PREFIX", "lakewarden-cache"),
            "TIMEOUT": 300,
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
    }

# --- Metrics: who may scrape /metrics (console/metrics/access.py), where samples are kept ------
# Neither set: /metrics answers 403 saying how to turn it on. Both set: a scrape needs both.
LAKEWARDEN_METRICS_TOKEN = metrics_token()
LAKEWARDEN_METRICS_ALLOWED_IPS = allowed_networks()
#: Where each web process writes its request-latency samples (prometheus-client's multiprocess
#: mode); ``lakewarden_serve`` wipes it before the web server starts.
PROMETHEUS_MULTIPROC_DIR = env_str("PROMETHEUS_MULTIPROC_DIR") or str(LAKEWARDEN_VAR_DIR / "prometheus")

# --- REST API -----------------------------------------------------------------------------------
REST_FRAMEWORK = {
    # Token first: an anonymous call answers 401 with ``WWW-Authenticate: Token``.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # JSON bodies: NUL characters and deep nesting are a 400, not a 500.
    "DEFAULT_PARSER_CLASSES": [
        "console.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["console.permissions.RolePermission"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": LAKEWARDEN_PAGE_SIZE,
    # drf-spectacular's, with operations tagged by what they work on (console/api/schema.py)
    "DEFAULT_SCHEMA_CLASS": "console.api.schema.TaggedAutoSchema",
    "EXCEPTION_HANDLER": "console.api.errors.exception_handler",
    # ?format= filters tables by table format; responses are JSON (Accept header picks otherwise).
    "URL_FORMAT_OVERRIDE": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Lakewarden API",
    "DESCRIPTION": (
        "Browse and maintain lakehouse tables: Iceberg, Delta, Hudi (browsed and read, not maintained),"
        " and through their plugins Lance and Paimon. Catalogs, tables, files, processes, queries."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its docs need the viewer role like every other read.
    "SERVE_PERMISSIONS": ["console.permissions.RolePermission"],
    # Swagger UI assets come from the sidecar package so the docs work offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Several models have a "kind": each choice set gets a name of its own in the schema.
    "ENUM_NAME_OVERRIDES": {
        "CatalogKindEnum": "storage.models.CatalogKind",
        "AlertChannelKindEnum": "processes.alerts.models.ChannelKind",
        "AlertRuleKindEnum": "processes.alerts.models.RuleKind",
    },
    # Error responses ({"error", "field"}) on every operation, see console/api/schema.py.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "console.api.schema.postprocess_error_responses",
        "console.api.schema.postprocess_tags",
    ],
}

# --- Logging: secrets never reach a handler (console.security.SecretMaskingFilter) ---------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"mask_secrets": {"()": "console.security.SecretMaskingFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["mask_secrets"]}
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"py4j": {"level": "WARNING"}},
}
