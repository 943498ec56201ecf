"""Single sign-on settings from the environment: OpenID Connect (mozilla-django-oidc) and LDAP
(django-auth-ldap). ``console/settings.py`` calls ``oidc_settings()`` and ``ldap_settings()`` and
binds each setting they return by name; this module never imports the settings.

Both are off unless their environment is set (each function then returns ``{}``), and then local
accounts keep working beside them (Django's ModelBackend stays first).

OpenID Connect, on when LAKEWARDEN_OIDC_CLIENT_ID is set:
  LAKEWARDEN_OIDC_CLIENT_ID / LAKEWARDEN_OIDC_CLIENT_SECRET   the client registered at the provider
  LAKEWARDEN_OIDC_AUTHORIZATION_ENDPOINT, _TOKEN_ENDPOINT, _USERINFO_ENDPOINT, _JWKS_ENDPOINT
                                the provider's endpoints (from its .well-known/openid-configuration)
  LAKEWARDEN_OIDC_ISSUER        the ID token's ``iss`` must equal this (recommended)
  LAKEWARDEN_OIDC_SIGN_ALGO     RS256 (default), ES256... or HS256 (signed with the client secret)
  LAKEWARDEN_OIDC_SCOPES        "openid email profile" (add the scope that releases the groups claim)
  LAKEWARDEN_OIDC_USERNAME_CLAIM  preferred_username    LAKEWARDEN_OIDC_GROUPS_CLAIM  groups
  LAKEWARDEN_OIDC_PROVIDER_NAME   the login button says "Sign in with <name>" (default "single sign-on")
  LAKEWARDEN_OIDC_TIMEOUT       seconds per call to the provider (10); LAKEWARDEN_OIDC_VERIFY_TLS (1)
  LAKEWARDEN_OIDC_VIEWER_GROUPS / _OPERATOR_GROUPS / _ADMIN_GROUPS   provider group names, ";"-separated

LDAP, on when LAKEWARDEN_LDAP_SERVER_URI is set:
  LAKEWARDEN_LDAP_SERVER_URI    ldap://host:389 or ldaps://host:636
  LAKEWARDEN_LDAP_BIND_DN / LAKEWARDEN_LDAP_BIND_PASSWORD   the account that searches (empty: anonymous)
  LAKEWARDEN_LDAP_USER_SEARCH_BASE + LAKEWARDEN_LDAP_USER_FILTER ("(uid=%(user)s)"), or
  LAKEWARDEN_LDAP_USER_DN_TEMPLATE ("uid=%(user)s,ou=people,dc=example,dc=org": bind directly)
  LAKEWARDEN_LDAP_GROUP_SEARCH_BASE   where groups live (required: roles come from groups)
  LAKEWARDEN_LDAP_GROUP_TYPE    groupOfNames (default), groupOfUniqueNames, posixGroup,
                                nestedGroupOfNames, activeDirectory, nestedActiveDirectory
  LAKEWARDEN_LDAP_START_TLS (0), LAKEWARDEN_LDAP_CA_FILE, LAKEWARDEN_LDAP_TIMEOUT (5 s)
  LAKEWARDEN_LDAP_VIEWER_GROUPS / _OPERATOR_GROUPS / _ADMIN_GROUPS   group DNs, ";"-separated

A user gets the highest role any of their groups maps to, set again at every login; a user whose
groups map to no role is refused at login (see console/sso).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

from console.env import env_bool, env_int, env_required, env_str

MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
LDAP_BACKEND = "console.sso.ldap_login.LakewardenLDAPBackend"
OIDC_BACKEND = "console.sso.oidc_login.LakewardenOIDCBackend"
_ROLES = ("viewer", "operator", "admin")
_OIDC_ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "LAKEWARDEN_OIDC_AUTHORIZATION_ENDPOINT",
    "OIDC_OP_TOKEN_ENDPOINT": "LAKEWARDEN_OIDC_TOKEN_ENDPOINT",
    "OIDC_OP_USER_ENDPOINT": "LAKEWARDEN_OIDC_USERINFO_ENDPOINT",
    "OIDC_OP_JWKS_ENDPOINT": "LAKEWARDEN_OIDC_JWKS_ENDPOINT",
}
_LDAP_GROUP_TYPES = {
    "groupofnames": "GroupOfNamesType",
    "groupofuniquenames": "GroupOfUniqueNamesType",
    "posixgroup": "PosixGroupType",
    "nestedgroupofnames": "NestedGroupOfNamesType",
    "activedirectory": "ActiveDirectoryGroupType",
    "nestedactivedirectory": "NestedActiveDirectoryGroupType",
}


def role_groups(prefix: str) -> dict[str, list[str]]:
    """``{"viewer": [...], "operator": [...], "admin": [...]}`` from ``<prefix>_<ROLE>_GROUPS``;
    at least one group must be named, or nobody could ever get in."""
    mapping = {
        role: [g.strip() for g in (env_str(f"{prefix}_{role.upper()}_GROUPS") or "").split(";") if g.strip()]
        for role in _ROLES
    }
    if not any(mapping.values()):
        raise ImproperlyConfigured(
            f"set {prefix}_VIEWER_GROUPS, {prefix}_OPERATOR_GROUPS or {prefix}_ADMIN_GROUPS "
            "(';'-separated): the groups whose members get that role"
        )
    return mapping


def oidc_settings() -> dict[str, Any]:
    """The OIDC_* settings mozilla-django-oidc reads, or {} when LAKEWARDEN_OIDC_CLIENT_ID is unset."""
    client_id = env_str("LAKEWARDEN_OIDC_CLIENT_ID")
    if client_id is None:
        return {}
    why = "when LAKEWARDEN_OIDC_CLIENT_ID is set"
    values: dict[str, Any] = {key: env_required(name, why) for key, name in _OIDC_ENDPOINTS.items()}
    for key, name in _OIDC_ENDPOINTS.items():
        if not values[key].startswith(("https://", "http://")):
            raise ImproperlyConfigured(f"{name}={values[key]!r} must be an http(s):// URL")
    return {
        **values,
        "OIDC_RP_CLIENT_ID": client_id,
        "OIDC_RP_CLIENT_SECRET": env_required("LAKEWARDEN_OIDC_CLIENT_SECRET", why),
        "OIDC_RP_SIGN_ALGO": env_str("LAKEWARDEN_OIDC_SIGN_ALGO", "RS256"),
        "OIDC_RP_SCOPES": env_str("LAKEWARDEN_OIDC_SCOPES", "openid email profile"),
        "OIDC_USE_PKCE": env_bool("LAKEWARDEN_OIDC_USE_PKCE", True),
        "OIDC_TIMEOUT": env_int("LAKEWARDEN_OIDC_TIMEOUT", 10, minimum=1),
        "OIDC_VERIFY_SSL": env_bool("LAKEWARDEN_OIDC_VERIFY_TLS", True),
        "OIDC_CREATE_USER": True,
        "LAKEWARDEN_OIDC_ISSUER": env_str("LAKEWARDEN_OIDC_ISSUER"),
        "LAKEWARDEN_OIDC_USERNAME_CLAIM": env_str("LAKEWARDEN_OIDC_USERNAME_CLAIM", "preferred_username"),
        "LAKEWARDEN_OIDC_GROUPS_CLAIM": env_str("LAKEWARDEN_OIDC_GROUPS_CLAIM", "groups"),
        "LAKEWARDEN_OIDC_PROVIDER_NAME": env_str("LAKEWARDEN_OIDC_PROVIDER_NAME", "single sign-on"),
        "LAKEWARDEN_OIDC_ROLE_GROUPS": role_groups("LAKEWARDEN_OIDC"),
    }


def ldap_settings() -> dict[str, Any]:
    """The AUTH_LDAP_* settings django-auth-ldap reads, or {} when LAKEWARDEN_LDAP_SERVER_URI is unset."""
    uri = env_str("LAKEWARDEN_LDAP_SERVER_URI")
    if uri is None:
        return {}
    if not uri.startswith(("ldap://", "ldaps://", "ldapi://")):
        raise ImproperlyConfigured(
            f"LAKEWARDEN_LDAP_SERVER_URI={uri!r} must start with ldap://, ldaps:// or ldapi://"
        )
    import ldap
    from django_auth_ldap import config

    why = "when LAKEWARDEN_LDAP_SERVER_URI is set"
    timeout = env_int("LAKEWARDEN_LDAP_TIMEOUT", 5, minimum=1)
    options: dict[int, Any] = {
        ldap.OPT_NETWORK_TIMEOUT: timeout,
        ldap.OPT_TIMEOUT: timeout,
        ldap.OPT_REFERRALS: 0,
    }
    ca_file = env_str("LAKEWARDEN_LDAP_CA_FILE")
    if ca_file:
        options.update({ldap.OPT_X_TLS_CACERTFILE: ca_file, ldap.OPT_X_TLS_NEWCTX: 0})
    group_type = env_str("LAKEWARDEN_LDAP_GROUP_TYPE", "groupOfNames")
    if group_type.lower() not in _LDAP_GROUP_TYPES:
        raise ImproperlyConfigured(
            f"LAKEWARDEN_LDAP_GROUP_TYPE={group_type!r} is not one of {', '.join(_LDAP_GROUP_TYPES)}"
        )
    values: dict[str, Any] = {
        "AUTH_LDAP_SERVER_URI": uri,
        "AUTH_LDAP_BIND_DN": env_str("LAKEWARDEN_LDAP_BIND_DN", ""),
        "AUTH_LDAP_BIND_PASSWORD": env_str("LAKEWARDEN_LDAP_BIND_PASSWORD", ""),
        "AUTH_LDAP_START_TLS": env_bool("LAKEWARDEN_LDAP_START_TLS", False),
        "AUTH_LDAP_CONNECTION_OPTIONS": options,
        "AUTH_LDAP_USER_ATTR_MAP": {"first_name": "givenName", "last_name": "sn", "email": "mail"},
        "AUTH_LDAP_ALWAYS_UPDATE_USER": True,
        "AUTH_LDAP_GROUP_SEARCH": config.LDAPSearch(
            env_required("LAKEWARDEN_LDAP_GROUP_SEARCH_BASE", why), ldap.SCOPE_SUBTREE, "(objectClass=*)"
        ),
        "AUTH_LDAP_GROUP_TYPE": getattr(config, _LDAP_GROUP_TYPES[group_type.lower()])(),
        "LAKEWARDEN_LDAP_ROLE_GROUPS": role_groups("LAKEWARDEN_LDAP"),
    }
    template = env_str("LAKEWARDEN_LDAP_USER_DN_TEMPLATE")
    if template:
        values["AUTH_LDAP_USER_DN_TEMPLATE"] = template
    else:
        base = env_required(
            "LAKEWARDEN_LDAP_USER_SEARCH_BASE", f"{why} (or LAKEWARDEN_LDAP_USER_DN_TEMPLATE)"
        )
        user_filter = env_str("LAKEWARDEN_LDAP_USER_FILTER", "(uid=%(user)s)")
        values["AUTH_LDAP_USER_SEARCH"] = config.LDAPSearch(base, ldap.SCOPE_SUBTREE, user_filter)
    return values


def authentication_backends(*, oidc: bool, ldap: bool) -> list[str]:
    """Local accounts first, then the directory, then the OpenID provider."""
    return [MODEL_BACKEND, *([LDAP_BACKEND] if ldap else []), *([OIDC_BACKEND] if oidc else [])]
