"""Roles are Django groups, ordered: viewer < operator < admin. Superusers are admins."""

from __future__ import annotations

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)
_RANK = {role: rank for rank, role in enumerate(ROLES)}


def user_role(user) -> str | None:
    """The highest role the user holds, or None for anonymous users and users with no role."""
    if not getattr(user, "is_authenticated", False):
        return None
    if user.is_superuser:
        return ADMIN
    cached = getattr(user, "_lakewarden_role", "unset")
    if cached != "unset":
        return cached
    names = set(user.groups.values_list("name", flat=True))
    role = max((r for r in ROLES if r in names), key=_RANK.__getitem__, default=None)
    user._lakewarden_role = role
    return role


def has_role(user, required: str) -> bool:
    role = user_role(user)
    return role is not None and _RANK[role] >= _RANK[required]
