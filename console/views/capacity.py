"""The capacity page (``/capacity/``, operators and admins): each resource group with its budgets
used and left, its workers (alive, slots busy and free), its queue depth and its backlog per action
(processes waiting in the queue, due runs the scheduler held back). What it reads is
``processes.groups.capacity``. Admins create a group and change a group's budgets and namespace
patterns here (catalogs and tables by name: the admin or the API); a refused change answers 400
with the page and the reason."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from console.decorators import role_required
from console.roles import ADMIN, OPERATOR
from processes.groups import services
from processes.groups.capacity import capacity
from processes.groups.models import ResourceGroup
from storage.errors import InvalidInput


@role_required(OPERATOR)
@require_GET
def capacity_page(request):
    return render(request, "console/capacity.html", capacity())


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
    return render(request, "console/capacity.html", {**capacity(), "form_error": error.message}, status=400)


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
