"""The health score stored on the table row (issue 34: 100,000 tables sorted by health within the
budget) and the indexes of the tables list's sorts. Rows start unscored (blank, sorted last); the
health beat (processes.tasks.health_store_task) scores every table at its first tick, and every
refresh, process end and factory change scores the tables it touches."""

import django.db.models.functions.comparison
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("storage", "0011_table_compactable_file_count"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="table",
            name="console_tab_format_bcaae8_idx",
        ),
        migrations.AddField(
            model_name="table",
            name="health_score",
            field=models.SmallIntegerField(
                blank=True,
                help_text="The health score (storage/health.py) stored where the facts change, so lists sort and filter by it with an index (processes/health.py ``health_store``); blank: not scored yet",
                null=True,
            ),
        ),
        migrations.AddIndex(
            model_name="table",
            index=models.Index(fields=["format", "name", "id"], name="table_format_name_idx"),
        ),
        migrations.AddIndex(
            model_name="table",
            index=models.Index(
                models.OrderBy(models.F("health_score"), descending=True, nulls_last=True),
                django.db.models.functions.comparison.Collate(models.F("name"), "C"),
                models.F("id"),
                name="table_health_desc_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="table",
            index=models.Index(
                models.OrderBy(models.F("health_score"), nulls_last=True),
                django.db.models.functions.comparison.Collate(models.F("name"), "C"),
                models.F("id"),
                name="table_health_asc_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="table",
            index=models.Index(
                models.F("format"),
                models.OrderBy(models.F("health_score"), descending=True, nulls_last=True),
                django.db.models.functions.comparison.Collate(models.F("name"), "C"),
                models.F("id"),
                name="table_format_health_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="table",
            index=models.Index(
                models.OrderBy(models.F("file_count"), descending=True, nulls_last=True),
                models.F("name"),
                models.F("id"),
                name="table_files_desc_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="table",
            index=models.Index(
                models.OrderBy(models.F("small_file_count"), descending=True, nulls_last=True),
                models.F("name"),
                models.F("id"),
                name="table_small_desc_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="table",
            index=models.Index(
                models.OrderBy(models.F("total_bytes"), descending=True, nulls_last=True),
                models.F("name"),
                models.F("id"),
                name="table_size_desc_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="table",
            index=models.Index(
                models.OrderBy(models.F("last_maintenance_at"), nulls_last=True),
                models.F("name"),
                models.F("id"),
                name="table_maintained_idx",
            ),
        ),
    ]
