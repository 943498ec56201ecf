"""``/api/v1/resource-groups/``: resource groups with their budgets, membership rules and usage.
Operators read, admins write; the rules (budgets of at least 1, one group per table, ``default``
kept) are the services' (processes/groups/services.py), so the admin and the API refuse alike.

A team user (console/teams/access.py) lists and reads only the groups holding a table their teams
may see; a group's ``tables``, its ``usage`` (their teams' share: ``scope`` "teams") and its
``report/`` (cost spent and benefit gained per day and per action, processes/groups/report.py)
count only those tables."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from console.api.base import ApiDefaults
from console.api.schema import CONFLICT
from console.roles import ADMIN, OPERATOR
from console.teams.access import tables_scope
from processes.groups import capacity, services
from processes.groups.models import ResourceGroup
from processes.groups.report import BENEFITS, COSTS, DEFAULT_DAYS, MAX_DAYS, check_days, group_report
from storage.errors import InvalidInput
from storage.models import Catalog, Table


class ResourceGroupSerializer(serializers.ModelSerializer):
    effective_queue = serializers.CharField(read_only=True)
    catalogs = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    tables = serializers.SerializerMethodField(help_text="ids of the tables assigned to it by name")
    usage = serializers.SerializerMethodField(
        help_text="budget used and left now, and what was held back; for a team user (scope "
        "\"teams\") only their teams' share: what their tables' processes use, nothing left or held"
    )
    warnings = serializers.SerializerMethodField(help_text="e.g. a namespace pattern that matches no table")

    class Meta:
        model = ResourceGroup
        fields = [
            "id",
            "name",
            "description",
            "queue",
            "effective_queue",
            "max_concurrency",
            "compute_budget_seconds",
            "catalogs",
            "namespace_patterns",
            "tables",
            "usage",
            "warnings",
            "created_at",
            "updated_at",
        ]

    def get_tables(self, group) -> list[int]:
        assigned = group.assignments.all()
        scope = self.context.get("tables")
        if scope is not None:
            assigned = assigned.filter(table__in=scope.order_by().values("pk"))
        return sorted(assigned.values_list("table_id", flat=True))

    def get_usage(self, group) -> dict:
        return capacity.group_budget(group, tables=self.context.get("tables"))

    def get_warnings(self, group) -> list[str]:
        return capacity.group_warnings(group)


class ResourceGroupWriteSerializer(serializers.Serializer):
    """Fields to set; anything left out stays as it is (``catalogs``/``tables``: the whole list)."""

    name = serializers.CharField(max_length=60, required=False)
    description = serializers.CharField(max_length=255, required=False, allow_blank=True)
    queue = serializers.CharField(max_length=200, required=False, allow_blank=True)
    max_concurrency = serializers.IntegerField(required=False, help_text="processes at once, at least 1")
    compute_budget_seconds = serializers.IntegerField(
        required=False, help_text="worker-seconds per rolling hour, at least 1"
    )
    namespace_patterns = serializers.ListField(child=serializers.CharField(max_length=200), required=False)
    catalogs = serializers.SlugRelatedField(
        slug_field="name", many=True, queryset=Catalog.objects.all(), required=False
    )
    tables = serializers.PrimaryKeyRelatedField(many=True, queryset=Table.objects.all(), required=False)


def _sums(name: str) -> serializers.Serializer:
    fields = {
        "runs": serializers.IntegerField(help_text="finished runs"),
        "failed": serializers.IntegerField(help_text="finished runs that did not succeed"),
    }
    for key, what in COSTS:
        fields[key] = serializers.FloatField(help_text=f"cost: {what}, every finished run")
    for key, what, _ in BENEFITS:
        fields[key] = serializers.IntegerField(help_text=f"benefit: {what}, successful runs")
    return inline_serializer(name, fields)


ReportSerializer = inline_serializer(
    "ResourceGroupReport",
    {
        "group": serializers.CharField(),
        "days": serializers.IntegerField(),
        "since": serializers.DateField(help_text="first day (UTC) counted"),
        "until": serializers.DateField(help_text="last day (UTC) counted: today"),
        "totals": _sums("ResourceGroupReportTotals"),
        "by_action": serializers.ListField(child=serializers.DictField(), help_text="totals per action"),
        "by_day": serializers.ListField(
            child=serializers.DictField(), help_text="per day, oldest first, every day of the range"
        ),
    },
)
DAYS = OpenApiParameter(
    "days",
    {"type": "integer", "minimum": 1, "maximum": MAX_DAYS, "default": DEFAULT_DAYS},
    description="days the report covers, today (UTC) the last",
)


class ResourceGroupViewSet(
    ApiDefaults, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = ResourceGroupSerializer
    queryset = ResourceGroup.objects.prefetch_related("catalogs")
    write_role = ADMIN
    action_roles = {"list": OPERATOR, "retrieve": OPERATOR, "report": OPERATOR}

    def get_queryset(self):
        scope = tables_scope(self.request.user)
        if scope is None:
            return self.queryset.all()
        return self.queryset.filter(pk__in=[group.pk for group in capacity.visible_groups(scope)])

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "tables": tables_scope(self.request.user)}

    @extend_schema(parameters=[DAYS], responses={200: ReportSerializer})
    @action(detail=True, methods=["get"])
    def report(self, request, pk=None):
        """Cost spent and benefit gained per day and per action over the last ``days`` days,
        measured on the group's finished processes (a team user's: on their tables only)."""
        group = self.get_object()
        try:
            days = check_days(request.query_params.get("days"))
        except ValueError as error:
            raise InvalidInput(str(error), field="days") from None
        return Response(group_report(group, days=days, tables=tables_scope(request.user)))

    @extend_schema(request=ResourceGroupWriteSerializer, responses={201: ResourceGroupSerializer})
    def create(self, request):
        values = self._values(request, require_name=True)
        group = services.resource_group_create(**values)
        return Response(
            ResourceGroupSerializer(group, context=self.get_serializer_context()).data,
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(request=ResourceGroupWriteSerializer, responses={200: ResourceGroupSerializer})
    def partial_update(self, request, pk=None):
        group = services.resource_group_update(group=self.get_object(), **self._values(request))
        return Response(ResourceGroupSerializer(group, context=self.get_serializer_context()).data)

    @extend_schema(responses={204: None, 409: CONFLICT})
    def destroy(self, request, pk=None):
        services.resource_group_delete(group=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @staticmethod
    def _values(request, *, require_name: bool = False) -> dict:
        data = ResourceGroupWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        if require_name and "name" not in values:
            raise serializers.ValidationError({"name": ["a resource group needs a name"]})
        return values
