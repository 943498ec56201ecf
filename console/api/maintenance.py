"""``GET /api/v1/tables/{id}/maintenance/`` (viewer): per action of the table's format, whether the
scheduler runs it and why not, the last and next evaluation, its last decisions with their reasons
and the effective settings (factory properties with the table's overrides laid over them). A table
the user's teams may not see is a 404, as for the other table endpoints."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api.base import ApiDefaults
from console.decorators import visible_or_404
from processes.decisions.models import KIND_LABELS, Decision
from processes.decisions.selectors import DECLINED, DISABLED, ENABLED, MANUAL, table_maintenance
from storage.models import Table


class DecisionSerializer(serializers.ModelSerializer):
    kind = serializers.ChoiceField(choices=list(KIND_LABELS.items()))
    kind_label = serializers.CharField(source="get_kind_display", read_only=True)
    process = serializers.IntegerField(source="process_id", allow_null=True, read_only=True)
    numbers = serializers.DictField(
        help_text="the figures behind it (benefit and minimum, budget used, until)"
    )

    class Meta:
        model = Decision
        fields = [
            "id",
            "kind",
            "kind_label",
            "reason",
            "group",
            "numbers",
            "process",
            "at",
            "last_at",
            "repeats",
        ]
        read_only_fields = fields


class ActionMaintenanceSerializer(serializers.Serializer):
    action = serializers.CharField()
    description = serializers.CharField()
    factory = serializers.CharField(help_text="the factory serving the action ('' when none does)")
    state = serializers.ChoiceField(choices=[ENABLED, MANUAL, DISABLED, DECLINED])
    note = serializers.CharField(help_text="why the action is manual only, disabled or declined")
    interval_seconds = serializers.IntegerField(allow_null=True)
    on_new_snapshot = serializers.BooleanField()
    parallelism = serializers.IntegerField(allow_null=True)
    last_evaluated_at = serializers.DateTimeField(allow_null=True)
    next_evaluation_at = serializers.DateTimeField(
        allow_null=True, help_text="null: at the next tick, or never for a disabled or declined action"
    )
    next_evaluation = serializers.CharField(help_text="the next evaluation in words")
    active_process = serializers.IntegerField(allow_null=True)
    settings = serializers.DictField(
        help_text="the factory's properties with the table's overrides laid over them"
    )
    decisions = DecisionSerializer(many=True, help_text="newest first")


class TableMaintenanceSerializer(serializers.Serializer):
    table = serializers.IntegerField(source="table.pk")
    wake_at = serializers.DateTimeField(
        allow_null=True, help_text="when the scheduler looks at the table again"
    )
    actions = ActionMaintenanceSerializer(many=True)


class TableMaintenanceView(ApiDefaults, APIView):
    @extend_schema(
        responses={200: TableMaintenanceSerializer},
        description="Per action of the table's format: whether the scheduler runs it (enabled, manual-only,"
        " disabled, declined, with the reason), the last and next evaluation, the last decisions with their"
        " reasons (ran, nothing to do, below the minimum benefit, waiting for budget or a slot...) and the"
        " effective settings.",
    )
    def get(self, request, pk: int):
        table = visible_or_404(request, Table.objects.all(), pk=pk)  # console/teams
        return Response(TableMaintenanceSerializer(table_maintenance(table=table)).data)
