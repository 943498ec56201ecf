"""Process pages: global list, per-table tab with "run now", detail; cancel/kill/retry buttons."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from console import run_params
from console.api.processes import ProcessNameFilter
from console.decorators import role_required, visible_or_404
from console.htmx import hx_redirect, is_fragment, render_page
from console.roles import OPERATOR
from console.teams.access import visible
from processes import selectors, services
from processes.models import ACTIVE_STATUSES, Process, ProcessStatus
from processes.scheduler import manual_actions
from storage.errors import ServiceError
from storage.models import Table


@require_GET
def process_list(request):
    processes = visible(request.user, selectors.process_list_rows(), via="table")  # console/teams
    if any(request.GET.get(name) for name in ProcessNameFilter.base_filters):
        processes = ProcessNameFilter(request.GET, queryset=processes).qs
    page = selectors.process_page(processes, request.GET.get("before"))
    context = {
        "page": page,
        "statuses": ProcessStatus.values,
        "any_active": any(p.status in ACTIVE_STATUSES for p in page.items),
        "params": request.GET,
    }
    return render_page(request, "processes/list.html", "processes/partials/rows.html", context)


@require_GET
def process_detail(request, pk: int):
    processes = Process.objects.select_related("table", "retry_of", "requested_by")
    process = visible_or_404(request, processes, via="table", pk=pk)
    return render_page(
        request, "processes/detail.html", "processes/partials/status.html", {"process": process}
    )


@require_GET
def table_processes(request, pk: int):
    table = visible_or_404(request, Table.objects.all(), pk=pk)
    page = selectors.process_page(
        selectors.process_list_rows().filter(table=table), request.GET.get("before"), size=25
    )
    offered = selectors.actions_for_format(table.format)
    forms = run_params.action_forms(table, offered)
    context = {
        "table": table,
        "tab": "processes",
        "page": page,
        "any_active": any(p.status in ACTIVE_STATUSES for p in page.items),
        "offered": offered,
        "run_forms": forms,
        "selected": run_params.default_action(forms),
        "params_text": "{}",
        "declined": selectors.declined_actions_for_format(table.format),
        "manual_actions": sorted(manual_actions(table)),
        "params": request.GET,
    }
    return render_page(request, "processes/table_processes.html", "processes/partials/rows.html", context)


@role_required(OPERATOR)
@require_POST
def table_process_run(request, pk: int):
    table = visible_or_404(request, Table.objects.all(), action="operate", pk=pk)
    process = _submitted(request, table, lambda **form: services.process_create(user=request.user, **form))
    if isinstance(process, HttpResponse):
        return process
    # No flash message: the process page says "queued" in its live status, which ends with it.
    return _go(request, process.get_absolute_url())


@role_required(OPERATOR)
@require_POST
def table_process_preview(request, pk: int):
    """The run form's "Preview": what the process would do, rendered beside the form."""
    table = visible_or_404(request, Table.objects.all(), action="operate", pk=pk)
    preview = _submitted(request, table, services.process_preview)
    if isinstance(preview, HttpResponse):
        return preview
    if not is_fragment(request):
        return render(request, "processes/preview.html", {"table": table, "preview": preview})
    return render(request, "processes/partials/preview.html", {"preview": preview})


def _submitted(request, table, service):
    """``service(table=, action=, params=)`` on the run form's fields (the generated fields, or the
    raw JSON of "advanced"), or the error response: the form again, the error beside its field."""
    action = request.POST.get("action", "")
    forms = run_params.action_forms(table, selectors.actions_for_format(table.format))
    form = next((f for f in forms if f.action == action), None)
    use_fields = (
        form is not None and not request.POST.get("advanced") and run_params.submitted(request.POST, action)
    )
    try:
        params = (
            run_params.params_from_form(action, form.schema, request.POST, form.defaults)
            if (form is not None and use_fields)
            else _params(request)
        )
        return service(table=table, action=action, params=params)
    except run_params.FormError as error:
        return _run_error(request, table, forms, str(error), errors={error.key: error.message})
    except BadParams as error:
        return _run_error(request, table, forms, str(error))
    except ServiceError as error:
        on_field = run_params.field_error(form, error.message) if use_fields and form else None
        errors = dict([on_field]) if on_field else {}
        return _run_error(request, table, forms, error.message, status=error.status_code, errors=errors)


class BadParams(ValueError):
    pass


def _params(request):
    """The form's JSON parameters; ``BadParams`` saying what is wrong with them."""
    try:
        return json.loads(request.POST.get("params") or "{}")
    except json.JSONDecodeError as error:
        raise BadParams(f"parameters are not valid JSON: {error}") from None
    except RecursionError:
        raise BadParams("parameters are not valid JSON: nested too deeply") from None


@role_required(OPERATOR)
@require_POST
def process_act(request, pk: int, verb: str):
    process = visible_or_404(
        request, Process.objects.select_related("table"), via="table", action="operate", pk=pk
    )
    try:
        if verb == "cancel":
            result = services.process_cancel(process=process)
        elif verb == "kill":
            result = services.process_kill(process=process)
        elif verb == "retry":
            result = services.process_retry(process=process, user=request.user)
        else:
            return HttpResponse(status=404)
    except ServiceError as error:
        if is_fragment(request):
            return render(
                request,
                "processes/partials/status.html",
                {"process": process, "action_error": error.message},
                status=error.status_code,
            )
        messages.error(request, error.message)
        return redirect(process)
    if is_fragment(request) and verb != "retry":
        return render(request, "processes/partials/status.html", {"process": result})
    return _go(request, result.get_absolute_url())


def _run_error(request, table, forms, message: str, status: int = 400, errors=None):
    """A refused run or preview: for htmx, the run form again as it was sent, the error beside its
    field (or above the form), in place of the form; else the tab with the message."""
    if not is_fragment(request):
        messages.error(request, message)
        return redirect("console:table-processes", pk=table.pk)
    errors = errors or {}
    action = request.POST.get("action", "")
    for form in forms:
        run_params.fill(
            form.fields,
            request.POST if form.action == action else {},
            errors if form.action == action else {},
        )
    context = {
        "table": table,
        "run_forms": forms,
        "selected": action,
        "advanced": bool(request.POST.get("advanced")),
        "params_text": request.POST.get("params", "{}")[:100_000],
        "run_error": "" if errors else message,
    }
    response = render(request, "processes/partials/run_form.html", context, status=status)
    response["HX-Retarget"] = "#run-form"
    response["HX-Reswap"] = "outerHTML"
    return response


def _go(request, url: str):
    return hx_redirect(request, url)
