"""The Query model now lives in processes (its database table, storage_query, stays). State only."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("storage", "0002_catalog_table"),
        ("processes", "0004_table_in_storage_query_moved"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="Query")],
            database_operations=[],
        ),
    ]
