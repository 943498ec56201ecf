"""Creating, changing and deleting resource groups, with every bad-input rule in one place (the
API, the admin and the console call these): budgets of at least 1, a queue of its own, no table
claimed by two groups (the same catalog, an overlapping namespace pattern, an explicit assignment
of a table another group holds), ``default`` never deleted nor renamed. A pattern that matches no
table is allowed (tables may come later) but said (``membership.group_warnings``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import transaction

from processes.groups.membership import tables_matching
from processes.groups.models import DEFAULT_GROUP, ResourceGroup, ResourceGroupTable
from processes.models import ACTIVE_STATUSES
from storage.errors import Conflict, InvalidInput
from storage.models import Catalog, Table

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,59}$")
QUEUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
MAX_PATTERNS = 50
#: Budgets above these are typing mistakes (a compute budget of a year per hour).
MAX_CONCURRENCY = 1000
MAX_COMPUTE_SECONDS = 1000 * 3600

FIELDS = ("name", "description", "queue", "max_concurrency", "compute_budget_seconds", "namespace_patterns")


def _positive(value: Any, field: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{field} must be a whole number", field=field)
    if value < 1:
        raise InvalidInput(
            f"{field} must be at least 1 (got {value}); a group that may run nothing would hold its work forever",
            field=field,
        )
    if value > maximum:
        raise InvalidInput(f"{field} must be at most {maximum:,} (got {value:,})", field=field)
    return value


def _patterns(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise InvalidInput("namespace_patterns must be a list of glob strings", field="namespace_patterns")
    cleaned = [p.strip() for p in value]
    if len(cleaned) > MAX_PATTERNS:
        raise InvalidInput(f"at most {MAX_PATTERNS} namespace patterns", field="namespace_patterns")
    for pattern in cleaned:
        if not pattern or len(pattern) > 200 or "\x00" in pattern:
            raise InvalidInput(
                f"namespace pattern {pattern!r} must be 1 to 200 characters", field="namespace_patterns"
            )
    return sorted(set(cleaned), key=cleaned.index)


def _check_queue(group: ResourceGroup) -> None:
    if group.queue and not QUEUE.match(group.queue):
        raise InvalidInput(f"queue {group.queue!r} is not a valid queue name", field="queue")
    queue = group.effective_queue
    reserved = {settings.CELERY_TASK_DEFAULT_QUEUE: "the light queue (scheduler, reaper)"}
    if not group.is_default:
        reserved[settings.LAKEWARDEN_HEAVY_QUEUE] = "the default group's queue"
    if queue in reserved:
        raise InvalidInput(
            f"queue {queue} is {reserved[queue]}; a group needs a queue of its own", field="queue"
        )
    for other in ResourceGroup.objects.exclude(pk=group.pk):
        if other.effective_queue == queue:
            raise InvalidInput(f"queue {queue} is already resource group {other.name}'s", field="queue")


def _check_claims(group: ResourceGroup, catalogs: list[Catalog], tables: list[Table]) -> None:
    """400 naming both groups when another group claims the same tables at the same level."""
    others = ResourceGroup.objects.exclude(pk=group.pk)
    for catalog in catalogs:
        holder = others.filter(catalogs=catalog).first()
        if holder:
            raise InvalidInput(
                f"catalog {catalog.name} is already claimed by resource group {holder.name}; "
                f"a table is in one group: remove it there first or assign tables of it to {group.name} by name",
                field="catalogs",
            )
    for assignment in (
        ResourceGroupTable.objects.filter(table__in=tables)
        .exclude(group_id=group.pk)
        .select_related("group", "table")
    ):
        raise InvalidInput(
            f"table {assignment.table.name} is already assigned to resource group {assignment.group.name}; "
            f"unassign it there before assigning it to {group.name}",
            field="tables",
        )
    for other in others.exclude(namespace_patterns=[]):
        for mine in group.namespace_patterns:
            for theirs in other.namespace_patterns:
                both = [mine] if mine == theirs else tables_matching(mine, also=theirs)
                if both:
                    what = "the same pattern" if mine == theirs else f"both match table(s) {', '.join(both)}"
                    raise InvalidInput(
                        f"namespace pattern {mine!r} of {group.name} and {theirs!r} of resource group "
                        f"{other.name} claim the same tables ({what}); narrow one of them",
                        field="namespace_patterns",
                    )


def _apply(group: ResourceGroup, values: dict[str, Any]) -> None:
    if "name" in values:
        name = values["name"]
        if not isinstance(name, str) or not NAME.match(name):
            raise InvalidInput("name must be 1 to 60 lowercase letters, digits, '-' or '_'", field="name")
        if group.pk and group.is_default and name != DEFAULT_GROUP:
            raise InvalidInput("the default group cannot be renamed", field="name")
        if ResourceGroup.objects.exclude(pk=group.pk).filter(name=name).exists():
            raise InvalidInput(f"a resource group named {name} exists", field="name")
        group.name = name
    if "description" in values:
        group.description = str(values["description"] or "")[:255]
    if "queue" in values:
        group.queue = str(values["queue"] or "").strip()
    if "max_concurrency" in values:
        group.max_concurrency = _positive(values["max_concurrency"], "max_concurrency", MAX_CONCURRENCY)
    if "compute_budget_seconds" in values:
        group.compute_budget_seconds = _positive(
            values["compute_budget_seconds"], "compute_budget_seconds", MAX_COMPUTE_SECONDS
        )
    if "namespace_patterns" in values:
        group.namespace_patterns = _patterns(values["namespace_patterns"])


def resource_group_check(
    group: ResourceGroup, values: dict[str, Any], catalogs=None, tables=None
) -> tuple[list[Catalog], list[Table]]:
    """Apply ``values`` to ``group`` (unsaved) and check every rule; ``InvalidInput`` names the
    field and, for a table two groups would claim, both groups. Returns the catalogs and tables
    the group will claim. The admin's form calls this too."""
    _apply(group, values)
    if group.is_default and (catalogs or tables or group.namespace_patterns):
        raise InvalidInput(
            "the default group takes every table no other group claims; it has no rules of its own",
            field="name",
        )
    _check_queue(group)
    catalog_list = list(catalogs) if catalogs is not None else list(group.catalogs.all()) if group.pk else []
    table_list = list(tables) if tables is not None else []
    _check_claims(group, catalog_list, table_list)
    return catalog_list, table_list


def _save(group: ResourceGroup, values: dict[str, Any], catalogs, tables) -> ResourceGroup:
    catalog_list, table_list = resource_group_check(group, values, catalogs, tables)
    group.save()
    if catalogs is not None:
        group.catalogs.set(catalog_list)
    if tables is not None:
        ResourceGroupTable.objects.filter(group=group).exclude(table__in=table_list).delete()
        held = set(ResourceGroupTable.objects.filter(group=group).values_list("table_id", flat=True))
        ResourceGroupTable.objects.bulk_create(
            ResourceGroupTable(group=group, table=table) for table in table_list if table.pk not in held
        )
    return group


def resource_group_create(
    *,
    name: str,
    catalogs: Iterable[Catalog] | None = None,
    tables: Iterable[Table] | None = None,
    **values: Any,
) -> ResourceGroup:
    with transaction.atomic():
        return _save(ResourceGroup(), {"name": name, **values}, catalogs, tables)


def resource_group_update(
    *,
    group: ResourceGroup,
    catalogs: Iterable[Catalog] | None = None,
    tables: Iterable[Table] | None = None,
    **values: Any,
) -> ResourceGroup:
    """Change what ``values`` names (``catalogs``/``tables``: the whole new list when given)."""
    with transaction.atomic():
        locked = ResourceGroup.objects.select_for_update().get(pk=group.pk)
        return _save(locked, values, catalogs, tables)


def resource_group_delete(*, group: ResourceGroup) -> None:
    """Its tables go back to the rules (``default`` at last); refused for ``default`` and while
    processes it admitted are active (they would run outside any budget)."""
    if group.is_default:
        raise Conflict("the default group cannot be deleted: it takes every table no other group claims")
    with transaction.atomic():
        locked = ResourceGroup.objects.select_for_update().get(pk=group.pk)
        active = locked.processes.filter(status__in=ACTIVE_STATUSES).count()
        if active:
            raise Conflict(
                f"resource group {locked.name} has {active} active process(es); delete it once they finish"
            )
        locked.delete()
