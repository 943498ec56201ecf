"""The scheduler's decisions: one row per (table, action) evaluation outcome, the same outcome
repeated tick after tick kept as one row (``repeats``, ``last_at``); a bounded history per
(table, action) (``processes.decisions.log.KEEP``)."""

from __future__ import annotations

from django.db import models


class DecisionKind(models.TextChoices):
    RAN = "ran"
    NOTHING_TO_DO = "nothing-to-do"
    BELOW_BENEFIT = "below-benefit"
    WAITING_BUDGET = "waiting-budget"
    WAITING_SLOT = "waiting-slot"
    DISABLED = "disabled"
    DECLINED = "declined"
    MANUAL_ONLY = "manual-only"
    FAILED = "failed"


#: What the console and the API call each kind (``Decision.get_kind_display``).
KIND_LABELS: dict[str, str] = {
    DecisionKind.RAN: "Ran",
    DecisionKind.NOTHING_TO_DO: "Nothing to do",
    DecisionKind.BELOW_BENEFIT: "Below the minimum benefit",
    DecisionKind.WAITING_BUDGET: "Waiting for budget",
    DecisionKind.WAITING_SLOT: "Waiting for a slot",
    DecisionKind.DISABLED: "Disabled",
    DecisionKind.DECLINED: "Declined",
    DecisionKind.MANUAL_ONLY: "Manual only",
    DecisionKind.FAILED: "Evaluation failed",
}


class Decision(models.Model):
    table = models.ForeignKey("storage.Table", on_delete=models.CASCADE, related_name="decisions")
    action = models.CharField(max_length=64)
    kind = models.CharField(max_length=20, choices=list(KIND_LABELS.items()))
    reason = models.TextField(blank=True)
    #: The resource group the table belonged to when decided (its name; blank when not resolved).
    group = models.CharField(max_length=60, blank=True)
    #: Figures behind the decision (benefit and minimum, budget used and until when...).
    numbers = models.JSONField(default=dict, blank=True)
    process = models.ForeignKey(
        "processes.Process", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    at = models.DateTimeField(help_text="First evaluation with this outcome")
    last_at = models.DateTimeField(help_text="Latest evaluation with this outcome")
    repeats = models.PositiveIntegerField(default=1, help_text="Evaluations in a row with this outcome")

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["table", "action", "-id"], name="decision_table_action")]

    def __str__(self) -> str:
        return f"{self.table_id} {self.action}: {self.kind}"
