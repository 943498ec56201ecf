"""The alerts page (``/alerts/``): channels with a "send test" button, rules, open episodes and the
latest deliveries. Admins see all of it; under teams (issue 32) a team member with the operator role
sees their teams' channels, rules and episodes and the deliveries to their channels (another team's
channel is 404), and switches their teams' channels and rules on and off; everyone else gets 403.
Channels and rules are otherwise edited in the API (and the admin)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from console.decorators import role_required
from console.roles import ADMIN, OPERATOR, has_role
from console.teams.access import alerts_allowed, owned_visible
from processes.alerts.models import AlertChannel, AlertDelivery, AlertEpisode, AlertRule, DeliveryStatus
from processes.alerts.services import channel_send_test, channel_update, rule_update


def _allowed(request) -> None:
    if not alerts_allowed(request.user):
        raise PermissionDenied("Alerts are for admins, and for operators of a team (their team's alerts).")


@role_required(OPERATOR)
@require_GET
def alerts_page(request):
    _allowed(request)
    user = request.user
    episodes = AlertEpisode.objects.select_related("rule").filter(resolved_at__isnull=True)
    deliveries = AlertDelivery.objects.select_related("channel", "episode__rule")
    context = {
        "channels": owned_visible(user, AlertChannel.objects.select_related("team")),
        "rules": owned_visible(user, AlertRule.objects.select_related("team").prefetch_related("channels")),
        "episodes": owned_visible(user, episodes, via="rule__team")[:100],
        "deliveries": owned_visible(user, deliveries, via="channel__team")[:50],
        "is_admin": has_role(user, ADMIN),
    }
    return render(request, "console/alerts.html", context)


@role_required(OPERATOR)
@require_POST
def alert_channel_test(request, pk: int):
    _allowed(request)
    channel = get_object_or_404(owned_visible(request.user, AlertChannel.objects.all()), pk=pk)
    delivery = channel_send_test(channel=channel)
    if delivery.status == DeliveryStatus.SENT:
        messages.success(request, f"Test alert sent to {delivery.channel.name}.")
    else:
        messages.error(request, f"Test alert to {delivery.channel.name} failed: {delivery.last_error}")
    return redirect("console:alerts")


def _toggle_view(model, change, what: str):
    """A POST view switching one of the user's teams' ``model`` rows (any, for an admin) on or off."""

    @role_required(OPERATOR)
    @require_POST
    def toggle(request, pk: int):
        _allowed(request)
        found = get_object_or_404(owned_visible(request.user, model.objects.all()), pk=pk)
        changed = change(found, not found.enabled)
        messages.success(request, f"{what} {changed.name} {'enabled' if changed.enabled else 'disabled'}.")
        return redirect("console:alerts")

    return toggle


alert_channel_toggle = _toggle_view(
    AlertChannel, lambda channel, on: channel_update(channel=channel, enabled=on), "Channel"
)
alert_rule_toggle = _toggle_view(AlertRule, lambda rule, on: rule_update(rule=rule, enabled=on), "Rule")
