"""The local demo lakehouse leaves one table to operators: the scheduler maintains the others within
a minute, and a newcomer's first Preview on that one still has a compaction to show."""

from __future__ import annotations

import pytest
from django.db import connection

from devtools.demo import LEFT_FOR_PREVIEW, NAMESPACE, demo_lakehouse_build
from processes.models import Process
from processes.scheduler import schedule_tick
from processes.services import process_preview
from storage.models import Table

# The demo's Iceberg SQL catalog writes through a connection of its own: the clean-up below must
# be committed for it to see it.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def demo(warehouse):
    # The SQL catalog's own tables are not Django's: start from an empty demo catalog.
    with connection.cursor() as cursor:
        cursor.execute("select to_regclass('iceberg_tables') is not null")
        if cursor.fetchone()[0]:
            cursor.execute("delete from iceberg_tables where catalog_name = 'demo'")
            cursor.execute("delete from iceberg_namespace_properties where catalog_name = 'demo'")
    lines: list[str] = []
    result = demo_lakehouse_build(warehouse=warehouse, scale=6, report=lines.append)
    return result, lines, warehouse


def test_the_demo_leaves_one_table_to_operators_with_work_to_preview(demo):
    result, lines, _ = demo
    kept = Table.objects.get(identifier=f"{NAMESPACE}.{LEFT_FOR_PREVIEW}")
    assert kept.properties == {"manual-actions": "*"}
    assert not Table.objects.exclude(pk=kept.pk).filter(properties__has_key="manual-actions").exists()
    assert any(line.startswith(f"{NAMESPACE}.{LEFT_FOR_PREVIEW}: left to operators") for line in lines)

    report = schedule_tick()

    picked = set(Process.objects.filter(pk__in=report.triggered).values_list("table_id", flat=True))
    assert picked and kept.pk not in picked
    preview = process_preview(table=kept, action="rewrite")
    assert preview["available"] and preview["files_in"] >= 5, preview


def test_building_the_demo_again_keeps_what_an_operator_set(demo):
    _, _, warehouse = demo
    kept = Table.objects.get(identifier=f"{NAMESPACE}.{LEFT_FOR_PREVIEW}")
    kept.properties = {}
    kept.save(update_fields=["properties"])

    demo_lakehouse_build(warehouse=warehouse, scale=6, report=lambda line: None)

    kept.refresh_from_db()
    assert kept.properties == {}
