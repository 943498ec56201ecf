from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User

from console.admin_site import RoleModelAdmin
from console.plugin_form import PropertiesField
from processes.models import PluginConfig, Process, TableState
from processes.registry import broken_factories, conflicts_if_enabled, factory_classes, validate_properties
from storage.errors import InvalidInput
from storage.models import Catalog, Table
from storage.secrets import MASK, mask_mapping, merge_secrets
from storage.services.tables import catalog_properties_checked


class CatalogAdminForm(forms.ModelForm):
    """Secrets in a catalog's properties are write-only: shown masked, and a masked (or blank)
    secret sent back keeps the stored value. A new catalog is checked like one the console or the
    API creates (its root listed or its catalog connected to) before it is saved."""

    class Meta:
        model = Catalog
        fields = ["name", "kind", "properties"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["properties"] = mask_mapping(self.instance.properties)

    def clean_properties(self):
        submitted = self.cleaned_data.get("properties") or {}
        if not isinstance(submitted, dict):
            raise forms.ValidationError("the properties must be a JSON object")
        stored = Catalog.objects.filter(pk=self.instance.pk).values_list("properties", flat=True).first()
        return merge_secrets(stored or {}, submitted)

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk is None and not self.errors:
            try:
                cleaned["properties"] = catalog_properties_checked(
                    cleaned["name"], cleaned["kind"], cleaned.get("properties") or {}
                )
            except InvalidInput as error:
                # The form is shown again: with the typed secrets masked (they must be typed again).
                self.data = self.data.copy()
                self.data["properties"] = json.dumps(mask_mapping(cleaned.get("properties") or {}))
                raise forms.ValidationError({"properties": error.message}) from None
        return cleaned


@admin.register(Catalog)
class CatalogAdmin(RoleModelAdmin):
    form = CatalogAdminForm
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
        """API tokens are credentials: the list shows only their first characters."""

        list_display = ("masked_key", "user", "created")

        @admin.display(description="key")
        def masked_key(self, token) -> str:
            return f"{token.key[:4]}{MASK}"

    if admin.site.is_registered(TokenProxy):
        admin.site.unregister(TokenProxy)
    admin.site.register(TokenProxy, RoleTokenAdmin)


class PluginConfigForm(forms.ModelForm):
    """A configured plugin's properties are a form generated from its schema (console/plugin_form.py);
    a new one's, until its factory is known, are JSON."""

    class Meta:
        model = PluginConfig
        fields = ["name", "enabled", "priority", "properties"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        factory_cls = factory_classes().get(self.instance.name) if self.instance.pk else None
        if factory_cls is not None:
            self.fields["properties"] = PropertiesField(
                factory_cls.properties_schema,
                factory_cls.default_properties,
                label="Properties",
                help_text="The factory's settings; a table's own properties override some of them.",
            )

    def clean(self):
        cleaned = super().clean()
        name = cleaned.get("name")
        factory_cls = factory_classes().get(name)
        if factory_cls is None:
            raise forms.ValidationError({"name": f"no installed process factory is called {name!r}"})
        try:
            cleaned["properties"] = validate_properties(factory_cls, cleaned.get("properties") or {})
        except InvalidInput as error:
            if isinstance(self.fields["properties"], PropertiesField):
                self.fields["properties"].place(error.message)
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

    def changelist_view(self, request, extra_context=None):
        for name, reason in sorted(broken_factories().items()):
            messages.error(request, f"Process factory plugin {name!r} is broken and not loaded: {reason}")
        return super().changelist_view(request, extra_context)

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


# Alerts (issue 16): channels (with a "send test" action), rules, episodes, deliveries.
from console import alerts_admin, groups_admin  # noqa: E402,F401  (groups_admin: resource groups, issue 31)
