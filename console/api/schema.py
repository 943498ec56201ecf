"""OpenAPI schema additions: the error responses every operation can give, with the one error body
of the API (console/api/errors.py): ``{"error": message, "field": name or null, "details": ...}``,
and the tag of every operation (the groups of the API docs), by what it works on.

Registered in ``SPECTACULAR_SETTINGS`` (console/settings.py): the hooks in ``POSTPROCESSING_HOOKS``,
``TaggedAutoSchema`` as ``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]``. Responses a view declares itself
(e.g. 409 on process actions) are kept as they are.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers

ERROR_SCHEMA_NAME = "Error"
ERROR_SCHEMA = {
    "type": "object",
    "description": "The body of every error response.",
    "properties": {
        "error": {"type": "string", "description": "What went wrong, in words a person can act on."},
        "field": {
            "type": "string",
            "nullable": True,
            "description": "The request field to blame, when there is one.",
        },
        "details": {"description": "Validation errors per field (400 from validation only)."},
    },
    "required": ["error", "field"],
}
ERROR_REF = {"$ref": f"#/components/schemas/{ERROR_SCHEMA_NAME}"}

DESCRIPTIONS = {
    "400": "Invalid input: a parameter or body field is wrong (``field`` names it).",
    "401": "Not authenticated: no credentials, or credentials that are not valid.",
    "403": "The user's role does not allow this operation.",
    "404": "No such object, or a page past the last one.",
    "409": "The object's current state does not allow this (``error`` says which state it is in).",
    "413": (
        "Too large: the request body is over the server's limit of {body_limit} bytes, or a field is"
        " longer than its limit (``field`` names it, e.g. ``sql``)."
    ),
}
# DRF sends it with every 401: the scheme of the first authentication class (console/api/base.py).
WWW_AUTHENTICATE = {
    "WWW-Authenticate": {
        "description": "``Token``: send ``Authorization: Token <key>`` (or log in for a session).",
        "schema": {"type": "string", "example": "Token"},
    }
}

# For views that declare a 409 with ``extend_schema(responses={409: CONFLICT})``.
ErrorSerializer = inline_serializer(
    ERROR_SCHEMA_NAME,
    {
        "error": serializers.CharField(),
        "field": serializers.CharField(allow_null=True),
        "details": serializers.JSONField(required=False),
    },
)
CONFLICT = OpenApiResponse(ErrorSerializer, description=DESCRIPTIONS["409"])


def _error_response(status: str) -> dict[str, Any]:
    description = DESCRIPTIONS[status].format(body_limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    response = {"description": description, "content": {"application/json": {"schema": ERROR_REF}}}
    if status == "401":
        response["headers"] = WWW_AUTHENTICATE
    return response


def error_statuses(operation: dict[str, Any]) -> list[str]:
    """The error statuses an operation can answer with, from its shape."""
    parameters = operation.get("parameters", [])
    in_path = any(p.get("in") == "path" for p in parameters)
    in_query = any(p.get("in") == "query" for p in parameters)
    paged = any(p.get("in") == "query" and p.get("name") == "page" for p in parameters)
    statuses = []
    if in_query or "requestBody" in operation:
        statuses.append("400")
    statuses += ["401", "403"]
    if in_path or paged:
        statuses.append("404")
    if "requestBody" in operation:
        statuses.append("413")
    return statuses


def postprocess_error_responses(result, generator, request, public):
    """drf-spectacular postprocessing hook: document the error responses of every operation."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas[ERROR_SCHEMA_NAME] = ERROR_SCHEMA
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            for status in error_statuses(operation):
                responses.setdefault(status, _error_response(status))
    return result


# --- tags: the API docs' groups -------------------------------------------------------------------

#: The tags in the order the docs show them, with what each group holds.
TAGS = {
    "tables": "Registered tables: register, refresh, snapshots, files, partitions, splits, changes, records.",
    "processes": "Maintenance processes: run now, plan preview, list, cancel, kill, retry.",
    "trash": "Files a process moved to the trash instead of deleting them, and their restore.",
    "queries": "SQL queries over registered tables, and the cache of their results.",
    "storages": "Storage backends that hold cached query results.",
    "catalogs": "Catalogs (Iceberg SQL, Iceberg REST, path roots) and their sync.",
    "alerts": "Notification channels (with a test send), rules, episodes and the record of deliveries.",
    "audit": "The audit trail of what users and the scheduler did.",
    "teams": "Teams, their members and SSO groups, and their grants on catalogs, namespaces and tables.",
    "plugins": "Installed process factories: properties, parameters and trigger strategies.",
    "resource groups": "Resource groups: a queue of their own, a concurrency and a compute budget, and the"
    " tables they take (by catalog, namespace pattern or name).",
}
#: (path after ``/api/v1/``, tag): the first pattern that matches a path names its tag.
TAG_RULES = (
    (r"tables/\{[^}]+\}/processes/", "processes"),  # a process's plan preview, before it exists
    (r"processes/\{[^}]+\}/(trash|restore)/", "trash"),
    (r"trash/", "trash"),
    (r"tables/", "tables"),
    (r"processes/", "processes"),
    (r"(queries|cached-results)/", "queries"),
    (r"storages/", "storages"),
    (r"catalogs/", "catalogs"),
    (r"alert-(channels|rules|deliveries|episodes)/", "alerts"),
    (r"audit/", "audit"),
    (r"(teams|grants)/", "teams"),
    (r"plugins/", "plugins"),
    (r"resource-groups/", "resource groups"),
)
API_PREFIX = "/api/v1/"


def operation_tag(path: str) -> str:
    """The tag of an operation on ``path`` (``/api/v1/tables/{id}/files/``): by ``TAG_RULES``, else
    the path's first part (a test fails for a tag ``TAGS`` does not describe)."""
    rest = path.removeprefix(API_PREFIX)
    for pattern, tag in TAG_RULES:
        if re.match(pattern, rest):
            return tag
    return rest.split("/", 1)[0]


class TaggedAutoSchema(AutoSchema):
    """drf-spectacular's schema with each operation tagged by what it works on (not the flat "v1"
    its default takes from the path's first part)."""

    def get_tags(self) -> list[str]:
        return [operation_tag(self.path)]


def postprocess_tags(result, generator, request, public):
    """drf-spectacular postprocessing hook: the tags in the order of ``TAGS``, described."""
    used = {
        tag for item in result.get("paths", {}).values() for op in item.values() for tag in op.get("tags", [])
    }
    result["tags"] = [{"name": name, "description": text} for name, text in TAGS.items() if name in used]
    result["tags"] += [{"name": name} for name in sorted(used - set(TAGS))]
    return result
