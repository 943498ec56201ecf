from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("storage", "0007_table_pointer"),
    ]

    operations = [
        migrations.AddField(
            model_name="table",
            name="delete_file_count",
            field=models.BigIntegerField(default=0, help_text="Live delete files and deletion vectors"),
        ),
    ]
