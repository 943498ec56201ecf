"""The Celery app: configuration from Django settings (CELERY_*, among them the one beat schedule,
``CELERY_BEAT_SCHEDULE``), tasks from each app's tasks.py, and the router of heavy tasks."""

from __future__ import annotations

import os
from fnmatch import fnmatchcase
from typing import Any

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("lakewarden")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def route_task(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> dict | None:
    """Celery router (``CELERY_TASK_ROUTES``): tasks matching ``HEAVY_TASKS`` to
    ``LAKEWARDEN_HEAVY_QUEUE``, both read when the task is sent (so a changed setting, as in tests,
    is honoured); None leaves the rest on the default queue. A queue given to ``apply_async``
    explicitly still wins over this."""
    from django.conf import settings

    if any(fnmatchcase(name, pattern) for pattern in settings.HEAVY_TASKS):
        return {"queue": settings.LAKEWARDEN_HEAVY_QUEUE}
    return None


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


@signals.heartbeat_sent.connect
def record_worker_alive(sender: Any = None, **_kwargs) -> None:
    """The worker's own liveness record, on each of Celery's worker heartbeats (every 2 s, from
    the worker's main process): what the reapers go by (processes/workers.py)."""
    from processes.workers import record_worker_alive as record

    record(sender.eventer)


@signals.worker_shutdown.connect
def forget_worker(sender: Any = None, **_kwargs) -> None:
    """A worker that stops cleanly is known gone at once, not after the reapers' tolerance."""
    from processes.workers import forget_worker as forget

    forget(sender.hostname)
