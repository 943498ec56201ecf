from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("processes", "0005_process_sent_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="process",
            name="preview",
            field=models.JSONField(
                blank=True,
                help_text="What the factory predicted when the process was created (plan preview)",
                null=True,
            ),
        ),
    ]
