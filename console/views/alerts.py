"""The alerts page (``/alerts/``): channels with a "send test" button, rules, open episodes and the
latest deliveries. Admins see all of it; under teams (issue 32) a team member with the operator role
sees their teams' channels and rules, the deliveries to their channels (another team's channel or
rule is 404) and the episodes of their rules and about their tables, whoever's rule fired (read
only: an admin's rule's channels stay the admin's); everyone else gets 403. Channels and rules are
created, edited, switched on and off and deleted here with the services the API calls
(processes/alerts/services.py); a refused form answers 400 with the reason beside its field."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console.alert_forms import ChannelForm, RuleForm
from console.audit import recording
from console.decorators import role_required
from console.htmx import hx_redirect
from console.roles import ADMIN, OPERATOR, has_role
from console.teams.access import alerts_allowed, episodes_visible, owned_visible
from processes.alerts import services
from processes.alerts.models import AlertChannel, AlertDelivery, AlertEpisode, AlertRule, DeliveryStatus
from storage.errors import ServiceError


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
        "episodes": episodes_visible(user, episodes)[:100],
        "deliveries": owned_visible(user, deliveries, via="channel__team")[:50],
        "is_admin": has_role(user, ADMIN),
    }
    return render(request, "console/alerts.html", context)


@role_required(OPERATOR)
@require_POST
def alert_channel_test(request, pk: int):
    _allowed(request)
    channel = get_object_or_404(owned_visible(request.user, AlertChannel.objects.all()), pk=pk)
    delivery = services.channel_send_test(channel=channel)
    if delivery.status == DeliveryStatus.SENT:
        messages.success(request, f"Test alert sent to {delivery.channel.name}.")
    else:
        messages.error(request, f"Test alert to {delivery.channel.name} failed: {delivery.last_error}")
    return redirect("console:alerts")


def _owned_action(model, act: Callable):
    """A POST view doing ``act(row)`` (which returns the message) on one of the user's teams'
    ``model`` rows (any, for an admin); another team's is 404."""

    @role_required(OPERATOR)
    @require_POST
    def view(request, pk: int):
        _allowed(request)
        found = get_object_or_404(owned_visible(request.user, model.objects.all()), pk=pk)
        messages.success(request, act(found))
        return hx_redirect(request, "console:alerts")

    return view


def _switched(what: str, changed) -> str:
    return f"{what} {changed.name} {'enabled' if changed.enabled else 'disabled'}."


def _deleting(what: str, delete: Callable):
    def act(found) -> str:
        delete(found)
        return f"{what} {found.name} deleted."

    return act


alert_channel_toggle = _owned_action(
    AlertChannel,
    lambda channel: _switched(
        "Channel", services.channel_update(channel=channel, enabled=not channel.enabled)
    ),
)
alert_rule_toggle = _owned_action(
    AlertRule, lambda rule: _switched("Rule", services.rule_update(rule=rule, enabled=not rule.enabled))
)
alert_channel_delete = _owned_action(
    AlertChannel, _deleting("Channel", lambda channel: services.channel_delete(channel=channel))
)
alert_rule_delete = _owned_action(AlertRule, _deleting("Rule", lambda rule: services.rule_delete(rule=rule)))


def _note_created(saved) -> None:
    """Name the new row in the request's audit row (the API's answer names it by its ``id``)."""
    audit = recording.current()
    if audit is not None:
        audit.note({"created": True, "model": saved._meta.label, "id": saved.pk, "label": str(saved)})


def _form_page(request, form, what: str, found=None, *, status: int = 200):
    context = {"form": form, "what": what, "found": found}
    return render(request, "console/alert_form.html", context, status=status)


def _form_view(model, form_class, what: str, save: Callable, *, editing: bool):
    """GET: the form (new, or filled from one of the user's teams' ``model`` rows); POST: parse
    it and ``save(found, values)`` through a service; a refusal answers 400 with the form."""

    @role_required(OPERATOR)
    @require_http_methods(["GET", "POST"])
    def view(request, pk: int | None = None):
        _allowed(request)
        found = None
        if editing:
            found = get_object_or_404(
                owned_visible(request.user, model.objects.select_related("team")), pk=pk
            )
        posted = request.POST if request.method == "POST" else None
        form = form_class(posted, user=request.user, **({what: found} if editing else {}))
        if posted is None:
            return _form_page(request, form, what, found)
        if form.is_valid():
            try:
                saved = save(found, form.values())
            except ServiceError as error:
                form.refuse(error)
            else:
                if not editing:
                    _note_created(saved)
                messages.success(request, f"{what.capitalize()} {saved.name} saved.")
                return redirect("console:alerts")
        return _form_page(request, form, what, found, status=400)

    return view


alert_channel_create = _form_view(
    AlertChannel, ChannelForm, "channel", lambda _, values: services.channel_create(**values), editing=False
)
alert_channel_edit = _form_view(
    AlertChannel,
    ChannelForm,
    "channel",
    lambda channel, values: services.channel_update(channel=channel, **values),
    editing=True,
)
alert_rule_create = _form_view(
    AlertRule, RuleForm, "rule", lambda _, values: services.rule_create(**values), editing=False
)
alert_rule_edit = _form_view(
    AlertRule, RuleForm, "rule", lambda rule, values: services.rule_update(rule=rule, **values), editing=True
)
