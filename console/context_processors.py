from __future__ import annotations

from console.roles import ADMIN, OPERATOR, VIEWER, has_role, user_role


def roles(request):
    user = getattr(request, "user", None)
    return {
        "role": user_role(user) if user else None,
        "can_view": bool(user) and has_role(user, VIEWER),
        "can_operate": bool(user) and has_role(user, OPERATOR),
        "can_admin": bool(user) and has_role(user, ADMIN),
    }
