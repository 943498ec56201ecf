"""Process history (the record of truth) and its state machine, interactive queries, per-table state,
and plugin configuration rows."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone


class ProcessStatus(models.TextChoices):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    CANCELING = "CANCELING"
    CANCELED = "CANCELED"
    KILLED = "KILLED"


ACTIVE_STATUSES = (ProcessStatus.PENDING, ProcessStatus.RUNNING, ProcessStatus.CANCELING)
#: Claimed by a worker and not finished: what a heartbeat keeps alive and the reaper watches.
STARTED_STATUSES = (ProcessStatus.RUNNING, ProcessStatus.CANCELING)
TERMINAL_STATUSES = (
    ProcessStatus.SUCCESS,
    ProcessStatus.FAILED,
    ProcessStatus.CANCELED,
    ProcessStatus.KILLED,
)


#: Every allowed status change of a process: ``transition()`` in processes/services.py looks it up, so
#: a change not listed here is a 409 that says why, never a silent overwrite.
TRANSITIONS: dict[str, frozenset[str]] = {
    # claimed by a worker; cancelled or killed before it ran; failed before it ran (lost task)
    ProcessStatus.PENDING: frozenset(
        {ProcessStatus.RUNNING, ProcessStatus.CANCELED, ProcessStatus.KILLED, ProcessStatus.FAILED}
    ),
    # finished; asked to stop; failed (or its worker lost); lock busy: back in the queue
    ProcessStatus.RUNNING: frozenset(
        {
            ProcessStatus.SUCCESS,
            ProcessStatus.FAILED,
            ProcessStatus.CANCELING,
            ProcessStatus.CANCELED,
            ProcessStatus.KILLED,
            ProcessStatus.PENDING,
        }
    ),
    # the cancel reached the work (or it finished first, or failed, or the kill's grace ran out)
    ProcessStatus.CANCELING: frozenset(
        {
            ProcessStatus.CANCELING,
            ProcessStatus.CANCELED,
            ProcessStatus.KILLED,
            ProcessStatus.SUCCESS,
            ProcessStatus.FAILED,
        }
    ),
    ProcessStatus.SUCCESS: frozenset(),
    ProcessStatus.FAILED: frozenset(),
    ProcessStatus.CANCELED: frozenset(),
    ProcessStatus.KILLED: frozenset(),
}


def statuses_leading_to(status: str) -> tuple[str, ...]:
    """The statuses a process may be in for a change to ``status`` (the conditional update's filter)."""
    return tuple(source for source, targets in TRANSITIONS.items() if status in targets)


class ProcessTrigger(models.TextChoices):
    SCHEDULE = "schedule"
    MANUAL = "manual"
    RETRY = "retry"
    AUTO_RETRY = "auto-retry"


#: Counts a plan preview predicts and a summary may report (preview key = summary key), labelled.
PREDICTED_COUNTS = (
    ("groups", "file groups"),
    ("files_in", "files in"),
    ("bytes_in", "bytes in"),
    ("files_out", "files out"),
    ("bytes_out", "bytes out"),
    ("objects_to_delete", "objects deleted"),
)


class Process(models.Model):
    table = models.ForeignKey("storage.Table", on_delete=models.CASCADE, related_name="processes")
    action = models.CharField(max_length=64)
    factory = models.CharField(max_length=100)
    status = models.CharField(max_length=10, choices=ProcessStatus.choices, default=ProcessStatus.PENDING)
    trigger = models.CharField(max_length=12, choices=ProcessTrigger.choices, default=ProcessTrigger.SCHEDULE)
    params = models.JSONField(default=dict, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    preview = models.JSONField(
        null=True,
        blank=True,
        help_text="What the factory predicted when the process was created (plan preview)",
    )
    measured = models.JSONField(
        default=dict,
        blank=True,
        help_text="The table's facts before and after the run and its cost (processes/executor.py)",
    )
    failure = models.TextField(blank=True)
    attempt = models.PositiveIntegerField(default=1)
    max_retries = models.PositiveIntegerField(default=3)
    retry_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retries"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    resource_group = models.ForeignKey(
        "processes.ResourceGroup",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="processes",
        help_text="The resource group whose queue and budgets it was admitted to (processes/groups.py)",
    )
    progress_done = models.BigIntegerField(default=0)
    progress_total = models.BigIntegerField(default=0)
    progress_message = models.CharField(max_length=255, blank=True)
    cancel_requested = models.BooleanField(default=False)
    kill_deadline = models.DateTimeField(null=True, blank=True)
    celery_task_id = models.CharField(max_length=64, blank=True)
    worker = models.CharField(max_length=255, blank=True)
    not_before = models.DateTimeField(null=True, blank=True, help_text="Retry backoff: not started before")
    sent_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Last time its task was sent to the broker (the reaper re-sends lost ones)",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "processes"
        ordering = ["-created_at", "-id"]
        constraints = [
            # The scheduler checks this too; the database makes it hold under any race.
            models.UniqueConstraint(
                fields=["table", "action"],
                condition=models.Q(status__in=["PENDING", "RUNNING", "CANCELING"]),
                name="one_active_process_per_table_action",
            )
        ]
        indexes = [
            models.Index(fields=["status"]),
            models.Index(fields=["table", "action", "-created_at"]),
            models.Index(fields=["table", "-id"]),
            models.Index(fields=["-created_at"]),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.action} on {self.table_id} ({self.status})"

    def get_absolute_url(self) -> str:
        return reverse("console:process-detail", args=[self.pk])

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def progress_percent(self) -> int:
        if not self.progress_total:
            return 0
        return min(100, round(100 * self.progress_done / self.progress_total))

    @property
    def duration_seconds(self) -> float | None:
        """Seconds from start to finish; for a process still running, to now (not to its last
        heartbeat, which a fresh claim sets to its start)."""
        if self.started_at is None:
            return None
        if self.finished_at is None and self.status in ACTIVE_STATUSES:
            return max(0.0, (timezone.now() - self.started_at).total_seconds())
        end = self.finished_at or self.heartbeat_at or self.started_at
        return (end - self.started_at).total_seconds()

    def prediction_rows(self) -> list[tuple[str, object, object]]:
        """(what, predicted at creation, what the run's summary says; None when it does not say)
        for the counts a preview and a summary share, when the row holds an available preview."""
        preview = self.preview or {}
        if not preview.get("available"):
            return []
        summary = self.summary or {}
        rows = [(label, preview.get(key), summary.get(key)) for key, label in PREDICTED_COUNTS]
        return [row for row in rows if row[1] or row[2] is not None]

    def attempts_chain(self) -> list[Process]:
        """Oldest first: the first attempt, then each retry up to this one."""
        chain = [self]
        current = self
        while current.retry_of_id is not None and len(chain) < 50:
            current = current.retry_of
            chain.append(current)
        return list(reversed(chain))


class QueryStatus(models.TextChoices):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    CANCELED = "CANCELED"


class QueryEngine(models.TextChoices):
    """The engine a query asks for (``auto``: DuckDB below the scanned-bytes limit, else Spark)."""

    AUTO = "auto", "Auto"
    SPARK = "spark", "Spark"
    DUCKDB = "duckdb", "DuckDB"


class Query(models.Model):
    sql = models.TextField()
    cache = models.BooleanField(default=True)
    backend = models.ForeignKey(
        "storage.StorageBackend", null=True, blank=True, on_delete=models.SET_NULL, related_name="queries"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    status = models.CharField(max_length=10, choices=QueryStatus.choices, default=QueryStatus.PENDING)
    served_from_cache = models.BooleanField(default=False)
    cached_result = models.ForeignKey(
        "storage.CachedResult", null=True, blank=True, on_delete=models.SET_NULL, related_name="queries"
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
    worker = models.CharField(max_length=255, blank=True, help_text="The worker that claimed it")
    sent_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Last time its task was sent to the broker (the reaper re-sends lost ones)",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Last sign of life of the worker running it (the reaper fails it after)",
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    engine = models.CharField(max_length=10, choices=QueryEngine.choices, default=QueryEngine.SPARK)
    engine_used = models.CharField(max_length=10, blank=True, help_text="The engine that ran it")
    engine_reason = models.CharField(max_length=200, blank=True, help_text="Why that engine ran it")

    class Meta:
        verbose_name_plural = "queries"
        ordering = ["-created_at", "-id"]
        db_table = "storage_query"

    def __str__(self) -> str:
        return f"query #{self.pk} ({self.status})"

    def get_absolute_url(self) -> str:
        return reverse("console:query-detail", args=[self.pk])

    @property
    def is_active(self) -> bool:
        return self.status in (QueryStatus.PENDING, QueryStatus.RUNNING)


class TableState(models.Model):
    """A factory's typed per-table value (``StateKey``), one row per (table, key)."""

    table = models.ForeignKey("storage.Table", on_delete=models.CASCADE, related_name="states")
    key = models.CharField(max_length=150)
    value = models.JSONField(null=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["table", "key"], name="table_state_key_unique")]


class PluginKind(models.TextChoices):
    PROCESS_FACTORY = "process_factory", "Process factory"


class PluginConfig(models.Model):
    """Configuration of one discovered plugin: edited in the admin, seedable from conf/plugins/."""

    kind = models.CharField(max_length=30, choices=PluginKind.choices, default=PluginKind.PROCESS_FACTORY)
    name = models.CharField(max_length=100)
    enabled = models.BooleanField(default=True)
    priority = models.IntegerField(default=100, help_text="Higher runs first when slots are scarce")
    properties = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["kind", "-priority", "name"]
        constraints = [models.UniqueConstraint(fields=["kind", "name"], name="plugin_config_unique")]

    def __str__(self) -> str:
        return f"{self.name} ({'enabled' if self.enabled else 'disabled'})"


class ServiceHeartbeat(models.Model):
    """Last sign of life of a background service (``beat``: each scheduler tick)."""

    name = models.CharField(max_length=50, unique=True)
    last_seen = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} @ {self.last_seen}"


from processes.alerts.models import AlertChannel, AlertDelivery, AlertEpisode, AlertRule  # noqa: E402,F401  alerts (issue 16)
from processes.decisions.models import Decision, DecisionKind  # noqa: E402,F401  decisions (issue 31 item 3)
from processes.groups.models import ResourceGroup, ResourceGroupTable  # noqa: E402,F401  resource groups (issue 31)
