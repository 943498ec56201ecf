"""What a new user trips on in the console's process and catalog pages (issue 29, item 22): a
"queued." note that outlives the process, "0.0 s" for a running process, a catalog page saying
"no tables" beside "4 already registered", the alerts page with nothing set up and no word on how,
and a table the scheduler leaves alone without saying so."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from processes.alerts.models import AlertChannel, AlertRule
from processes.models import Process, ProcessStatus
from storage import services
from storage.models import Catalog, CatalogKind, Table
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


def _status_fragment(client, process: Process) -> str:
    return client.get(process.get_absolute_url(), HTTP_HX_REQUEST="true").content.decode()


def _outside_fragment(html: str) -> str:
    """The page without its live ``#process-status`` fragment (what polling never replaces)."""
    start = html.index('<div id="process-status"')
    return html[:start] + html[html.index('<section class="card"><h2>Attempts</h2>', start) :]


@pytest.fixture
def delta_table(warehouse):
    return services.table_register(location=str(write_delta_table(warehouse / "orders", commits=2)))


def test_the_queued_note_is_part_of_the_live_status_and_gone_once_the_process_ended(
    client_as, operator, test_plugin, delta_table
):
    client = client_as(operator)

    page = client.post(f"/tables/{delta_table.pk}/processes/run/", {"action": "touch"}, follow=True)

    process = Process.objects.get(table=delta_table)
    html = page.content.decode()
    assert "queued: waiting for a worker" in _status_fragment(client, process)
    assert "queued" not in _outside_fragment(html)  # no flash message that polling cannot clear
    now = timezone.now()
    Process.objects.filter(pk=process.pk).update(
        status=ProcessStatus.SUCCESS, started_at=now, heartbeat_at=now, finished_at=now
    )
    assert "queued" not in _status_fragment(client, process)
    assert "queued" not in client.get(process.get_absolute_url()).content.decode()


def test_a_running_process_shows_the_time_since_it_started(client_as, viewer, test_plugin, delta_table):
    started = timezone.now() - dt.timedelta(seconds=95)
    process = Process.objects.create(
        table=delta_table,
        action="touch",
        factory="test-touch",
        status=ProcessStatus.RUNNING,
        started_at=started,
        heartbeat_at=started,  # as a fresh claim leaves it until the first heartbeat
    )
    client = client_as(viewer)

    detail = client.get(process.get_absolute_url()).content.decode()
    listing = client.get("/processes/").content.decode()

    assert 95 <= process.duration_seconds < 120
    assert re.search(r"running for 1 min 3\d s", detail), detail
    row = listing[listing.index(f"#{process.pk}") :]
    assert "0.0 s" not in row[: row.index("</tr>")] and "1 min 3" in row[: row.index("</tr>")]


def test_a_finished_process_keeps_its_duration_from_start_to_finish(delta_table):
    started = timezone.now() - dt.timedelta(hours=2)
    process = Process(
        table=delta_table,
        status=ProcessStatus.SUCCESS,
        started_at=started,
        heartbeat_at=started,
        finished_at=started + dt.timedelta(seconds=12),
    )
    assert process.duration_seconds == 12


def test_a_path_root_catalog_page_lists_the_tables_its_sync_counts(client_as, admin_user, warehouse):
    for name in ("orders", "events", "clicks", "readings"):
        write_delta_table(warehouse / "lake" / name, commits=1)
    catalog = services.catalog_create(
        name="lake", kind=CatalogKind.PATH_ROOT, properties={"root": str(warehouse / "lake")}
    )
    services.table_register(location=str(warehouse / "lake" / "orders"))  # registered before
    outside = services.table_register(location=str(write_delta_table(warehouse / "lake2" / "x", commits=1)))
    client = client_as(admin_user)

    response = client.post(f"/catalogs/{catalog.pk}/sync/", follow=True)

    html = response.content.decode()
    assert "3 added, 1 already registered" in html
    assert "No tables registered from this catalog yet" not in html
    for name in ("orders", "events", "clicks", "readings"):
        assert f">{name}</a>" in html
    assert outside.name not in html.split("<h2>Tables</h2>", 1)[1]  # /lake2 is not under /lake
    listed = client.get("/catalogs/").content.decode()
    assert re.search(r">lake</a>.*?<td class=\"num\">4</td>", listed, re.S), listed


def test_the_catalog_api_counts_a_path_roots_tables(api_as, admin_user, warehouse):
    write_delta_table(warehouse / "lake" / "orders", commits=1)
    catalog = services.catalog_create(
        name="lake", kind=CatalogKind.PATH_ROOT, properties={"root": str(warehouse / "lake")}
    )
    services.catalog_sync(catalog=catalog)
    empty = Catalog.objects.create(name="other", kind=CatalogKind.PATH_ROOT, properties={"root": "/nowhere"})

    rows = {row["name"]: row for row in api_as(admin_user).get("/api/v1/catalogs/").json()["results"]}

    assert rows["lake"]["table_count"] == 1 and rows[empty.name]["table_count"] == 0


def test_an_empty_catalog_page_still_says_to_sync_it(client_as, admin_user, warehouse):
    (warehouse / "empty").mkdir()
    catalog = services.catalog_create(
        name="empty", kind=CatalogKind.PATH_ROOT, properties={"root": str(warehouse / "empty")}
    )

    html = client_as(admin_user).get(f"/catalogs/{catalog.pk}/").content.decode()

    assert "No tables registered from this catalog yet — sync it." in html


def test_the_alerts_page_of_a_new_install_says_nothing_is_sent_and_how_to_add_one(client_as, admin_user):
    client = client_as(admin_user)

    html = client.get("/alerts/").content.decode()

    assert "No alert is sent yet" in html
    assert "no alert channel and no rule" in html
    assert 'href="/alerts/channels/new/"' in html
    assert 'href="/alerts/rules/new/"' in html
    assert "add, edit, switch on and off and delete channels and rules" in html

    AlertChannel.objects.create(name="ops", kind="webhook", url="https://hooks.example.com/x")
    AlertRule.objects.create(name="failures", kind="process_failed")
    assert "No alert is sent yet" not in client.get("/alerts/").content.decode()


def test_the_processes_tab_says_which_actions_the_scheduler_leaves_to_operators(
    client_as, operator, test_plugin, delta_table
):
    client = client_as(operator)
    assert 'id="manual-actions"' not in client.get(f"/tables/{delta_table.pk}/processes/").content.decode()

    Table.objects.filter(pk=delta_table.pk).update(properties={"manual-actions": "*"})
    every = client.get(f"/tables/{delta_table.pk}/processes/").content.decode()
    Table.objects.filter(pk=delta_table.pk).update(properties={"manual-actions": ["rewrite"]})
    one = client.get(f"/tables/{delta_table.pk}/processes/").content.decode()

    assert "The scheduler leaves every action on this table to operators" in every
    assert "The scheduler leaves rewrite on this table to operators" in one
