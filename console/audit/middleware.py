"""``AuditMiddleware``: one audit row per state-changing request by a signed-in user.

Placed last (MIDDLEWARE in console/settings.py): it sees the user the console's session or the API's token
authenticated (DRF sets it on the request) and writes the row after the response, so the outcome
(the HTTP status) is known; a form answered with its errors (the admin re-renders a refused change
at 200) is recorded as the 400 it is, with the errors. The request's fields are kept with secrets masked; a JSON body is read
before the view so it can be kept too. Sign-in and sign-out are recorded by signals instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.apps import apps
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from console.audit import recording
from console.audit.actions import action_name, describe, target_of

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Recorded by the sign-in signals (console/audit/signals.py), not as requests.
NOT_REQUESTS = frozenset({"login", "logout", "oidc_authentication_init", "oidc_authentication_callback"})
# Form fields that say nothing about the action.
NOISE = frozenset({"csrfmiddlewaretoken", "_save", "_continue", "_addanother", "post"})
MAX_FIELD_CHARS = 2000
MAX_BODY_CHARS = 20_000


class AuditMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method not in WRITE_METHODS:
            return self.get_response(request)
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return self.get_response(request)
        if match.view_name in NOT_REQUESTS:
            return self.get_response(request)
        json_body = _json_body(request)
        audit = recording.RequestAudit(action=action_name(match.view_name, request.method, match.kwargs))
        audit.target_model, audit.target_id, audit.target_label = target_of(match.view_name, match.kwargs)
        token = recording.begin(audit)
        try:
            response = self.get_response(request)
        finally:
            recording.end(token)
        if getattr(getattr(request, "user", None), "is_authenticated", False):
            _record(request, response, audit, json_body)
        return response


#: Levels of a request body kept in the trail (the API itself refuses more than 32).
MAX_DEPTH = 8


def _json_body(request: HttpRequest) -> Any:
    """The JSON body, read (and so kept by Django for the view) before the view consumes it."""
    if not request.content_type or "json" not in request.content_type:
        return None
    try:
        return json.loads(request.body or b"null")
    except Exception:  # too big, not JSON: the view answers that; the row keeps no fields
        return None


def _fields(request: HttpRequest, json_body: Any) -> dict[str, Any]:
    if isinstance(json_body, dict):
        values = json_body
    elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        try:
            values = {
                key: items[0] if len(items) == 1 else items
                for key, items in request.POST.lists()
                if key not in NOISE
            }
        except Exception:
            return {}
    else:
        return {}
    # Bodies nested deeper than the API accepts (it refuses them with a 400) are kept shallow:
    # masking walks the structure, and a few hundred levels would exhaust the stack.
    masked = {key: _short(value) for key, value in recording.masked(_shallow(values)).items()}
    try:
        text = json.dumps(masked, default=str)
    except (TypeError, ValueError, RecursionError):
        return {"unreadable": True}
    if len(text) > MAX_BODY_CHARS:
        return {"truncated": True, "keys": sorted(str(key) for key in masked)[:50]}
    # Postgres keeps no NUL character and no lone half of a surrogate pair ("\\ud9bc") in JSON:
    # the request is kept without NULs and with U+FFFD for each lone half.
    if "\\u0000" not in text and "\\ud" not in text:
        return masked
    try:
        kept = json.dumps(json.loads(text.replace("\\u0000", "")), ensure_ascii=False)
        return json.loads(kept.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))
    except ValueError:
        return {"unreadable": True}


def _shallow(value: Any, depth: int = MAX_DEPTH) -> Any:
    """``value`` with whatever is nested deeper than ``depth`` levels replaced by a note."""
    if isinstance(value, dict):
        if depth <= 0:
            return "… (nested deeper)"
        return {key: _shallow(item, depth - 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        if depth <= 0:
            return "… (nested deeper)"
        return [_shallow(item, depth - 1) for item in value]
    return value


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
        return value[:MAX_FIELD_CHARS] + "…"
    return value


def _created_target(audit: recording.RequestAudit, response: HttpResponse) -> None:
    """A creation names its new object: the API answers with it (``id``), a settings model's
    creation was seen by the signals, or a console form redirects to its page."""
    if audit.target_id or not audit.target_model:
        return
    data = getattr(response, "data", None)
    if isinstance(data, dict) and "id" in data:
        audit.target_model, audit.target_id, audit.target_label = describe(
            apps.get_model(audit.target_model), data["id"]
        )
        return
    created = [
        c
        for c in audit.details.get("changes", [])
        if c.get("created") and c.get("model") == audit.target_model
    ]
    if len(created) == 1:
        audit.target_id, audit.target_label = str(created[0]["id"]), str(created[0]["label"])
        return
    location = urlsplit(response.get("HX-Redirect") or response.get("Location") or "").path
    try:
        match = resolve(location) if location else None
    except Resolver404:
        match = None
    if match is not None:
        model, pk, label = target_of(match.view_name, match.kwargs)
        if model == audit.target_model and pk:
            audit.target_id, audit.target_label = pk, label


def _form_errors(response: HttpResponse) -> dict[str, list[str]]:
    """The errors of a form a page answered with instead of saving it: the admin re-renders a
    refused change at 200 (its ``errors`` cover the form and its inlines); {} when none."""
    context = getattr(response, "context_data", None)
    if not isinstance(context, dict):
        return {}
    adminform = context.get("adminform")
    form = getattr(adminform, "form", None) or context.get("form")
    errors: dict[str, list[str]] = {}
    if form is not None and getattr(form, "is_bound", False) and form.errors:
        errors = {
            str(field): [str(m)[:MAX_FIELD_CHARS] for m in messages]
            for field, messages in form.errors.items()
        }
    if not errors and context.get("errors"):  # only an inline's errors (AdminErrorList)
        errors = {"__all__": [str(m)[:MAX_FIELD_CHARS] for item in context["errors"] for m in item]}
    return errors


def _record(request: HttpRequest, response: HttpResponse, audit: recording.RequestAudit, json_body) -> None:
    _created_target(audit, response)
    details = dict(audit.details)
    fields = _fields(request, json_body)
    if fields:
        details["request"] = fields
    status = response.status_code
    try:
        refused = _form_errors(response) if status < 400 else {}
    except Exception:  # reading the page's form must never fail the request it audits
        refused = {}
    if refused:  # nothing was saved: the trail records the refusal, not the page's 200
        status = 400
        details["refused"] = refused
    recording.write(
        **recording.who(request),
        action=audit.forced_action or audit.action,
        target_model=audit.target_model,
        target_id=audit.target_id,
        target_label=audit.target_label[:255],
        status=status,
        details=details,
    )
