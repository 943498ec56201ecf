"""Settings of the OpenID provider the SSO tests run (test infrastructure, not Lakewarden): a tiny
Django project serving django-oauth-toolkit's OpenID Connect endpoints over its own Postgres
database (``OIDC_PROVIDER_DATABASE_URL``, created by ``serve`` and dropped by the test fixture)."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

HERE = Path(__file__).resolve().parent

SECRET_KEY = "oidc-provider-for-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.security.sso_support.oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [HERE / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": dj_database_url.parse(os.environ["OIDC_PROVIDER_DATABASE_URL"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
USE_TZ = True
LOGIN_URL = "/accounts/login/"

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": os.environ["OIDC_PROVIDER_RSA_KEY"],
    "PKCE_REQUIRED": True,
    "OAUTH2_VALIDATOR_CLASS": "tests.security.sso_support.oidc_provider.validator.GroupsClaimValidator",
    "SCOPES": {
        "openid": "OpenID Connect",
        "email": "e-mail address",
        "profile": "name and username",
        "groups": "group memberships",
    },
}
