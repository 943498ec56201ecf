from __future__ import annotations

from dataclasses import asdict

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from console import selectors, services
from console.api.serializers import (
    CatalogCreateSerializer,
    CatalogSerializer,
    SyncReportSerializer,
    TableRegisterSerializer,
    TableSerializer,
)
from console.models import Catalog, Table


class CatalogViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = CatalogSerializer
    queryset = Catalog.objects.none()

    def get_queryset(self):
        return selectors.catalog_list()

    @extend_schema(request=CatalogCreateSerializer, responses={201: CatalogSerializer})
    def create(self, request):
        data = CatalogCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        catalog = services.catalog_create(**data.validated_data)
        return Response(CatalogSerializer(catalog).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: SyncReportSerializer})
    @action(detail=True, methods=["post"])
    def sync(self, request, pk=None):
        report = services.catalog_sync(catalog=self.get_object())
        return Response(asdict(report))


class TableViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = TableSerializer
    queryset = Table.objects.none()

    def get_queryset(self):
        params = self.request.query_params
        return selectors.table_list(search=params.get("search", ""), format=params.get("format", ""))

    @extend_schema(request=TableRegisterSerializer, responses={201: TableSerializer})
    def create(self, request):
        data = TableRegisterSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        table = services.table_register(**data.validated_data)
        return Response(TableSerializer(table).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: TableSerializer})
    @action(detail=True, methods=["post"])
    def refresh(self, request, pk=None):
        return Response(TableSerializer(services.table_refresh(table=self.get_object())).data)
