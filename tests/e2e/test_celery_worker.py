"""A real Celery worker process, consuming from the real Redis broker, runs Lakewarden tasks."""

from __future__ import annotations

import pytest

from storage import services
from storage.tasks import refresh_table_task
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.e2e


def test_a_worker_process_refreshes_a_table_that_gained_commits(celery_processes, warehouse):
    path = write_delta_table(warehouse / "orders", commits=1)
    table = services.table_register(location=str(path))
    write_delta_table(path, commits=2)  # two more commits after registration: versions 1 and 2
    celery_processes.start_worker()
    celery_processes.wait_for_workers()

    result = refresh_table_task.delay(table.pk).get(timeout=60)

    table.refresh_from_db()
    assert result["refreshed"] is True, celery_processes.logs()
    assert table.current_instant == "2"
    assert table.file_count == 3


def test_healthz_reports_the_worker_once_one_answers(celery_processes, client):
    celery_processes.start_worker()
    celery_processes.wait_for_workers()

    body = client.get("/healthz").json()

    assert body["checks"]["worker"]["ok"] is True
    assert any(celery_processes.queue in name for name in body["checks"]["worker"]["workers"])
