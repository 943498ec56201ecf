from __future__ import annotations

from django.contrib import admin

from console.models import Catalog, Table


@admin.register(Catalog)
class CatalogAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "last_synced_at"]
    search_fields = ["name"]


@admin.register(Table)
class TableAdmin(admin.ModelAdmin):
    list_display = ["name", "format", "catalog", "file_count", "total_bytes", "refreshed_at"]
    list_filter = ["format", "catalog"]
    search_fields = ["name", "identifier", "location"]
    readonly_fields = [
        "current_instant",
        "file_count",
        "total_bytes",
        "record_count",
        "instant_count",
        "refreshed_at",
    ]
