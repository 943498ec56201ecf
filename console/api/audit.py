"""``GET /api/v1/audit/``: the audit trail, newest first, paginated, filtered like the console page
(``user``, ``action`` (a name, or a prefix ending in a dot), ``target``, ``since``, ``until``).
Operators and admins; viewers get 403. Under teams (issue 32) a team owner reads the events on
their team's tables, processes, queries and the team itself, and their own; other operators their
own only (console/audit/selectors.py ``audit_visible``)."""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import generics, serializers

from console.api.base import ApiDefaults
from console.audit.models import AuditEvent
from console.audit.selectors import AuditFilter, audit_events
from console.permissions import RolePermission
from console.roles import OPERATOR


class AuditEventSerializer(serializers.ModelSerializer):
    user = serializers.IntegerField(source="user_id", read_only=True, allow_null=True)

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "at",
            "user",
            "username",
            "client_address",
            "user_agent",
            "action",
            "method",
            "path",
            "target_model",
            "target_id",
            "target_label",
            "status",
            "details",
        ]


class OperatorReadPermission(RolePermission):
    """Reading the trail needs the operator role (the viewer's default is not enough)."""

    @staticmethod
    def required_role(request, view) -> str:
        return OPERATOR


class AuditEventListView(ApiDefaults, generics.ListAPIView):
    serializer_class = AuditEventSerializer
    permission_classes = [OperatorReadPermission]
    filter_backends = [DjangoFilterBackend]
    filterset_class = AuditFilter

    def get_queryset(self):
        return audit_events(self.request.user)
