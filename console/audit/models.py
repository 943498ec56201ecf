"""``AuditEvent``: one row per audited action; rows are written once and never changed."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditEventImmutable(Exception):
    """An audit row was asked to change or go away."""


class AuditEventQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AuditEventImmutable("audit events are append-only: they cannot be updated")

    def delete(self):
        raise AuditEventImmutable("audit events are append-only: they cannot be deleted")


class AuditEvent(models.Model):
    """An action by a user (or a failed attempt to sign in) and what came of it."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    username = models.CharField(max_length=150, blank=True, help_text="As it was at the time")
    client_address = models.CharField(max_length=64, blank=True)
    user_agent = models.CharField(max_length=200, blank=True)
    action = models.CharField(max_length=100, db_index=True)
    method = models.CharField(max_length=10, blank=True)
    path = models.CharField(max_length=500, blank=True)
    target_model = models.CharField(max_length=100, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    target_label = models.CharField(max_length=255, blank=True)
    status = models.PositiveSmallIntegerField(null=True, blank=True, help_text="HTTP status of the answer")
    details = models.JSONField(default=dict, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        app_label = "console"
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["username", "-at"], name="audit_username_at"),
            models.Index(fields=["target_model", "target_id"], name="audit_target"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.username or '-'} {self.action}"

    @property
    def target(self) -> str:
        if not self.target_model:
            return ""
        return f"{self.target_model} {self.target_id} {self.target_label}".strip()

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None or not self._state.adding:
            raise AuditEventImmutable("audit events are append-only: they cannot be changed")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AuditEventImmutable("audit events are append-only: they cannot be deleted")
