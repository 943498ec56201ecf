"""The busiest console pages read a constant number of SQL queries however many rows they show
(issue 10 item 8: throughput), so an N+1 query cannot creep back in; and their cheap row markup
still says what the template loop said."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from processes.models import Process, ProcessStatus
from storage import services
from storage.models import Table
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


def _queries(client, path: str) -> int:
    """SQL statements one request of ``path`` runs (the page must answer 200)."""
    statements: list[str] = []

    def count(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        response = client.get(path)
    assert response.status_code == 200, path
    return len(statements)


def _add_tables(count: int, start: int) -> None:
    Table.objects.bulk_create(
        Table(
            name=f"q{start + i:04d}",
            format=("iceberg", "delta", "hudi")[i % 3],
            location=f"/nowhere/q{start + i:04d}",
            current_instant="1",
            file_count=i,
            refresh_error="gone" if i % 4 == 0 else "",
        )
        for i in range(count)
    )


def _add_processes(tables: list[Table], count: int) -> None:
    now = timezone.now()
    statuses = [ProcessStatus.SUCCESS, ProcessStatus.FAILED, ProcessStatus.CANCELED, ProcessStatus.KILLED]
    Process.objects.bulk_create(
        Process(
            table=tables[i % len(tables)],
            action="rewrite",
            factory="test",
            status=statuses[i % len(statuses)],
            failure="boom" if i % 4 == 1 else "",
            started_at=now,
            finished_at=now,
        )
        for i in range(count)
    )


def test_the_table_list_runs_the_same_queries_for_5_and_50_tables(client_as, admin_user):
    client = client_as(admin_user)
    _add_tables(5, 0)
    client.get("/tables/")  # the first request seeds the plugin configs the health score reads
    few = _queries(client, "/tables/")
    _add_tables(45, 5)

    assert _queries(client, "/tables/") == few
    html = client.get("/tables/").content.decode()
    assert html.count('<td><a href="/tables/') == 50
    assert 'title="gone">unreadable</span>' in html


def test_the_processes_list_runs_the_same_queries_for_5_and_50_processes(client_as, operator):
    client = client_as(operator)
    _add_tables(10, 0)
    tables = list(Table.objects.all())
    _add_processes(tables, 5)
    client.get(f"/tables/{tables[0].pk}/processes/")  # the first visit seeds the plugin rows once
    few = _queries(client, "/processes/")
    table_tab_few = _queries(client, f"/tables/{tables[0].pk}/processes/")
    _add_processes(tables, 45)

    assert _queries(client, "/processes/") == few
    assert _queries(client, f"/tables/{tables[0].pk}/processes/") == table_tab_few
    html = client.get("/processes/").content.decode()
    assert html.count('<td><a href="/processes/') == 50
    first_table = f'<a href="/tables/{tables[0].pk}/processes/">{tables[0].name}</a>'
    assert html.count(first_table) == 6  # 1 of the first 5 processes, 5 of the next 45
    assert '<span class="muted" title="boom">boom</span>' in html


def test_the_table_page_runs_the_same_queries_for_5_and_50_processes(client_as, viewer, warehouse):
    client = client_as(viewer)
    table = services.table_register(location=str(write_delta_table(warehouse / "orders", commits=2)))
    _add_processes([table], 5)
    first_few, again_few = _queries(client, f"/tables/{table.pk}/"), _queries(client, f"/tables/{table.pk}/")
    _add_processes([table], 45)

    # The first view after a change draws the charts; the next ones take them from the cache.
    assert _queries(client, f"/tables/{table.pk}/") == first_few
    assert _queries(client, f"/tables/{table.pk}/") == again_few
    assert again_few < first_few


def test_a_new_process_redraws_the_durations_chart(client_as, viewer, warehouse):
    client = client_as(viewer)
    table = services.table_register(location=str(write_delta_table(warehouse / "orders", commits=1)))
    _add_processes([table], 1)
    before = client.get(f"/tables/{table.pk}/").content.decode()
    _add_processes([table], 1)

    after = client.get(f"/tables/{table.pk}/").content.decode()
    assert after != before
    assert after.count("<svg") == before.count("<svg")


def test_a_table_whose_folder_went_away_is_reported_even_after_a_cached_view(client_as, viewer, warehouse):
    import shutil

    path = write_delta_table(warehouse / "orders", commits=1, partition_by=["region"])
    table = services.table_register(location=str(path))
    client = client_as(viewer)
    assert "identity(region)" in client.get(f"/tables/{table.pk}/").content.decode()
    shutil.rmtree(path)

    assert "cannot be read right now" in client.get(f"/tables/{table.pk}/").content.decode()
