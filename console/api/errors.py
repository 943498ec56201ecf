"""One error body for the whole API: ``{"error": message, "field": name|null, "details": ...}``."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from storage.errors import InvalidInput, ServiceError
from storage.spec import SpecError

logger = logging.getLogger(__name__)

INTERNAL_ERROR = "internal error: it was logged; try again, or tell an admin"


class ContentTooLarge(InvalidInput):
    """A body or a field larger than the API accepts: 413 Content Too Large."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE


def body_too_large() -> ContentTooLarge:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return ContentTooLarge(
        f"the request body is larger than the {limit / 2**20:g} MiB ({limit:,} bytes) the server accepts"
    )


def _first_message(detail) -> tuple[str | None, str]:
    if isinstance(detail, dict):
        for field_name, value in detail.items():
            _, message = _first_message(value)
            return (None if field_name == "non_field_errors" else field_name), message
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    return None, str(detail)


def exception_handler(exc, context):
    response = _error_response(exc, context)
    request = context.get("request")
    if response is not None and request is not None:
        # Whatever the client asked for (the schema as YAML, the browsable API or the docs page as
        # HTML), an error is the JSON error body: DRF renders a response with the request's renderer.
        request.accepted_renderer, request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
    return response


def _error_response(exc, context):
    if isinstance(exc, RequestDataTooBig):  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE, read in request.data
        exc = body_too_large()
    elif isinstance(exc, SuspiciousOperation):  # too many form fields or files, a bad multipart body
        exc = InvalidInput(f"the request was refused: {exc}")
    if isinstance(exc, ServiceError):
        return Response({"error": exc.message, "field": exc.field}, status=exc.status_code)
    if isinstance(exc, SpecError):
        return Response({"error": str(exc), "field": None}, status=status.HTTP_400_BAD_REQUEST)
    response = drf_exception_handler(exc, context)
    if response is None:
        if settings.DEBUG:
            return None  # Django's debug page, with the traceback
        # An API client gets the API's error body, not the console's HTML error page.
        view = context.get("view")
        logger.error("unhandled error in %s", type(view).__name__ if view else "the API", exc_info=exc)
        set_rollback()
        return Response(
            {"error": INTERNAL_ERROR, "field": None},
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    if isinstance(exc, ValidationError):
        field_name, message = _first_message(exc.detail)
        text = f"{field_name}: {message}" if field_name else message
        response.data = {"error": text, "field": field_name, "details": exc.detail}
    else:
        detail = (
            response.data.get("detail", response.data) if isinstance(response.data, dict) else response.data
        )
        response.data = {"error": str(detail), "field": None}
    return response
