"""Console pages: query workbench, cached results."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Value
from django.db.models.functions import Coalesce, NullIf
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from console.api.limits import MAX_SQL_CHARACTERS
from console.decorators import role_required
from console.forms import QueryForm
from console.htmx import error_fragment, is_fragment, render_page
from console.roles import OPERATOR
from console.table_shape import table_shape
from console.teams.access import cached_results_visible, queries_visible, visible
from processes import queries
from processes import query_export as query_export_formats
from processes.models import Query, QueryEngine
from storage import services
from storage.errors import ServiceError
from storage.models import CachedResult, CachedResultState, StorageBackend, Table
from storage.selectors import shown, text_param
from storage.services.tables import table_open_error

#: Tables the schema browser lists at once; a search narrows the rest.
BROWSER_TABLES = 200


def _readable_tables(request):
    """The tables ``request.user`` may read (their teams', console/teams), by the name queries use
    (identifier, else name)."""
    tables = visible(request.user, Table.objects.all())
    return tables.annotate(sql_name=Coalesce(NullIf("identifier", Value("")), "name")).order_by("sql_name")


def _browser_context(request) -> dict:
    search = text_param(request.GET.get("tables", "").strip(), "tables")
    tables = _readable_tables(request)
    if search:
        tables = tables.filter(sql_name__icontains=search)
    shown_tables = list(tables.values("pk", "sql_name", "format")[: BROWSER_TABLES + 1])
    return {
        "browser_tables": shown_tables[:BROWSER_TABLES],
        "browser_more": len(shown_tables) > BROWSER_TABLES,
        "browser_search": search,
    }


def _error(request, context: dict, *, status: int):
    """A refusal as the workbench's error fragment, swapped in whatever its status: a 403 or 409
    says why, not "the request failed"."""
    return error_fragment(render(request, "storage/partials/query_error.html", context, status=status))


@require_GET
def workbench(request):
    context = {
        "form": QueryForm(initial={"cache": True, "engine": QueryEngine.AUTO}),
        "engines": QueryEngine.choices,
        "backends": StorageBackend.objects.all(),
        "history": Query.objects.select_related("backend").filter(user=request.user)[:20],
        **_browser_context(request),
    }
    return render(request, "storage/workbench.html", context)


@require_GET
def workbench_tables(request):
    """The schema browser's list of tables, narrowed by its search box."""
    try:
        context = _browser_context(request)
    except ServiceError as error:
        return _error(request, {"message": error.message}, status=400)
    return render(request, "storage/partials/schema_tables.html", context)


@require_GET
def workbench_columns(request, pk: int):
    """One table's columns and types for the schema browser (read once per table state)."""
    table = get_object_or_404(_readable_tables(request).select_related("catalog"), pk=pk)
    context: dict = {"table": table}
    try:
        context["columns"] = table_shape(table)["schema_fields"]
    except Exception as error:  # the spec's, the store's or the catalog's refusal is shown
        context["open_error"] = table_open_error(table, error)
        if context["open_error"] is None:
            raise
    return render(request, "storage/partials/schema_columns.html", context)


@role_required(OPERATOR)
@require_POST
def query_run(request):
    if len(request.POST.get("sql", "")) > MAX_SQL_CHARACTERS:
        message = (
            f"the query is {len(request.POST['sql']):,} characters long; the limit is {MAX_SQL_CHARACTERS:,}"
        )
        # 400, not the API's 413: htmx swaps a 400's fragment in (static/console/lakewarden.js).
        return _error(request, {"message": message}, status=400)
    form = QueryForm(request.POST)
    if not form.is_valid():
        return _error(request, {"message": "write a query first"}, status=400)
    backend = None
    if form.cleaned_data["storage"]:
        backend = StorageBackend.objects.filter(name=form.cleaned_data["storage"]).first()
        if backend is None:
            return _error(
                request,
                {"message": f"no storage named {form.cleaned_data['storage']!r}"},
                status=400,
            )
    try:
        query = queries.query_submit(
            sql=form.cleaned_data["sql"],
            cache=form.cleaned_data["cache"],
            backend=backend,
            user=request.user,
            engine=form.cleaned_data["engine"] or QueryEngine.AUTO,
        )
    except ServiceError as error:
        return _error(request, {"message": error.message}, status=error.status_code)
    return _changed(render(request, "storage/partials/query.html", _query_context(request, query)))


@require_GET
def query_detail(request, pk: int):
    query = get_object_or_404(
        queries_visible(request.user, Query.objects.select_related("backend", "cached_result")), pk=pk
    )
    response = render_page(
        request, "storage/query_detail.html", "storage/partials/query.html", _query_context(request, query)
    )
    # the workbench polls an active query's fragment: its last answer refreshes the history
    return _changed(response) if is_fragment(request) and not query.is_active else response


@require_GET
def query_export(request, pk: int, fmt: str):
    """The query's result as a CSV or Parquet download, streamed (query_export says from where)."""
    query = get_object_or_404(
        queries_visible(request.user, Query.objects.select_related("cached_result__backend")), pk=pk
    )
    if fmt not in query_export_formats.FORMATS:
        message = f"export format must be csv or parquet, not {shown(fmt)}"
        return _error(request, {"message": message}, status=400)
    try:
        export = query_export_formats.query_export_open(query=query)
    except ServiceError as error:
        return _error(request, {"message": error.message}, status=error.status_code)
    chunks = query_export_formats.csv_chunks if fmt == "csv" else query_export_formats.parquet_chunks
    response = StreamingHttpResponse(
        chunks(export),
        content_type="text/csv; charset=utf-8" if fmt == "csv" else "application/vnd.apache.parquet",
    )
    response["Content-Disposition"] = f'attachment; filename="query-{query.pk}.{fmt}"'
    response["X-Lakewarden-Export"] = f"{'whole result' if export.whole else 'partial'}: {export.source}"
    return response


def _changed(response):
    """``response``, telling the workbench page to refresh its list of recent queries."""
    response["HX-Trigger"] = "queries-changed"
    return response


@role_required(OPERATOR)
@require_POST
def query_cancel(request, pk: int):
    query = get_object_or_404(queries_visible(request.user, Query.objects.all()), pk=pk)
    try:
        query = queries.query_cancel(query=query)
    except ServiceError as error:
        return _error(request, {"message": error.message}, status=error.status_code)
    return _changed(render(request, "storage/partials/query.html", _query_context(request, query)))


def _query_context(request, query: Query) -> dict:
    page = Paginator(query.rows or [], 50).get_page(request.GET.get("page"))
    return {"query": query, "page": page}


@require_GET
def cached_result_list(request):
    results = cached_results_visible(request.user, CachedResult.objects.select_related("backend"))
    results = results.order_by("-last_used_at")
    state = request.GET.get("state", "")
    error = None
    if state in CachedResultState.values:
        results = results.filter(state=state)
    elif state:
        results = results.none()
        error = f"state must be one of {', '.join(CachedResultState.values)}, not {shown(state)}"
    page = Paginator(results, 50).get_page(request.GET.get("page"))
    tables = {str(t.pk): t.name for t in visible(request.user, Table.objects.only("id", "name"))}
    return render_page(
        request,
        "storage/cached_results.html",
        "storage/partials/cached_rows.html",
        {"page": page, "tables": tables, "state": state},
        status=400 if error else 200,
        error=error,
    )


@role_required(OPERATOR)
@require_POST
def cached_result_act(request, pk: int, verb: str):
    result = get_object_or_404(
        cached_results_visible(request.user, CachedResult.objects.select_related("backend")), pk=pk
    )
    try:
        if verb == "invalidate":
            services.cached_result_invalidate(result=result)
        elif verb == "drop":
            services.cached_result_drop(result=result)
        else:
            return HttpResponse(status=404)
        messages.success(request, f"Cached result {result.name}: {verb} done.")
    except ServiceError as error:
        messages.error(request, error.message)
    return redirect("console:cached-result-list")
