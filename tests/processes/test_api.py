"""Processes and plugins through the REST API and the console: roles, 4xx that change nothing."""

from __future__ import annotations

import pytest

from processes.models import Process, ProcessStatus
from storage import services as console_services
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


@pytest.fixture
def table(warehouse, test_plugin):
    return console_services.table_register(location=str(write_delta_table(warehouse / "orders", commits=2)))


def _set_status(process_id: int, status: str) -> None:
    Process.objects.filter(pk=process_id).update(status=status)


def test_an_operator_runs_an_action_now_with_parameters(api_as, operator, table):
    response = api_as(operator).post(
        "/api/v1/processes/", {"table": table.pk, "action": "touch", "params": {"seconds": 1}}, format="json"
    )

    assert response.status_code == 201, response.content
    assert response.json()["status"] == "PENDING"
    assert response.json()["requested_by"] == operator.username


def test_a_viewer_pressing_an_operator_button_is_refused_and_nothing_changes(api_as, viewer, operator, table):
    created = (
        api_as(operator)
        .post("/api/v1/processes/", {"table": table.pk, "action": "touch"}, format="json")
        .json()
    )

    assert (
        api_as(viewer)
        .post("/api/v1/processes/", {"table": table.pk, "action": "touch"}, format="json")
        .status_code
        == 403
    )
    for verb in ("cancel", "kill", "retry"):
        assert api_as(viewer).post(f"/api/v1/processes/{created['id']}/{verb}/").status_code == 403
    assert Process.objects.get().status == ProcessStatus.PENDING


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"action": "explode"}, 400, "no enabled process factory offers 'explode'"),
        ({"action": "touch", "params": {"seconds": "soon"}}, 400, "seconds"),
        ({"action": "touch", "params": {"unknown": 1}}, 400, "unknown"),
    ],
    ids=["unknown-action", "bad-param-type", "unknown-param"],
)
def test_bad_process_requests_are_refused_with_a_clear_message(
    api_as, operator, table, body, status, message
):
    response = api_as(operator).post("/api/v1/processes/", {"table": table.pk, **body}, format="json")

    assert response.status_code == status
    assert message in response.json()["error"]
    assert Process.objects.count() == 0


def test_an_unknown_table_is_a_400(api_as, operator, table):
    response = api_as(operator).post(
        "/api/v1/processes/", {"table": 999999, "action": "touch"}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["field"] == "table"


def test_retrying_a_successful_process_is_a_409_that_says_why(api_as, operator, table):
    created = (
        api_as(operator)
        .post("/api/v1/processes/", {"table": table.pk, "action": "touch"}, format="json")
        .json()
    )
    _set_status(created["id"], ProcessStatus.SUCCESS)

    response = api_as(operator).post(f"/api/v1/processes/{created['id']}/retry/")

    assert response.status_code == 409
    assert f"process {created['id']} is SUCCESS" in response.json()["error"]
    assert Process.objects.count() == 1


def test_killing_a_finished_process_is_a_409(api_as, operator, table):
    created = (
        api_as(operator)
        .post("/api/v1/processes/", {"table": table.pk, "action": "touch"}, format="json")
        .json()
    )
    _set_status(created["id"], ProcessStatus.FAILED)

    response = api_as(operator).post(f"/api/v1/processes/{created['id']}/kill/")

    assert response.status_code == 409
    assert Process.objects.get().status == ProcessStatus.FAILED


def test_cancel_then_retry_through_the_api(api_as, operator, table):
    api = api_as(operator)
    created = api.post("/api/v1/processes/", {"table": table.pk, "action": "touch"}, format="json").json()

    cancelled = api.post(f"/api/v1/processes/{created['id']}/cancel/")
    retried = api.post(f"/api/v1/processes/{created['id']}/retry/")

    assert cancelled.json()["status"] == "CANCELED"
    assert retried.status_code == 201 and retried.json()["retry_of"] == created["id"]


def test_the_process_list_filters_by_table_action_and_status(api_as, operator, table, warehouse):
    other = console_services.table_register(location=str(write_delta_table(warehouse / "other", commits=1)))
    api = api_as(operator)
    first = api.post("/api/v1/processes/", {"table": table.pk, "action": "touch"}, format="json").json()
    api.post("/api/v1/processes/", {"table": other.pk, "action": "touch"}, format="json")
    _set_status(first["id"], ProcessStatus.SUCCESS)

    by_table = api.get(f"/api/v1/processes/?table={table.pk}").json()
    by_status = api.get("/api/v1/processes/?status=PENDING").json()
    active = api.get("/api/v1/processes/?active=true").json()

    assert [p["id"] for p in by_table["results"]] == [first["id"]]
    assert [p["table"] for p in by_status["results"]] == [other.pk]
    assert active["count"] == 1


def test_plugins_list_their_pairs_and_strategies(api_as, viewer, test_plugin):
    plugins = {p["name"]: p for p in api_as(viewer).get("/api/v1/plugins/").json()}

    touch = plugins["test-touch"]
    assert touch["enabled"] is True and plugins["test-touch-twin"]["enabled"] is False
    assert touch["strategies"] == [
        {
            "format": "delta",
            "action": "touch",
            "interval_seconds": 3600.0,
            "on_new_snapshot": False,
            "parallelism": 2,
        }
    ]


def test_the_console_run_now_button_creates_a_process_and_goes_to_it(client_as, operator, table):
    response = client_as(operator).post(
        f"/tables/{table.pk}/processes/run/",
        {"action": "touch", "params": '{"seconds": 1}'},
        HTTP_HX_REQUEST="true",
    )

    process = Process.objects.get()
    assert response.status_code == 204
    assert response["HX-Redirect"] == f"/processes/{process.pk}/"


def test_the_console_shows_bad_run_parameters_without_creating_anything(client_as, operator, table):
    response = client_as(operator).post(
        f"/tables/{table.pk}/processes/run/",
        {"action": "touch", "params": "{not json"},
        HTTP_HX_REQUEST="true",
    )

    assert response.status_code == 400
    assert "not valid JSON" in response.content.decode()
    assert Process.objects.count() == 0


def test_process_pages_poll_while_active_and_stop_when_finished(client_as, operator, table):
    client = client_as(operator)
    client.post(f"/tables/{table.pk}/processes/run/", {"action": "touch", "params": "{}"})
    process = Process.objects.get()

    active = client.get(f"/processes/{process.pk}/", HTTP_HX_REQUEST="true").content.decode()
    _set_status(process.pk, ProcessStatus.SUCCESS)
    finished = client.get(f"/processes/{process.pk}/", HTTP_HX_REQUEST="true").content.decode()
    listing = client.get("/processes/").content.decode()

    assert 'hx-trigger="every 2s"' in active
    assert 'hx-trigger="every 2s"' not in finished
    assert "touch" in listing and "SUCCESS" in listing


def test_a_viewer_sees_no_operator_buttons_and_cannot_post_them(client_as, viewer, operator, table):
    client_as(operator).post(f"/tables/{table.pk}/processes/run/", {"action": "touch", "params": "{}"})
    process = Process.objects.get()
    client = client_as(viewer)

    html = client.get(f"/processes/{process.pk}/").content.decode()
    tab = client.get(f"/tables/{table.pk}/processes/").content.decode()

    assert "Cancel</button>" not in html and "Run now" not in tab
    assert client.post(f"/processes/{process.pk}/cancel/").status_code == 403
    assert Process.objects.get().status == ProcessStatus.PENDING
