"""Compactable small files on the table row (issue 31: health that means work). Existing rows
start from the partitions their metrics kept (the 50 with the most files); the next refresh
counts every partition."""

from django.db import migrations, models

FILL = """
UPDATE console_table SET compactable_file_count = LEAST(small_file_count, COALESCE((
  SELECT sum((p->>'small')::bigint) FROM jsonb_array_elements(metrics->'partitions') p
  WHERE (p->>'small')::bigint >= 5), 0))
WHERE jsonb_typeof(metrics->'partitions') = 'array'
"""


class Migration(migrations.Migration):
    dependencies = [
        ("storage", "0010_trash_batch_plural"),
    ]

    operations = [
        migrations.AddField(
            model_name="table",
            name="compactable_file_count",
            field=models.BigIntegerField(
                default=0,
                help_text="Small files in partitions holding enough of them to compact (storage/health.py)",
            ),
        ),
        migrations.RunSQL(FILL, migrations.RunSQL.noop),
    ]
