from __future__ import annotations

from dataclasses import asdict

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from console.api.base import ApiDefaults
from console.api.processes import ProcessPreviewRequestSerializer, ProcessPreviewSerializer
from console.api.schema import CONFLICT
from console.api.serializers import (
    CatalogCreateSerializer,
    CatalogSerializer,
    CatalogUpdateSerializer,
    FileChangeSerializer,
    FilesPageSerializer,
    InstantSerializer,
    PartitionChangeSerializer,
    PartitionSerializer,
    SplitPlanSerializer,
    SyncReportSerializer,
    TableRegisterSerializer,
    TableSerializer,
)
from console.roles import OPERATOR
from console.teams.access import catalogs_visible, tables_scope
from console.teams.services import table_owner_assign
from processes import services as process_services
from storage import selectors, services
from storage.models import Catalog, Table, format_values

AT = OpenApiParameter(
    "at",
    str,
    description="instant id (Iceberg snapshot id, Delta version, Hudi instant time); latest when absent",
)
FILTER = OpenApiParameter(
    "filter", str, description="filter text, e.g. region = 'eu' and ts >= timestamp '2024-01-01 00:00:00'"
)


def _whole_number(minimum: int, maximum: int) -> dict:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


PAGE = OpenApiParameter(
    "page",
    _whole_number(1, selectors.MAX_PAGE),
    description="page number, from 1 (a page past the last is empty)",
)
PAGE_SIZE = OpenApiParameter(
    "page_size", _whole_number(1, selectors.MAX_PAGE_SIZE), description="files per page (at most 500)"
)
TARGET_SIZE = OpenApiParameter(
    "target_size",
    _whole_number(1, selectors.MAX_BYTES),
    description="split target size in bytes (default 128 MiB)",
)
OPEN_FILE_COST = OpenApiParameter(
    "open_file_cost",
    _whole_number(0, selectors.MAX_BYTES),
    description="bytes counted per opened file (default 4 MiB)",
)
FROM = OpenApiParameter("from", str, description="exclusive start instant (default: the parent of `to`)")
TO = OpenApiParameter("to", str, description="inclusive end instant (default: the latest)")


class CatalogViewSet(ApiDefaults, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = CatalogSerializer
    queryset = Catalog.objects.none()

    def get_queryset(self):
        user = self.request.user
        return catalogs_visible(user, selectors.catalog_list(tables=tables_scope(user)))

    @extend_schema(request=CatalogCreateSerializer, responses={201: CatalogSerializer})
    def create(self, request):
        data = CatalogCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        catalog = services.catalog_create(**data.validated_data)
        # Read back through the list's query so the answer has the same fields (table_count) as a GET.
        catalog = selectors.catalog_list().get(pk=catalog.pk)
        return Response(CatalogSerializer(catalog).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=CatalogUpdateSerializer,
        responses={200: CatalogSerializer},
        description="Replace the catalog's properties (validated and the catalog reached, as the"
        " console's edit form does; a secret sent blank or masked keeps the stored one). Admins only.",
    )
    def partial_update(self, request, pk=None):
        catalog = self.get_object()
        data = CatalogUpdateSerializer(data=request.data, context={"catalog": catalog})
        data.is_valid(raise_exception=True)
        services.catalog_update(catalog=catalog, properties=data.validated_data["properties"])
        return Response(CatalogSerializer(self.get_queryset().get(pk=catalog.pk)).data)

    @extend_schema(
        responses={204: None, 409: CONFLICT},
        description="Delete the catalog; refused (409) while tables are registered from it. No table,"
        " data or Iceberg catalog entry is touched. Admins only.",
    )
    def destroy(self, request, pk=None):
        services.catalog_delete(catalog=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: SyncReportSerializer})
    @action(detail=True, methods=["post"])
    def sync(self, request, pk=None):
        report = services.catalog_sync(catalog=self.get_object())
        return Response(asdict(report))


class TableViewSet(ApiDefaults, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = TableSerializer
    queryset = Table.objects.none()
    action_roles = {"process_preview": OPERATOR}

    def get_queryset(self):
        scope = tables_scope(self.request.user)  # what the user's teams may see (console/teams)
        if self.action != "list":  # the list's filters never hide the table a detail URL names
            return selectors.table_list(tables=scope)
        params = self.request.query_params
        return selectors.table_list(
            search=params.get("search", ""), format=params.get("format", ""), tables=scope
        )

    @extend_schema(
        parameters=[
            OpenApiParameter("search", str, description="part of the name, identifier or location"),
            OpenApiParameter("format", str, enum=format_values(), description="only tables of this format"),
        ]
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=TableRegisterSerializer, responses={201: TableSerializer})
    def create(self, request):
        data = TableRegisterSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        table = services.table_register(**data.validated_data)
        table_owner_assign(table=table, user=request.user)
        return Response(TableSerializer(table).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=ProcessPreviewRequestSerializer,
        responses={200: ProcessPreviewSerializer},
        description="What a process (same body as a submission: action, params) would do on this table,"
        " computed from metadata without writing or deleting anything: file groups, files and bytes in,"
        " files and bytes expected out, objects to delete, and the health score now and predicted after."
        " Bad input is a 400 with the reason, as at submission.",
    )
    @action(detail=True, methods=["post"], url_path="processes/preview", url_name="process-preview")
    def process_preview(self, request, pk=None):
        data = ProcessPreviewRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        answer = process_services.process_preview(table=self.get_object(), **data.validated_data)
        return Response(ProcessPreviewSerializer(answer).data)

    @extend_schema(request=None, responses={200: TableSerializer})
    @action(detail=True, methods=["post"])
    def refresh(self, request, pk=None):
        return Response(TableSerializer(services.table_refresh(table=self.get_object())).data)

    # --- reads through the spec API ---------------------------------------------------------------

    @extend_schema(responses={200: InstantSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)  # the whole timeline, one list
    def snapshots(self, request, pk=None):
        instants = selectors.table_snapshots(table=self.get_object())
        return Response(InstantSerializer(instants, many=True).data)

    @extend_schema(parameters=[AT, FILTER, PAGE, PAGE_SIZE], responses={200: FilesPageSerializer})
    @action(detail=True, methods=["get"])
    def files(self, request, pk=None):
        query = selectors.spec_query_parse(request.query_params)
        page = selectors.table_files(table=self.get_object(), query=query)
        return Response(FilesPageSerializer(page).data)

    @extend_schema(parameters=[AT, FILTER, TARGET_SIZE, OPEN_FILE_COST], responses={200: SplitPlanSerializer})
    @action(detail=True, methods=["get"])
    def splits(self, request, pk=None):
        query = selectors.spec_query_parse(request.query_params)
        plan = selectors.table_splits(table=self.get_object(), query=query)
        return Response(SplitPlanSerializer(plan).data)

    @extend_schema(
        parameters=[AT, FILTER],
        responses={
            200: inline_serializer(
                "PartitionsAt",
                {
                    "instant": InstantSerializer(allow_null=True),
                    "small_file_bytes": serializers.IntegerField(),
                    "partitions": PartitionSerializer(many=True),
                },
            )
        },
    )
    @action(detail=True, methods=["get"])
    def partitions(self, request, pk=None):
        query = selectors.spec_query_parse(request.query_params)
        instant, partitions, small = selectors.table_partitions(table=self.get_object(), query=query)
        return Response(
            {
                "instant": InstantSerializer(instant).data if instant else None,
                "small_file_bytes": small,
                "partitions": PartitionSerializer(partitions, many=True).data,
            }
        )

    @extend_schema(
        parameters=[FROM, TO],
        responses={
            200: inline_serializer(
                "ChangesBetween",
                {
                    "from": InstantSerializer(allow_null=True),
                    "to": InstantSerializer(allow_null=True),
                    "partitions": PartitionChangeSerializer(many=True),
                    "files": FileChangeSerializer(many=True),
                },
            )
        },
    )
    @action(detail=True, methods=["get"])
    def changes(self, request, pk=None):
        query = selectors.spec_query_parse(request.query_params)
        start, end, partitions, files = selectors.table_changes(table=self.get_object(), query=query)
        return Response(
            {
                "from": InstantSerializer(start).data if start else None,
                "to": InstantSerializer(end).data if end else None,
                "partitions": PartitionChangeSerializer(partitions, many=True).data,
                "files": FileChangeSerializer(files, many=True).data,
            }
        )
