"""DRF permission by role: reads need viewer; writes need the view's ``write_role`` (default admin).

A viewset may name roles per action in ``action_roles`` (e.g. ``{"cancel": "operator"}``).
"""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from console.roles import ADMIN, VIEWER, has_role


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
