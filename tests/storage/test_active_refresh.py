"""The short refresh beat (issue 31): the tables with recent activity have their metadata pointer
read every few seconds, and another writer's commit to one of them is refreshed into the row;
bounded queries per tick whatever the number of tables. Real Delta tables written by deltalake."""

from __future__ import annotations

import datetime as dt

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from storage.metrics import table_metrics
from storage.models import Table
from storage.refresh import active_table_ids, refresh_moved, table_facts
from storage.services import table_open, table_register
from storage.tasks import refresh_table_task
from tests.processes.conftest import delta_rows


def append_delta(path, start: int) -> None:
    """Another writer (deltalake) appends one file of 5 rows to the Delta table at ``path``."""
    from deltalake import write_deltalake

    write_deltalake(str(path), delta_rows(start, 5), mode="append")


def spec_facts(table: Table) -> dict:
    """The facts as the spec API reads them from the table's metadata now."""
    spec_table = table_open(Table.objects.select_related("catalog").get(pk=table.pk))
    summary, metrics = spec_table.summary(), table_metrics(spec_table)
    return {
        "files": summary.file_count,
        "small_files": metrics["small_file_count"],
        "compactable_files": metrics["compactable_file_count"],
        "bytes": summary.total_bytes,
        "records": summary.record_count,
        "snapshots": summary.instant_count,
        "delete_files": metrics["delete_file_count"],
        "instant": str(summary.current_instant_id),
    }


def test_another_writers_commit_to_an_active_table_is_picked_up_by_the_pointer_check(warehouse, db):
    from deltalake import write_deltalake

    path = warehouse / "busy"
    write_deltalake(str(path), delta_rows(0, 5))
    table = table_register(location=str(path))
    now = timezone.now()
    assert active_table_ids(now) == [table.pk]
    first = refresh_moved([table.pk], refresh=refresh_table_task)  # registration keeps no pointer
    assert first.refreshed == [table.pk]

    append_delta(path, 5)
    moved = refresh_moved(active_table_ids(now), refresh=refresh_table_task)

    assert moved.refreshed == [table.pk]
    assert table_facts(Table.objects.get(pk=table.pk)) == spec_facts(table)
    assert Table.objects.get(pk=table.pk).file_count == 2
    again = refresh_moved(active_table_ids(now), refresh=refresh_table_task)
    assert (again.refreshed, again.unchanged) == ([], 1)


def test_only_recently_active_tables_are_checked_most_recent_first_up_to_the_limit(db):
    now = timezone.now()
    old = now - dt.timedelta(days=3)

    def table(name, **times):
        row = Table.objects.create(name=name, format="delta", location=f"/lake/{name}")
        Table.objects.filter(pk=row.pk).update(registered_at=old, **times)
        return row.pk

    cold = table("cold", last_commit_at=old)
    committed = table("committed", last_commit_at=now - dt.timedelta(minutes=5))
    maintained = table("maintained", last_maintenance_at=now - dt.timedelta(minutes=1))
    registered = Table.objects.create(name="new", format="delta", location="/lake/new").pk

    assert active_table_ids(now) == [registered, maintained, committed]
    assert active_table_ids(now, limit=2) == [registered, maintained]
    assert cold not in active_table_ids(now, window=dt.timedelta(days=1))
    with CaptureQueriesContext(connection) as captured:
        report = refresh_moved([cold, committed, maintained, registered], refresh=refresh_table_task)
    assert len(captured) == 1  # the rows; the pointers are the tables' own reads
    assert sorted(report.unreadable_pointer) == sorted([cold, committed, maintained, registered])
    assert report.refreshed == []
