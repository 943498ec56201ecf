"""Worker tasks: thin wrappers around the scheduler, executor, services and queries."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task
from django.conf import settings

from processes.executor import TableLockBusy, run_process
from processes.health import health_store
from processes.models import Process
from processes.queries import query_run
from processes.query_reaper import queries_reap
from processes.scheduler import schedule_tick
from processes.services import process_enforce_kill, process_queue, processes_reap
from processes.spark.session import spark_session
from storage.models import StorageBackend
from storage.services import storage_backend_test

# A process may run for hours; the soft limit lets it fail cleanly (staging removed) first.
PROCESS_TIME_LIMIT = settings.CELERY_TASK_TIME_LIMIT
QUERY_TIME_LIMIT = min(settings.CELERY_TASK_TIME_LIMIT, 3600)


@shared_task(
    bind=True, soft_time_limit=PROCESS_TIME_LIMIT - 60, time_limit=PROCESS_TIME_LIMIT, max_retries=None
)
def run_process_task(self, process_id: int) -> str:
    try:
        return run_process(process_id, worker=self.request.hostname or "", task_id=self.request.id or "")
    except TableLockBusy as busy:
        process = Process.objects.select_related("resource_group").filter(pk=process_id).first()
        queue = process_queue(process) if process else settings.LAKEWARDEN_HEAVY_QUEUE
        raise self.retry(countdown=10, exc=busy, queue=queue) from busy


@shared_task(soft_time_limit=50, time_limit=60)
def schedule_processes_task() -> dict:
    from django.utils import timezone

    from processes.models import ServiceHeartbeat

    ServiceHeartbeat.objects.update_or_create(name="beat", defaults={"last_seen": timezone.now()})
    report = schedule_tick()
    return {**asdict(report), "triggered": len(report.triggered)}


@shared_task(soft_time_limit=570, time_limit=600)
def store_health_task() -> int:
    """Every table's stored health score brought to now (what time changes: staleness grows,
    failures leave the 7-day window); answers how many changed."""
    return health_store()


@shared_task(soft_time_limit=50, time_limit=60)
def reap_processes_task() -> dict:
    return processes_reap()


@shared_task(soft_time_limit=50, time_limit=60)
def kill_process_task(process_id: int) -> str | None:
    process = process_enforce_kill(process_id=process_id)
    return process.status if process else None


@shared_task(bind=True, soft_time_limit=QUERY_TIME_LIMIT - 30, time_limit=QUERY_TIME_LIMIT)
def run_query_task(self, query_id: int) -> str:
    return query_run(query_id=query_id, worker=self.request.hostname or "")


@shared_task(soft_time_limit=50, time_limit=60)
def reap_queries_task() -> dict:
    return queries_reap()


@shared_task(soft_time_limit=150, time_limit=180)
def test_storage_task(backend_id: int) -> dict:
    backend = StorageBackend.objects.filter(pk=backend_id).first()
    if backend is None:  # deleted while the test waited in the queue
        return {"ok": False, "message": f"storage {backend_id} no longer exists"}
    ok, message = storage_backend_test(backend=backend, spark=spark_session())
    return {"ok": ok, "message": message}
