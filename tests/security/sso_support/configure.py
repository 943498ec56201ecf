"""Turn SSO on for one test the way production does: environment variables read by
``console.sso.config``, whose settings are then applied through pytest-django's ``settings``."""

from __future__ import annotations

from console.sso import config as sso_config


def sso_settings_apply(settings, monkeypatch, env: dict[str, str]) -> dict:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    oidc, ldap = sso_config.oidc_settings(), sso_config.ldap_settings()
    for name, value in {**oidc, **ldap}.items():
        setattr(settings, name, value)
    settings.LAKEWARDEN_OIDC_ENABLED = bool(oidc)
    settings.LAKEWARDEN_LDAP_ENABLED = bool(ldap)
    settings.AUTHENTICATION_BACKENDS = sso_config.authentication_backends(oidc=bool(oidc), ldap=bool(ldap))
    return {**oidc, **ldap}
