"""What both single sign-on providers share: groups -> role, the account rules, the refusal."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction

from console.roles import ROLES

logger = logging.getLogger(__name__)

SSO_ERROR_CODE = "sso"


class SsoLoginRefused(ValidationError):
    """A sign-in Lakewarden refuses, with the reason shown on the login page.

    A ``ValidationError`` so that, raised from an authentication backend during the password form's
    ``authenticate()``, it lands in the form's errors (code ``sso``) instead of a generic
    "didn't match"."""

    def __init__(self, message: str):
        super().__init__(message, code=SSO_ERROR_CODE)


def role_for_groups(
    groups: Iterable[str], mapping: Mapping[str, Iterable[str]], *, ignore_case: bool = False
) -> str | None:
    """The highest role (``admin`` > ``operator`` > ``viewer``) any of ``groups`` maps to, or None."""

    def norm(name: str) -> str:
        return name.strip().lower() if ignore_case else name.strip()

    held = {norm(g) for g in groups}
    for role in reversed(ROLES):
        if held & {norm(g) for g in mapping.get(role, ())}:
            return role
    return None


def user_role_set(*, user, role: str | None) -> None:
    """Make ``role`` the user's only role group (None: no role); other groups are left alone."""
    with transaction.atomic():
        stale = user.groups.filter(name__in=ROLES).exclude(name=role or "")
        if stale:
            user.groups.remove(*stale)
        if role is not None:
            user.groups.add(Group.objects.get_or_create(name=role)[0])
    user.__dict__.pop("_lakewarden_role", None)  # console.roles caches the role on the object


def sso_account_check(*, username: str, role: str | None, provider: str):
    """The existing account a provider sign-in may use (None: one will be made), or refuse.

    Refused: a name taken by a local account (it has a password), and a sign-in whose groups map
    to no role (an existing provider-made account loses its role groups, so its open sessions stop
    too)."""
    existing = get_user_model().objects.filter(username__iexact=username).first()
    if existing is not None and existing.has_usable_password():
        logger.warning("%s sign-in as %r refused: a local account has that name", provider, username)
        raise SsoLoginRefused(
            f"A local Lakewarden account named “{existing.username}” already exists, so {provider} "
            "cannot sign into it. Sign in with that account's password, or ask an admin."
        )
    if role is None:
        if existing is not None:
            user_role_set(user=existing, role=None)
        logger.warning("%s sign-in as %r refused: no group maps to a Lakewarden role", provider, username)
        raise SsoLoginRefused(
            f"You signed in as “{username}” through {provider}, but none of your groups gives access "
            "to Lakewarden. Ask an admin to add you to a group mapped to the viewer, operator or admin role."
        )
    return existing
