from __future__ import annotations

from functools import partial

from console.roles import ADMIN, OPERATOR, VIEWER, has_role, user_role
from console.teams.access import alerts_allowed


def roles(request):
    user = getattr(request, "user", None)
    return {
        "role": user_role(user) if user else None,
        "can_view": bool(user) and has_role(user, VIEWER),
        "can_operate": bool(user) and has_role(user, OPERATOR),
        "can_admin": bool(user) and has_role(user, ADMIN),
        # Asked only by a page that shows the link (a template calls it): admins, a team's operators.
        "can_see_alerts": partial(alerts_allowed, user) if user else False,
    }
