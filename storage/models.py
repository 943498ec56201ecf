"""Registered result storages, cached results and interactive queries."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse


class StorageSource(models.TextChoices):
    CODE = "code"
    YAML = "yaml"
    CONSOLE = "console"
    DEFAULT = "default"


class StorageBackend(models.Model):
    """A registered intermediate result storage: a type and its configuration (secrets included;
    they are masked wherever the configuration is shown)."""

    name = models.SlugField(max_length=100, unique=True)
    type = models.CharField(max_length=50)
    config = models.JSONField(default=dict, blank=True)
    quota_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="Least recently used results are cleaned above this"
    )
    is_default = models.BooleanField(default=False)
    source = models.CharField(max_length=10, choices=StorageSource.choices, default=StorageSource.CONSOLE)
    created_at = models.DateTimeField(auto_now_add=True)
    last_test_at = models.DateTimeField(null=True, blank=True)
    last_test_ok = models.BooleanField(null=True, blank=True)
    last_test_message = models.TextField(blank=True)

    class Meta:
        ordering = ["-is_default", "name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("console:storage-list") + f"#storage-{self.pk}"


class CachedResultState(models.TextChoices):
    POPULATING = "POPULATING"
    READY = "READY"
    INVALID = "INVALID"
    CLEANED = "CLEANED"


class CachedResult(models.Model):
    fingerprint = models.CharField(max_length=64)
    backend = models.ForeignKey(StorageBackend, on_delete=models.PROTECT, related_name="results")
    name = models.CharField(max_length=100, help_text="Logical name given to the creation hook")
    properties = models.JSONField(default=dict, blank=True, help_text="What the creation hook returned")
    sql = models.TextField()
    source_snapshots = models.JSONField(default=dict, help_text="table id -> instant id read")
    size_bytes = models.BigIntegerField(default=0)
    row_count = models.BigIntegerField(default=0)
    hits = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(auto_now_add=True)
    state = models.CharField(
        max_length=10, choices=CachedResultState.choices, default=CachedResultState.POPULATING
    )
    state_reason = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["-last_used_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["fingerprint", "backend"],
                condition=models.Q(state__in=["POPULATING", "READY"]),
                name="one_live_result_per_fingerprint_backend",
            )
        ]
        indexes = [models.Index(fields=["fingerprint"]), models.Index(fields=["state", "last_used_at"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"


class QueryStatus(models.TextChoices):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    CANCELED = "CANCELED"


class Query(models.Model):
    sql = models.TextField()
    cache = models.BooleanField(default=True)
    backend = models.ForeignKey(
        StorageBackend, null=True, blank=True, on_delete=models.SET_NULL, related_name="queries"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    status = models.CharField(max_length=10, choices=QueryStatus.choices, default=QueryStatus.PENDING)
    served_from_cache = models.BooleanField(default=False)
    cached_result = models.ForeignKey(
        CachedResult, null=True, blank=True, on_delete=models.SET_NULL, related_name="queries"
    )
    fingerprint = models.CharField(max_length=64, blank=True)
    row_limit = models.PositiveIntegerField(default=1000)
    columns = models.JSONField(default=list, blank=True)
    rows = models.JSONField(default=list, blank=True, help_text="The first row_limit rows, for display")
    total_rows = models.BigIntegerField(null=True, blank=True)
    truncated = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    celery_task_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"query #{self.pk} ({self.status})"

    def get_absolute_url(self) -> str:
        return reverse("console:query-detail", args=[self.pk])

    @property
    def is_active(self) -> bool:
        return self.status in (QueryStatus.PENDING, QueryStatus.RUNNING)
