"""Turn SSO on for one test the way production does: environment variables read by
``console.settings_sso``, whose settings are then applied through pytest-django's ``settings``."""

from __future__ import annotations

from console import settings_sso


def sso_settings_apply(settings, monkeypatch, env: dict[str, str]) -> dict:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    oidc, ldap = settings_sso.oidc_settings(), settings_sso.ldap_settings()
    for name, value in {**oidc, **ldap}.items():
        setattr(settings, name, value)
    settings.LAKEWARDEN_OIDC_ENABLED = bool(oidc)
    settings.LAKEWARDEN_LDAP_ENABLED = bool(ldap)
    settings.AUTHENTICATION_BACKENDS = settings_sso.authentication_backends(oidc=bool(oidc), ldap=bool(ldap))
    return {**oidc, **ldap}
