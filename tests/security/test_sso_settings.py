"""SSO settings come from LAKEWARDEN_OIDC_* / LAKEWARDEN_LDAP_* and are inert without them; a
half-done configuration stops start-up naming the variable to fix."""

from __future__ import annotations

import os

import pytest
from django.core.exceptions import ImproperlyConfigured

from console.sso import config as sso_config

OIDC = {
    "LAKEWARDEN_OIDC_CLIENT_ID": "lakewarden",
    "LAKEWARDEN_OIDC_CLIENT_SECRET": "secret",
    "LAKEWARDEN_OIDC_AUTHORIZATION_ENDPOINT": "https://idp.example.org/authorize",
    "LAKEWARDEN_OIDC_TOKEN_ENDPOINT": "https://idp.example.org/token",
    "LAKEWARDEN_OIDC_USERINFO_ENDPOINT": "https://idp.example.org/userinfo",
    "LAKEWARDEN_OIDC_JWKS_ENDPOINT": "https://idp.example.org/jwks",
    "LAKEWARDEN_OIDC_VIEWER_GROUPS": "readers; auditors",
}
LDAP = {
    "LAKEWARDEN_LDAP_SERVER_URI": "ldap://ldap.example.org",
    "LAKEWARDEN_LDAP_USER_DN_TEMPLATE": "uid=%(user)s,ou=people,dc=example,dc=org",
    "LAKEWARDEN_LDAP_GROUP_SEARCH_BASE": "ou=groups,dc=example,dc=org",
    "LAKEWARDEN_LDAP_ADMIN_GROUPS": "cn=admins,ou=groups,dc=example,dc=org",
}


@pytest.fixture
def environ(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("LAKEWARDEN_OIDC_", "LAKEWARDEN_LDAP_")):
            monkeypatch.delenv(name)

    def set_all(values: dict[str, str]) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_all


def test_without_sso_variables_only_local_accounts_sign_in(environ):
    assert sso_config.oidc_settings() == {}
    assert sso_config.ldap_settings() == {}
    assert sso_config.authentication_backends(oidc=False, ldap=False) == [
        "django.contrib.auth.backends.ModelBackend"
    ]


def test_oidc_settings_map_groups_and_keep_local_accounts_first(environ):
    environ(OIDC)

    values = sso_config.oidc_settings()

    assert values["OIDC_RP_CLIENT_ID"] == "lakewarden"
    assert values["OIDC_OP_USER_ENDPOINT"] == "https://idp.example.org/userinfo"
    assert values["OIDC_RP_SIGN_ALGO"] == "RS256" and values["OIDC_USE_PKCE"] is True
    assert values["LAKEWARDEN_OIDC_ROLE_GROUPS"] == {
        "viewer": ["readers", "auditors"],
        "operator": [],
        "admin": [],
    }
    assert sso_config.authentication_backends(oidc=True, ldap=True) == [
        "django.contrib.auth.backends.ModelBackend",
        "console.sso.ldap_login.LakewardenLDAPBackend",
        "console.sso.oidc_login.LakewardenOIDCBackend",
    ]


def test_ldap_settings_bind_by_template_and_split_group_dns_on_semicolons(environ):
    environ(
        {
            **LDAP,
            "LAKEWARDEN_LDAP_VIEWER_GROUPS": "cn=a,ou=groups,dc=example,dc=org;cn=b,ou=groups,dc=example,dc=org",
        }
    )

    values = sso_config.ldap_settings()

    assert values["AUTH_LDAP_USER_DN_TEMPLATE"] == "uid=%(user)s,ou=people,dc=example,dc=org"
    assert "AUTH_LDAP_USER_SEARCH" not in values
    assert values["LAKEWARDEN_LDAP_ROLE_GROUPS"]["viewer"] == [
        "cn=a,ou=groups,dc=example,dc=org",
        "cn=b,ou=groups,dc=example,dc=org",
    ]


@pytest.mark.parametrize(
    ("base", "change", "message"),
    [
        (OIDC, {"LAKEWARDEN_OIDC_TOKEN_ENDPOINT": ""}, "LAKEWARDEN_OIDC_TOKEN_ENDPOINT must be set"),
        (OIDC, {"LAKEWARDEN_OIDC_CLIENT_SECRET": ""}, "LAKEWARDEN_OIDC_CLIENT_SECRET must be set"),
        (OIDC, {"LAKEWARDEN_OIDC_JWKS_ENDPOINT": "idp.example.org/jwks"}, "must be an http(s):// URL"),
        (OIDC, {"LAKEWARDEN_OIDC_VIEWER_GROUPS": " ; "}, "set LAKEWARDEN_OIDC_VIEWER_GROUPS"),
        (LDAP, {"LAKEWARDEN_LDAP_SERVER_URI": "http://ldap.example.org"}, "must start with ldap://"),
        (
            LDAP,
            {"LAKEWARDEN_LDAP_GROUP_TYPE": "sqlGroup"},
            "LAKEWARDEN_LDAP_GROUP_TYPE='sqlGroup' is not one of",
        ),
        (LDAP, {"LAKEWARDEN_LDAP_GROUP_SEARCH_BASE": ""}, "LAKEWARDEN_LDAP_GROUP_SEARCH_BASE must be set"),
        (LDAP, {"LAKEWARDEN_LDAP_USER_DN_TEMPLATE": ""}, "LAKEWARDEN_LDAP_USER_SEARCH_BASE must be set"),
        (LDAP, {"LAKEWARDEN_LDAP_ADMIN_GROUPS": ""}, "set LAKEWARDEN_LDAP_VIEWER_GROUPS"),
    ],
)
def test_an_incomplete_configuration_stops_start_up_naming_the_variable(environ, base, change, message):
    environ({**base, **change})

    with pytest.raises(ImproperlyConfigured) as refused:
        sso_config.oidc_settings() if base is OIDC else sso_config.ldap_settings()
    assert message in str(refused.value)
