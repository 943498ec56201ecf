"""LDAP sign-in through django-auth-ldap, with Lakewarden's roles and clear errors.

The password form's ``authenticate()`` reaches this backend after Django's ModelBackend, so local
accounts never depend on the directory. django-auth-ldap swallows directory errors (it logs them
and sends ``ldap_error``); this backend collects them for the sign-in at hand and turns "server
down" into a message on the login page rather than "your password didn't match".
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

import ldap
from django.conf import settings
from django_auth_ldap.backend import LDAPBackend, ldap_error

from console.sso.accounts import SsoLoginRefused, role_for_groups, sso_account_check, user_role_set
from console.teams.services import sso_teams_set

logger = logging.getLogger(__name__)

PROVIDER = "the directory (LDAP)"
_UNREACHABLE = (ldap.SERVER_DOWN, ldap.TIMEOUT, ldap.CONNECT_ERROR)
# The directory errors of the sign-in running in this thread/task (None outside one).
_sign_in_errors: ContextVar[list[Exception] | None] = ContextVar("lakewarden_ldap_errors", default=None)


class LakewardenLDAPBackend(LDAPBackend):
    def authenticate_ldap_user(self, ldap_user, password):
        errors: list[Exception] = []
        token = _sign_in_errors.set(errors)
        try:
            user = super().authenticate_ldap_user(ldap_user, password)
        finally:
            _sign_in_errors.reset(token)
        if user is None and errors:
            raise SsoLoginRefused(_error_message(errors[0]))
        if user is not None:
            user_role_set(user=user, role=_role(ldap_user))
            sso_teams_set(user=user, groups=ldap_user.group_dns, ignore_case=True)  # console/teams
        return user

    def get_or_build_user(self, username, ldap_user):
        # Called once the directory accepted the password, before any account is made.
        sso_account_check(username=username, role=_role(ldap_user), provider=PROVIDER)
        return super().get_or_build_user(username, ldap_user)


def _role(ldap_user) -> str | None:
    mapping = getattr(settings, "LAKEWARDEN_LDAP_ROLE_GROUPS", {})
    return role_for_groups(ldap_user.group_dns, mapping, ignore_case=True)


def _error_message(error: Exception) -> str:
    if isinstance(error, _UNREACHABLE):
        return (
            f"The directory server ({settings.AUTH_LDAP_SERVER_URI}) cannot be reached, so directory "
            "accounts cannot sign in right now. Try again later; local accounts still work."
        )
    return "The directory server (LDAP) answered with an error, so you could not be signed in. Ask an admin to check the server log."


def _remember_error(sender, context, user, request, exception, **kwargs) -> None:
    errors = _sign_in_errors.get()
    if errors is not None:
        errors.append(exception)
    logger.warning("LDAP error while %s: %s", context, exception)


ldap_error.connect(_remember_error, sender=LakewardenLDAPBackend, dispatch_uid="lakewarden-ldap-errors")
