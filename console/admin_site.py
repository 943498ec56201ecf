"""The Django admin for the admin role: membership of the ``admin`` group (or superuser) is what
opens it, so roles stay the one source of access rules."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig

from console.roles import ADMIN, has_role


class LakewardenAdminSite(admin.AdminSite):
    site_header = "Lakewarden administration"
    site_title = "Lakewarden admin"
    index_title = "Plugins, storages, catalogs and users"

    def has_permission(self, request) -> bool:
        return request.user.is_active and has_role(request.user, ADMIN)


class LakewardenAdminConfig(AdminConfig):
    default_site = "console.admin_site.LakewardenAdminSite"


class RoleModelAdmin(admin.ModelAdmin):
    """Model admin whose permissions follow the admin role rather than per-model permissions."""

    def has_module_permission(self, request) -> bool:
        return has_role(request.user, ADMIN)

    def has_view_permission(self, request, obj=None) -> bool:
        return has_role(request.user, ADMIN)

    def has_add_permission(self, request) -> bool:
        return has_role(request.user, ADMIN)

    def has_change_permission(self, request, obj=None) -> bool:
        return has_role(request.user, ADMIN)

    def has_delete_permission(self, request, obj=None) -> bool:
        return has_role(request.user, ADMIN)
