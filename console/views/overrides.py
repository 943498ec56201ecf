"""A table's overrides (the table properties that tune its actions) as a form generated from its
factories' schemas: a fragment the table's pages load, saved by admins."""

from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from console import schema_form
from console.decorators import visible_or_404
from console.roles import ADMIN, has_role
from console.schema_form import FormError
from processes.overrides import table_overrides_schema, table_overrides_update
from storage.errors import ServiceError
from storage.models import Table

PREFIX = "override"


@require_http_methods(["GET", "POST"])
def table_overrides(request, pk: int):
    table = visible_or_404(request, Table.objects.all(), pk=pk)
    known = table_overrides_schema(table)
    fields = schema_form.build_fields(
        PREFIX, known.schema, known.defaults, values=table.properties, id_prefix="table"
    )
    context = {"table": table, "fields": fields, "owners": known.owners, "saved": False, "error": ""}
    if request.method == "GET":
        return render(request, "console/partials/table_overrides.html", context)
    if not has_role(request.user, ADMIN):
        return render(request, "403.html", {"reason": f"This needs the {ADMIN} role."}, status=403)
    try:
        overrides = schema_form.values_from_form(PREFIX, known.schema, request.POST, known.defaults)
        table_overrides_update(table=table, overrides=overrides)
    except FormError as error:
        schema_form.fill(fields, request.POST, {error.key: error.message})
        return render(request, "console/partials/table_overrides.html", context, status=400)
    except ServiceError as error:
        schema_form.fill(fields, request.POST, {})
        context["error"] = schema_form.place_errors(fields, error.message)
        return render(request, "console/partials/table_overrides.html", context, status=error.status_code)
    fields = schema_form.build_fields(
        PREFIX, known.schema, known.defaults, values=table.properties, id_prefix="table"
    )
    return render(
        request, "console/partials/table_overrides.html", {**context, "fields": fields, "saved": True}
    )
