"""The audit trail page (``/audit/``): operators and admins; filters by user, action, target and
date range; newest first, paged by id. Under teams a team owner reads their team's events and
their own, other operators their own (console/audit/selectors.py ``audit_visible``)."""

from __future__ import annotations

from django.views.decorators.http import require_GET

from console.audit import selectors
from console.decorators import role_required
from console.htmx import render_page
from console.roles import OPERATOR
from processes.selectors import process_page as keyset_page

PAGE_SIZE = 50


@role_required(OPERATOR)
@require_GET
def audit_list(request):
    found = selectors.audit_filter(request.GET, user=request.user)
    error = None
    if not found.is_valid():
        error = "; ".join(f"{name}: {' '.join(messages)}" for name, messages in found.errors.items())
        events = selectors.audit_events().none()
    else:
        events = found.qs
    context = {"page": keyset_page(events, request.GET.get("before"), PAGE_SIZE), "params": request.GET}
    return render_page(
        request,
        "console/audit.html",
        "console/partials/audit_rows.html",
        context,
        status=400 if error else 200,
        error=error,
    )
