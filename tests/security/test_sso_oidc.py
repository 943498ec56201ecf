"""OpenID Connect sign-in against a real provider run by the module (a small Django project with
django-oauth-toolkit's OIDC support, its own Postgres database, its own process on a free port): the
browser goes to the provider, signs in on its form and comes back signed into Lakewarden with the
role its groups map to; a tampered state or nonce, a provider that is down and a user in no mapped
group end on the login page with the reason, and no account is made."""

from __future__ import annotations

import os
import sys
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from console.roles import user_role
from devtools.seaweedfs import free_port
from tests.conftest import REPO_ROOT
from tests.security.sso_support.browser import provider_sign_in, sign_in_start, state_of
from tests.security.sso_support.configure import sso_settings_apply
from tests.security.sso_support.oidc_provider.serve import CLIENT_ID, drop_database
from tests.security.sso_support.processes import read_line, spawn, stop

pytestmark = pytest.mark.django_db

CLIENT_SECRET = "lakewarden-client-secret-for-tests"
PROVIDER_PASSWORD = "provider-pass-1"
CALLBACK = "http://testserver/accounts/login/oidc/callback/"
LOCAL_PASSWORD = "correct horse battery"  # the users made by tests/conftest.py


@pytest.fixture(scope="module")
def provider(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("oidc-provider")
    log = folder / "provider.log"
    database_url = _provider_database_url()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.security.sso_support.oidc_provider.settings",
        "OIDC_PROVIDER_DATABASE_URL": database_url,
        "OIDC_PROVIDER_CLIENT_SECRET": CLIENT_SECRET,
        "OIDC_PROVIDER_REDIRECT_URI": CALLBACK,
        "OIDC_PROVIDER_PASSWORD": PROVIDER_PASSWORD,
    }
    child = spawn(
        [sys.executable, "-m", "tests.security.sso_support.oidc_provider.serve"],
        log=log,
        env=env,
        cwd=REPO_ROOT,
    )
    try:
        port = int(read_line(child, prefix="READY", timeout=120, log=log).split()[1])
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(child)
        drop_database(database_url)


def _provider_database_url() -> str:
    """Lakewarden's own Postgres server, a database named after this test database and process."""
    from django.conf import settings

    config = settings.DATABASES["default"]
    name = f"{settings.DATABASES['default']['TEST']['NAME']}_oidc_{os.getpid()}"
    auth = f"{quote(config['USER'])}:{quote(config['PASSWORD'] or '')}@" if config["USER"] else ""
    return f"postgres://{auth}{config['HOST'] or '127.0.0.1'}:{config['PORT'] or 5432}/{name}"


def provider_env(base: str) -> dict[str, str]:
    return {
        "LAKEWARDEN_OIDC_CLIENT_ID": CLIENT_ID,
        "LAKEWARDEN_OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "LAKEWARDEN_OIDC_AUTHORIZATION_ENDPOINT": f"{base}/o/authorize/",
        "LAKEWARDEN_OIDC_TOKEN_ENDPOINT": f"{base}/o/token/",
        "LAKEWARDEN_OIDC_USERINFO_ENDPOINT": f"{base}/o/userinfo/",
        "LAKEWARDEN_OIDC_JWKS_ENDPOINT": f"{base}/o/.well-known/jwks.json",
        "LAKEWARDEN_OIDC_ISSUER": f"{base}/o",
        "LAKEWARDEN_OIDC_SCOPES": "openid email profile groups",
        "LAKEWARDEN_OIDC_PROVIDER_NAME": "Test IdP",
        "LAKEWARDEN_OIDC_VIEWER_GROUPS": "lakewarden-viewers",
        "LAKEWARDEN_OIDC_OPERATOR_GROUPS": "lakewarden-operators",
        "LAKEWARDEN_OIDC_ADMIN_GROUPS": "lakewarden-admins;platform-team",
    }


@pytest.fixture
def oidc_on(provider, settings, monkeypatch) -> str:
    sso_settings_apply(settings, monkeypatch, provider_env(provider))
    return provider


def account(username: str):
    return get_user_model().objects.filter(username=username).first()


def role_groups(user) -> set[str]:
    return set(user.groups.filter(name__in=("viewer", "operator", "admin")).values_list("name", flat=True))


def refusal(client: Client, answer) -> str:
    """The login page the refused sign-in lands on, with its message."""
    assert answer.status_code == 302 and answer["Location"] == reverse("login"), answer
    page = client.get(answer["Location"])
    assert page.status_code == 200
    assert "_auth_user_id" not in client.session
    return page.content.decode()


@pytest.mark.parametrize(
    ("username", "role"), [("vick", "viewer"), ("olivia", "operator"), ("adam", "admin")]
)
def test_provider_users_land_signed_in_with_the_role_their_groups_map_to(oidc_on, username, role):
    client = Client()
    callback = provider_sign_in(sign_in_start(client), username, PROVIDER_PASSWORD)
    assert callback.startswith(CALLBACK)

    answer = client.get(callback)

    assert answer.status_code == 302 and answer["Location"] == reverse("console:overview")
    user = account(username)
    assert role_groups(user) == {role}
    assert user_role(user) == role
    assert not user.has_usable_password()
    assert (user.email, user.first_name) == (f"{username}@example.org", username.title())
    assert client.session["_auth_user_id"] == str(user.pk)
    assert client.session["_auth_user_backend"] == "console.sso.oidc_login.LakewardenOIDCBackend"
    assert client.get(reverse("console:overview")).status_code == 200


def test_the_sign_in_returns_to_the_page_asked_for(oidc_on):
    client = Client()
    wanted = reverse("console:table-list")

    answer = client.get(provider_sign_in(sign_in_start(client, wanted), "vick", PROVIDER_PASSWORD))

    assert answer["Location"] == wanted


def test_the_login_page_offers_the_provider_only_while_oidc_is_on(provider, settings, monkeypatch):
    page = Client().get(reverse("login")).content.decode()
    assert "Sign in with" not in page
    assert Client().get(reverse("oidc_authentication_init")).status_code == 404
    assert Client().get(reverse("oidc_authentication_callback")).status_code == 404

    sso_settings_apply(settings, monkeypatch, provider_env(provider))

    page = Client().get(reverse("login"), {"next": "/tables/"}).content.decode()
    assert f'href="{reverse("oidc_authentication_init")}?next=%2Ftables%2F">Sign in with Test IdP</a>' in page


def test_a_tampered_state_is_refused_and_makes_no_account(oidc_on):
    client = Client()
    callback = provider_sign_in(sign_in_start(client), "olivia", PROVIDER_PASSWORD)
    parts = urlsplit(callback)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    tampered = f"{parts.path}?{urlencode({**query, 'state': query['state'][::-1]})}"

    page = refusal(client, client.get(tampered))

    assert "does not belong to a sign-in started from this browser" in page
    assert account("olivia") is None


def test_a_callback_is_good_once_only(oidc_on):
    client = Client()
    callback = provider_sign_in(sign_in_start(client), "olivia", PROVIDER_PASSWORD)
    assert client.get(callback)["Location"] == reverse("console:overview")
    client.logout()

    page = refusal(client, client.get(callback))

    assert "does not belong to a sign-in started from this browser" in page


def test_a_tampered_nonce_is_refused_and_makes_no_account(oidc_on):
    client = Client()
    authorize = sign_in_start(client)
    session = client.session
    session["oidc_states"][state_of(authorize)]["nonce"] = "forged-nonce"
    session.save()

    page = refusal(client, client.get(provider_sign_in(authorize, "adam", PROVIDER_PASSWORD)))

    assert "the provider&#x27;s ID token could not be verified (JWT Nonce verification failed.)" in page
    assert account("adam") is None


def test_a_provider_user_in_no_mapped_group_is_refused_and_no_account_is_made(oidc_on):
    client = Client()

    page = refusal(client, client.get(provider_sign_in(sign_in_start(client), "nina", PROVIDER_PASSWORD)))

    assert (
        "You signed in as “nina” through Test IdP, but none of your groups gives access to Lakewarden" in page
    )
    assert account("nina") is None


def test_a_provider_that_cannot_be_reached_gives_a_clear_error_and_makes_no_account(oidc_on, settings):
    client = Client()
    callback = provider_sign_in(sign_in_start(client), "vick", PROVIDER_PASSWORD)
    settings.OIDC_OP_TOKEN_ENDPOINT = f"http://127.0.0.1:{free_port()}/o/token/"  # the provider went away

    page = refusal(client, client.get(callback))

    assert "Single sign-on failed: Test IdP could not be reached or refused the sign-in" in page
    assert account("vick") is None


def test_a_refusal_at_the_provider_is_reported(oidc_on):
    client = Client()
    state = state_of(sign_in_start(client))

    page = refusal(
        client,
        client.get(reverse("oidc_authentication_callback"), {"error": "access_denied", "state": state}),
    )

    assert "Single sign-on was refused or cancelled at Test IdP (access_denied)" in page


def test_a_provider_account_cannot_take_over_a_local_account_of_the_same_name(oidc_on, django_user_model):
    local = django_user_model.objects.create_user(username="adam", password="local-only-password")
    client = Client()

    page = refusal(client, client.get(provider_sign_in(sign_in_start(client), "adam", PROVIDER_PASSWORD)))

    assert "A local Lakewarden account named “adam” already exists" in page
    assert role_groups(local) == set()


def test_local_accounts_keep_working_with_oidc_on(oidc_on, operator):
    client = Client()

    answer = client.post(reverse("login"), {"username": operator.username, "password": LOCAL_PASSWORD})

    assert answer.status_code == 302
    assert client.session["_auth_user_backend"] == "django.contrib.auth.backends.ModelBackend"


def test_an_id_token_from_another_issuer_is_refused(oidc_on, settings):
    settings.LAKEWARDEN_OIDC_ISSUER = "https://idp.example.org"
    client = Client()

    page = refusal(client, client.get(provider_sign_in(sign_in_start(client), "vick", PROVIDER_PASSWORD)))

    assert f"could not be verified (the ID token comes from another issuer ({oidc_on}/o))" in page
    assert account("vick") is None
