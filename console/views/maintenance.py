"""The table page's Maintenance tab: per action of the table's format, whether the scheduler runs
it, its last and next evaluation, its last decision with the reason and a short history, and the
table's overrides form (console/views/overrides.py, loaded into the tab)."""

from __future__ import annotations

from django.views.decorators.http import require_GET

from console.decorators import visible_or_404
from console.htmx import render_page
from processes.decisions.selectors import table_maintenance
from storage.models import Table

#: Decisions shown per action on the tab (the API gives every kept one).
SHOWN = 5


@require_GET
def table_maintenance_tab(request, pk: int):
    table = visible_or_404(request, Table.objects.select_related("catalog"), pk=pk)
    context = {
        "table": table,
        "tab": "maintenance",
        "maintenance": table_maintenance(table=table, history=SHOWN),
    }
    return render_page(
        request, "console/table_maintenance.html", "console/partials/table_maintenance.html", context
    )
