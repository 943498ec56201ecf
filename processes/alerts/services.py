"""Channel changes and the "send test" action, shared by the API, the console page and the admin."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from processes.alerts.delivery import attempt_delivery, check_channel
from processes.alerts.models import AlertChannel, AlertDelivery, DeliveryEvent, DeliveryStatus
from storage.errors import Conflict


def channel_create(
    *, name: str, kind: str, url: str = "", recipients: str = "", enabled: bool = True
) -> AlertChannel:
    check_channel(kind, url, recipients)
    try:
        with transaction.atomic():
            return AlertChannel.objects.create(
                name=name, kind=kind, url=url, recipients=recipients, enabled=enabled
            )
    except IntegrityError:
        raise Conflict(f"an alert channel named {name!r} exists") from None


def channel_send_test(*, channel: AlertChannel) -> AlertDelivery:
    """One attempt now (no retry: the person who pressed the button sees the answer), recorded."""
    delivery = AlertDelivery.objects.create(
        channel=channel,
        event=DeliveryEvent.TEST,
        title=f"[Lakewarden] test of channel {channel.name}",
        text="This is a test alert sent from Lakewarden: the channel works.",
    )
    if attempt_delivery(delivery.pk) is not None:
        AlertDelivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.FAILED)
    delivery.refresh_from_db()
    return delivery
