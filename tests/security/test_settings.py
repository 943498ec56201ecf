"""Django's deploy checklist under production settings, security headers, CSRF with htmx posts."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import REPO_ROOT

PRODUCTION_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": secrets.token_urlsafe(64),
    "LAKEWARDEN_HTTPS": "1",
    "ALLOWED_HOSTS": "lakewarden.example.com",
    "LAKEWARDEN_REQUIRE_SECRET_KEY": "1",
}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DEBUG", "SECRET_KEY", "LAKEWARDEN_HTTPS", "LAKEWARDEN_CACHE_URL"}
    }
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO_ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_deploy_is_clean_under_production_settings():
    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], PRODUCTION_ENV)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_warns_about_cookies_when_https_is_off():
    """LAKEWARDEN_HTTPS really drives the cookie flags (off for the local demo over http)."""
    result = _run(["manage.py", "check", "--deploy"], {**PRODUCTION_ENV, "LAKEWARDEN_HTTPS": "0"})

    assert "security.W012" in result.stderr + result.stdout  # SESSION_COOKIE_SECURE
    assert "security.W016" in result.stderr + result.stdout  # CSRF_COOKIE_SECURE


SETTINGS_PRINTER = """
import json, django
django.setup()
from django.conf import settings as s
print(json.dumps({name: getattr(s, name, None) for name in %r}, default=str))
"""


def _settings(env: dict[str, str], *names: str) -> dict:
    result = _run(
        ["-c", SETTINGS_PRINTER % (list(names),)], {"DJANGO_SETTINGS_MODULE": "console.settings", **env}
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_production_settings_turn_on_https_protections():
    values = _settings(
        PRODUCTION_ENV,
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SESSION_COOKIE_HTTPONLY",
        "CSRF_COOKIE_HTTPONLY",
    )

    assert values == {
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 365 * 24 * 3600,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SESSION_COOKIE_HTTPONLY": True,
        # htmx takes the token from the page, so the cookie need not be hidden from scripts
        "CSRF_COOKIE_HTTPONLY": False,
    }


def test_the_login_cache_is_the_brokers_redis_with_a_prefix_or_locmem_on_request():
    redis = _settings({"CELERY_BROKER_URL": "redis://127.0.0.1:6379/3"}, "CACHES")["CACHES"]["default"]
    local = _settings({"LAKEWARDEN_CACHE_URL": "locmem://"}, "CACHES")["CACHES"]["default"]

    assert redis["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    assert redis["LOCATION"] == "redis://127.0.0.1:6379/3"
    assert redis["KEY_PREFIX"]
    assert local["BACKEND"] == "django.core.cache.backends.locmem.LocMemCache"


# --- the secret key: one per installation, not one per process ----------------------------------

KEY_RACER = """
import sys, time
from pathlib import Path
from console.secret_key import persistent_secret_key
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.005)
print(persistent_secret_key(Path(sys.argv[1])))
"""


def test_processes_starting_at_once_agree_on_one_key_written_once(tmp_path):
    """Several processes create the key file at the same moment: one wins, every one reads its key."""
    key_file, go = tmp_path / "var" / "secret_key", tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", KEY_RACER, str(key_file), str(go)],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    try:
        go.touch()
        outputs = [racer.communicate(timeout=120) for racer in racers]
    finally:
        for racer in racers:
            racer.kill()
    assert all(racer.returncode == 0 for racer in racers), [err for _, err in outputs]
    keys = {out.strip() for out, _ in outputs}
    assert len(keys) == 1 and len(keys.pop()) >= 50
    assert key_file.read_text().strip() == outputs[0][0].strip()
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in key_file.parent.iterdir()) == ["secret_key"]  # no temporary left


def test_without_secret_key_every_process_uses_the_key_file_of_the_var_folder(tmp_path):
    env = {"LAKEWARDEN_VAR_DIR": str(tmp_path / "var")}

    first = _settings(env, "SECRET_KEY")["SECRET_KEY"]
    second = _settings(env, "SECRET_KEY")["SECRET_KEY"]

    assert first == second == (tmp_path / "var" / "secret_key").read_text().strip()
    assert _settings({**env, "SECRET_KEY": "x" * 60}, "SECRET_KEY")["SECRET_KEY"] == "x" * 60


def test_https_without_secret_key_uses_the_key_file_unless_a_key_is_required(tmp_path):
    """Production (LAKEWARDEN_HTTPS) may rely on the key file on one machine; the README says so.
    LAKEWARDEN_REQUIRE_SECRET_KEY makes a missing SECRET_KEY stop start-up instead."""
    env = {**PRODUCTION_ENV, "LAKEWARDEN_VAR_DIR": str(tmp_path / "var")}
    del env["SECRET_KEY"], env["LAKEWARDEN_REQUIRE_SECRET_KEY"]

    key = _settings(env, "SECRET_KEY")["SECRET_KEY"]
    refused = _run(
        ["-c", SETTINGS_PRINTER % (["SECRET_KEY"],)], {**env, "LAKEWARDEN_REQUIRE_SECRET_KEY": "1"}
    )

    assert key == (tmp_path / "var" / "secret_key").read_text().strip()
    assert refused.returncode != 0
    assert "SECRET_KEY must be set" in refused.stderr


def test_the_settings_modules_import_each_other_one_way_only():
    """console.settings imports the helpers it reads (console.env, console.secret_key...); they
    never import it back (a cycle made each see the other half-built, depending on which was
    imported first)."""
    import ast

    helpers = ("env", "secret_key", "gunicorn_conf", "database_url", "sso/config", "metrics/access")
    for module in helpers:
        tree = ast.parse((REPO_ROOT / "console" / f"{module}.py").read_text())
        imported = {
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        assert not {"console.settings", "console"} & imported, (module, imported)
    probe = _run(
        [
            "-c",
            "import sys, "
            + ", ".join(f"console.{module.replace('/', '.')}" for module in helpers)
            + "; print('console.settings' in sys.modules)",
        ],
        {},
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "False"


def test_web_workers_and_threads_come_from_the_environment():
    values = _settings(
        {"LAKEWARDEN_WEB_WORKERS": "11", "LAKEWARDEN_WEB_THREADS": "6"},
        "LAKEWARDEN_WEB_WORKERS",
        "LAKEWARDEN_WEB_THREADS",
    )
    assert values == {"LAKEWARDEN_WEB_WORKERS": 11, "LAKEWARDEN_WEB_THREADS": 6}


# --- headers on the pages themselves -------------------------------------------------------------


@pytest.mark.django_db
def test_console_pages_carry_the_security_headers(client_as, viewer):
    response = client_as(viewer).get(reverse("console:table-list"))

    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    policy = dict(
        part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";") if part.strip()
    )
    assert policy["script-src"] == "'self'"  # no inline script, no eval
    assert policy["frame-ancestors"] == "'none'"
    assert policy["object-src"] == "'none'"


@pytest.mark.django_db
def test_the_api_and_the_login_page_carry_the_policy_too(client, api_as, viewer):
    assert "script-src 'self'" in client.get(reverse("login"))["Content-Security-Policy"]
    assert "default-src 'self'" in api_as(viewer).get("/api/v1/tables/")["Content-Security-Policy"]


@pytest.mark.django_db
def test_the_session_cookie_is_http_only(client, viewer):
    response = client.post(
        reverse("login"), {"username": viewer.username, "password": "correct horse battery"}
    )

    assert response.status_code == 302
    assert response.cookies["sessionid"]["httponly"]
    assert response.cookies["sessionid"]["samesite"] == "Lax"


def test_no_template_has_an_inline_script_or_event_handler():
    """The policy forbids inline scripts: a template that adds one would break silently in browsers."""
    offenders = []
    for path in (REPO_ROOT / "templates").rglob("*.html"):
        text = path.read_text()
        for match in re.finditer(r"<script\b(?![^>]*\bsrc=)[^>]*>", text):
            offenders.append(f"{path.relative_to(REPO_ROOT)}: {match.group(0)}")
        for match in re.finditer(r"\s(on[a-z]+|hx-on[:\w-]*)\s*=", text):
            offenders.append(f"{path.relative_to(REPO_ROOT)}: {match.group(1)}=")
        if "javascript:" in text:
            offenders.append(f"{path.relative_to(REPO_ROOT)}: javascript: URL")
    assert not offenders, "inline script in templates (move it to static/console/*.js):\n" + "\n".join(
        offenders
    )


# --- CSRF with htmx ------------------------------------------------------------------------------


@pytest.fixture
def pending_process(warehouse, test_plugin):
    from processes import services as process_services
    from storage import services as console_services
    from tests.console.tables import write_delta_table

    table = console_services.table_register(location=str(write_delta_table(warehouse / "orders", commits=1)))
    return process_services.process_create(table=table, action="touch")


def _csrf_browser(user) -> Client:
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    return browser


def _token_from_page(html: str) -> str:
    """The token htmx sends: base.html puts it in the body's hx-headers attribute."""
    match = re.search(r"""hx-headers='\{"X-CSRFToken": "([^"]+)"\}'""", html)
    assert match, "base.html no longer gives htmx the CSRF token in hx-headers"
    return match.group(1)


@pytest.mark.django_db
def test_an_htmx_post_with_the_token_from_the_page_is_accepted(pending_process, operator):
    from processes.models import ProcessStatus

    browser = _csrf_browser(operator)
    page = browser.get(reverse("console:process-detail", args=[pending_process.pk]))
    token = _token_from_page(page.content.decode())

    response = browser.post(
        reverse("console:process-act", args=[pending_process.pk, "cancel"]),
        HTTP_X_CSRFTOKEN=token,
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="process-status",
    )

    assert response.status_code == 200
    pending_process.refresh_from_db()
    assert pending_process.status == ProcessStatus.CANCELED


@pytest.mark.django_db
@pytest.mark.parametrize("token", [None, "forged-token-forged-token-forged-1"], ids=["missing", "forged"])
def test_an_htmx_post_without_the_pages_token_is_refused(pending_process, operator, token):
    from processes.models import ProcessStatus

    browser = _csrf_browser(operator)
    browser.get(reverse("console:process-detail", args=[pending_process.pk]))  # sets the cookie
    headers = {"HTTP_HX_REQUEST": "true"} | ({"HTTP_X_CSRFTOKEN": token} if token else {})

    response = browser.post(reverse("console:process-act", args=[pending_process.pk, "cancel"]), **headers)

    assert response.status_code == 403
    pending_process.refresh_from_db()
    assert pending_process.status == ProcessStatus.PENDING


@pytest.mark.django_db
def test_the_api_with_a_session_needs_the_csrf_token_but_not_with_an_api_token(pending_process, operator):
    from rest_framework.authtoken.models import Token

    browser = _csrf_browser(operator)
    url = f"/api/v1/processes/{pending_process.pk}/cancel/"
    assert browser.post(url).status_code == 403

    robot = Client(enforce_csrf_checks=True)
    key = Token.objects.create(user=operator).key
    assert robot.post(url, HTTP_AUTHORIZATION=f"Token {key}").status_code == 200


def test_the_brokers_visibility_timeout_outlasts_every_countdown_and_refuses_less():
    """A killed worker's reserved messages come back after the visibility timeout; it must outlast
    the longest countdown a held message can have, or Redis delivers held messages twice."""
    default = _settings({}, "CELERY_BROKER_TRANSPORT_OPTIONS")
    assert default["CELERY_BROKER_TRANSPORT_OPTIONS"] == {"visibility_timeout": 900}
    long_backoff = _settings(
        {"LAKEWARDEN_RETRY_BACKOFF_SECONDS": "600", "LAKEWARDEN_MAX_RETRIES": "3"},
        "CELERY_BROKER_TRANSPORT_OPTIONS",
    )
    assert long_backoff["CELERY_BROKER_TRANSPORT_OPTIONS"] == {"visibility_timeout": 2 * 600 * 4}
    refused = _run(["manage.py", "check"], {"LAKEWARDEN_BROKER_VISIBILITY_SECONDS": "60"})
    assert refused.returncode != 0 and "LAKEWARDEN_BROKER_VISIBILITY_SECONDS" in refused.stderr
