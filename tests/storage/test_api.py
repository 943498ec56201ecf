"""Storages, queries and cached results through the REST API: roles, masking, 4xx."""

from __future__ import annotations

import pytest

from processes import queries
from processes.models import Query
from storage import services as console_services
from storage.models import CachedResult, StorageBackend
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


def reachable_dsn(password: str) -> str:
    """A DSN of the test database with ``password`` (the server trusts loopback connections, so any
    password connects): a postgres storage is reached before it is saved."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    return f"postgresql://{db['USER']}:{password}@127.0.0.1:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def orders(warehouse):
    return console_services.table_register(location=str(write_delta_table(warehouse / "orders", commits=2)))


def test_an_admin_registers_a_storage_and_secrets_never_come_back(api_as, admin_user, viewer, warehouse):
    api = api_as(admin_user)
    created = api.post(
        "/api/v1/storages/",
        {
            "name": "pg",
            "type": "postgres",
            "config": {"dsn": reachable_dsn("s3cret")},
        },
        format="json",
    )

    assert created.status_code == 201, created.content
    for body in (
        created.content,
        api.get("/api/v1/storages/").content,
        api_as(viewer).get("/api/v1/storages/").content,
    ):
        assert b"s3cret" not in body
    assert StorageBackend.objects.get().config["dsn"] == reachable_dsn("s3cret")


def test_sending_a_masked_secret_back_keeps_the_stored_one(api_as, admin_user):
    api = api_as(admin_user)
    created = api.post(
        "/api/v1/storages/",
        {
            "name": "pg",
            "type": "postgres",
            "config": {"dsn": reachable_dsn("s3cret"), "schema": "a"},
        },
        format="json",
    ).json()

    updated = api.patch(
        f"/api/v1/storages/{created['id']}/", {"config": {**created["config"], "schema": "b"}}, format="json"
    )

    assert updated.status_code == 200, updated.content
    config = StorageBackend.objects.get().config
    assert config["schema"] == "b" and "s3cret" in config["dsn"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "type": "teleport"}, "type"),
        ({"name": "x", "type": "filesystem", "config": {"root": "/etc"}}, "config"),
        ({"name": "bad name!", "type": "filesystem"}, "name"),
        ({"name": "x", "type": "filesystem", "quota_bytes": 0}, "quota_bytes"),
    ],
)
def test_bad_storages_answer_400_naming_the_field(api_as, admin_user, warehouse, body, field):
    response = api_as(admin_user).post("/api/v1/storages/", body, format="json")

    assert response.status_code == 400
    assert response.json()["field"] == field
    assert StorageBackend.objects.count() == 0


def test_viewers_and_operators_cannot_manage_storages(api_as, viewer, operator):
    for user in (viewer, operator):
        response = api_as(user).post("/api/v1/storages/", {"name": "x", "type": "filesystem"}, format="json")
        assert response.status_code == 403
    assert StorageBackend.objects.count() == 0


def test_an_operator_submits_a_query_and_a_viewer_cannot(api_as, operator, viewer, orders):
    submitted = api_as(operator).post(
        "/api/v1/queries/", {"sql": "select count(*) from orders"}, format="json"
    )
    refused = api_as(viewer).post("/api/v1/queries/", {"sql": "select count(*) from orders"}, format="json")

    assert submitted.status_code == 201 and submitted.json()["status"] == "PENDING"
    assert refused.status_code == 403
    assert Query.objects.count() == 1


def test_bad_sql_answers_400_with_the_reason(api_as, operator, orders):
    response = api_as(operator).post(
        "/api/v1/queries/", {"sql": "select * from missing_table"}, format="json"
    )

    assert response.status_code == 400
    assert "unknown table 'missing_table'" in response.json()["error"]
    assert Query.objects.count() == 0


def test_a_query_result_is_paged_in_the_api(api_as, viewer, operator, orders):
    query = queries.query_submit(sql="select id from orders")
    Query.objects.filter(pk=query.pk).update(
        status="SUCCESS", columns=["id"], rows=[[i] for i in range(250)], total_rows=250
    )

    page3 = api_as(viewer).get(f"/api/v1/queries/{query.pk}/?page=3").json()

    assert page3["result"]["pages"] == 3 and page3["result"]["rows"] == [[i] for i in range(200, 250)]


def test_cached_results_can_be_invalidated_and_dropped_through_the_api(api_as, operator, viewer, warehouse):
    from storage.services import storage_backend_default

    backend = storage_backend_default()
    folder = warehouse / ".lakewarden-cache" / "r1"
    folder.mkdir(parents=True)
    (folder / "part-0.parquet").write_bytes(b"x")
    result = CachedResult.objects.create(
        fingerprint="f" * 64,
        backend=backend,
        name="r1",
        sql="select 1",
        properties={"path": str(folder)},
        state="READY",
    )
    api = api_as(operator)

    assert api_as(viewer).post(f"/api/v1/cached-results/{result.pk}/invalidate/").status_code == 403
    invalidated = api.post(f"/api/v1/cached-results/{result.pk}/invalidate/")
    again = api.post(f"/api/v1/cached-results/{result.pk}/invalidate/")
    dropped = api.delete(f"/api/v1/cached-results/{result.pk}/")

    assert invalidated.status_code == 200 and invalidated.json()["state"] == "CLEANED"
    assert not folder.exists()
    assert again.status_code == 409 and "only READY or POPULATING" in again.json()["error"]
    assert dropped.status_code == 204 and CachedResult.objects.count() == 0


def _cached_result(backend: StorageBackend, folder, name: str) -> CachedResult:
    folder.mkdir(parents=True)
    (folder / "part-0.parquet").write_bytes(b"x" * 100)
    return CachedResult.objects.create(
        fingerprint=name[-1] * 64,
        backend=backend,
        name=name,
        sql="select 1",
        properties={"path": str(folder)},
        state="READY",
        size_bytes=100,
    )


def _filesystem_storage(root) -> StorageBackend:
    from storage.results.plugin import StorageDescriptor

    return console_services.storage_backend_register(
        name="results", descriptor=StorageDescriptor(type="filesystem", config={"root": str(root)})
    )


def test_moving_a_storage_cleans_the_results_it_wrote_where_it_was(api_as, admin_user, warehouse):
    """A new root (bucket, database) cannot reach what the old one holds: the results are cleaned
    with the old configuration first. They were left behind, and cleaning them for the quota or
    the storage's deletion then refused the path outside the new root: a 500 each (API fuzz)."""
    backend = _filesystem_storage(warehouse / "old")
    result = _cached_result(backend, warehouse / "old" / "result_r1", "result_r1")
    api = api_as(admin_user)

    moved = api.patch(
        f"/api/v1/storages/{backend.pk}/",
        {"config": {"root": str(warehouse / "new")}, "quota_bytes": 1},
        format="json",
    )
    result.refresh_from_db()
    deleted = api.delete(f"/api/v1/storages/{backend.pk}/")

    assert moved.status_code == 200, moved.content
    assert moved.json()["config"] == {"root": str(warehouse / "new")}
    assert result.state == "CLEANED" and "configuration changed" in result.state_reason
    assert not (warehouse / "old" / "result_r1").exists()
    assert deleted.status_code == 204, deleted.content
    assert not StorageBackend.objects.exists()


def test_a_result_left_outside_a_moved_storage_is_kept_and_its_storage_can_go(api_as, admin_user, warehouse):
    """A result an earlier move left behind (or a worker finished after it) lies outside the root:
    the storage never deletes there, and no longer refuses its quota, invalidation or deletion."""
    backend = _filesystem_storage(warehouse / "new")
    result = _cached_result(backend, warehouse / "old" / "result_r2", "result_r2")
    api = api_as(admin_user)

    invalidated = api.post(f"/api/v1/cached-results/{result.pk}/invalidate/")
    deleted = api.delete(f"/api/v1/storages/{backend.pk}/")

    assert invalidated.status_code == 200, invalidated.content
    assert deleted.status_code == 204, deleted.content
    assert (warehouse / "old" / "result_r2" / "part-0.parquet").exists()


class _RunHereWhenAsked:
    """What ``send_task`` returns, run in this process when its answer is asked for, as a worker
    would run it, after ``meanwhile`` (what another request does in the meantime)."""

    def __init__(self, name, args, meanwhile):
        self.args, self.meanwhile = args, meanwhile

    def get(self, timeout=None, propagate=True):
        from processes import tasks

        self.meanwhile()
        try:
            return tasks.test_storage_task(*self.args)
        except Exception as error:  # Celery hands the worker's exception back, raised unless told not to
            if propagate:
                raise
            return error


def _worker_runs_the_test(monkeypatch, meanwhile=lambda: None):
    monkeypatch.setattr(
        queries.current_app,
        "send_task",
        lambda name, args, queue=None, **kw: _RunHereWhenAsked(name, args, meanwhile),
    )


def test_a_storage_deleted_while_it_is_tested_answers_404(api_as, admin_user, warehouse, monkeypatch):
    """The API fuzz as admin deleted a storage while a test of it waited for the worker: the
    worker's DoesNotExist came back through Celery into the request, a 500."""
    backend = _filesystem_storage(warehouse / "results")
    _worker_runs_the_test(
        monkeypatch, meanwhile=lambda: StorageBackend.objects.filter(pk=backend.pk).delete()
    )

    answer = api_as(admin_user).post(f"/api/v1/storages/{backend.pk}/test/")

    assert answer.status_code == 404, answer.content
    assert answer.json()["error"] == f"storage {backend.pk} was deleted while it was tested"


def test_a_test_that_fails_on_the_worker_answers_its_failure_without_its_text(
    api_as, admin_user, warehouse, monkeypatch
):
    from processes import tasks

    def no_spark():
        raise RuntimeError("the JVM did not start: password=hunter2")

    backend = _filesystem_storage(warehouse / "results")
    _worker_runs_the_test(monkeypatch)
    monkeypatch.setattr(tasks, "spark_session", no_spark)

    answer = api_as(admin_user).post(f"/api/v1/storages/{backend.pk}/test/")

    assert answer.status_code == 200, answer.content
    assert answer.json() == {
        "ok": False,
        "message": "the test failed on the worker (RuntimeError); its log says why",
    }
