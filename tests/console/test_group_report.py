"""The per-group report (issue 31 item 6): cost spent and benefit gained per day and per action from
``Process.measured``, the same numbers in the API, the capacity page (human units) and /metrics."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from processes.groups.models import DEFAULT_GROUP, ResourceGroup
from processes.groups.report import group_report, group_reports
from processes.models import Process, ProcessStatus
from storage.models import Table
from tests.console.test_metrics import TOKEN, scrape, token, value  # noqa: F401 - the token fixture

pytestmark = pytest.mark.django_db
GIB = 1024**3


def _facts(small, deletes, snapshots, size, health):
    return {
        "small_files": small,
        "delete_files": deletes,
        "snapshots": snapshots,
        "bytes": size,
        "health": health,
    }


def _run(table, group, action, status, finished, *, seconds=None, read=0, written=0, before=None, after=None):
    measured = {}
    if seconds is not None:
        measured = {
            "before": before or {},
            "after": after or {},
            "cost": {"worker_seconds": seconds, "bytes_read": read, "bytes_written": written},
        }
    return Process.objects.create(
        table=table,
        action=action,
        factory="test",
        status=status,
        resource_group=group,
        finished_at=finished,
        measured=measured,
    )


@pytest.fixture
def history():
    """Group ``night``: today a compaction (3600.5 s, 2 GiB read, 1 GiB written, 100 small files,
    4 delete files and 0.5 GiB gone, health 60 -> 20), a failed one (100 s), a run recorded before
    ``measured`` existed; two days ago a snapshot expiry (10 s, 40 snapshots, health worse: gain 0);
    twenty days ago a compaction (outside 14 days); one waiting. ``default``: one run today."""
    now = timezone.now()
    night = ResourceGroup.objects.create(name="night")
    default = ResourceGroup.objects.get(name=DEFAULT_GROUP)
    table = Table.objects.create(name="orders", identifier="sales.orders", format="delta", location="/lake/o")
    other = Table.objects.create(name="events", identifier="web.events", format="delta", location="/lake/e")
    ok, failed = ProcessStatus.SUCCESS, ProcessStatus.FAILED
    _run(
        table,
        night,
        "rewrite",
        ok,
        now,
        seconds=3600.5,
        read=2 * GIB,
        written=GIB,
        before=_facts(120, 4, 10, 5 * GIB, 60),
        after=_facts(20, 0, 11, 4.5 * GIB, 20),
    )
    _run(table, night, "rewrite", failed, now, seconds=100, before=_facts(20, 0, 11, GIB, 20))
    _run(table, night, "rewrite", ok, now)  # no measured record: counted, nothing summed
    for action, days_ago, seconds, before, after in (
        ("expire-snapshots", 2, 10, _facts(20, 0, 50, GIB, 30), _facts(20, 0, 10, GIB, 35)),
        ("rewrite", 20, 50, _facts(9, 0, 1, GIB, 10), _facts(1, 0, 2, GIB, 5)),
    ):
        finished = now - dt.timedelta(days=days_ago)
        _run(table, night, action, ok, finished, seconds=seconds, before=before, after=after)
    Process.objects.create(table=other, action="rewrite", factory="test", resource_group=night)  # waiting
    _run(
        other,
        default,
        "rewrite",
        ok,
        now,
        seconds=7,
        read=1000,
        written=500,
        before=_facts(6, 0, 1, 2000, 15),
        after=_facts(1, 0, 2, 1500, 5),
    )
    return {"night": night, "default": default, "now": now}


NIGHT_TOTALS = {
    "runs": 4,
    "failed": 1,
    "worker_seconds": 3710.5,
    "bytes_read": 2 * GIB,
    "bytes_written": GIB,
    "small_files_removed": 100,
    "delete_files_removed": 4,
    "snapshots_removed": 40,
    "bytes_reclaimed": GIB // 2,
    "health_gain": 40,
}


def test_the_report_sums_cost_of_every_finished_run_and_benefit_of_the_successful_ones(history):
    report = group_report(history["night"], days=14)

    assert report["totals"] == NIGHT_TOTALS
    assert report["by_action"] == [
        {
            "action": "expire-snapshots",
            "runs": 1,
            "failed": 0,
            "worker_seconds": 10.0,
            "bytes_read": 0,
            "bytes_written": 0,
            "small_files_removed": 0,
            "delete_files_removed": 0,
            "snapshots_removed": 40,
            "bytes_reclaimed": 0,
            "health_gain": 0,
        },
        {
            "action": "rewrite",
            "runs": 3,
            "failed": 1,
            "worker_seconds": 3700.5,
            "bytes_read": 2 * GIB,
            "bytes_written": GIB,
            "small_files_removed": 100,
            "delete_files_removed": 4,
            "snapshots_removed": 0,
            "bytes_reclaimed": GIB // 2,
            "health_gain": 40,
        },
    ]
    today = history["now"].astimezone(dt.UTC).date()
    days = report["by_day"]
    assert [d["day"] for d in days] == [(today - dt.timedelta(days=13 - i)).isoformat() for i in range(14)]
    assert (report["since"], report["until"]) == (days[0]["day"], today.isoformat())
    assert [(d["runs"], d["worker_seconds"], d["snapshots_removed"]) for d in days[-3:]] == [
        (1, 10.0, 40),
        (0, 0.0, 0),
        (3, 3700.5, 0),
    ]
    assert sum(d["runs"] for d in days[:-3]) == 0
    # 30 days reach the run of twenty days ago
    assert group_report(history["night"], days=30)["totals"]["small_files_removed"] == 108


def test_any_number_of_groups_is_reported_in_one_query(history):
    groups = list(ResourceGroup.objects.all())
    with CaptureQueriesContext(connection) as queries:
        reports = group_reports(groups, days=14)
    assert len(queries.captured_queries) == 1
    assert reports[history["default"].pk]["totals"]["worker_seconds"] == 7.0
    assert reports[history["default"].pk]["totals"]["bytes_reclaimed"] == 500


def test_the_api_gives_the_report_with_its_days_and_refuses_bad_days(history, api_as, operator, viewer):
    api = api_as(operator)
    url = f"/api/v1/resource-groups/{history['night'].pk}/report/"

    answer = api.get(url, {"days": 14})
    assert answer.status_code == 200, answer.content
    assert answer.json()["totals"] == NIGHT_TOTALS
    assert answer.json() == {**group_report(history["night"], days=14), "since": answer.json()["since"]}
    assert len(api.get(url).json()["by_day"]) == 14  # the default
    assert api.get(url, {"days": 1}).json()["totals"]["runs"] == 3
    for bad, message in (("0", "days must be from 1 to 366 (got 0)"), ("x", "days must be a whole number")):
        refused = api.get(url, {"days": bad})
        assert refused.status_code == 400
        assert refused.json()["field"] == "days" and refused.json()["error"].startswith(message)
    assert api.get("/api/v1/resource-groups/999999/report/").status_code == 404
    assert api_as(viewer).get(url).status_code == 403


def test_the_capacity_page_shows_the_report_in_human_units(history, operator):
    client = Client()
    client.force_login(operator)

    html = client.get("/capacity/").content.decode()

    night = html[html.index('id="group-night"') :]
    assert 'id="report-night"' in night
    rewrite = night[night.index("<td>rewrite</td><td>3</td>") :]
    row = rewrite[: rewrite.index("</tr>")]
    assert "<td>1 h 1 min</td>" in row  # 3,700.5 worker-seconds
    assert f'title="{2 * GIB:,} bytes">2.0 GiB' in row and f'title="{GIB // 2:,} bytes">512.0 MiB' in row
    assert row.endswith(
        "<td>100</td><td>4</td><td>0</td>"
        + f'<td><span title="{GIB // 2:,} bytes">512.0 MiB</span></td><td>40</td>'
    )
    assert "<th>All</th><td>4</td><td>1</td><td>1 h 1 min</td>" in night
    refused = client.get("/capacity/", {"days": "400"})
    assert refused.status_code == 400 and "days must be from 1 to 366 (got 400)" in refused.content.decode()
    week = client.get("/capacity/", {"days": "1"}).content.decode()
    assert "<th>All</th><td>3</td><td>1</td>" in week[week.index('id="group-night"') :]


def test_metrics_count_what_each_group_spent_and_gained(history, client, token):  # noqa: F811
    samples = scrape(client)

    def of(name, action, group="night"):
        return value(samples, f"lakewarden_resource_group_{name}_total", group=group, action=action)

    # every finished run since the history began: the run of twenty days ago too
    assert of("runs", "rewrite") == 4 and of("failed_runs", "rewrite") == 1
    assert of("worker_seconds", "rewrite") == 3750.5
    assert of("small_files_removed", "rewrite") == 108
    assert of("snapshots_removed", "expire-snapshots") == 40
    assert of("health_gain", "rewrite") == 45
    assert of("bytes_read", "rewrite", group=DEFAULT_GROUP) == 1000
    assert of("bytes_reclaimed", "rewrite", group=DEFAULT_GROUP) == 500
