"""DRF permission by role: reads need viewer; writes need the view's ``write_role`` (default admin).

A viewset may name roles per action in ``action_roles`` (e.g. ``{"cancel": "operator"}``).

On one object (a table, a process: what ``get_object()`` returns) the teams' grants decide too
(console/teams/access.py): a view's queryset already hides what the user may not see (404), and an
action that needs the operator role needs an operator grant on the object's table (else 403).
"""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.permissions import SAFE_METHODS, BasePermission

from console.roles import ADMIN, VIEWER, has_role
from console.teams.access import can, is_tables


class RolePermission(BasePermission):
    message = "your role does not allow this"

    def has_permission(self, request, view) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        required = self.required_role(request, view)
        self.message = f"this needs the {required} role"
        return has_role(request.user, required)

    @staticmethod
    def required_role(request, view) -> str:
        action = getattr(view, "action", None)
        action_roles = getattr(view, "action_roles", {})
        if action in action_roles:
            return action_roles[action]
        if request.method in SAFE_METHODS:
            return VIEWER
        return getattr(view, "write_role", ADMIN)

    def has_object_permission(self, request, view, obj) -> bool:
        required = self.required_role(request, view)
        if required == ADMIN or not is_tables(obj):
            return True  # admins are global; other objects (catalogs, storages...) go by the role
        self.message = f"your team has no {required} grant on this table"
        return can(request.user, "view" if required == VIEWER else "operate", obj)


def table_for_operation(request, table) -> None:
    """A table named in a request body (a process submission): one the user's teams may not see
    is refused as a missing one is (400 on ``table``), one they may see but not operate is a 403."""
    if not can(request.user, "view", table):
        raise exceptions.ValidationError({"table": [f'Invalid pk "{table.pk}" - object does not exist.']})
    if not can(request.user, "operate", table):
        raise exceptions.PermissionDenied("your team has no operator grant on this table")
