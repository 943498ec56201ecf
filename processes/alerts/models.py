"""Alert rows: where alerts go (channels), what raises them (rules), each episode of a rule on one
subject, and each delivery of a message to a channel with its status and attempts.

A channel or rule may belong to a team (issue 32; the team model is the console's teams app,
referred to by name only): a team's rule watches only the tables the team's grants cover, and a
team's channel hears only of those tables, whoever's rule fired. Blank: an admin's, as before."""

from __future__ import annotations

from django.db import models


class ChannelKind(models.TextChoices):
    WEBHOOK = "webhook", "Webhook (JSON body)"
    SLACK = "slack", "Slack-compatible webhook"
    EMAIL = "email", "E-mail"


class AlertChannel(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(max_length=10, choices=ChannelKind.choices)
    url = models.URLField(max_length=1024, blank=True, help_text="Webhook and Slack: the http(s) endpoint")
    recipients = models.TextField(blank=True, help_text="E-mail: addresses, comma-separated")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    team = models.ForeignKey(
        "teams.Team",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="alert_channels",
        help_text="The team that owns it: it hears only of the team's tables. Blank: an admin's channel",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    @property
    def recipient_list(self) -> list[str]:
        return [address.strip() for address in self.recipients.split(",") if address.strip()]


class RuleKind(models.TextChoices):
    PROCESS_FAILED = "process_failed", "A process failed after its retry budget"
    TABLE_HEALTH = "table_health", "A table's health score at or above the threshold"
    SERVICE_SILENT = "service_silent", "Workers or beat silent"
    STORAGE_QUOTA = "storage_quota", "A result storage over its quota"


#: The kinds whose subjects are tables (a team's rule is one of these: the rest watch the service).
TABLE_KINDS = (str(RuleKind.PROCESS_FAILED), str(RuleKind.TABLE_HEALTH))


class AlertRule(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, choices=RuleKind.choices)
    enabled = models.BooleanField(default=True)
    threshold = models.PositiveIntegerField(
        default=60, help_text="table_health: alert when the score (0 healthy .. 100) is at least this"
    )
    minutes = models.PositiveIntegerField(
        default=0, help_text="Alert only when the condition has held this long (0: at once)"
    )
    channels = models.ManyToManyField(
        AlertChannel,
        blank=True,
        related_name="rules",
        help_text="None chosen: every enabled channel (of the rule's team, for a team's rule)",
    )
    team = models.ForeignKey(
        "teams.Team",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="alert_rules",
        help_text="The team that owns it: it watches only the team's tables. Blank: every table",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class AlertEpisode(models.Model):
    """One stretch of a rule's condition on one subject: seen, fired once it held long enough,
    resolved when it cleared. At most one open episode per (rule, subject)."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="episodes")
    subject = models.CharField(max_length=255)
    message = models.TextField()
    first_seen_at = models.DateTimeField()
    fired_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-first_seen_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=models.Q(resolved_at__isnull=True),
                name="one_open_alert_episode",
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule.name} on {self.subject}"


class DeliveryEvent(models.TextChoices):
    OPENED = "opened"
    RESOLVED = "resolved"
    TEST = "test"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class AlertDelivery(models.Model):
    channel = models.ForeignKey(AlertChannel, on_delete=models.CASCADE, related_name="deliveries")
    episode = models.ForeignKey(
        AlertEpisode, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    event = models.CharField(max_length=10, choices=DeliveryEvent.choices)
    title = models.CharField(max_length=255)
    text = models.TextField()
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status"])]
        verbose_name_plural = "alert deliveries"

    def __str__(self) -> str:
        return f"{self.event} to {self.channel_id}: {self.status}"
