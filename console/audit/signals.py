"""Signal handlers of the audit trail: sign-ins, failed sign-ins (the attempted username, never the
password), sign-outs, role changes (a user's groups, from any surface, the admin included) and the
before/after of settings: catalogs, tables' overrides, storages, plugin configurations."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db.models.signals import m2m_changed, post_save, pre_save

from console.audit import recording
from console.roles import ROLES
from processes.models import PluginConfig, ResourceGroup
from storage.models import Catalog, StorageBackend, Table

#: The settings each model's diff covers (a table's refresh changes other fields: not audited).
WATCHED: dict[type, tuple[str, ...]] = {
    Catalog: ("name", "kind", "properties"),
    Table: ("properties",),
    StorageBackend: ("name", "type", "config", "quota_bytes", "is_default"),
    PluginConfig: ("enabled", "priority", "properties"),
    ResourceGroup: ("name", "queue", "max_concurrency", "compute_budget_seconds", "namespace_patterns"),
}
NOUNS = {
    Catalog: "catalog",
    Table: "table",
    StorageBackend: "storage",
    PluginConfig: "plugin",
    ResourceGroup: "resource-group",
}
MAX_CHANGES = 50


def connect() -> None:
    user_logged_in.connect(_logged_in, dispatch_uid="audit-login")
    user_logged_out.connect(_logged_out, dispatch_uid="audit-logout")
    user_login_failed.connect(_login_failed, dispatch_uid="audit-login-failed")
    m2m_changed.connect(_groups_changed, sender=get_user_model().groups.through, dispatch_uid="audit-groups")
    for model in WATCHED:
        pre_save.connect(_before_save, sender=model, dispatch_uid=f"audit-pre-{model.__name__}")
        post_save.connect(_after_save, sender=model, dispatch_uid=f"audit-post-{model.__name__}")


# --- signing in and out -----------------------------------------------------------------------------


def _logged_in(sender, request, user, **kwargs) -> None:
    recording.write(
        **recording.who(request, user),
        action="login",
        target_model=user._meta.label,
        target_id=str(user.pk),
        target_label=user.get_username(),
        details={"backend": getattr(user, "backend", "")},
    )


def _logged_out(sender, request, user, **kwargs) -> None:
    if user is not None and user.is_authenticated:
        recording.write(**recording.who(request, user), action="logout")


def _login_failed(sender, credentials: dict[str, Any], request=None, **kwargs) -> None:
    attempted = str(credentials.get("username") or credentials.get(get_user_model().USERNAME_FIELD) or "")
    values = recording.who(request, None) if request is not None else {}
    values.update(username=attempted[:150], action="login.failed")
    recording.write(**values, details={"attempted_username": attempted[:150]})


# --- roles --------------------------------------------------------------------------------------------


def _group_names(user_pk) -> list[str]:
    return sorted(Group.objects.filter(user__pk=user_pk).values_list("name", flat=True))


def _role(names: list[str]) -> str | None:
    held = [role for role in ROLES if role in names]
    return held[-1] if held else None


def _affected_users(instance, reverse: bool, pk_set) -> list:
    if not reverse:
        return [instance.pk]
    if pk_set:
        return sorted(pk_set)
    return list(instance.user_set.values_list("pk", flat=True))  # a group cleared


def _groups_changed(sender, instance, action: str, reverse: bool, pk_set, **kwargs) -> None:
    stash: dict = instance.__dict__.setdefault("_audit_groups_before", {})
    if action.startswith("pre_"):
        for user_pk in _affected_users(instance, reverse, pk_set):
            stash.setdefault(user_pk, _group_names(user_pk))
        return
    users = get_user_model()._default_manager.in_bulk(list(stash))
    for user_pk, before in list(stash.items()):
        after = _group_names(user_pk)
        user = users.get(user_pk)
        if user is None:
            continue
        _note_role_change(user, before, after)


def _note_role_change(user, before: list[str], after: list[str]) -> None:
    target = (user._meta.label, str(user.pk), user.get_username())
    change = {
        "model": user._meta.label,
        "id": user.pk,
        "label": user.get_username(),
        "field": "groups",
        "before": {"groups": before, "role": _role(before)},
        "after": {"groups": after, "role": _role(after)},
    }
    audit = recording.current()
    if audit is not None:
        # One entry per user and request, however many add/remove steps ``groups.set`` takes.
        changes = audit.details.setdefault("changes", [])
        changes[:] = [c for c in changes if not (c.get("field") == "groups" and c.get("id") == user.pk)]
        recording.note_action("role.change", target)
        if before != after:
            changes.append(change)
        return
    if before != after:
        recording.note_change(change, action="role.change", target=target)


# --- settings -------------------------------------------------------------------------------------------


def _values(instance, fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(instance, name) for name in fields}


def _before_save(sender, instance, update_fields=None, raw=False, **kwargs) -> None:
    fields = WATCHED[sender]
    if raw or (update_fields is not None and not set(update_fields) & set(fields)):
        instance.__dict__["_audit_before"] = None
        return
    if instance.pk is None or instance._state.adding:
        instance.__dict__["_audit_before"] = {}
        return
    instance.__dict__["_audit_before"] = (
        sender._default_manager.filter(pk=instance.pk).values(*fields).first() or {}
    )


def _after_save(sender, instance, created: bool, raw=False, **kwargs) -> None:
    before = instance.__dict__.pop("_audit_before", None)
    if raw or before is None or (created and recording.current() is None):
        return  # creations outside a request (a sync on a worker) are not user actions
    after = _values(instance, WATCHED[sender])
    before_diff, after_diff = _diff(before, after)
    if not created and before_diff == after_diff:
        return
    secret_keys = _secret_keys(instance)
    change = {
        "model": sender._meta.label,
        "id": instance.pk,
        "label": str(instance)[:255],
        "created": created,
        "before": recording.masked(before_diff, secret_keys=secret_keys),
        "after": recording.masked(after_diff, secret_keys=secret_keys),
    }
    audit = recording.current()
    if audit is not None and len(audit.details.get("changes", [])) >= MAX_CHANGES:
        audit.details["more_changes"] = audit.details.get("more_changes", 0) + 1
        return
    target = (sender._meta.label, str(instance.pk), str(instance))
    recording.note_change(change, action=f"{NOUNS[sender]}.change", target=target)


def _diff(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The changed fields only; for a mapping (properties, config), only its changed keys."""
    old: dict[str, Any] = {}
    new: dict[str, Any] = {}
    for name, value in after.items():
        previous = before.get(name)
        if previous == value:
            continue
        if isinstance(previous, dict) and isinstance(value, dict):
            keys = sorted(k for k in set(previous) | set(value) if previous.get(k) != value.get(k))
            old[name] = {k: previous[k] for k in keys if k in previous}
            new[name] = {k: value[k] for k in keys if k in value}
        else:
            old[name], new[name] = previous, value
    return old, new


def _secret_keys(instance) -> frozenset[str]:
    """Keys a storage type declares secret, besides those secret by name."""
    if not isinstance(instance, StorageBackend):
        return frozenset()
    from storage.results import registry

    try:
        return frozenset(registry.storage_type(instance.type).secret_keys)
    except Exception:  # an unknown type: masked by name only
        return frozenset()
