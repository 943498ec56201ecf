"""The audit trail (console/audit): its app (signal handlers, admin page) and its middleware.

Star-imported on the last line of ``console/settings.py``. As ``console/settings_observability.py``
does, it reads the lists it extends (``INSTALLED_APPS``, ``MIDDLEWARE``) from that half-built module
and exports them extended. The middleware goes last: inside the authentication (the session's and,
through DRF, the API token's) so it sees who acted, and around the view so it sees the answer.
"""

from __future__ import annotations

import sys

__all__ = ["INSTALLED_APPS", "MIDDLEWARE"]

AUDIT_APP = "console.audit.apps.AuditConfig"
AUDIT_MIDDLEWARE = "console.audit.middleware.AuditMiddleware"


def with_audit(entries: list[str], entry: str) -> list[str]:
    return [*(e for e in entries if e != entry), entry]


_base = sys.modules["console.settings"]  # the module star-importing this one, built up to here

INSTALLED_APPS = with_audit(_base.INSTALLED_APPS, AUDIT_APP)
MIDDLEWARE = with_audit(_base.MIDDLEWARE, AUDIT_MIDDLEWARE)
