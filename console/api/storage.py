"""REST API: ``storages/``, ``queries/``, ``cached-results/``."""

from __future__ import annotations

from django.core.paginator import Paginator
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from console.api.base import ApiDefaults
from console.api.errors import ContentTooLarge
from console.api.limits import MAX_SQL_CHARACTERS
from console.roles import ADMIN, OPERATOR
from console.teams.access import cached_results_visible, queries_visible
from processes import queries
from processes.models import Query, QueryEngine
from storage import services
from storage.models import CachedResult, StorageBackend, StorageSource
from storage.results.plugin import StorageDescriptor


class StorageBackendSerializer(serializers.ModelSerializer):
    config = serializers.SerializerMethodField()

    class Meta:
        model = StorageBackend
        fields = [
            "id",
            "name",
            "type",
            "config",
            "quota_bytes",
            "is_default",
            "source",
            "created_at",
            "last_test_at",
            "last_test_ok",
            "last_test_message",
        ]

    def get_config(self, backend) -> dict:
        return services.storage_backend_masked_config(backend)


class StorageBackendWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    type = serializers.CharField(max_length=50)
    config = serializers.DictField(required=False, default=dict)
    quota_bytes = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=2**63 - 1)
    is_default = serializers.BooleanField(required=False, default=False)


class StorageBackendUpdateSerializer(serializers.Serializer):
    config = serializers.DictField(required=False)
    quota_bytes = serializers.IntegerField(required=False, min_value=1, max_value=2**63 - 1)
    is_default = serializers.BooleanField(required=False)


class StorageTestSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    message = serializers.CharField()


class StorageBackendViewSet(
    ApiDefaults, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = StorageBackendSerializer
    queryset = StorageBackend.objects.all()
    write_role = ADMIN

    @extend_schema(request=StorageBackendWriteSerializer, responses={201: StorageBackendSerializer})
    def create(self, request):
        data = StorageBackendWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        backend = services.storage_backend_register(
            name=values["name"],
            descriptor=StorageDescriptor(type=values["type"], config=values["config"]),
            quota_bytes=values.get("quota_bytes"),
            is_default=values["is_default"],
            source=StorageSource.CONSOLE,
        )
        return Response(StorageBackendSerializer(backend).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=StorageBackendUpdateSerializer, responses={200: StorageBackendSerializer})
    def partial_update(self, request, pk=None):
        data = StorageBackendUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        backend = services.storage_backend_update(backend=self.get_object(), **data.validated_data)
        return Response(StorageBackendSerializer(backend).data)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        services.storage_backend_delete(backend=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: StorageTestSerializer})
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        ok, message = queries.storage_backend_test_on_worker(backend=self.get_object())
        return Response({"ok": ok, "message": message})


class QuerySerializer(serializers.ModelSerializer):
    backend = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    result = serializers.SerializerMethodField()

    class Meta:
        model = Query
        fields = [
            "id",
            "sql",
            "cache",
            "backend",
            "status",
            "served_from_cache",
            "cached_result",
            "fingerprint",
            "row_limit",
            "total_rows",
            "truncated",
            "error",
            "created_at",
            "started_at",
            "finished_at",
            "duration_ms",
            "engine",
            "engine_used",
            "engine_reason",
            "result",
        ]

    def get_result(self, query) -> dict:
        request = self.context.get("request")
        page_number = request.query_params.get("page", 1) if request else 1
        page = Paginator(query.rows or [], 100).get_page(page_number)
        return {
            "columns": query.columns,
            "rows": list(page.object_list),
            "page": page.number,
            "pages": page.paginator.num_pages,
        }


class SqlField(serializers.CharField):
    """SQL up to MAX_SQL_CHARACTERS; longer is 413 (documented as ``maxLength``)."""

    def __init__(self, **kwargs):
        super().__init__(max_length=MAX_SQL_CHARACTERS, **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, str) and len(data) > MAX_SQL_CHARACTERS:
            raise ContentTooLarge(
                f"sql is {len(data):,} characters long; the limit is {MAX_SQL_CHARACTERS:,}", field="sql"
            )
        return super().to_internal_value(data)


class NameField(serializers.SlugRelatedField):
    """An object by its name: a string without NUL characters (the lookup used to be a 500)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError(f"must be a {self.slug_field} (a string)")
        if "\x00" in data:
            raise serializers.ValidationError("must not contain a NUL character (\\x00)")
        return super().to_internal_value(data)


class QueryCreateSerializer(serializers.Serializer):
    sql = SqlField()
    cache = serializers.BooleanField(required=False, default=True)
    storage = NameField(
        slug_field="name", queryset=StorageBackend.objects.all(), required=False, allow_null=True
    )
    row_limit = serializers.IntegerField(required=False, min_value=1)
    engine = serializers.ChoiceField(
        choices=QueryEngine.choices,
        required=False,
        default=QueryEngine.AUTO,
        help_text="auto (DuckDB below LAKEWARDEN_DUCKDB_MAX_SCAN_BYTES scanned, else Spark), spark or duckdb",
    )


class QueryViewSet(ApiDefaults, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = QuerySerializer
    queryset = Query.objects.select_related("backend")
    write_role = OPERATOR
    action_roles = {"create": OPERATOR, "cancel": OPERATOR}

    def get_queryset(self):
        return queries_visible(self.request.user, super().get_queryset())  # console/teams

    @extend_schema(request=QueryCreateSerializer, responses={201: QuerySerializer})
    def create(self, request):
        data = QueryCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        query = queries.query_submit(
            sql=values["sql"],
            cache=values["cache"],
            backend=values.get("storage"),
            user=request.user,
            row_limit=values.get("row_limit"),
            engine=values["engine"],
        )
        return Response(
            QuerySerializer(query, context={"request": request}).data, status=status.HTTP_201_CREATED
        )

    @extend_schema(parameters=[OpenApiParameter("page", int, description="result page (100 rows each)")])
    def retrieve(self, request, *args, **kwargs):
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(request=None, responses={200: QuerySerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        return Response(
            QuerySerializer(queries.query_cancel(query=self.get_object()), context={"request": request}).data
        )


class CachedResultSerializer(serializers.ModelSerializer):
    backend = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = CachedResult
        fields = [
            "id",
            "fingerprint",
            "backend",
            "name",
            "sql",
            "source_snapshots",
            "size_bytes",
            "row_count",
            "hits",
            "created_at",
            "last_used_at",
            "state",
            "state_reason",
        ]


class CachedResultViewSet(
    ApiDefaults, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = CachedResultSerializer
    queryset = CachedResult.objects.select_related("backend")
    write_role = OPERATOR
    action_roles = {"invalidate": OPERATOR, "destroy": OPERATOR}

    def get_queryset(self):
        return cached_results_visible(self.request.user, super().get_queryset())  # console/teams

    @extend_schema(request=None, responses={200: CachedResultSerializer})
    @action(detail=True, methods=["post"])
    def invalidate(self, request, pk=None):
        return Response(
            CachedResultSerializer(services.cached_result_invalidate(result=self.get_object())).data
        )

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        services.cached_result_drop(result=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
