"""The alerts page (``/alerts/``, admin role): channels with a "send test" button, open episodes and
the latest deliveries. Channels and rules are edited in the Django admin or the API."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from console.decorators import role_required
from console.roles import ADMIN
from processes.alerts.models import AlertChannel, AlertDelivery, AlertEpisode, AlertRule, DeliveryStatus
from processes.alerts.services import channel_send_test


@role_required(ADMIN)
@require_GET
def alerts_page(request):
    context = {
        "channels": AlertChannel.objects.all(),
        "rules": AlertRule.objects.prefetch_related("channels"),
        "episodes": AlertEpisode.objects.select_related("rule").filter(resolved_at__isnull=True)[:100],
        "deliveries": AlertDelivery.objects.select_related("channel", "episode__rule")[:50],
    }
    return render(request, "console/alerts.html", context)


@role_required(ADMIN)
@require_POST
def alert_channel_test(request, pk: int):
    delivery = channel_send_test(channel=get_object_or_404(AlertChannel, pk=pk))
    if delivery.status == DeliveryStatus.SENT:
        messages.success(request, f"Test alert sent to {delivery.channel.name}.")
    else:
        messages.error(request, f"Test alert to {delivery.channel.name} failed: {delivery.last_error}")
    return redirect("console:alerts")
