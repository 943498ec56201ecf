"""The search's trigram indexes keep a 256 kB pending list (issue 34): a search reads the whole
list of rows written since its last merge, 4 MB by default. Set in place (no rebuild); the list
there now is merged."""

import django.contrib.postgres.indexes
import django.db.models.functions.text
from django.db import migrations

COLUMNS = ("name", "identifier", "location")


def _index(column: str) -> django.contrib.postgres.indexes.GinIndex:
    return django.contrib.postgres.indexes.GinIndex(
        django.contrib.postgres.indexes.OpClass(
            django.db.models.functions.text.Upper(column), name="gin_trgm_ops"
        ),
        gin_pending_list_limit=256,
        name=f"table_{column}_trgm_idx",
    )


class Migration(migrations.Migration):
    dependencies = [
        ("storage", "0012_table_health_score"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"ALTER INDEX table_{column}_trgm_idx SET (gin_pending_list_limit = 256);"
                    f" SELECT gin_clean_pending_list('table_{column}_trgm_idx'::regclass);",
                    f"ALTER INDEX table_{column}_trgm_idx RESET (gin_pending_list_limit);",
                )
                for column in COLUMNS
            ],
            state_operations=[
                *(
                    migrations.RemoveIndex(model_name="table", name=f"table_{column}_trgm_idx")
                    for column in COLUMNS
                ),
                *(migrations.AddIndex(model_name="table", index=_index(column)) for column in COLUMNS),
            ],
        ),
    ]
