from __future__ import annotations

import functools

from django.shortcuts import render

from console.roles import has_role


def role_required(role: str):
    """Refuse (403, in the console's style) a user whose role is below ``role``."""

    def decorator(view):
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            if not has_role(request.user, role):
                reason = f"This needs the {role} role."
                return render(request, "403.html", {"reason": reason}, status=403)
            return view(request, *args, **kwargs)

        wrapper.required_role = role
        return wrapper

    return decorator
