"""The Celery app: configuration from Django settings (CELERY_*), tasks from each app's tasks.py."""

from __future__ import annotations

import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("lakewarden")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
@signals.beat_init.connect
def refuse_conflicting_plugins(**_kwargs) -> None:
    """Start-up check: two enabled factories claiming one (format, action) stop the worker/beat
    with one line naming both, instead of running processes for an ambiguous configuration."""
    from processes.registry import PluginConflict, configured_factories, coordinators

    try:
        coordinators(configured_factories())
    except PluginConflict as conflict:
        raise SystemExit(f"lakewarden: {conflict}") from None
