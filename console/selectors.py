"""Reads shared by pages and the API."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet, Sum

from console.models import Catalog, Table


def table_list(*, search: str = "", format: str = "", catalog_id: int | None = None) -> QuerySet[Table]:
    tables = Table.objects.select_related("catalog")
    if search:
        tables = tables.filter(
            Q(name__icontains=search) | Q(identifier__icontains=search) | Q(location__icontains=search)
        )
    if format:
        tables = tables.filter(format=format)
    if catalog_id:
        tables = tables.filter(catalog_id=catalog_id)
    return tables


def catalog_list() -> QuerySet[Catalog]:
    return Catalog.objects.annotate(table_count=Count("tables")).order_by("name")


def lakehouse_totals() -> dict[str, int]:
    totals = Table.objects.aggregate(
        tables=Count("id"), files=Sum("file_count"), bytes=Sum("total_bytes"), records=Sum("record_count")
    )
    return {key: value or 0 for key, value in totals.items()}
