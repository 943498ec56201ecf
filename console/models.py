"""Catalogs (where tables are found) and managed tables."""

from __future__ import annotations

from django.db import models
from django.urls import reverse


class CatalogKind(models.TextChoices):
    ICEBERG_SQL = "iceberg_sql", "Iceberg SQL catalog"
    ICEBERG_REST = "iceberg_rest", "Iceberg REST catalog"
    PATH_ROOT = "path_root", "Path root (Delta / Hudi / Iceberg folders)"


class TableFormat(models.TextChoices):
    ICEBERG = "iceberg", "Iceberg"
    DELTA = "delta", "Delta"
    HUDI = "hudi", "Hudi"


class Catalog(models.Model):
    """Where tables are found. ``properties`` holds the kind's settings:

    iceberg_sql: ``uri`` (SQLAlchemy URL; empty means Lakewarden's own database), ``warehouse``;
    iceberg_rest: ``uri``, optional ``token``/``credential`` (secrets, masked on output);
    path_root: ``root`` (a folder inside LAKEWARDEN_ALLOWED_ROOTS).
    """

    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, choices=CatalogKind.choices)
    properties = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("console:catalog-detail", args=[self.pk])


class Table(models.Model):
    """A managed table. Metadata facts (snapshot, files, bytes) are cached here by a refresh so
    list pages never open table metadata per row."""

    catalog = models.ForeignKey(
        Catalog, null=True, blank=True, on_delete=models.PROTECT, related_name="tables"
    )
    name = models.CharField(
        max_length=255, help_text="Display name: the catalog identifier or the folder name"
    )
    identifier = models.CharField(
        max_length=255, blank=True, help_text="Catalog identifier, e.g. demo.orders"
    )
    format = models.CharField(max_length=10, choices=TableFormat.choices)
    location = models.CharField(max_length=1024)
    properties = models.JSONField(
        default=dict, blank=True, help_text="Lakewarden overrides, e.g. target-file-size"
    )
    current_instant = models.CharField(max_length=64, blank=True)
    file_count = models.BigIntegerField(default=0)
    total_bytes = models.BigIntegerField(default=0)
    record_count = models.BigIntegerField(default=0)
    instant_count = models.IntegerField(default=0)
    last_commit_at = models.DateTimeField(null=True, blank=True)
    small_file_count = models.BigIntegerField(default=0)
    last_maintenance_at = models.DateTimeField(null=True, blank=True, help_text="Last successful process")
    metrics = models.JSONField(
        default=dict, blank=True, help_text="Histograms and timeline (console/metrics.py)"
    )
    refreshed_at = models.DateTimeField(null=True, blank=True)
    refresh_error = models.TextField(blank=True)
    registered_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["location"], name="table_location_unique"),
            models.UniqueConstraint(
                fields=["catalog", "identifier"],
                condition=~models.Q(identifier=""),
                name="table_catalog_identifier_unique",
            ),
        ]
        indexes = [models.Index(fields=["format"])]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("console:table-detail", args=[self.pk])

    @property
    def average_file_bytes(self) -> int:
        return self.total_bytes // self.file_count if self.file_count else 0

    @property
    def small_file_ratio(self) -> float:
        return self.small_file_count / self.file_count if self.file_count else 0.0
