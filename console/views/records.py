"""The table page's record lookup: which file holds each record key (console/api/records.py)."""

from __future__ import annotations

from django.views.decorators.http import require_GET

from console.api import records as record_api
from console.decorators import visible_or_404
from console.htmx import render_page
from storage.errors import ServiceError
from storage.models import Table


@require_GET
def table_records(request, pk: int):
    """The lookup box; with keys, their locations. An htmx request gets the fragment only."""
    table = visible_or_404(request, Table.objects.select_related("catalog"), pk=pk)
    context = {"table": table, "tab": "records", "params": request.GET}
    status = 200
    try:
        query = record_api.record_query_parse(request.GET)
        context["query"] = query
        if query.keys:
            context["lookup"] = record_api.table_records(table=table, query=query)
    except ServiceError as error:
        context["read_error"] = error.message
        status = error.status_code
    return render_page(
        request, "console/records.html", "console/partials/record_lookup.html", context, status=status
    )
