from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User

from console.admin_site import RoleModelAdmin
from console.models import Catalog, Table


@admin.register(Catalog)
class CatalogAdmin(RoleModelAdmin):
    list_display = ["name", "kind", "last_synced_at"]
    search_fields = ["name"]


@admin.register(Table)
class TableAdmin(RoleModelAdmin):
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


# Users and roles are managed by the admin role too.
class RoleUserAdmin(RoleModelAdmin, UserAdmin):
    pass


class RoleGroupAdmin(RoleModelAdmin, GroupAdmin):
    pass


admin.site.unregister(User)
admin.site.unregister(Group)
admin.site.register(User, RoleUserAdmin)
admin.site.register(Group, RoleGroupAdmin)


# DRF's token admin checks model permissions; tokens are managed by the admin role like the rest.
try:
    from rest_framework.authtoken.admin import TokenAdmin
    from rest_framework.authtoken.models import TokenProxy
except ImportError:  # authtoken not installed
    pass
else:

    class RoleTokenAdmin(RoleModelAdmin, TokenAdmin):
        pass

    if admin.site.is_registered(TokenProxy):
        admin.site.unregister(TokenProxy)
    admin.site.register(TokenProxy, RoleTokenAdmin)
