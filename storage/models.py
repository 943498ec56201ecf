"""The lakehouse's bookkeeping: catalogs and managed tables, registered result storages and cached
results. Catalog and Table were born in the ``console`` app; their database tables keep those names."""

from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models import F
from django.db.models.functions import Collate, Upper
from django.urls import reverse

from storage.spec.models import TableFormat
from storage.spec.registry import format_adapters


class CatalogKind(models.TextChoices):
    ICEBERG_SQL = "iceberg_sql", "Iceberg SQL catalog"
    ICEBERG_REST = "iceberg_rest", "Iceberg REST catalog"
    PATH_ROOT = "path_root", "Path root (Delta / Hudi / Iceberg folders)"


def format_choices() -> list[tuple[str, str]]:
    """The formats a table row may hold, labelled for forms and badges: the spec's built-in
    ``TableFormat`` members, then those installed plugins add (``lakewarden.table_formats``), each
    labelled by its adapter's ``label`` or its name capitalised. A callable, so installing a
    plugin changes no migration."""
    adapters = format_adapters()
    names = dict.fromkeys([*(member.value for member in TableFormat), *sorted(adapters)])
    return [(name, getattr(adapters.get(name), "label", "") or name.capitalize()) for name in names]


def format_values() -> list[str]:
    return [value for value, _ in format_choices()]


class Catalog(models.Model):
    """Where tables are found. ``properties`` holds the kind's settings:

    iceberg_sql: ``uri`` (SQLAlchemy URL; empty means Lakewarden's own database), ``warehouse``;
    iceberg_rest: ``uri``, ``warehouse``, optional ``token``/``credential`` (secrets, masked on
    output); its HTTP requests time out after ``s3.connect-timeout``/``s3.request-timeout``;
    path_root: ``root`` (a folder or an object-store URI prefix inside LAKEWARDEN_ALLOWED_ROOTS).

    Any kind may carry the object store's credentials as ``s3.*`` properties (``s3.endpoint``,
    ``s3.access-key-id``, ``s3.secret-access-key`` (masked), ``s3.region``,
    ``s3.path-style-access``, timeouts); unset ones come from ``LAKEWARDEN_S3_*``/``AWS_*``.
    """

    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, choices=CatalogKind.choices)
    properties = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        db_table = "console_catalog"

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("console:catalog-detail", args=[self.pk])


#: The search indexes' pending list, in kB (see ``Table.Meta.indexes``).
GIN_PENDING_KB = 256


def _sort_indexes() -> list[models.Index]:
    """Indexes of the tables list's sorts (console/table_list.py): the health score worst first
    (and best first; by format too), ties by name in code-point order as the ranking breaks them;
    files, small files and size largest first; last maintenance oldest first; then name and id."""
    by_name = (Collate(F("name"), "C"), F("id"))
    worst = F("health_score").desc(nulls_last=True)
    return [
        models.Index(worst, *by_name, name="table_health_desc_idx"),
        models.Index(F("health_score").asc(nulls_last=True), *by_name, name="table_health_asc_idx"),
        models.Index(F("format"), worst, *by_name, name="table_format_health_idx"),
        *(
            models.Index(F(column).desc(nulls_last=True), F("name"), F("id"), name=f"table_{short}_desc_idx")
            for column, short in (
                ("file_count", "files"),
                ("small_file_count", "small"),
                ("total_bytes", "size"),
            )
        ),
        models.Index(
            F("last_maintenance_at").asc(nulls_last=True), F("name"), F("id"), name="table_maintained_idx"
        ),
    ]


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
    format = models.CharField(max_length=10, choices=format_choices)
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
    compactable_file_count = models.BigIntegerField(
        default=0, help_text="Small files in partitions holding enough of them to compact (storage/health.py)"
    )
    delete_file_count = models.BigIntegerField(default=0, help_text="Live delete files and deletion vectors")
    last_maintenance_at = models.DateTimeField(null=True, blank=True, help_text="Last successful process")
    health_score = models.SmallIntegerField(
        null=True,
        blank=True,
        help_text="The health score (storage/health.py) stored where the facts change, so lists sort"
        " and filter by it with an index (processes/health.py ``health_store``); blank: not scored yet",
    )
    metrics = models.JSONField(
        default=dict, blank=True, help_text="Histograms and timeline (storage/metrics.py)"
    )
    refreshed_at = models.DateTimeField(null=True, blank=True)
    refresh_error = models.TextField(blank=True)
    registered_at = models.DateTimeField(auto_now_add=True)
    metadata_pointer = models.CharField(
        max_length=1024,
        blank=True,
        help_text="What the last refresh read (Iceberg metadata file, Delta version, Hudi instant):"
        " a refresh pass re-reads only tables whose pointer moved (storage/refresh.py)",
    )
    scheduler_wake_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the scheduler must look at the table again (blank: at its next tick); a"
        " refresh blanks it (processes/scheduler.py)",
    )
    scheduler_instant = models.CharField(
        max_length=64, blank=True, help_text="The snapshot the scheduler's wake time was computed at"
    )

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
        indexes = [
            # The format filter in name order (issue 34), the format sort's order.
            models.Index(fields=["format", "name", "id"], name="table_format_name_idx"),
            # The table list pages by name (issue 17: 100,000 tables).
            models.Index(fields=["name", "id"], name="table_name_id_idx"),
            # The table list's sorts (issue 34: 100,000 tables), each in its first click's order
            # with the list's tie-breaks, so a page is an index walk (the reverse: backwards).
            *_sort_indexes(),
            # The table list's search (``icontains``: UPPER(column) LIKE '%TEXT%') by trigrams. Each
            # search reads the whole pending list of rows written since its last merge (4 MB by
            # default: 100 ms at 100,000 tables after a refresh pass); 256 kB keeps that to a few ms
            # and writes as fast (issue 34, bench/RESULTS.md).
            *(
                GinIndex(
                    OpClass(Upper(column), name="gin_trgm_ops"),
                    name=f"table_{column}_trgm_idx",
                    gin_pending_list_limit=GIN_PENDING_KB,
                )
                for column in ("name", "identifier", "location")
            ),
        ]
        db_table = "console_table"

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


# The trash's bookkeeping (issue 14) lives in storage/trash/models.py; imported here so Django
# (and makemigrations) always sees the model.
from storage.trash.models import TrashBatch, TrashState  # noqa: E402,F401
