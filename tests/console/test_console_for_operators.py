"""The console as an operator reads it (issue 34, first slice): the processes list found by table
name, byte counts in binary units and elapsed time on the process pages, proper plural names in
the admin, a skip link before the navigation, and the API docs grouped by tag."""

from __future__ import annotations

import datetime as dt
import re
from html.parser import HTMLParser

import pytest
from django.contrib import admin
from django.utils import timezone

from processes.models import Process, ProcessStatus
from storage.models import Table
from storage.trash.models import TrashBatch

pytestmark = pytest.mark.django_db


def _table(warehouse, name: str, fmt: str = "iceberg") -> Table:
    return Table.objects.create(name=name, format=fmt, location=str(warehouse / name.replace(".", "/")))


def _process(table: Table, status: str = ProcessStatus.SUCCESS, **fields) -> Process:
    fields = {"action": "rewrite", "factory": "iceberg-rewrite", **fields}
    return Process.objects.create(table=table, status=status, **fields)


def _listed(html: str) -> set[int]:
    """The processes a list page's rows link to."""
    return {int(pk) for pk in re.findall(r'<td><a href="/processes/(\d+)/">#', html)}


@pytest.fixture
def three_tables(warehouse):
    """A process on each of demo.orders, demo.order_items and events."""
    tables = [_table(warehouse, name) for name in ("demo.orders", "demo.order_items", "events")]
    return {table.name: _process(table).pk for table in tables}


# --- 1. processes: by table name, human units, elapsed time ----------------------------------------


def test_the_processes_list_filters_by_part_of_the_table_name_in_any_case(client_as, viewer, three_tables):
    client = client_as(viewer)

    page = client.get("/processes/").content.decode()
    order = client.get("/processes/?table_name=ORDER").content.decode()
    orders = client.get("/processes/?table_name=demo.orders", HTTP_HX_REQUEST="true").content.decode()
    nothing = client.get("/processes/?table_name=nope").content.decode()

    assert 'name="table_name"' in page and "table id" not in page  # a name box, no numeric id box
    assert _listed(page) == set(three_tables.values())
    assert _listed(order) == {three_tables["demo.orders"], three_tables["demo.order_items"]}
    assert 'value="ORDER"' in order  # the box keeps what was typed
    assert "<html" not in orders and _listed(orders) == {three_tables["demo.orders"]}
    assert _listed(nothing) == set()


def test_the_processes_list_pages_keep_the_table_name_filter(client_as, viewer, warehouse):
    orders, events = _table(warehouse, "orders"), _table(warehouse, "events")
    mine = [_process(orders) for _ in range(51)]
    _process(events)
    client = client_as(viewer)

    first = client.get("/processes/?table_name=orders").content.decode()
    older = re.search(r'href="\?([^"]*before=\d+[^"]*)"', first).group(1).replace("&amp;", "&")
    second = client.get(f"/processes/?{older}").content.decode()

    assert "table_name=orders" in older
    assert _listed(first) | _listed(second) == {p.pk for p in mine}


def test_a_table_name_with_a_nul_character_is_left_out_not_a_server_error(client_as, viewer, three_tables):
    response = client_as(viewer).get("/processes/?table_name=%00")

    assert response.status_code == 200
    assert _listed(response.content.decode()) == set(three_tables.values())


def test_the_api_process_list_filters_by_table_name_and_still_by_id(api_as, viewer, three_tables):
    api = api_as(viewer)
    orders = Table.objects.get(name="demo.orders")

    by_name = api.get("/api/v1/processes/?table_name=Order").json()
    by_id = api.get(f"/api/v1/processes/?table={orders.pk}").json()
    both = api.get(f"/api/v1/processes/?table={orders.pk}&table_name=events").json()
    nul = api.get("/api/v1/processes/?table_name=%00")

    assert {p["id"] for p in by_name["results"]} == {
        three_tables["demo.orders"],
        three_tables["demo.order_items"],
    }
    assert [p["id"] for p in by_id["results"]] == [three_tables["demo.orders"]]
    assert both["results"] == []
    assert nul.status_code == 400 and nul.json()["field"] == "table_name"


MIB_7 = 7 * 1024 * 1024
GIB_3 = 3 * 1024**3


def test_the_process_page_shows_byte_counts_in_binary_units_with_the_exact_count_on_hover(
    client_as, viewer, warehouse
):
    counts = {"groups": 1, "files_in": 6, "bytes_in": MIB_7, "files_out": 1, "bytes_out": GIB_3}
    process = _process(
        _table(warehouse, "orders"),
        action="vacuum",
        preview={"available": True, **counts},
        summary={**counts, "orphan_bytes": 1536, "trash": {"files": 2, "bytes": 2048, "kinds": {"data": 2}}},
    )

    html = client_as(viewer).get(process.get_absolute_url()).content.decode()

    predicted = html[html.index('id="prediction"') : html.index("</table>", html.index('id="prediction"'))]
    mib = f'<span title="{MIB_7:,} bytes">7.0 MiB</span>'
    gib = f'<span title="{GIB_3:,} bytes">3.0 GiB</span>'
    assert f"<tr><th>bytes in</th><td>{mib}</td><td>{mib}</td></tr>" in predicted
    assert f"<tr><th>bytes out</th><td>{gib}</td><td>{gib}</td></tr>" in predicted
    assert "<tr><th>files in</th><td>6</td><td>6</td></tr>" in predicted  # counts stay counts
    summary = html[html.index("<h2>Summary</h2>") :]
    assert (
        '<dt title="bytes_in">bytes in</dt><dd><span title="7,340,032 bytes">7.0 MiB</span></dd>' in summary
    )
    assert (
        '<dt title="orphan_bytes">orphan bytes</dt><dd><span title="1,536 bytes">1.5 KiB</span></dd>'
        in summary
    )
    assert (
        '<dt title="trash">trash</dt><dd>bytes: <span title="2,048 bytes">2.0 KiB</span>, files: 2, kinds: (data: 2)</dd>'
        in summary
    )
    assert str(MIB_7) not in html and str(GIB_3) not in html and ">1536<" not in html  # no raw count shown


def test_the_trash_card_shows_its_size_in_binary_units(client_as, viewer, warehouse):
    table = _table(warehouse, "orders")
    process = _process(table, action="vacuum")
    TrashBatch.objects.create(
        table=table,
        process_id=process.pk,
        action="vacuum",
        location=str(warehouse / "trash" / "1"),
        expires_at=timezone.now() + dt.timedelta(days=7),
        file_count=3,
        total_bytes=5 * 1024 * 1024,
    )

    html = client_as(viewer).get(f"/trash/processes/{process.pk}/", HTTP_HX_REQUEST="true").content.decode()

    assert '3 (<span title="5,242,880 bytes">5.0 MiB</span>)' in html
    assert "MB" not in html


def test_a_running_process_shows_its_elapsed_time_on_the_table_tab_and_the_overview(
    client_as, viewer, warehouse
):
    table = _table(warehouse, "orders")
    started = timezone.now() - dt.timedelta(seconds=95)
    process = _process(table, status=ProcessStatus.RUNNING, started_at=started, heartbeat_at=started)
    client = client_as(viewer)

    tab = client.get(f"/tables/{table.pk}/processes/").content.decode()
    overview = client.get("/").content.decode()

    row = tab[tab.index(f">#{process.pk}</a>") :]
    row = row[: row.index("</tr>")]
    assert re.search(r'<td class="num">1 min 3\d s</td>', row), row
    running = overview[overview.index("<h2>Running now</h2>") :]
    assert re.search(r'<span class="muted elapsed">for 1 min 3\d s</span>', running), running


# --- 2. the admin's model names --------------------------------------------------------------------


def _naive_plural_is_wrong(name: str) -> bool:
    """English words whose plural is not the word and an "s": process, box, batch, delivery."""
    return bool(re.search(r"(s|x|z|ch|sh|[^aeiou]y)$", name))


def test_every_model_in_the_admin_has_a_proper_plural(client_as, admin_user):
    html = client_as(admin_user).get("/admin/").content.decode()

    wrong = {
        model.__name__: model._meta.verbose_name_plural
        for model in admin.site._registry
        if _naive_plural_is_wrong(str(model._meta.verbose_name))
        and str(model._meta.verbose_name_plural) == f"{model._meta.verbose_name}s"
    }
    assert wrong == {}
    assert ">Processes</a>" in html and ">Alert deliveries</a>" in html
    assert "Processs" not in html and "deliverys" not in html.lower()


# --- 3. keyboard: the skip link --------------------------------------------------------------------


class _FirstFocusable(HTMLParser):
    """The first element of the body a Tab reaches (links with an href, fields, buttons, tabindex>=0)."""

    FIELDS = {"button", "input", "select", "textarea"}

    def __init__(self):
        super().__init__()
        self.in_body = False
        self.found: tuple[str, dict] | None = None
        self.text = ""
        self.main: dict = {}

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "body":
            self.in_body = True
        elif self.in_body and self.found is None and self._focusable(tag, attributes):
            self.found = (tag, attributes)
        elif tag == "main" and self.found is not None:
            self.main = attributes

    def handle_data(self, data):
        if self.found is not None and not self.text:
            self.text = data.strip()

    @classmethod
    def _focusable(cls, tag, attributes) -> bool:
        if attributes.get("tabindex") is not None:
            return int(attributes["tabindex"]) >= 0
        if tag == "a":
            return "href" in attributes
        return tag in cls.FIELDS and attributes.get("type") != "hidden"


def _first_focusable(html: str) -> tuple[str, dict, str, dict]:
    parser = _FirstFocusable()
    parser.feed(html)
    tag, attributes = parser.found
    return tag, attributes, parser.text, parser.main


def test_the_skip_link_is_the_first_tab_stop_of_every_console_page_and_leads_to_the_content(
    client, client_as, admin_user, warehouse
):
    table = _table(warehouse, "orders")
    process = _process(table)
    login = client.get("/accounts/login/").content.decode()
    signed_in = client_as(admin_user)
    pages = ["/", "/tables/", "/catalogs/", "/processes/", process.get_absolute_url(), "/queries/"]
    pages += ["/cached-results/", "/storages/", "/audit/", "/alerts/", f"/tables/{table.pk}/processes/"]

    for path, html in [("/accounts/login/", login)] + [(p, signed_in.get(p).content.decode()) for p in pages]:
        tag, attributes, text, main = _first_focusable(html)
        assert (tag, attributes.get("href"), text) == ("a", "#content", "Skip to content"), path
        assert attributes.get("class") == "skip-link", path
        assert main.get("id") == "content" and main.get("tabindex") == "-1", path  # focus can land there


def test_the_search_box_says_slash_reaches_it(client_as, viewer):
    html = client_as(viewer).get("/processes/").content.decode()

    box = re.search(r'<input type="search" name="q"[^>]*>', html).group(0)
    assert 'aria-keyshortcuts="/"' in box and "data-search-shortcut" in box and "press /" in box


# --- 4. the API docs grouped by tag ----------------------------------------------------------------

EXPECTED_TAGS = {
    "tables": {
        "GET /api/v1/tables/",
        "POST /api/v1/tables/",
        "GET /api/v1/tables/{id}/",
        "GET /api/v1/tables/{id}/changes/",
        "GET /api/v1/tables/{id}/files/",
        "GET /api/v1/tables/{id}/partitions/",
        "POST /api/v1/tables/{id}/refresh/",
        "GET /api/v1/tables/{id}/snapshots/",
        "GET /api/v1/tables/{id}/splits/",
        "GET /api/v1/tables/{id}/maintenance/",
        "GET /api/v1/tables/{table_pk}/records/",
        "POST /api/v1/tables/{table_pk}/records/",
    },
    "processes": {
        "GET /api/v1/processes/",
        "POST /api/v1/processes/",
        "GET /api/v1/processes/{id}/",
        "POST /api/v1/processes/{id}/cancel/",
        "POST /api/v1/processes/{id}/kill/",
        "POST /api/v1/processes/{id}/retry/",
        "POST /api/v1/tables/{id}/processes/preview/",
    },
    "trash": {
        "GET /api/v1/processes/{id}/trash/",
        "POST /api/v1/processes/{id}/restore/",
        "GET /api/v1/trash/",
    },
    "queries": {
        "GET /api/v1/queries/",
        "POST /api/v1/queries/",
        "GET /api/v1/queries/{id}/",
        "POST /api/v1/queries/{id}/cancel/",
        "GET /api/v1/cached-results/",
        "GET /api/v1/cached-results/{id}/",
        "DELETE /api/v1/cached-results/{id}/",
        "POST /api/v1/cached-results/{id}/invalidate/",
    },
    "storages": {
        "GET /api/v1/storages/",
        "POST /api/v1/storages/",
        "GET /api/v1/storages/{id}/",
        "PATCH /api/v1/storages/{id}/",
        "DELETE /api/v1/storages/{id}/",
        "POST /api/v1/storages/{id}/test/",
    },
    "catalogs": {
        "GET /api/v1/catalogs/",
        "POST /api/v1/catalogs/",
        "GET /api/v1/catalogs/{id}/",
        "PATCH /api/v1/catalogs/{id}/",
        "DELETE /api/v1/catalogs/{id}/",
        "POST /api/v1/catalogs/{id}/sync/",
    },
    "alerts": {
        "GET /api/v1/alert-channels/",
        "POST /api/v1/alert-channels/",
        "GET /api/v1/alert-channels/{id}/",
        "PATCH /api/v1/alert-channels/{id}/",
        "DELETE /api/v1/alert-channels/{id}/",
        "POST /api/v1/alert-channels/{id}/test/",
        "GET /api/v1/alert-episodes/",
        "GET /api/v1/alert-rules/",
        "POST /api/v1/alert-rules/",
        "GET /api/v1/alert-rules/{id}/",
        "PATCH /api/v1/alert-rules/{id}/",
        "DELETE /api/v1/alert-rules/{id}/",
        "GET /api/v1/alert-deliveries/",
    },
    "audit": {"GET /api/v1/audit/"},
    "teams": {
        "GET /api/v1/teams/",
        "POST /api/v1/teams/",
        "GET /api/v1/teams/{id}/",
        "PATCH /api/v1/teams/{id}/",
        "DELETE /api/v1/teams/{id}/",
        "POST /api/v1/teams/{id}/metrics-token/",
        "DELETE /api/v1/teams/{id}/metrics-token/",
        "GET /api/v1/grants/",
        "POST /api/v1/grants/",
        "GET /api/v1/grants/{id}/",
        "DELETE /api/v1/grants/{id}/",
    },
    "plugins": {"GET /api/v1/plugins/"},
    "resource groups": {
        "GET /api/v1/resource-groups/",
        "POST /api/v1/resource-groups/",
        "GET /api/v1/resource-groups/{id}/",
        "GET /api/v1/resource-groups/{id}/report/",
        "PATCH /api/v1/resource-groups/{id}/",
        "DELETE /api/v1/resource-groups/{id}/",
    },
}


def test_every_api_operation_is_in_the_group_of_what_it_works_on(api_as, viewer):
    schema = api_as(viewer).get("/api/schema/", HTTP_ACCEPT="application/json").json()

    groups: dict[str, set[str]] = {}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                assert len(operation["tags"]) == 1, (method, path, operation["tags"])
                groups.setdefault(operation["tags"][0], set()).add(f"{method.upper()} {path}")

    assert "v1" not in groups  # nothing left in the old flat group
    assert groups == EXPECTED_TAGS
    assert [tag["name"] for tag in schema["tags"]] == list(EXPECTED_TAGS)  # the docs' order
    assert all(tag["description"] for tag in schema["tags"])
    assert schema["paths"]["/api/v1/processes/"]["get"]["operationId"] == "v1_processes_list"  # ids kept


def test_the_process_page_shows_its_parameters_with_sizes_in_binary_units(client_as, viewer, warehouse):
    """Issue 34: the parameters read as the summary does, not as raw JSON with byte counts."""
    table = _table(warehouse, "demo.params")
    process = _process(table, params={"target-file-size": 134217728, "min_file_size": 1000, "dry-run": True})
    bare = _process(table, params={})

    html = client_as(viewer).get(process.get_absolute_url()).content.decode()
    dd = re.search(r"<dt>Parameters</dt><dd[^>]*>(.*?)</dd>", html)[1]
    # in the order Postgres keeps a JSON object's keys (shortest first)
    assert re.sub(r"<[^>]+>", "", dd) == "dry-run True, min_file_size 1000 B, target-file-size 128.0 MiB"
    assert '<span title="134,217,728 bytes">128.0 MiB</span>' in dd
    bare_html = client_as(viewer).get(bare.get_absolute_url()).content.decode()
    assert '<dt>Parameters</dt><dd title="{}"><span class="muted">the defaults</span></dd>' in bare_html
