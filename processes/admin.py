from __future__ import annotations

from django import forms
from django.contrib import admin

from console.admin_site import RoleModelAdmin
from console.errors import InvalidInput
from processes.models import PluginConfig, Process, TableState
from processes.registry import conflicts_if_enabled, factory_classes, validate_properties


class PluginConfigForm(forms.ModelForm):
    class Meta:
        model = PluginConfig
        fields = ["name", "enabled", "priority", "properties"]

    def clean(self):
        cleaned = super().clean()
        name = cleaned.get("name")
        factory_cls = factory_classes().get(name)
        if factory_cls is None:
            raise forms.ValidationError({"name": f"no installed process factory is called {name!r}"})
        try:
            cleaned["properties"] = validate_properties(factory_cls, cleaned.get("properties") or {})
        except InvalidInput as error:
            raise forms.ValidationError({"properties": error.message}) from None
        if cleaned.get("enabled"):
            conflict = conflicts_if_enabled(name)
            if conflict:
                raise forms.ValidationError({"enabled": conflict})
        return cleaned


@admin.register(PluginConfig)
class PluginConfigAdmin(RoleModelAdmin):
    form = PluginConfigForm
    list_display = ["name", "enabled", "priority", "supported", "updated_at"]
    list_editable = ["priority"]
    actions = ["disable_plugins"]

    @admin.display(description="formats → actions")
    def supported(self, config: PluginConfig) -> str:
        cls = factory_classes().get(config.name)
        if cls is None:
            return "not installed"
        return "; ".join(
            f"{fmt}: {', '.join(sorted(actions))}"
            for fmt, actions in sorted(cls().supported_actions().items())
        )

    @admin.action(description="Disable the selected plugins")
    def disable_plugins(self, request, queryset):
        queryset.update(enabled=False)


@admin.register(Process)
class ProcessAdmin(RoleModelAdmin):
    list_display = ["id", "table", "action", "status", "attempt", "trigger", "created_at", "finished_at"]
    list_filter = ["status", "action", "trigger"]
    search_fields = ["table__name"]
    raw_id_fields = ["table", "retry_of", "requested_by"]


@admin.register(TableState)
class TableStateAdmin(RoleModelAdmin):
    list_display = ["table", "key", "value", "updated_at"]
    search_fields = ["key", "table__name"]
