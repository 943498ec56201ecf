"""Resource group rows: the group (queue, budgets, membership rules, the scheduler's last hold) and
the explicit assignment of a table to a group (one group per table, by a unique constraint)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

#: The group that takes every table no other group claims; created by a data migration, never deleted.
DEFAULT_GROUP = "default"
#: The ``default`` group as migration 0012 made it (and as it is made again where it is missing):
#: budgets that leave the behaviour before groups as it was until an operator sets them.
DEFAULT_GROUP_FIELDS = {
    "description": "Every table no other group claims",
    "max_concurrency": 20,
    "compute_budget_seconds": 20 * 3600,
}


class ResourceGroup(models.Model):
    name = models.SlugField(max_length=60, unique=True)
    description = models.CharField(max_length=255, blank=True)
    queue = models.CharField(
        max_length=200,
        blank=True,
        help_text="Celery queue of its processes; blank: the heavy queue for default, "
        "<heavy queue>.<name> for any other group",
    )
    max_concurrency = models.PositiveIntegerField(
        default=2, help_text="Concurrency budget: processes of the group active at once (pending or running)"
    )
    compute_budget_seconds = models.PositiveIntegerField(
        default=7200, help_text="Compute budget: worker-seconds the group may use per rolling hour"
    )
    catalogs = models.ManyToManyField(
        "storage.Catalog",
        blank=True,
        related_name="resource_groups",
        help_text="Every table of these catalogs",
    )
    namespace_patterns = models.JSONField(
        default=list,
        blank=True,
        help_text='Globs matched against a table\'s namespace (its identifier up to the last dot), e.g. ["sales.*"]',
    )
    held = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the scheduler held back at its last tick: at, reason, by_action (processes/scheduler.py)",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(max_concurrency__gte=1), name="resource_group_concurrency_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(compute_budget_seconds__gte=1), name="resource_group_compute_positive"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT_GROUP

    @property
    def effective_queue(self) -> str:
        """The queue its processes are sent to, read when sent (so a changed setting is honoured)."""
        if self.queue:
            return self.queue
        if self.is_default:
            return settings.LAKEWARDEN_HEAVY_QUEUE
        return f"{settings.LAKEWARDEN_HEAVY_QUEUE}.{self.name}"


class ResourceGroupTable(models.Model):
    """A table assigned to a group by name: wins over namespace patterns and catalogs."""

    group = models.ForeignKey(ResourceGroup, on_delete=models.CASCADE, related_name="assignments")
    table = models.OneToOneField(
        "storage.Table", on_delete=models.CASCADE, related_name="resource_group_assignment"
    )

    def __str__(self) -> str:
        return f"{self.table_id} -> {self.group_id}"
