"""Console pages. Each view parses input, calls one service or selector and renders."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from django.contrib import messages
from django.contrib.staticfiles import finders
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from console import overview as overview_selectors
from console import table_list as table_listing
from console import table_tabs
from console.catalog_form import catalog_form
from console.charts_context import table_charts, with_chart_facts
from console.decorators import role_required, visible_or_404
from console.forms import TableRegisterForm
from console.health import health_report
from console.htmx import hx_redirect, render_page
from console.roles import ADMIN
from console.table_shape import table_shape
from console.teams.access import catalogs_visible, tables_scope, visible
from console.teams.services import table_owner_assign
from processes.health import tables_by_health
from storage import selectors, services
from storage.errors import ServiceError
from storage.models import Catalog, Table, format_choices
from storage.services.tables import table_open_error


@require_GET
def healthz(request):
    healthy, report = health_report()
    return JsonResponse(report, status=200 if healthy else 503)


@require_GET
def favicon(request):
    """The console's icon for pages that do not link it (Swagger UI, the raw API schema): without
    it a browser's /favicon.ico request is a 404 on each of them."""
    return HttpResponse(_favicon(), content_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


@functools.lru_cache(maxsize=1)
def _favicon() -> bytes:
    found = finders.find("console/favicon.svg")
    return Path(str(found)).read_bytes()


@require_GET
def overview(request):
    scope = tables_scope(request.user)  # what the user's teams may see (console/teams)
    context = {
        "totals": selectors.lakehouse_totals(tables=scope),
        "attention": tables_by_health(limit=10, tables=scope, stored=True),
        "running": overview_selectors.running_processes(tables=scope),
        "failures": overview_selectors.recent_failures(tables=scope),
    }
    return render_page(request, "console/overview.html", "console/partials/overview_live.html", context)


@require_GET
def overview_liveness(request):
    context = overview_selectors.liveness(shared=True)
    context["workers_age"] = max(int(time.time() - context["workers"]["checked_at"]), 0)
    return render(request, "console/partials/liveness.html", context)


@require_GET
def catalog_list(request):
    catalogs = selectors.catalog_list(tables=tables_scope(request.user))
    context = {"catalogs": catalogs_visible(request.user, catalogs), "form": catalog_form()}
    return render_page(request, "console/catalogs.html", "console/partials/catalog_rows.html", context)


@require_GET
def catalog_detail(request, pk: int):
    catalog = get_object_or_404(catalogs_visible(request.user, Catalog.objects.all()), pk=pk)
    tables = visible(request.user, selectors.catalog_tables(catalog))
    return render(request, "console/catalog_detail.html", {"catalog": catalog, "tables": tables})


@role_required(ADMIN)
@require_POST
def catalog_sync(request, pk: int):
    catalog = get_object_or_404(Catalog, pk=pk)
    try:
        report = services.catalog_sync(catalog=catalog)
        summary = f"{len(report.added)} added, {len(report.already_registered)} already registered"
        if report.failed:
            summary += f", {len(report.failed)} failed: " + "; ".join(
                f"{k}: {v}" for k, v in report.failed.items()
            )
        messages.info(request, f"Sync of {catalog.name}: {summary}")
    except ServiceError as error:
        messages.error(request, error.message)
    return redirect("console:catalog-detail", pk=catalog.pk)


@require_GET
def table_list(request):
    search = request.GET.get("q", "").strip()
    format_filter = request.GET.get("format", "")
    catalog_filter = request.GET.get("catalog", "").strip()
    namespace_filter = request.GET.get("namespace", "").strip()
    sort = table_listing.parse_sort(request.GET.get("sort", ""))
    error = None
    try:
        tables = selectors.table_list(search=search, format=format_filter, tables=tables_scope(request.user))
        tables = table_listing.filtered(tables, catalog=catalog_filter, namespace=namespace_filter)
        page = table_listing.table_page(
            tables,
            sort=sort,
            number=request.GET.get("page"),
            after=request.GET.get("after", ""),
            before=request.GET.get("before", ""),
            searched=bool(search),
        )
    except ServiceError as problem:
        tables, error = Table.objects.none(), problem.message
        page = table_listing.table_page(tables, sort=sort)
    filters = {"q": search, "format": format_filter, "catalog": catalog_filter, "namespace": namespace_filter}
    shown = {key: value for key, value in filters.items() if value}
    # the catalogs the user's teams may see: the filter's menu and the namespace tree's first level
    catalogs = list(
        catalogs_visible(request.user, Catalog.objects.order_by("name")).values_list("name", flat=True)
    )
    context = {
        "page": page,
        "search": search,
        "format_filter": format_filter,
        "catalog_filter": catalog_filter,
        "namespace_filter": namespace_filter,
        "namespace_crumbs": table_listing.namespace_crumbs(namespace_filter),
        "tree": table_listing.namespace_tree(
            tables,
            catalog=catalog_filter,
            namespace=namespace_filter,
            filters={**shown, "sort": sort},
            catalogs=catalogs,
        ),
        "catalogs": catalogs,
        "sort": sort,
        "headers": table_listing.sort_headers(shown, sort),
        "list_query": table_listing.list_query(shown, sort),
        "formats": format_choices(),
        "form": TableRegisterForm(),
        "form_html": _blank_register_form_html(),
    }
    return render_page(
        request,
        "console/tables.html",
        "console/partials/table_rows.html",
        context,
        status=400 if error else 200,
        error=error,
    )


@functools.cache
def _blank_register_form_html() -> str:
    """The fields of the empty register form: the same markup for every request, rendered once
    (a form renders each widget through its own template)."""
    return TableRegisterForm().as_div()


@role_required(ADMIN)
@require_POST
def table_register(request):
    form = TableRegisterForm(request.POST)
    if form.is_valid():
        try:
            table = services.table_register(
                location=form.cleaned_data["location"],
                format=form.cleaned_data["format"] or None,
                allow_nested=form.cleaned_data["allow_nested"],
            )
            table_owner_assign(table=table, user=request.user)
            messages.success(request, f"Registered {table.name}.")
            return hx_redirect(request, table)
        except ServiceError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
    return render(request, "console/partials/table_register_form.html", {"form": form}, status=400)


@require_GET
def table_detail(request, pk: int):
    table = visible_or_404(request, with_chart_facts(Table.objects.select_related("catalog")), pk=pk)
    context = {"table": table, "tab": "overview", "charts": table_charts(table)}
    try:
        context.update(table_shape(table))
    except Exception as error:  # the spec's, the store's or the catalog's refusal is shown
        context["open_error"] = table_open_error(table, error)
        if context["open_error"] is None:
            raise
    return render_page(request, "console/table_detail.html", "console/partials/table_overview.html", context)


@role_required(ADMIN)
@require_POST
def table_refresh(request, pk: int):
    table = get_object_or_404(Table, pk=pk)
    services.table_refresh(table=table)
    return redirect(table)


# --- table tabs: reads through the spec API -------------------------------------------------------


def _table_tab(request, pk: int, tab: str, read):
    """Render one tab of the table page; ``read(table, query)`` returns the tab's context."""
    table = visible_or_404(request, Table.objects.select_related("catalog"), pk=pk)
    context = {"table": table, "tab": tab, "params": request.GET}
    status = 200
    try:
        query = selectors.spec_query_parse(request.GET)
        context["query"] = query
        context.update(read(table, query))
    except ServiceError as error:
        context["read_error"] = error.message
        status = error.status_code
    return render_page(
        request, f"console/table_{tab}.html", f"console/partials/table_{tab}.html", context, status=status
    )


@require_GET
def table_snapshots(request, pk: int):
    return _table_tab(
        request,
        pk,
        "snapshots",
        lambda table, query: {
            "snapshots": table_tabs.snapshot_page(
                selectors.table_snapshots(table=table), number=query.page, per_page=query.page_size
            )
        },
    )


@require_GET
def table_files(request, pk: int):
    return _table_tab(
        request,
        pk,
        "files",
        _files_read,
    )


def _files_read(table: Table, query) -> dict:
    page = selectors.table_files(table=table, query=query)
    first = (page.page - 1) * page.page_size + 1
    return {
        "files_page": page,
        "totals": table_tabs.file_totals(table, query, page.instant),
        "shown_first": first,
        "shown_last": first + len(page.files) - 1,
    }


@require_GET
def table_splits(request, pk: int):
    return _table_tab(
        request,
        pk,
        "splits",
        lambda table, query: {"plan": selectors.table_splits(table=table, query=query)},
    )


@require_GET
def table_partitions(request, pk: int):
    def read(table, query):
        instant, partitions, small = selectors.table_partitions(table=table, query=query)
        return {"instant": instant, "partitions": partitions, "small_file_bytes": small}

    return _table_tab(request, pk, "partitions", read)


@require_GET
def table_changes(request, pk: int):
    def read(table, query):
        start, end, partitions, files = selectors.table_changes(table=table, query=query)
        return {"start": start, "end": end, "partition_changes": partitions, "file_changes": files}

    return _table_tab(request, pk, "changes", read)
