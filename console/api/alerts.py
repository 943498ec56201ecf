"""``/api/v1/alert-channels/``: list, create, read, change, delete notification channels and
``POST .../<id>/test/`` to send a test alert; ``/api/v1/alert-rules/``: list, create, read, change,
delete the rules; ``/api/v1/alert-deliveries/``: the delivery record; ``/api/v1/alert-episodes/``:
the episodes (newest first), read only.

Admins see and change all of it. Under teams (issue 32) a member of a team with the operator role
sees and changes their teams' channels and rules and the deliveries to their channels, nothing
else (another team's is 404), and reads the episodes of their rules and those about their tables,
whoever's rule fired (an episode names its rule, never the rule's channels); everyone else gets 403
(a webhook URL is a secret of sorts)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import BasePermission
from rest_framework.response import Response

from console.api.base import ApiDefaults
from console.api.storage import NameField
from console.roles import ADMIN, has_role
from console.teams.access import (
    alert_teams_assignable,
    alerts_allowed,
    episodes_visible,
    owned_visible,
    teams_of,
)
from processes.alerts import services
from processes.alerts.models import (
    AlertChannel,
    AlertDelivery,
    AlertEpisode,
    AlertRule,
    ChannelKind,
    RuleKind,
)

TEAM_HELP = "The owning team's name: it hears of (watches) the team's tables only. Blank: an admin's"


class TeamField(NameField):
    """A team by name, among those the requesting user may give (an admin: any; else their own)."""

    def get_queryset(self):
        request = self.context.get("request")
        user = getattr(request, "user", None)
        return alert_teams_assignable(user)


def _owner(serializer: serializers.Serializer) -> int | None:
    """The team a new channel or rule belongs to: the one named; for a non-admin who names none,
    their team when they are in exactly one (else they must name it)."""
    team = serializer.validated_data.get("team")
    request = serializer.context["request"]
    if team is not None or has_role(request.user, ADMIN):
        return team.pk if team is not None else None
    mine = list(teams_of(request.user)[:2])
    if len(mine) != 1:
        raise serializers.ValidationError({"team": ["name the team it belongs to (you are in several)"]})
    return mine[0].pk


class AlertChannelSerializer(serializers.ModelSerializer):
    kind = serializers.ChoiceField(choices=ChannelKind.choices)
    url = serializers.CharField(max_length=1024, required=False, allow_blank=True, default="")
    team = TeamField(slug_field="name", required=False, allow_null=True, help_text=TEAM_HELP)

    class Meta:
        model = AlertChannel
        fields = ["id", "name", "kind", "url", "recipients", "enabled", "team", "created_at"]
        read_only_fields = ["id", "created_at"]
        extra_kwargs = {"name": {"validators": []}}


class AlertChannelUpdateSerializer(serializers.ModelSerializer):
    kind = serializers.ChoiceField(choices=ChannelKind.choices, required=False)
    url = serializers.CharField(max_length=1024, required=False, allow_blank=True)

    class Meta:
        model = AlertChannel
        fields = ["name", "kind", "url", "recipients", "enabled"]
        extra_kwargs = {"name": {"validators": [], "required": False}}


class ChannelsField(serializers.PrimaryKeyRelatedField):
    """Channels by id, among those the requesting user sees."""

    def get_queryset(self):
        request = self.context.get("request")
        return owned_visible(getattr(request, "user", None), AlertChannel.objects.all())


class AlertRuleSerializer(serializers.ModelSerializer):
    kind = serializers.ChoiceField(choices=RuleKind.choices)
    team = TeamField(slug_field="name", required=False, allow_null=True, help_text=TEAM_HELP)
    channels = ChannelsField(many=True, required=False, help_text="channel ids; none: every enabled one")

    class Meta:
        model = AlertRule
        fields = ["id", "name", "kind", "enabled", "threshold", "minutes", "channels", "team"]
        read_only_fields = ["id"]
        extra_kwargs = {"name": {"validators": []}}


class AlertRuleUpdateSerializer(serializers.ModelSerializer):
    channels = ChannelsField(many=True, required=False, help_text="channel ids; none: every enabled one")

    class Meta:
        model = AlertRule
        fields = ["enabled", "threshold", "minutes", "channels"]


class AlertDeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = AlertDelivery
        fields = [
            "id",
            "channel",
            "episode",
            "event",
            "title",
            "text",
            "status",
            "attempts",
            "last_error",
            "created_at",
            "last_attempt_at",
        ]


class AlertEpisodeSerializer(serializers.ModelSerializer):
    rule = serializers.SlugRelatedField(slug_field="name", read_only=True)
    rule_team = serializers.SlugRelatedField(
        source="rule.team", slug_field="name", read_only=True, help_text="null: an admin's rule"
    )

    class Meta:
        model = AlertEpisode
        fields = ["id", "rule", "rule_team", "subject", "message", "first_seen_at", "fired_at", "resolved_at"]


class AlertsPermission(BasePermission):
    """Admins, and operators who belong to a team (console/teams/access.py ``alerts_allowed``)."""

    message = "alerts need the admin role, or the operator role and a team"

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and alerts_allowed(user))


class _Owned(ApiDefaults, viewsets.GenericViewSet):
    permission_classes = [AlertsPermission]
    model: type = AlertChannel
    via = "team"

    def get_queryset(self):
        return owned_visible(self.request.user, self.model.objects.all(), via=self.via)


class AlertChannelViewSet(_Owned, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin):
    serializer_class = AlertChannelSerializer
    queryset = AlertChannel.objects.none()
    model = AlertChannel
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_destroy(self, instance) -> None:
        services.channel_delete(channel=instance)

    @extend_schema(request=AlertChannelUpdateSerializer, responses={200: AlertChannelSerializer})
    def partial_update(self, request, pk=None):
        """Change ``name``, ``kind``, ``url``, ``recipients`` or ``enabled`` (the team stays),
        checked as a new channel is: a refused change is a 400 naming the field, and nothing changes."""
        channel = self.get_object()
        fixed = sorted(set(request.data) - set(AlertChannelUpdateSerializer.Meta.fields))
        if fixed:  # the team (or a field no channel has) is not silently ignored
            raise serializers.ValidationError(
                {fixed[0]: ["a channel's " + ", ".join(fixed) + " cannot be changed"]}
            )
        data = AlertChannelUpdateSerializer(
            data=request.data, partial=True, context=self.get_serializer_context()
        )
        data.is_valid(raise_exception=True)
        channel = services.channel_update(channel=channel, **data.validated_data)
        return Response(AlertChannelSerializer(channel).data)

    def create(self, request):
        data = AlertChannelSerializer(data=request.data, context=self.get_serializer_context())
        data.is_valid(raise_exception=True)
        values = {
            key: data.validated_data[key]
            for key in ("name", "kind", "url", "recipients", "enabled")
            if key in data.validated_data
        }
        channel = services.channel_create(**values, team_id=_owner(data))
        return Response(AlertChannelSerializer(channel).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: AlertDeliverySerializer})
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        """Send a test alert now (one attempt); the answer is the recorded delivery: ``status``
        ``sent`` or ``failed`` with ``last_error``."""
        delivery = services.channel_send_test(channel=self.get_object())
        return Response(AlertDeliverySerializer(delivery).data)


class AlertRuleViewSet(_Owned, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin):
    serializer_class = AlertRuleSerializer
    queryset = AlertRule.objects.none()
    model = AlertRule
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self):
        return super().get_queryset().prefetch_related("channels")

    def perform_destroy(self, instance) -> None:
        services.rule_delete(rule=instance)

    @extend_schema(request=AlertRuleSerializer, responses={201: AlertRuleSerializer})
    def create(self, request):
        """A rule; a team's watches only the team's tables (``process_failed``, ``table_health``)
        and sends to the team's channels."""
        data = AlertRuleSerializer(data=request.data, context=self.get_serializer_context())
        data.is_valid(raise_exception=True)
        values = {k: v for k, v in data.validated_data.items() if k != "team"}
        rule = services.rule_create(**values, team_id=_owner(data))
        return Response(AlertRuleSerializer(rule).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=AlertRuleUpdateSerializer, responses={200: AlertRuleSerializer})
    def partial_update(self, request, pk=None):
        """Change ``enabled``, ``threshold``, ``minutes`` or ``channels`` (the kind and team stay)."""
        rule = self.get_object()
        data = AlertRuleUpdateSerializer(
            data=request.data, partial=True, context=self.get_serializer_context()
        )
        data.is_valid(raise_exception=True)
        rule = services.rule_update(rule=rule, **data.validated_data)
        return Response(AlertRuleSerializer(rule).data)


class AlertDeliveryViewSet(_Owned, mixins.ListModelMixin):
    serializer_class = AlertDeliverySerializer
    queryset = AlertDelivery.objects.none()
    model = AlertDelivery
    via = "channel__team"


class AlertEpisodeViewSet(ApiDefaults, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Episodes, newest first: an admin's all; a team member's those of their teams' rules and those
    about a table they may see, whoever's rule fired."""

    permission_classes = [AlertsPermission]
    serializer_class = AlertEpisodeSerializer
    queryset = AlertEpisode.objects.none()

    def get_queryset(self):
        episodes = AlertEpisode.objects.select_related("rule__team").order_by("-first_seen_at", "-id")
        return episodes_visible(self.request.user, episodes)
