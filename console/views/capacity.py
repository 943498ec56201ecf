"""The capacity page (``/capacity/``, operators and admins): each resource group with its budgets
used and left, its workers (alive, slots busy and free), its queue depth and its backlog per action
(processes waiting in the queue, due runs the scheduler held back), what each group spent and gained
per day and per action over the last ``?days=`` days (14 by default), and the Spark the workers use
with its executors. What it reads is ``processes.groups.capacity``. A team user sees only the groups
holding a table their teams may see, counted over those tables (console/teams/access.py). Admins create a group and change a group's budgets and namespace
patterns here (catalogs and tables by name: the admin or the API); a refused change answers 400
with the page and the reason."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from console.decorators import role_required
from console.roles import ADMIN, OPERATOR
from console.teams.access import tables_scope
from processes.groups import services
from processes.groups.capacity import capacity
from processes.groups.models import ResourceGroup
from processes.groups.report import check_days
from storage.errors import InvalidInput


@role_required(OPERATOR)
@require_GET
def capacity_page(request):
    try:
        days = check_days(request.GET.get("days"))
    except ValueError as error:
        return _page(request, status=400, form_error=str(error))
    return _page(request, days=days)


def _page(request, *, status: int = 200, days: int | None = None, **extra):
    context = capacity(tables=tables_scope(request.user), **({"days": days} if days else {}))
    return render(request, "console/capacity.html", {**context, **extra}, status=status)


def _form_values(request) -> dict:
    values: dict = {}
    for field in ("max_concurrency", "compute_budget_seconds"):
        raw = request.POST.get(field, "").strip()
        if raw:
            try:
                values[field] = int(raw)
            except ValueError:
                raise InvalidInput(f"{field} must be a whole number (got {raw!r})", field=field) from None
    if "namespace_patterns" in request.POST:
        values["namespace_patterns"] = [
            p.strip() for p in request.POST["namespace_patterns"].split(",") if p.strip()
        ]
    return values


def _refused(request, error: InvalidInput):
    return _page(request, status=400, form_error=error.message)


@role_required(ADMIN)
@require_POST
def resource_group_create(request):
    try:
        group = services.resource_group_create(
            name=request.POST.get("name", "").strip(), **_form_values(request)
        )
    except InvalidInput as error:
        return _refused(request, error)
    messages.success(
        request, f"Resource group {group.name} created: start a worker on {group.effective_queue}."
    )
    return redirect("console:capacity")


@role_required(ADMIN)
@require_POST
def resource_group_update(request, pk: int):
    group = get_object_or_404(ResourceGroup, pk=pk)
    try:
        services.resource_group_update(group=group, **_form_values(request))
    except InvalidInput as error:
        return _refused(request, error)
    messages.success(request, f"Resource group {group.name} saved.")
    return redirect("console:capacity")
