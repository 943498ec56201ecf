from __future__ import annotations

import functools

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404, render

from console.roles import has_role
from console.teams.access import can, visible


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


def visible_or_404(request, queryset: QuerySet, *, via: str = "", action: str = "view", **lookup):
    """The one object of ``queryset`` that ``lookup`` names, if the user's teams may see it (else
    404, as for a missing one), and may do ``action`` (``view``, ``operate``) on it (else 403)."""
    obj = get_object_or_404(visible(request.user, queryset, via=via), **lookup)
    if action != "view" and not can(request.user, action, obj):
        raise PermissionDenied(f"Your team has no grant to {action} {obj}.")
    return obj
