"""The scheduler's wake-time writes update rows in place (issue 31): a tick that looks at many
tables (the first after a configuration change: every table) writes ``scheduler_wake_at`` and
``scheduler_instant`` of each. Indexed, or on a full page, each write was a new row version with
an entry in every index of the table (three trigram GIN indexes among them): 20 s for 100,000
tables. Nothing reads the wake-time index (the tick scans the table to count it), so it goes, and
pages keep 30% free for such heap-only updates (``fillfactor``; pages written from now on: an
existing table gets the room as its rows are rewritten, or at once by ``VACUUM FULL``)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("storage", "0013_table_trgm_pending_list"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="table", name="table_scheduler_wake_idx"),
        migrations.RunSQL(
            "ALTER TABLE console_table SET (fillfactor = 70)",
            "ALTER TABLE console_table RESET (fillfactor)",
        ),
    ]
