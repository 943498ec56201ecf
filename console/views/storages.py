"""Result storage pages: the list, the form generated from each type's configuration schema
(register, edit), test and delete."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import storage_form
from console.decorators import role_required
from console.htmx import hx_redirect, is_fragment
from console.roles import ADMIN
from console.schema_form import FormError
from processes import queries
from storage import services
from storage.errors import ServiceError
from storage.models import StorageBackend, StorageSource
from storage.results.plugin import StorageDescriptor


@require_GET
def storage_list(request):
    return _storage_page(request, storage_form.storage_form())


def _storage_page(request, form, status: int = 200):
    backends = [(b, services.storage_backend_masked_config(b)) for b in StorageBackend.objects.all()]
    return render(request, "storage/storages.html", {"backends": backends, "form": form}, status=status)


@role_required(ADMIN)
@require_POST
def storage_create(request):
    form = storage_form.storage_form()
    try:
        values = storage_form.submitted_values(form, request.POST)
        backend = services.storage_backend_register(
            name=values.name,
            descriptor=StorageDescriptor(type=values.type, config=values.config),
            quota_bytes=values.quota_bytes,
            is_default=values.is_default,
            source=StorageSource.CONSOLE,
        )
    except FormError as error:
        storage_form.place_errors(form, error.key, str(error))
    except ServiceError as error:
        storage_form.place_errors(form, error.field or "", error.message)
    else:
        messages.success(request, f"Storage {backend.name} registered. Test it to be sure it works.")
        return redirect("console:storage-list")
    return _storage_page(request, form, status=400)


@role_required(ADMIN)
@require_http_methods(["GET", "POST"])
def storage_edit(request, pk: int):
    backend = get_object_or_404(StorageBackend, pk=pk)
    form = storage_form.storage_form(backend=backend)
    if request.method == "GET":
        return render(request, "storage/storage_edit.html", {"form": form, "backend": backend})
    try:
        values = storage_form.submitted_values(form, request.POST)
        if values.quota_bytes is None and backend.quota_bytes:
            raise FormError("quota", "a quota cannot be removed here; set a larger one")
        services.storage_backend_update(
            backend=backend,
            config=values.config,
            quota_bytes=values.quota_bytes,
            is_default=values.is_default or None,
        )
    except FormError as error:
        storage_form.place_errors(form, error.key, str(error))
    except ServiceError as error:
        storage_form.place_errors(form, error.field or "", error.message)
    else:
        messages.success(request, f"Storage {backend.name} saved.")
        return redirect("console:storage-list")
    backend.refresh_from_db()  # nothing was saved: the page shows the stored storage
    return render(request, "storage/storage_edit.html", {"form": form, "backend": backend}, status=400)


@role_required(ADMIN)
@require_POST
def storage_test(request, pk: int):
    backend = get_object_or_404(StorageBackend, pk=pk)
    ok, message = queries.storage_backend_test_on_worker(backend=backend)
    if is_fragment(request):
        return render(request, "storage/partials/test_result.html", {"ok": ok, "message": message})
    (messages.success if ok else messages.error)(request, f"{backend.name}: {message}")
    return redirect("console:storage-list")


@role_required(ADMIN)
@require_POST
def storage_delete(request, pk: int):
    backend = get_object_or_404(StorageBackend, pk=pk)
    services.storage_backend_delete(backend=backend)
    messages.success(request, f"Storage {backend.name} deleted and its cached results cleaned.")
    return hx_redirect(request, "console:storage-list")
