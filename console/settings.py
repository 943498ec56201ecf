"""Lakewarden settings: everything configurable comes from environment variables (see README).

The other settings modules never import this one: ``console.settings_scale`` and
``console.settings_security`` read the environment through ``console.env`` and this module takes
their values (star imports of their ``__all__``) and calls their helpers with its own values.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from console import settings_security
from console.database_url import database_url
from console.env import env_bool, env_int, env_path, env_roots, env_str, env_url

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
#: Local state of this installation: the secret key file, static files, the demo warehouse, beat's
#: schedule, the admin password.
LAKEWARDEN_VAR_DIR = env_path("LAKEWARDEN_VAR_DIR", "./var", base=BASE_DIR)
SECRET_KEY = env_str("SECRET_KEY")
if SECRET_KEY is None:
    if not DEBUG and env_bool("LAKEWARDEN_REQUIRE_SECRET_KEY", False):
        raise ImproperlyConfigured("SECRET_KEY must be set (LAKEWARDEN_REQUIRE_SECRET_KEY is on)")
    # One key for every process of this installation (each gunicorn worker, the Celery workers,
    # manage.py), made once and kept in var/secret_key: sessions stay valid across workers and
    # restarts. Production may rely on it too (one machine, var/ kept); several web hosts need the
    # same SECRET_KEY set on each.
    SECRET_KEY = settings_security.persistent_secret_key(
        LAKEWARDEN_VAR_DIR / settings_security.SECRET_KEY_FILE_NAME
    )

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
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "console.middleware.LoginRequiredMiddleware",
    "console.middleware.OutboundBoundsMiddleware",
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
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns about a missing folder
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve static files from the app folders without collectstatic in development and tests.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

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
LAKEWARDEN_PAGE_SIZE = env_int("LAKEWARDEN_PAGE_SIZE", 50, minimum=1)
LAKEWARDEN_QUERY_ROW_LIMIT = env_int("LAKEWARDEN_QUERY_ROW_LIMIT", 1000, minimum=1)

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
LAKEWARDEN_HEARTBEAT_SECONDS = env_int("LAKEWARDEN_HEARTBEAT_SECONDS", 5, minimum=1)
LAKEWARDEN_SCHEDULER_SECONDS = env_int("LAKEWARDEN_SCHEDULER_SECONDS", 30, minimum=1)
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
CELERY_BEAT_SCHEDULE = {
    "refresh-tables": {
        "task": "storage.tasks.refresh_tables_task",
        "schedule": env_int("LAKEWARDEN_REFRESH_SECONDS", 300, minimum=1),
    },
    "schedule-processes": {
        "task": "processes.tasks.schedule_processes_task",
        "schedule": LAKEWARDEN_SCHEDULER_SECONDS,
    },
    # Twice per heartbeat: a lost worker's process is failed within two heartbeats.
    "reap-processes": {
        "task": "processes.tasks.reap_processes_task",
        "schedule": LAKEWARDEN_HEARTBEAT_SECONDS / 2,
    },
    # Trash (issue 14): purge trash batches whose retention has passed.
    "purge-trash": {
        "task": "processes.trash_tasks.purge_trash_task",
        "schedule": env_int("LAKEWARDEN_TRASH_PURGE_SECONDS", 3600, minimum=60),
    },
}
# Task modules outside an app's tasks.py that workers must register.
CELERY_IMPORTS = ["processes.trash_tasks"]

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
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
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
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
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
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"py4j": {"level": "WARNING"}},
}

from console.settings_scale import *  # noqa: E402,F403  (queue routing, worker concurrency, web workers)
from console.settings_security import *  # noqa: E402,F403  (security headers, cookies, throttling)

MIDDLEWARE = settings_security.with_security_middleware(MIDDLEWARE)
CACHES = settings_security.cache_settings(CELERY_BROKER_URL)
SPECTACULAR_SETTINGS = settings_security.with_role_protected_schema(SPECTACULAR_SETTINGS)
LOGGING = settings_security.with_masked_secrets(LOGGING)
# Alerts (issue 16): channel delivery settings and the evaluation tick (processes/alerts, console/alerts.py).
from console.settings_alerts import *  # noqa: E402,F403
from console.settings_audit import *  # noqa: E402,F403  (audit trail: its app and middleware, console/audit)
from console.settings_observability import *  # noqa: E402,F403  (/metrics access, request-latency middleware)
from console.settings_sso import *  # noqa: E402,F403  (OpenID Connect and LDAP sign-in; inert unless LAKEWARDEN_OIDC_*/LAKEWARDEN_LDAP_* set)

CELERY_BEAT_SCHEDULE.update(ALERTS_BEAT_SCHEDULE)  # noqa: F405
CELERY_IMPORTS = [*CELERY_IMPORTS, *ALERTS_CELERY_IMPORTS]  # noqa: F405

# --- DuckDB query engine: engine=auto runs a query on DuckDB when it scans at most this many bytes ---
LAKEWARDEN_DUCKDB_MAX_SCAN_BYTES = env_int("LAKEWARDEN_DUCKDB_MAX_SCAN_BYTES", 256 * 1024 * 1024, minimum=0)
