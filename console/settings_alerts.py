"""Alerts (issue 16): delivery settings and the evaluation tick. Star-imported at the end of
``console/settings.py``; the tick joins ``CELERY_BEAT_SCHEDULE`` there (light queue: not a heavy task)."""

from __future__ import annotations

from console.env import env_bool, env_int, env_networks

__all__ = [
    "LAKEWARDEN_ALERT_ALLOW_PRIVATE",
    "LAKEWARDEN_ALERT_ALLOWED_NETWORKS",
    "LAKEWARDEN_ALERT_TIMEOUT_SECONDS",
    "LAKEWARDEN_ALERT_MAX_ATTEMPTS",
    "LAKEWARDEN_ALERT_BACKOFF_SECONDS",
    "LAKEWARDEN_ALERT_SECONDS",
    "ALERTS_BEAT_SCHEDULE",
    "ALERTS_CELERY_IMPORTS",
]

#: Webhooks to private, loopback or link-local addresses (on-premises receivers are common): on.
LAKEWARDEN_ALERT_ALLOW_PRIVATE = env_bool("LAKEWARDEN_ALERT_ALLOW_PRIVATE", True)
#: With private targets off, these networks (``10.1.2.0/24,192.0.2.7``) are still allowed.
LAKEWARDEN_ALERT_ALLOWED_NETWORKS = env_networks("LAKEWARDEN_ALERT_ALLOWED_NETWORKS")
LAKEWARDEN_ALERT_TIMEOUT_SECONDS = env_int("LAKEWARDEN_ALERT_TIMEOUT_SECONDS", 10, minimum=1)
#: Attempts per delivery; the n-th retry waits BACKOFF * 2**(n-1) seconds.
LAKEWARDEN_ALERT_MAX_ATTEMPTS = env_int("LAKEWARDEN_ALERT_MAX_ATTEMPTS", 5, minimum=1)
LAKEWARDEN_ALERT_BACKOFF_SECONDS = env_int("LAKEWARDEN_ALERT_BACKOFF_SECONDS", 30, minimum=1)
LAKEWARDEN_ALERT_SECONDS = env_int("LAKEWARDEN_ALERT_SECONDS", 60, minimum=5)

ALERTS_BEAT_SCHEDULE = {
    "evaluate-alerts": {"task": "console.alerts.evaluate_alerts_task", "schedule": LAKEWARDEN_ALERT_SECONDS},
}
#: Task modules outside an app's tasks.py (added to CELERY_IMPORTS in console/settings.py).
ALERTS_CELERY_IMPORTS = ("console.alerts", "processes.alerts.tasks")
