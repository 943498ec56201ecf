from __future__ import annotations

from django.apps import AppConfig


class AuditConfig(AppConfig):
    """Connects the audit signal handlers and registers the admin page. The model itself belongs to
    the ``console`` app (its migration lives in console/migrations)."""

    name = "console.audit"
    label = "audit"
    verbose_name = "Lakewarden audit trail"

    def ready(self) -> None:
        from console.audit import signals

        signals.connect()
