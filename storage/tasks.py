"""Query tasks (Spark work, heavy queue) and storage tests."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from storage import cache, services
from storage.models import StorageBackend

QUERY_TIME_LIMIT = min(settings.CELERY_TASK_TIME_LIMIT, 3600)


@shared_task(soft_time_limit=QUERY_TIME_LIMIT - 30, time_limit=QUERY_TIME_LIMIT)
def run_query_task(query_id: int) -> str:
    return cache.query_run(query_id=query_id)


@shared_task(soft_time_limit=150, time_limit=180)
def test_storage_task(backend_id: int) -> dict:
    backend = StorageBackend.objects.get(pk=backend_id)
    ok, message = services.storage_backend_test(backend=backend)
    return {"ok": ok, "message": message}
