"""The audit trail in the admin: read only (no add, change or delete, no bulk actions)."""

from __future__ import annotations

from django.contrib import admin

from console.admin_site import RoleModelAdmin
from console.audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(RoleModelAdmin):
    list_display = ["at", "username", "action", "target_model", "target_id", "target_label", "status"]
    list_filter = ["action"]
    search_fields = ["username", "action", "target_label", "target_id"]
    date_hierarchy = "at"
    actions = None

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in self.model._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
