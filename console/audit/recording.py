"""Writing audit rows: who and where from the request, secrets masked, one row per request.

A request being audited opens a ``RequestAudit`` (held in a context variable for the request's
duration); signal handlers that fire while it is open add to it (``note_change``, ``note_action``)
instead of writing rows of their own, and the middleware writes the one row after the response.
Outside a request, ``note_change`` writes its own row at once.
"""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from console.audit.models import AuditEvent
from console.auth import client_address
from storage.secrets import mask_mapping

logger = logging.getLogger(__name__)

USER_AGENT_LENGTH = 200


@dataclass
class RequestAudit:
    """What one request did, gathered while it runs."""

    action: str
    target_model: str = ""
    target_id: str = ""
    target_label: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    forced_action: str = ""  # a more telling name a signal found (``role.change``)

    def note(self, change: dict[str, Any]) -> None:
        self.details.setdefault("changes", []).append(change)


_current: contextvars.ContextVar[RequestAudit | None] = contextvars.ContextVar(
    "lakewarden_audit", default=None
)


def begin(audit: RequestAudit) -> contextvars.Token:
    return _current.set(audit)


def end(token: contextvars.Token) -> None:
    _current.reset(token)


def current() -> RequestAudit | None:
    return _current.get()


def masked(values: dict[str, Any], *, secret_keys=()) -> dict[str, Any]:
    """``values`` safe to keep in the trail (the project's one masking rule, storage/secrets.py)."""
    return mask_mapping(values, secret_keys=secret_keys)


def who(request, user=None) -> dict[str, Any]:
    """The user and where the request came from (REMOTE_ADDR, as the login throttle counts it)."""
    user = user if user is not None else getattr(request, "user", None)
    authenticated = bool(getattr(user, "is_authenticated", False))
    return {
        "user": user if authenticated else None,
        "username": user.get_username() if authenticated else "",
        "client_address": client_address(request) if request is not None else "",
        "user_agent": (request.META.get("HTTP_USER_AGENT", "") if request is not None else "")[
            :USER_AGENT_LENGTH
        ],
        "method": (getattr(request, "method", None) or "") if request is not None else "",
        "path": (getattr(request, "path", None) or "")[:500] if request is not None else "",
    }


def write(**values: Any) -> AuditEvent | None:
    """Write one row; an audit failure is logged, never turned into a failed user action."""
    try:
        with transaction.atomic():
            return AuditEvent.objects.create(**values)
    except Exception:
        logger.exception("could not write the audit row for %s", values.get("action"))
        return None


def note_change(change: dict[str, Any], *, action: str, target: tuple[str, str, str]) -> None:
    """A settings change seen by a signal: added to the current request's row, or a row of its own."""
    audit = current()
    if audit is not None:
        audit.note(change)
        return
    model, pk, label = target
    write(
        action=action,
        target_model=model,
        target_id=pk,
        target_label=label[:255],
        details={"changes": [change]},
    )


def note_action(action: str, target: tuple[str, str, str]) -> bool:
    """Name the current request's action more precisely; False when no request is being audited."""
    audit = current()
    if audit is None:
        return False
    audit.forced_action = action
    audit.target_model, audit.target_id, audit.target_label = target
    return True
