"""``/api/v1/resource-groups/``: resource groups with their budgets, membership rules and usage.
Operators read, admins write; the rules (budgets of at least 1, one group per table, ``default``
kept) are the services' (processes/groups/services.py), so the admin and the API refuse alike."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.response import Response

from console.api.base import ApiDefaults
from console.api.schema import CONFLICT
from console.roles import ADMIN, OPERATOR
from processes.groups import capacity, services
from processes.groups.models import ResourceGroup
from storage.models import Catalog, Table


class ResourceGroupSerializer(serializers.ModelSerializer):
    effective_queue = serializers.CharField(read_only=True)
    catalogs = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    tables = serializers.SerializerMethodField(help_text="ids of the tables assigned to it by name")
    usage = serializers.SerializerMethodField(help_text="budget used and left now, and what was held back")
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
        return sorted(group.assignments.values_list("table_id", flat=True))

    def get_usage(self, group) -> dict:
        return capacity.group_budget(group)

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


class ResourceGroupViewSet(
    ApiDefaults, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = ResourceGroupSerializer
    queryset = ResourceGroup.objects.prefetch_related("catalogs")
    write_role = ADMIN
    action_roles = {"list": OPERATOR, "retrieve": OPERATOR}

    @extend_schema(request=ResourceGroupWriteSerializer, responses={201: ResourceGroupSerializer})
    def create(self, request):
        values = self._values(request, require_name=True)
        group = services.resource_group_create(**values)
        return Response(ResourceGroupSerializer(group).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ResourceGroupWriteSerializer, responses={200: ResourceGroupSerializer})
    def partial_update(self, request, pk=None):
        group = services.resource_group_update(group=self.get_object(), **self._values(request))
        return Response(ResourceGroupSerializer(group).data)

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
