"""The trash card of a process page (loaded by the page, then swapped in place by its button)."""

from __future__ import annotations

from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST

from console.decorators import role_required, visible_or_404
from console.roles import OPERATOR
from processes.models import Process
from processes.trash import process_trash_restore
from storage.errors import ServiceError
from storage.trash.models import TrashBatch, TrashState

TEMPLATE = "console/partials/process_trash.html"


def _card(request, process: Process, *, error: str = "", status: int = 200):
    batch = TrashBatch.objects.filter(process_id=process.pk).first()
    context = {
        "process": process,
        "trash_loaded": True,
        "batch": batch,
        "restorable": batch is not None and batch.restore_refusal() is None,
        "refusal": batch.restore_refusal() if batch is not None and batch.state == TrashState.KEPT else "",
        "trash_error": error,
    }
    response = render(request, TEMPLATE, context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    return response


@require_GET
def process_trash(request, pk: int):
    return _card(request, visible_or_404(request, Process.objects.all(), via="table", pk=pk))


@role_required(OPERATOR)
@require_POST
def process_trash_restore_view(request, pk: int):
    process = visible_or_404(request, Process.objects.all(), via="table", action="operate", pk=pk)
    try:
        process_trash_restore(process_id=process.pk, user=request.user)
    except ServiceError as error:
        return _card(request, process, error=error.message, status=error.status_code)
    return _card(request, process)
