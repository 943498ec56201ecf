"""Celery tasks of alerts, on the default (light) queue, never on the heavy one: the beat tick that
evaluates the rules (processes/alerts/evaluation.py) and sends their deliveries, and the delivery,
whose failed attempt re-sends itself with a countdown (exponential backoff) instead of blocking a
worker."""

from __future__ import annotations

import logging

from celery import shared_task

from processes.alerts.delivery import attempt_delivery
from processes.alerts.evaluation import evaluate_alerts

log = logging.getLogger(__name__)


@shared_task(name="processes.alerts.tasks.evaluate_alerts_task", ignore_result=True)
def evaluate_alerts_task() -> None:
    for delivery_id in evaluate_alerts():
        enqueue_delivery(delivery_id)


@shared_task(name="processes.alerts.tasks.deliver_alert_task", ignore_result=True)
def deliver_alert_task(delivery_id: int) -> None:
    countdown = attempt_delivery(delivery_id)
    if countdown is not None:
        enqueue_delivery(delivery_id, countdown=countdown)


def enqueue_delivery(delivery_id: int, countdown: float = 0) -> None:
    """Send the delivery's task; a broker that is down leaves the row pending (the next evaluation
    tick re-sends pending deliveries) and is logged, never raised."""
    try:
        deliver_alert_task.apply_async((delivery_id,), countdown=countdown)
    except Exception:  # noqa: BLE001
        log.warning(
            "alert delivery %s could not be queued; the next tick re-sends it", delivery_id, exc_info=True
        )
