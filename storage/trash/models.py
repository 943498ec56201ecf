"""TrashBatch: the bookkeeping of one process's trash (see ``storage.trash.folder``), so the
console lists and restores batches without listing the store."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class TrashState(models.TextChoices):
    KEPT = "kept"
    RESTORED = "restored"
    PURGED = "purged"


class TrashBatch(models.Model):
    """What one maintenance process moved into ``<table>/.lakewarden-trash/<process id>/``."""

    table = models.ForeignKey("storage.Table", on_delete=models.CASCADE, related_name="trash_batches")
    # The process row lives in the processes app, above storage: kept as its id.
    process_id = models.BigIntegerField(unique=True)
    action = models.CharField(max_length=64)
    location = models.CharField(max_length=1024, help_text="The batch folder")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(help_text="Purged by the beat task after this")
    state = models.CharField(max_length=10, choices=TrashState.choices, default=TrashState.KEPT)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    state_changed_by = models.CharField(max_length=150, blank=True, help_text="User, or the purge task")
    file_count = models.IntegerField(default=0)
    total_bytes = models.BigIntegerField(default=0)
    kinds = models.JSONField(default=dict, blank=True, help_text="Files per kind")
    failed_count = models.IntegerField(default=0, help_text="Files that could not be moved (left in place)")
    manifest_sha256 = models.CharField(
        max_length=64,
        blank=True,
        help_text="The manifest as Lakewarden wrote it: a restore refuses a manifest changed since",
    )

    class Meta:
        app_label = "storage"
        ordering = ["-created_at"]
        verbose_name_plural = "trash batches"
        indexes = [models.Index(fields=["state", "expires_at"], name="storage_trash_state_expires")]

    def __str__(self) -> str:
        return f"trash of process {self.process_id} ({self.state})"

    def is_expired(self, now=None) -> bool:
        return (now or timezone.now()) >= self.expires_at

    def restore_refusal(self, now=None) -> str | None:
        """Why this batch cannot be restored now, or None."""
        if self.state == TrashState.RESTORED:
            return f"the trash of process {self.process_id} was restored already ({self._when()})"
        if self.state == TrashState.PURGED:
            return f"the trash of process {self.process_id} was purged ({self._when()}); its files are gone"
        if self.is_expired(now):
            return (
                f"the trash of process {self.process_id} expired at "
                f"{self.expires_at:%Y-%m-%d %H:%M:%S} UTC and is being purged"
            )
        return None

    def _when(self) -> str:
        when = f"{self.state_changed_at:%Y-%m-%d %H:%M:%S} UTC" if self.state_changed_at else "earlier"
        return f"{when} by {self.state_changed_by}" if self.state_changed_by else when
