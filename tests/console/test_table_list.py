"""The tables list (issue 34): health, catalog and namespace, files, small files, size, last
maintenance and status per row; sorted and filtered in the database; the same number of queries
for 10 tables as for 200."""

from __future__ import annotations

import datetime as dt
import html
import re
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from processes.health import health_store, tables_by_health
from processes.models import Process, ProcessStatus
from storage.models import Catalog, CatalogKind, Table

pytestmark = pytest.mark.django_db

MiB, GiB = 1024**2, 1024**3


class _Rows(HTMLParser):
    """The text of each cell of the list's body rows, and the links of each row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.links: list[list[str]] = []
        self._in_body = self._in_cell = False

    def handle_starttag(self, tag, attrs):
        if tag == "tbody":
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append([])
            self.links.append([])
        elif self._in_body and tag == "td":
            self._in_cell = True
            self.rows[-1].append("")
        elif self._in_body and tag == "a":
            self.links[-1].append(dict(attrs)["href"])

    def handle_endtag(self, tag):
        if tag == "tbody":
            self._in_body = False
        elif tag == "td":
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.rows[-1][-1] += data.replace("\xa0", " ")


def _rows(client, url: str) -> tuple[list[list[str]], list[list[str]]]:
    response = client.get(url)
    assert response.status_code == 200, url
    parser = _Rows()
    parser.feed(response.content.decode())
    rows = [[" ".join(cell.split()) for cell in row] for row in parser.rows]
    return [row for row in rows if len(row) > 1], parser.links


def _names(client, url: str) -> list[str]:
    return [row[0] for row in _rows(client, url)[0]]


@pytest.fixture
def lake():
    """Four tables with known facts: scores 60 (alpha), 0 (beta), 24 (gamma), 0 (dora: no enabled
    action maintains Hudi tables, so its 1,000 files and its age count for nothing)."""
    now = timezone.now()
    catalog = Catalog.objects.create(name="lake", kind=CatalogKind.PATH_ROOT, properties={"root": "/x"})

    def table(name, **facts):
        return Table.objects.create(name=name, location=f"/lake/{name}", **facts)

    alpha = table(
        "alpha", format="iceberg", catalog=catalog, identifier="sales.orders",
        file_count=100, small_file_count=100, compactable_file_count=100, total_bytes=5 * MiB,
    )  # fmt: skip
    beta = table(
        "beta", format="delta", catalog=catalog, identifier="hr.people",
        total_bytes=3 * GiB, last_maintenance_at=now - dt.timedelta(days=2),
    )  # fmt: skip
    gamma = table(
        "gamma", format="iceberg", catalog=catalog, identifier="sales.eu.returns",
        file_count=50, small_file_count=10, compactable_file_count=10, instant_count=250, total_bytes=1024,
        last_maintenance_at=now - dt.timedelta(days=15),
    )  # fmt: skip
    dora = table(
        "dora", format="hudi", file_count=1000, total_bytes=512,
        last_maintenance_at=now - dt.timedelta(days=1, hours=1),
    )  # fmt: skip
    Process.objects.bulk_create(
        [
            Process(table=beta, action="rewrite", factory="f", status=ProcessStatus.SUCCESS),
            Process(table=gamma, action="expire", factory="f", status=ProcessStatus.SUCCESS),
            Process(table=gamma, action="rewrite", factory="f", status=ProcessStatus.FAILED),
            Process(table=dora, action="expire", factory="f", status=ProcessStatus.RUNNING),
        ]
    )
    health_store()  # the health beat's pass: processes inserted in bulk skip what stores the score
    return {"alpha": alpha, "beta": beta, "gamma": gamma, "dora": dora}


def test_each_column_shows_the_tables_facts(client_as, viewer, lake):
    rows, links = _rows(client_as(viewer), "/tables/")

    assert rows == [
        ["alpha", "Iceberg", "lake / sales", "60", "100", "100", "5.0 MiB", "never", "ok"],
        ["beta", "Delta", "lake / hr", "0", "0", "0", "3.0 GiB", "2 days ago", "ok"],
        ["dora", "Hudi", "—", "0", "1,000", "0", "512 B", "1 day ago", "running expire"],
        ["gamma", "Iceberg", "lake / sales.eu", "24", "50", "10", "1.0 KiB", "2 weeks ago", "failed rewrite"],
    ]
    assert links[3] == [f"/tables/{lake['gamma'].pk}/", "?catalog=lake", "?catalog=lake&namespace=sales.eu"]


def test_the_health_column_is_the_overviews_score(client_as, viewer, lake):
    rows, _ = _rows(client_as(viewer), "/tables/")

    overview = {health.table.name: health.score for health in tables_by_health(limit=None)}
    assert {row[0]: int(row[3]) for row in rows} == overview


@pytest.mark.parametrize(
    ("sort", "names"),
    [
        ("-health", ["alpha", "gamma", "beta", "dora"]),
        ("health", ["beta", "dora", "gamma", "alpha"]),
        ("-size", ["beta", "alpha", "gamma", "dora"]),
        ("size", ["dora", "gamma", "alpha", "beta"]),
        ("name", ["alpha", "beta", "dora", "gamma"]),
        ("-name", ["gamma", "dora", "beta", "alpha"]),
        ("-files", ["dora", "alpha", "gamma", "beta"]),
        ("-small_files", ["alpha", "gamma", "beta", "dora"]),
        ("last_maintenance", ["gamma", "beta", "dora", "alpha"]),  # never maintained last
        ("format", ["beta", "dora", "alpha", "gamma"]),
        ("catalog", ["beta", "gamma", "alpha", "dora"]),  # by catalog, then identifier
    ],
)
def test_sorting_orders_the_rows(client_as, viewer, lake, sort, names):
    assert _names(client_as(viewer), f"/tables/?sort={sort}") == names


@pytest.mark.parametrize("sort", ["bogus", "-bogus", "health;drop", "--size", ""])
def test_an_unknown_sort_key_falls_back_to_the_name_order(client_as, viewer, lake, sort):
    assert _names(client_as(viewer), f"/tables/?sort={sort}") == ["alpha", "beta", "dora", "gamma"]


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("format=iceberg", ["alpha", "gamma"]),
        ("catalog=lake", ["alpha", "beta", "gamma"]),
        ("catalog=lake&namespace=sales", ["alpha", "gamma"]),  # and the namespaces below it
        ("catalog=lake&namespace=sales.eu", ["gamma"]),
        ("namespace=hr", ["beta"]),
        ("catalog=nowhere", []),
        ("q=amm", ["gamma"]),
        ("q=a&format=iceberg&sort=-health", ["alpha", "gamma"]),
        ("catalog=lake&sort=-size", ["beta", "alpha", "gamma"]),
    ],
)
def test_filters_narrow_the_list(client_as, viewer, lake, query, names):
    assert _names(client_as(viewer), f"/tables/?{query}") == names


def test_a_rows_namespace_link_filters_the_list_and_shows_a_breadcrumb(client_as, viewer, lake):
    client = client_as(viewer)
    _, links = _rows(client, "/tables/")

    response = client.get("/tables/" + links[3][2])

    assert _names(client, "/tables/" + links[3][2]) == ["gamma"]
    page = response.content.decode()
    assert '<a href="?catalog=lake&amp;namespace=sales">sales</a>' in page
    assert '<a href="?catalog=lake&amp;namespace=sales.eu">eu</a>' in page


def test_the_sort_headers_link_to_the_other_direction_and_keep_the_filters(client_as, viewer, lake):
    page = client_as(viewer).get("/tables/?format=iceberg&sort=-health").content.decode()

    assert 'aria-sort="descending"' in page
    assert html.escape("?format=iceberg&sort=health") in page  # health reversed
    assert html.escape("?format=iceberg&sort=-size") in page  # largest first on a first click
    assert html.escape("?format=iceberg&sort=name") in page


def _many(count: int, start: int) -> None:
    catalogs = [Catalog.objects.get_or_create(name=f"c{i}", kind=CatalogKind.PATH_ROOT)[0] for i in range(3)]
    tables = Table.objects.bulk_create(
        Table(
            name=f"t{start + i:04d}",
            format=("iceberg", "delta", "hudi")[i % 3],
            location=f"/many/t{start + i}",
            catalog=catalogs[i % 3] if i % 4 else None,
            identifier=f"ns{i % 5}.t{start + i}" if i % 4 else "",
            file_count=i * 7 % 300,
            small_file_count=i * 3 % 100,
            total_bytes=i * 7919,
        )
        for i in range(count)
    )
    statuses = [ProcessStatus.FAILED, ProcessStatus.RUNNING, ProcessStatus.SUCCESS]
    Process.objects.bulk_create(
        Process(table=table, action="rewrite", factory="f", status=statuses[i % 3])
        for i, table in enumerate(tables[::2])
    )
    health_store()  # the health beat's pass: rows inserted in bulk skip what stores the score


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured.captured_queries)


@pytest.mark.parametrize(
    "url",
    [
        "/tables/",
        "/tables/?sort=-health",
        "/tables/?sort=health&page=2",
        "/tables/?sort=-size&format=delta",
        "/tables/?sort=last_maintenance&catalog=c1",
        "/tables/?catalog=c1&namespace=ns1&sort=catalog",
        "/tables/?q=t00&sort=-small_files",
    ],
)
def test_the_list_runs_as_many_queries_for_200_tables_as_for_10(client_as, viewer, url):
    client = client_as(viewer)
    _many(10, 0)
    client.get(url)  # the session and caches of a first request
    few = _queries(client, url)
    _many(190, 10)

    assert _queries(client, url) == few
    assert few <= 13  # 12, and the namespace tree's one grouped query


def test_a_health_sorted_page_is_the_overviews_ranking_page(client_as, viewer):
    _many(200, 0)
    ranked = tables_by_health(limit=None)
    worst_first = [health.table.name for health in ranked]
    best_first = [h.table.name for h in sorted(ranked, key=lambda h: (h.score, h.table.name, h.table.pk))]
    client = client_as(viewer)

    assert _names(client, "/tables/?sort=-health&page=2") == worst_first[50:100]
    assert _names(client, "/tables/?sort=health&page=4") == best_first[150:200]
    assert len({health.score for health in ranked}) > 5  # a ranking, not one tie


def _tree(client, url: str) -> list[tuple[str, str, str]]:
    """(label, link, count text or "") of each entry of the namespace tree on ``url``."""
    page = client.get(url).content.decode()
    found = re.search(r'<nav class="namespace-tree"[^>]*><ul>(.*?)</ul></nav>', page)
    if found is None:
        return []
    entries = re.findall(
        r'<li><a href="([^"]*)">([^<]*)</a>(?: <span class="muted">([^<]*)</span>)?</li>', found[1]
    )
    return [(label, html.unescape(href), count) for href, label, count in entries]


@pytest.mark.parametrize(
    ("query", "tree"),
    [
        ("", [("lake", "?catalog=lake", "")]),  # the catalogs, uncounted: the first page scans no table
        (
            "catalog=lake",
            [
                ("sales", "?catalog=lake&namespace=sales", "2 tables"),
                ("hr", "?catalog=lake&namespace=hr", "1 table"),
            ],
        ),
        ("catalog=lake&namespace=sales", [("eu", "?catalog=lake&namespace=sales.eu", "1 table")]),
        ("catalog=lake&namespace=sales.eu", []),  # returns is a table, not a namespace
        (
            "catalog=lake&format=delta&sort=-size",
            [("hr", "?format=delta&sort=-size&catalog=lake&namespace=hr", "1 table")],
        ),
        ("q=gamm&catalog=lake", [("sales", "?q=gamm&catalog=lake&namespace=sales", "1 table")]),
    ],
)
def test_the_namespace_tree_shows_one_level_below_the_filter_with_its_counts(
    client_as, viewer, lake, query, tree
):
    assert _tree(client_as(viewer), f"/tables/?{query}") == tree


def test_the_namespace_tree_walks_catalog_namespace_table(client_as, viewer, lake):
    client = client_as(viewer)
    ((_, catalog_link, _),) = _tree(client, "/tables/")
    sales_link = _tree(client, f"/tables/{catalog_link}")[0][1]
    eu_link = _tree(client, f"/tables/{sales_link}")[0][1]
    assert _names(client, f"/tables/{eu_link}") == ["gamma"]
    rows, links = _rows(client, f"/tables/{eu_link}")
    assert links[0][0] == f"/tables/{lake['gamma'].pk}/"  # and on to the table


def test_the_namespace_tree_is_one_grouped_query_and_stops_at_its_limit(client_as, viewer, settings):
    from console import table_list

    catalog = Catalog.objects.create(name="wide", kind=CatalogKind.PATH_ROOT)
    Table.objects.bulk_create(
        Table(
            name=f"w{i}", format="delta", location=f"/wide/w{i}", catalog=catalog, identifier=f"ns{i:03d}.t"
        )
        for i in range(table_list.TREE_LIMIT + 5)
    )
    Table.objects.create(
        name="w-big", format="delta", location="/wide/big", catalog=catalog, identifier="ns077.b.t"
    )
    tables = Table.objects.filter(catalog=catalog)
    with CaptureQueriesContext(connection) as captured:
        tree = table_list.namespace_tree(tables, catalog="wide", namespace="", filters={}, catalogs=["wide"])
    assert len(captured.captured_queries) == 1
    assert "GROUP BY" in captured.captured_queries[0]["sql"]
    assert len(tree["entries"]) == table_list.TREE_LIMIT and tree["more"] is True
    assert tree["entries"][:2] == [
        ("ns077", "?catalog=wide&namespace=ns077", 2),  # the largest first, then by name
        ("ns000", "?catalog=wide&namespace=ns000", 1),
    ]


def test_the_first_level_lists_only_the_catalogs_the_users_teams_may_see(client_as, django_user_model, lake):
    from django.contrib.auth.models import Group

    from console.teams.models import Grant, Team, TeamMember

    Catalog.objects.create(name="other", kind=CatalogKind.PATH_ROOT, properties={"root": "/y"})
    team = Team.objects.create(name="sales")
    Grant.objects.create(
        team=team, role="viewer", catalog=Catalog.objects.get(name="lake"), namespace="sales"
    )
    user = django_user_model.objects.create_user("sam", password="x")
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    TeamMember.objects.create(team=team, user=user)
    client = client_as(user)
    assert [label for label, _, _ in _tree(client, "/tables/")] == ["lake"]
    assert _tree(client, "/tables/?catalog=lake") == [("sales", "?catalog=lake&namespace=sales", "2 tables")]


def test_a_table_pages_breadcrumb_leads_back_through_its_catalog_and_namespaces(client_as, viewer, warehouse):
    from tests.console.tables import write_delta_table

    location = write_delta_table(warehouse / "lake" / "sales" / "eu" / "returns", commits=1)
    catalog = Catalog.objects.create(
        name="lake", kind=CatalogKind.PATH_ROOT, properties={"root": str(warehouse)}
    )
    table = Table.objects.create(
        name="returns", format="delta", location=str(location), catalog=catalog, identifier="sales.eu.returns"
    )
    loose_location = write_delta_table(warehouse / "loose", commits=1)
    loose = Table.objects.create(name="loose", format="delta", location=str(loose_location))
    client = client_as(viewer)

    for tab in ("", "snapshots/"):
        page = client.get(f"/tables/{table.pk}/{tab}").content.decode()
        crumbs = re.search(r'<nav class="crumbs" aria-label="Breadcrumb">(.*?)</nav>', page)[1]
        links = re.findall(r'<a href="([^"]*)">([^<]*)</a>', crumbs)
        assert [(html.unescape(href), label) for href, label in links] == [
            ("/tables/", "Tables"),
            ("/tables/?catalog=lake", "lake"),
            ("/tables/?catalog=lake&namespace=sales", "sales"),
            ("/tables/?catalog=lake&namespace=sales.eu", "eu"),
            (f"/tables/{table.pk}/", "returns"),
        ]
    page = client.get(f"/tables/{loose.pk}/").content.decode()
    crumbs = re.search(r'<nav class="crumbs" aria-label="Breadcrumb">(.*?)</nav>', page)[1]
    assert re.findall(r">([^<]*)</a>", crumbs) == ["Tables", "loose"]  # registered by location
