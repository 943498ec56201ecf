"""The measured benefit and cost of a process (issue 31): the table's facts before and after and
the worker-seconds and bytes it took."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("processes", "0010_plural_names"),
    ]

    operations = [
        migrations.AddField(
            model_name="process",
            name="measured",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="The table's facts before and after the run and its cost (processes/executor.py)",
            ),
        ),
    ]
