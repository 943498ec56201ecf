"""Which action a state-changing request is, and on what: named from the resolved URL.

``ACTIONS`` maps a URL name (``view_name``: ``console:table-register``, ``process-cancel``) to an
action name, per method where one URL does several things; ``{verb}`` is filled from the URL.
A URL missing from the table is recorded under its URL name, never dropped. Admin pages are named
from their model and operation (``admin:storage_table_delete`` -> ``table.unregister``).
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.db import models

ANY = "*"

ACTIONS: dict[str, dict[str, str]] = {
    # console
    "console:catalog-create": {ANY: "catalog.create"},
    "console:catalog-sync": {ANY: "catalog.sync"},
    "console:catalog-edit": {ANY: "catalog.update"},
    "console:catalog-delete": {ANY: "catalog.delete"},
    "console:catalog-test": {ANY: "catalog.test"},
    "console:table-register": {ANY: "table.register"},
    "console:table-refresh": {ANY: "table.refresh"},
    "console:table-overrides": {"POST": "table.update"},
    "console:table-process-run": {ANY: "process.run"},
    "console:table-process-preview": {ANY: "process.preview"},
    "console:process-act": {ANY: "process.{verb}"},
    "console:process-trash-restore": {ANY: "trash.restore"},
    "console:query-run": {ANY: "query.run"},
    "console:query-cancel": {ANY: "query.cancel"},
    "console:cached-result-act": {ANY: "cached-result.{verb}"},
    "console:storage-create": {ANY: "storage.create"},
    "console:storage-edit": {ANY: "storage.update"},
    "console:storage-test": {ANY: "storage.test"},
    "console:storage-delete": {ANY: "storage.delete"},
    "console:alert-channel-toggle": {ANY: "alert-channel.update"},
    "console:alert-rule-toggle": {ANY: "alert-rule.update"},
    "console:alert-channel-test": {ANY: "alert-channel.test"},
    "console:alert-channel-create": {"POST": "alert-channel.create"},
    "console:alert-channel-edit": {"POST": "alert-channel.update"},
    "console:alert-channel-delete": {ANY: "alert-channel.delete"},
    "console:alert-rule-create": {"POST": "alert-rule.create"},
    "console:alert-rule-edit": {"POST": "alert-rule.update"},
    "console:alert-rule-delete": {ANY: "alert-rule.delete"},
    "console:resource-group-create": {ANY: "resource-group.create"},
    "console:resource-group-update": {ANY: "resource-group.update"},
    # REST API
    "catalog-list": {"POST": "catalog.create"},
    "catalog-detail": {"PUT": "catalog.update", "PATCH": "catalog.update", "DELETE": "catalog.delete"},
    "catalog-sync": {ANY: "catalog.sync"},
    "table-list": {"POST": "table.register"},
    "table-detail": {"PUT": "table.update", "PATCH": "table.update", "DELETE": "table.unregister"},
    "table-refresh": {ANY: "table.refresh"},
    "table-process-preview": {ANY: "process.preview"},
    "process-list": {"POST": "process.run"},
    "process-cancel": {ANY: "process.cancel"},
    "process-kill": {ANY: "process.kill"},
    "process-retry": {ANY: "process.retry"},
    "process-restore": {ANY: "trash.restore"},
    "plugin-detail": {ANY: "plugin.configure"},
    "storage-list": {"POST": "storage.create"},
    "storage-detail": {"PUT": "storage.update", "PATCH": "storage.update", "DELETE": "storage.delete"},
    "storage-test": {ANY: "storage.test"},
    "query-list": {"POST": "query.run"},
    "query-cancel": {ANY: "query.cancel"},
    "cached-result-detail": {"DELETE": "cached-result.drop"},
    "cached-result-invalidate": {ANY: "cached-result.invalidate"},
    "alert-channel-list": {"POST": "alert-channel.create"},
    "alert-channel-detail": {"DELETE": "alert-channel.delete"},
    "alert-channel-test": {ANY: "alert-channel.test"},
    "alert-rule-list": {"POST": "alert-rule.create"},
    "alert-rule-detail": {"PATCH": "alert-rule.update", "DELETE": "alert-rule.delete"},
    "resource-group-list": {"POST": "resource-group.create"},
    "resource-group-detail": {"PATCH": "resource-group.update", "DELETE": "resource-group.delete"},
}

# Where a URL's ``pk`` points, by the first two words of its name or else the first
# (``alert-rule-edit`` -> AlertRule, ``process-kill`` -> Process).
TARGETS: dict[str, str] = {
    "alert-channel": "processes.AlertChannel",
    "alert-rule": "processes.AlertRule",
    "catalog": "storage.Catalog",
    "table": "storage.Table",
    "process": "processes.Process",
    "storage": "storage.StorageBackend",
    "query": "processes.Query",
    "cached": "storage.CachedResult",
    "plugin": "processes.PluginConfig",
    "resource": "processes.ResourceGroup",
}

# Admin pages: model -> the noun of its actions, and the verbs of the admin's operations.
ADMIN_NOUNS = {
    "storagebackend": "storage",
    "pluginconfig": "plugin",
    "tokenproxy": "token",
    "resourcegroup": "resource-group",
}
ADMIN_VERBS = {"add": "create", "change": "update", "delete": "delete", "changelist": "bulk"}
ADMIN_SPECIAL = {
    "table.create": "table.register",
    "table.delete": "table.unregister",
    "plugin.update": "plugin.configure",
}


def action_name(view_name: str, method: str, kwargs: dict[str, Any]) -> str:
    """The action a request to ``view_name`` is (its URL name when the table does not know it)."""
    if view_name.startswith("admin:"):
        return _admin_action(view_name) or view_name
    by_method = ACTIONS.get(view_name)
    if by_method is None:
        return view_name or "unknown"
    template = by_method.get(method) or by_method.get(ANY) or f"{view_name}.{method.lower()}"
    try:
        return template.format(**kwargs)
    except (KeyError, IndexError):
        return template


def _admin_action(view_name: str) -> str | None:
    model, operation = _admin_parts(view_name)
    if model is None:
        return None
    noun = ADMIN_NOUNS.get(model._meta.model_name, model._meta.model_name)
    name = f"{noun}.{ADMIN_VERBS.get(operation, operation)}"
    return ADMIN_SPECIAL.get(name, name)


def _admin_parts(view_name: str) -> tuple[type[models.Model] | None, str]:
    """``admin:storage_table_change`` -> (Table, "change")."""
    rest = view_name.removeprefix("admin:")
    for app_config in apps.get_app_configs():
        prefix = f"{app_config.label}_"
        if not rest.startswith(prefix):
            continue
        model_name, _, operation = rest[len(prefix) :].rpartition("_")
        try:
            return app_config.get_model(model_name), operation
        except LookupError:
            continue
    return None, ""


def target_of(view_name: str, kwargs: dict[str, Any]) -> tuple[str, str, str]:
    """(model label, id, label) of the object a URL names, or empty strings."""
    if view_name.startswith("admin:"):
        model, _ = _admin_parts(view_name)
        pk = kwargs.get("object_id")
    else:
        words = view_name.split(":")[-1].split("-")
        label = TARGETS.get("-".join(words[:2])) or TARGETS.get(words[0])
        model = apps.get_model(label) if label else None
        pk = kwargs.get("pk")
    if model is None:
        return "", "", ""
    return describe(model, pk)


def describe(model: type[models.Model], pk: Any) -> tuple[str, str, str]:
    if pk in (None, ""):
        return model._meta.label, "", ""
    try:
        obj = model._default_manager.filter(pk=pk).first()
    except (ValueError, TypeError):  # a malformed id: the view answers it
        obj = None
    return model._meta.label, str(pk)[:64], str(obj)[:255] if obj is not None else ""
