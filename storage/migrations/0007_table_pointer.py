# Issue 17 (100,000 tables): the metadata pointer a refresh pass compares, the scheduler's wake
# time, and the indexes the table list pages and searches along.

from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.operations import TrigramExtension
from django.db import migrations, models
from django.db.models.functions import Upper


class Migration(migrations.Migration):
    dependencies = [
        ("storage", "0006_table_format_choices_from_plugins"),
    ]

    operations = [
        TrigramExtension(),
        migrations.AddField(
            model_name="table",
            name="metadata_pointer",
            field=models.CharField(
                blank=True,
                help_text="What the last refresh read (Iceberg metadata file, Delta version, Hudi instant): a"
                " refresh pass re-reads only tables whose pointer moved (storage/refresh.py)",
                max_length=1024,
            ),
        ),
        migrations.AddField(
            model_name="table",
            name="scheduler_instant",
            field=models.CharField(
                blank=True, help_text="The snapshot the scheduler's wake time was computed at", max_length=64
            ),
        ),
        migrations.AddField(
            model_name="table",
            name="scheduler_wake_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When the scheduler must look at the table again (blank: at its next tick); a"
                " refresh blanks it (processes/scheduler.py)",
                null=True,
            ),
        ),
        migrations.AddIndex(
            model_name="table",
            index=models.Index(fields=["name", "id"], name="table_name_id_idx"),
        ),
        migrations.AddIndex(
            model_name="table",
            index=models.Index(fields=["scheduler_wake_at"], name="table_scheduler_wake_idx"),
        ),
        # Written by hand: Django 5.2 renders OpClass(Upper(column)) as ((UPPER(...) gin_trgm_ops)).
        *(
            migrations.RunSQL(
                f'CREATE INDEX "table_{column}_trgm_idx" ON "console_table"'
                f' USING gin ((UPPER("{column}"::text)) gin_trgm_ops)',
                f'DROP INDEX "table_{column}_trgm_idx"',
                state_operations=[
                    migrations.AddIndex(
                        model_name="table",
                        index=GinIndex(
                            OpClass(Upper(column), name="gin_trgm_ops"), name=f"table_{column}_trgm_idx"
                        ),
                    )
                ],
            )
            for column in ("name", "identifier", "location")
        ),
    ]
