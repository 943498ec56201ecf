"""Fresh figures end to end (issue 31): a real `celery beat` and worker on Redis; another writer's
commit to an active table shows in the console within 15 s, through the short pointer beat at its
default interval (nothing in the test refreshes the table itself)."""

from __future__ import annotations

import time

import pytest

from processes.models import PluginConfig
from processes.registry import configured_factories
from storage.models import Table
from storage.services import table_register
from tests.e2e.conftest import wait_for
from tests.processes.conftest import delta_rows

pytestmark = pytest.mark.e2e

#: The issue's promise for a table with recent activity.
VISIBLE_WITHIN = 15


def _files_shown(api, pk: int) -> int:
    response = api.get(f"/api/v1/tables/{pk}/")
    assert response.status_code == 200, response.content
    return response.json()["file_count"]


def test_another_writers_commit_shows_in_the_console_within_15_seconds(
    celery_processes, warehouse, api_as, viewer
):
    from deltalake import write_deltalake

    configured_factories()
    PluginConfig.objects.update(enabled=False)  # no maintenance: only the refresh moves the figures
    path = warehouse / "busy"
    write_deltalake(str(path), delta_rows(0, 5))
    table = table_register(location=str(path))  # registered now: an active table
    celery_processes.start_worker(queues="light", concurrency=1)
    celery_processes.start_beat()
    celery_processes.wait_for_workers()
    # The beat's first short tick keeps the table's pointer (a registration keeps none): from then
    # on the beat is running and a moved pointer is what it looks for.
    wait_for(
        lambda: Table.objects.filter(pk=table.pk).exclude(metadata_pointer="").exists(),
        timeout=120,
        message="the short beat's first look at the table\n" + celery_processes.logs(),
    )
    api = api_as(viewer)
    assert _files_shown(api, table.pk) == 1

    write_deltalake(str(path), delta_rows(5, 5), mode="append")
    committed = time.monotonic()
    wait_for(
        lambda: _files_shown(api, table.pk) == 2,
        timeout=VISIBLE_WITHIN,
        interval=0.25,
        message=f"the other writer's commit in the console within {VISIBLE_WITHIN} s\n"
        + celery_processes.logs(),
    )

    shown_after = time.monotonic() - committed
    row = Table.objects.get(pk=table.pk)
    assert (row.file_count, row.record_count, row.metadata_pointer) == (2, 10, "delta:1")
    assert shown_after < VISIBLE_WITHIN
