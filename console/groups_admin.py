"""Resource groups in the Django admin (admin role): the same rules as the API, checked by the
service (processes/groups/services.py) from the form; tables assigned by name in an inline. The
``default`` group cannot be deleted. Imported at the end of console/admin.py."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from console.admin_site import RoleModelAdmin
from processes.groups import services
from processes.groups.models import ResourceGroup, ResourceGroupTable
from storage.errors import Conflict, InvalidInput


class ResourceGroupForm(forms.ModelForm):
    class Meta:
        model = ResourceGroup
        fields = [
            "name",
            "description",
            "queue",
            "max_concurrency",
            "compute_budget_seconds",
            "catalogs",
            "namespace_patterns",
        ]

    def clean(self):
        data = super().clean()
        probe = ResourceGroup.objects.get(pk=self.instance.pk) if self.instance.pk else ResourceGroup()
        values = {key: data[key] for key in services.FIELDS if key in data}
        values["namespace_patterns"] = values.get("namespace_patterns") or []
        try:
            services.resource_group_check(probe, values, list(data.get("catalogs") or []))
        except InvalidInput as error:
            field = error.field if error.field in self.fields else None
            raise forms.ValidationError({field or "__all__": error.message}) from None
        return data


class AssignmentForm(forms.ModelForm):
    class Meta:
        model = ResourceGroupTable
        fields = ["table"]

    def clean_table(self):
        table = self.cleaned_data["table"]
        other = (
            ResourceGroupTable.objects.filter(table=table)
            .exclude(group_id=self.instance.group_id)
            .select_related("group")
            .first()
        )
        if other is not None:
            raise forms.ValidationError(
                f"table {table.name} is already assigned to resource group {other.group.name}; unassign it there first"
            )
        return table


class AssignmentInline(admin.TabularInline):
    model = ResourceGroupTable
    form = AssignmentForm
    raw_id_fields = ["table"]
    extra = 0

    def has_add_permission(self, request, obj=None) -> bool:
        return obj is None or not obj.is_default

    def has_change_permission(self, request, obj=None) -> bool:
        return True

    def has_delete_permission(self, request, obj=None) -> bool:
        return True

    def has_view_permission(self, request, obj=None) -> bool:
        return True


@admin.register(ResourceGroup)
class ResourceGroupAdmin(RoleModelAdmin):
    form = ResourceGroupForm
    list_display = ["name", "effective_queue", "max_concurrency", "compute_budget_seconds", "updated_at"]
    filter_horizontal = ["catalogs"]
    inlines = [AssignmentInline]
    actions = None  # no bulk delete: each deletion goes through the service

    def has_delete_permission(self, request, obj=None) -> bool:
        return super().has_delete_permission(request, obj) and not (obj is not None and obj.is_default)

    def delete_model(self, request, obj) -> None:
        try:
            services.resource_group_delete(group=obj)
        except Conflict as error:
            messages.error(request, error.message)
