"""``/api/v1/alert-channels/``: list, create, read, delete notification channels and
``POST .../<id>/test/`` to send a test alert; ``/api/v1/alert-deliveries/``: the delivery record.
Admin role for all of it (a webhook URL is a secret of sorts)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from console.api.base import ApiDefaults
from console.permissions import RolePermission
from console.roles import ADMIN
from processes.alerts import services
from processes.alerts.models import AlertChannel, AlertDelivery, ChannelKind


class AlertChannelSerializer(serializers.ModelSerializer):
    kind = serializers.ChoiceField(choices=ChannelKind.choices)
    url = serializers.CharField(max_length=1024, required=False, allow_blank=True, default="")

    class Meta:
        model = AlertChannel
        fields = ["id", "name", "kind", "url", "recipients", "enabled", "created_at"]
        read_only_fields = ["id", "created_at"]
        extra_kwargs = {"name": {"validators": []}}


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


class AdminOnly(RolePermission):
    @staticmethod
    def required_role(request, view) -> str:
        return ADMIN


class AlertChannelViewSet(
    ApiDefaults,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = AlertChannelSerializer
    queryset = AlertChannel.objects.all()
    permission_classes = [AdminOnly]

    def create(self, request):
        data = AlertChannelSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = {
            key: data.validated_data[key]
            for key in ("name", "kind", "url", "recipients", "enabled")
            if key in data.validated_data
        }
        channel = services.channel_create(**values)
        return Response(AlertChannelSerializer(channel).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: AlertDeliverySerializer})
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        """Send a test alert now (one attempt); the answer is the recorded delivery: ``status``
        ``sent`` or ``failed`` with ``last_error``."""
        delivery = services.channel_send_test(channel=self.get_object())
        return Response(AlertDeliverySerializer(delivery).data)


class AlertDeliveryViewSet(ApiDefaults, mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = AlertDeliverySerializer
    queryset = AlertDelivery.objects.all()
    permission_classes = [AdminOnly]
