"""Catalog changes in the console: add (a form per kind), edit, delete and a connection test.
The list, a catalog's page and its sync are in console/views/tables.py."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from console import catalog_form
from console.decorators import role_required
from console.htmx import hx_redirect, is_fragment
from console.roles import ADMIN
from console.schema_form import FormError
from storage import selectors, services
from storage.errors import ServiceError
from storage.models import Catalog


@role_required(ADMIN)
@require_POST
def catalog_create(request):
    form = catalog_form.catalog_form()
    try:
        properties = catalog_form.submitted_properties(form, request.POST)
        catalog = services.catalog_create(name=form.name, kind=form.kind, properties=properties)
    except FormError as error:
        catalog_form.place_errors(form, error.key, str(error))
    except ServiceError as error:
        catalog_form.place_errors(form, error.field or "", error.message)
    else:
        messages.success(request, f"Catalog {catalog.name} created. Sync it to find its tables.")
        return redirect("console:catalog-list")
    context = {"catalogs": selectors.catalog_list(), "form": form}
    return render(request, "console/catalogs.html", context, status=400)


@role_required(ADMIN)
@require_http_methods(["GET", "POST"])
def catalog_edit(request, pk: int):
    catalog = get_object_or_404(Catalog, pk=pk)
    form = catalog_form.catalog_form(catalog=catalog)
    if request.method == "GET":
        return render(request, "console/catalog_edit.html", {"form": form, "catalog": catalog})
    try:
        properties = catalog_form.submitted_properties(form, request.POST)
        services.catalog_update(catalog=catalog, properties=properties)
    except FormError as error:
        catalog_form.place_errors(form, error.key, str(error))
    except ServiceError as error:
        catalog_form.place_errors(form, error.field or "", error.message)
    else:
        messages.success(request, f"Catalog {catalog.name} saved.")
        return redirect(catalog)
    catalog.refresh_from_db()  # nothing was saved
    return render(request, "console/catalog_edit.html", {"form": form, "catalog": catalog}, status=400)


@role_required(ADMIN)
@require_POST
def catalog_delete(request, pk: int):
    catalog = get_object_or_404(Catalog, pk=pk)
    try:
        services.catalog_delete(catalog=catalog)
    except ServiceError as error:
        messages.error(request, error.message)
        return hx_redirect(request, catalog)
    messages.success(request, f"Catalog {catalog.name} deleted; no table or data was touched.")
    return hx_redirect(request, "console:catalog-list")


@role_required(ADMIN)
@require_POST
def catalog_test(request, pk: int):
    catalog = get_object_or_404(Catalog, pk=pk)
    try:
        ok, message = True, services.catalog_test(catalog=catalog)
    except ServiceError as error:
        ok, message = False, error.message
    if is_fragment(request):
        return render(request, "storage/partials/test_result.html", {"ok": ok, "message": message})
    (messages.success if ok else messages.error)(request, f"{catalog.name}: {message}")
    return redirect(catalog)
