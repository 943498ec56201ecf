"""Alerts in the Django admin (admin role): channels (checked like the API does, with a "send test"
action), rules, and the read-only episodes and deliveries. Imported at the end of console/admin.py."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from console.admin_site import RoleModelAdmin
from processes.alerts.delivery import check_channel
from processes.alerts.models import AlertChannel, AlertDelivery, AlertEpisode, AlertRule
from processes.alerts.services import channel_send_test, rule_check
from storage.errors import InvalidInput


class AlertChannelForm(forms.ModelForm):
    url = forms.CharField(
        max_length=1024, required=False, help_text="Webhook and Slack: the http(s) endpoint"
    )

    class Meta:
        model = AlertChannel
        fields = ["name", "kind", "url", "recipients", "enabled", "team"]

    def clean(self):
        data = super().clean()
        try:
            check_channel(data.get("kind", ""), data.get("url", ""), data.get("recipients", ""))
        except InvalidInput as error:
            raise forms.ValidationError({error.field or "__all__": str(error)}) from None
        return data


@admin.action(description="Send a test alert")
def send_test(modeladmin, request, queryset):
    for channel in queryset:
        delivery = channel_send_test(channel=channel)
        level = messages.SUCCESS if delivery.status == "sent" else messages.ERROR
        modeladmin.message_user(request, f"{channel.name}: {delivery.status} {delivery.last_error}", level)


@admin.register(AlertChannel)
class AlertChannelAdmin(RoleModelAdmin):
    form = AlertChannelForm
    list_display = ["name", "kind", "team", "enabled", "created_at"]
    list_filter = ["team"]
    actions = [send_test]


class AlertRuleForm(forms.ModelForm):
    class Meta:
        model = AlertRule
        fields = ["name", "kind", "team", "enabled", "threshold", "minutes", "channels"]

    def clean(self):
        data = super().clean()
        team = data.get("team")
        try:
            rule_check(data.get("kind", ""), team.pk if team else None, list(data.get("channels") or []))
        except InvalidInput as error:
            raise forms.ValidationError({error.field or "__all__": str(error)}) from None
        return data


@admin.register(AlertRule)
class AlertRuleAdmin(RoleModelAdmin):
    form = AlertRuleForm
    list_display = ["name", "kind", "team", "enabled", "threshold", "minutes"]
    list_filter = ["team"]
    filter_horizontal = ["channels"]


class ReadOnlyAdmin(RoleModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(AlertEpisode)
class AlertEpisodeAdmin(ReadOnlyAdmin):
    list_display = ["rule", "subject", "first_seen_at", "fired_at", "resolved_at"]
    list_filter = ["rule"]


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "channel", "event", "status", "attempts", "last_error"]
    list_filter = ["status", "event", "channel"]
