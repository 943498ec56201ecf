"""Snapshots, files, splits, partitions and changes of a table, through the API and the console."""

from __future__ import annotations

import shutil

import pytest
from deltalake import DeltaTable

from storage import services
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


@pytest.fixture
def orders(warehouse):
    path = write_delta_table(warehouse / "orders", commits=4, rows_per_commit=10, partition_by=["region"])
    return services.table_register(location=str(path))


def test_snapshots_list_every_version_newest_first(api_as, viewer, orders):
    response = api_as(viewer).get(f"/api/v1/tables/{orders.pk}/snapshots/")

    assert response.status_code == 200
    assert [s["id"] for s in response.json()] == ["3", "2", "1", "0"]
    assert {s["operation"] for s in response.json()} == {"append"}


def test_files_at_a_snapshot_match_the_delta_log(api_as, viewer, orders):
    body = api_as(viewer).get(f"/api/v1/tables/{orders.pk}/files/?at=1&page_size=100").json()

    expected = {uri.split("/")[-1] for uri in DeltaTable(orders.location, version=1).file_uris()}
    assert {f["path"].split("/")[-1] for f in body["files"]} == expected
    assert body["instant"]["id"] == "1"
    assert all(f["partition"]["region"] in {"eu", "us"} for f in body["files"])


def test_files_are_paged(api_as, viewer, orders):
    api = api_as(viewer)
    first = api.get(f"/api/v1/tables/{orders.pk}/files/?page_size=3").json()
    second = api.get(f"/api/v1/tables/{orders.pk}/files/?page_size=3&page=2").json()
    third = api.get(f"/api/v1/tables/{orders.pk}/files/?page_size=3&page=3").json()

    paths = [f["path"] for page in (first, second, third) for f in page["files"]]
    assert len(paths) == 8 == len(set(paths))  # 4 commits x 2 regions
    assert first["has_next"] and second["has_next"] and not third["has_next"]


def test_a_filter_prunes_files_by_partition(api_as, viewer, orders):
    body = api_as(viewer).get(f"/api/v1/tables/{orders.pk}/files/", {"filter": "region = 'eu'"}).json()

    assert len(body["files"]) == 4
    assert {f["partition"]["region"] for f in body["files"]} == {"eu"}


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"filter": "region = "}, "filter", "position"),
        ({"filter": "regoin = 'eu'"}, "filter", "unknown column 'regoin'"),
        ({"filter": "id = 'abc'"}, "filter", "id"),
        ({"at": "99"}, "at", "99"),
        ({"page": "0"}, "page", "positive"),
        ({"page_size": "many"}, "page_size", "whole number"),
    ],
    ids=["malformed", "unknown-column", "type-mismatch", "unknown-snapshot", "page-zero", "page-size-text"],
)
def test_bad_file_queries_answer_400_with_the_parser_message(api_as, viewer, orders, query, field, message):
    response = api_as(viewer).get(f"/api/v1/tables/{orders.pk}/files/", query)

    assert response.status_code == 400
    assert response.json()["field"] == field
    assert message in response.json()["error"]


def test_splits_respect_the_target_size_and_cover_all_files(api_as, viewer, orders):
    body = api_as(viewer).get(f"/api/v1/tables/{orders.pk}/splits/?target_size=4096&open_file_cost=1").json()

    parts = [p for split in body["splits"] for p in split["parts"]]
    assert len({p["path"] for p in parts}) == 8
    assert body["summary"]["count"] == len(body["splits"])
    assert all(s["weight"] <= 4096 or len(s["parts"]) == 1 for s in body["splits"])


@pytest.mark.parametrize("target", ["-5", "0", "big"])
def test_a_bad_target_size_answers_400(api_as, viewer, orders, target):
    response = api_as(viewer).get(f"/api/v1/tables/{orders.pk}/splits/?target_size={target}")

    assert response.status_code == 400
    assert response.json()["field"] == "target_size"


def test_partitions_aggregate_files_and_records(api_as, viewer, orders):
    body = api_as(viewer).get(f"/api/v1/tables/{orders.pk}/partitions/").json()

    by_path = {p["path"]: p for p in body["partitions"]}
    assert {p["file_count"] for p in by_path.values()} == {4}
    assert sum(p["record_count"] for p in by_path.values()) == 40
    assert all(p["small_file_count"] == 4 for p in by_path.values())


def test_changes_between_two_snapshots_list_added_files(api_as, viewer, orders):
    body = api_as(viewer).get(f"/api/v1/tables/{orders.pk}/changes/?from=1&to=3").json()

    assert sum(p["files_added"] for p in body["partitions"]) == 4
    assert {f["kind"] for f in body["files"]} == {"added"}
    assert body["from"]["id"] == "1" and body["to"]["id"] == "3"


def test_from_after_to_answers_400(api_as, viewer, orders):
    response = api_as(viewer).get(f"/api/v1/tables/{orders.pk}/changes/?from=3&to=1")

    assert response.status_code == 400
    assert "after" in response.json()["error"]


def test_a_table_whose_files_vanished_answers_409_not_500(api_as, viewer, orders):
    shutil.rmtree(orders.location)

    for endpoint in ("snapshots", "files", "splits", "partitions", "changes"):
        response = api_as(viewer).get(f"/api/v1/tables/{orders.pk}/{endpoint}/")
        assert response.status_code == 409, endpoint
        assert "cannot be read" in response.json()["error"]


@pytest.mark.parametrize("tab", ["snapshots", "files", "splits", "partitions", "changes"])
def test_each_table_tab_renders_as_page_and_as_fragment(client_as, viewer, orders, tab):
    client = client_as(viewer)

    page = client.get(f"/tables/{orders.pk}/{tab}/")
    fragment = client.get(f"/tables/{orders.pk}/{tab}/", HTTP_HX_REQUEST="true")

    assert page.status_code == 200 and "<html" in page.content.decode()
    assert fragment.status_code == 200 and "<html" not in fragment.content.decode()


def test_the_files_tab_shows_the_filter_error_in_the_page(client_as, viewer, orders):
    response = client_as(viewer).get(f"/tables/{orders.pk}/files/", {"filter": "nope > 1"})

    assert response.status_code == 400
    assert "unknown column" in response.content.decode()


def test_the_files_tab_shows_stats_and_a_size_histogram(client_as, viewer, orders):
    html = client_as(viewer).get(f"/tables/{orders.pk}/files/").content.decode()

    assert "File sizes at snapshot 3: 8 files" in html  # the whole snapshot: test_table_tabs.py
    assert "region=" in html
    assert "nulls" in html
