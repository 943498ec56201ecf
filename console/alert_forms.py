"""The alerts page's forms (issue 32): a channel and a rule, new or changed, for an admin or a team
operator. They parse and offer choices only; what a channel or rule must be is the services'
(processes/alerts/services.py), as for the API, and a refusal is put beside its field."""

from __future__ import annotations

from django import forms

from console.roles import ADMIN, has_role
from console.teams.access import alert_teams_assignable, owned_visible
from processes.alerts.models import TABLE_KINDS, AlertChannel, ChannelKind, RuleKind
from storage.errors import ServiceError

ADMINS_CHOICE = "(admins: every table)"


def _team_field(user) -> forms.ModelChoiceField:
    """The owning team among those ``user`` may give; blank (an admin's) only for an admin."""
    admin = has_role(user, ADMIN)
    mine = alert_teams_assignable(user).order_by("name")
    initial = None if admin or mine.count() != 1 else mine.first()
    return forms.ModelChoiceField(
        queryset=mine,
        required=not admin,
        empty_label=ADMINS_CHOICE if admin else None,
        initial=initial,
        help_text="It hears of (watches) this team's tables only",
    )


class _ServiceForm(forms.Form):
    def refuse(self, error: ServiceError) -> None:
        """Put a service's refusal beside its field (above the form when it names none here)."""
        self.add_error(error.field if error.field in self.fields else None, error.message)


class ChannelForm(_ServiceForm):
    name = forms.SlugField(max_length=100)
    kind = forms.ChoiceField(choices=ChannelKind.choices)
    url = forms.CharField(
        max_length=1024, required=False, label="URL", help_text="Webhook and Slack: the http(s) endpoint"
    )
    recipients = forms.CharField(
        max_length=2000, required=False, help_text="E-mail: addresses, comma-separated"
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args, user, channel: AlertChannel | None = None, **kwargs) -> None:
        if channel is not None:
            kwargs.setdefault("initial", {key: getattr(channel, key) for key in self.base_fields})
        super().__init__(*args, **kwargs)
        if channel is None:
            self.fields["team"] = _team_field(user)

    def values(self) -> dict:
        """The service's keyword arguments (``team_id`` for a new channel)."""
        values = {key: self.cleaned_data[key] for key in ("name", "kind", "url", "recipients", "enabled")}
        if "team" in self.fields:
            team = self.cleaned_data["team"]
            values["team_id"] = team.pk if team is not None else None
        return values


class _Channels(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj) -> str:
        return f"{obj.name} ({obj.team.name if obj.team_id else 'admins'})"


class RuleForm(_ServiceForm):
    name = forms.SlugField(max_length=100)
    kind = forms.ChoiceField(choices=RuleKind.choices)
    enabled = forms.BooleanField(required=False, initial=True)
    threshold = forms.IntegerField(
        min_value=0, initial=60, help_text="Table health: alert at this score (0 healthy .. 100) or above"
    )
    minutes = forms.IntegerField(
        min_value=0, initial=0, help_text="Alert only when the condition has held this long (0: at once)"
    )
    channels = _Channels(
        queryset=AlertChannel.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None chosen: every enabled channel (of the rule's team, for a team's rule)",
    )

    def __init__(self, *args, user, rule=None, **kwargs) -> None:
        if rule is not None:
            initial = {key: getattr(rule, key) for key in ("enabled", "threshold", "minutes")}
            kwargs.setdefault("initial", {**initial, "channels": list(rule.channels.all())})
        super().__init__(*args, **kwargs)
        visible = owned_visible(user, AlertChannel.objects.select_related("team"))
        if rule is not None:  # the name, kind and team stay (as in the API)
            del self.fields["name"], self.fields["kind"]
            if rule.team_id is not None:
                visible = visible.filter(team_id=rule.team_id)
        else:
            self.fields["team"] = _team_field(user)
            if not has_role(user, ADMIN):
                self.fields["kind"].choices = [c for c in RuleKind.choices if c[0] in TABLE_KINDS]
        self.fields["channels"].queryset = visible.order_by("name")

    def values(self) -> dict:
        """The service's keyword arguments (``team_id`` for a new rule)."""
        values = {key: self.cleaned_data[key] for key in self.fields if key != "team"}
        if "team" in self.fields:
            team = self.cleaned_data["team"]
            values["team_id"] = team.pk if team is not None else None
        return values
