"""Deep pages of the tables list (issue 34): next and previous carry the last and first row's sort
key and id (``?after=``/``?before=``), so a page is a range of the sort's index, not an OFFSET.
Walking every page by those links gives exactly the offset order of every sort, ties included
(equal scores, sizes, names, no catalog, never maintained, not scored yet)."""

from __future__ import annotations

import datetime as dt
import html
import random
import re

import pytest
from django.utils import timezone

from console import table_list
from processes.health import health_store
from storage.models import Catalog, CatalogKind, Table

pytestmark = pytest.mark.django_db

MiB = 1024**2
SORTS = [
    "", "-name", "health", "-health", "files", "-files", "small_files", "-small_files", "size", "-size",
    "last_maintenance", "-last_maintenance", "format", "-format", "catalog", "-catalog",
]  # fmt: skip


@pytest.fixture
def lake(monkeypatch):
    """100 tables whose sort keys tie often: 12 names, three sizes, half never maintained, a third
    in no catalog, ten not scored yet (registered after the health beat's pass); 9 a page."""
    monkeypatch.setattr(table_list, "PAGE_SIZE", 9)
    rng = random.Random(34)
    now = timezone.now()
    catalogs = [Catalog.objects.create(name=f"c{i}", kind=CatalogKind.PATH_ROOT) for i in range(2)]

    def table(i: int) -> Table:
        files = rng.choice([0, 5, 60, 4_000])
        catalog = rng.choice([None, *catalogs])
        return Table(
            name=rng.choice(["a", "B", "b", "_x"]) + str(rng.randrange(3)),
            format=rng.choice(["delta", "iceberg", "hudi"]),
            location=f"/lake/t{i}",
            catalog=catalog,
            identifier=f"ns{rng.randrange(3)}.t{i}" if catalog else "",
            file_count=files,
            small_file_count=rng.randrange(0, files + 1),
            compactable_file_count=rng.randrange(0, files + 1),
            total_bytes=rng.choice([0, 1024, 5 * MiB]),
            last_maintenance_at=rng.choice([None, now - dt.timedelta(days=rng.randrange(3))]),
        )

    Table.objects.bulk_create(table(i) for i in range(90))
    health_store()
    Table.objects.bulk_create(table(i) for i in range(90, 100))  # not scored yet: no health


def _page(client, url: str) -> tuple[list[int], str, str, object]:
    """The ids of the page at ``url``, its next and previous links, and the page."""
    response = client.get(url)
    assert response.status_code == 200, url
    body = response.content.decode()
    links = {
        rel: html.unescape(href)
        for href, rel in re.findall(r'<a href="([^"]*)"[^>]* rel="(next|prev)"', body)
    }
    page = response.context["page"]
    return [row["id"] for row in page.object_list], links.get("next", ""), links.get("prev", ""), page


def _walk(client, first: str) -> tuple[list[int], list[int]]:
    """Every id, following next from ``first``, then previous back from the last page."""
    forward, backward, url, pages = [], [], first, 0
    while True:
        ids, following, _, _ = _page(client, url)
        forward += ids
        pages += 1
        assert pages < 50, "the next links go round in circles"
        if not following:
            break
        url = "/tables/" + following
    while True:
        ids, _, preceding, _ = _page(client, url)
        backward = ids + backward
        if not preceding:
            break
        url = "/tables/" + preceding
    return forward, backward


def _offset_order(sort: str, **filters) -> list[int]:
    tables = Table.objects.filter(**filters)
    return list(
        tables.order_by(*table_list._order(sort.removeprefix("-"), sort.startswith("-"))).values_list(
            "id", flat=True
        )
    )


@pytest.mark.parametrize("sort", SORTS)
def test_walking_every_page_by_its_links_gives_the_offset_order(client_as, viewer, lake, sort):
    forward, backward = _walk(client_as(viewer), f"/tables/?sort={sort}")

    expected = _offset_order(sort)
    assert forward == expected and backward == expected
    assert len(expected) == 100


def test_a_keyset_walk_by_health_keeps_ties_and_unscored_tables_in_their_places(client_as, viewer, lake):
    forward, _ = _walk(client_as(viewer), "/tables/?sort=-health")

    rows = {pk: (score, name) for pk, score, name in Table.objects.values_list("id", "health_score", "name")}
    scores = [rows[pk][0] for pk in forward]
    scored = [score for score in scores if score is not None]
    assert scores[-10:] == [None] * 10  # not scored yet: after every scored table
    assert scored == sorted(scored, reverse=True) and len(set(scored)) < len(scored) - 20  # ties
    for score in set(scored):  # ties in name order by code point, then id
        tied = [(rows[pk][1], pk) for pk in forward if rows[pk][0] == score]
        assert tied == sorted(tied, key=lambda row: (row[0].encode(), row[1]))


@pytest.mark.parametrize(
    ("query", "filters"),
    [
        ("format=iceberg&sort=health", {"format": "iceberg"}),
        ("format=iceberg&sort=-health", {"format": "iceberg"}),
        ("catalog=c1&sort=-size", {"catalog__name": "c1"}),
        ("q=b&sort=-size", {"name__icontains": "b"}),
        ("q=a1&sort=last_maintenance", {"name__icontains": "a1"}),
    ],
)
def test_a_keyset_walk_keeps_the_filters_and_the_search(client_as, viewer, lake, query, filters):
    sort = re.search(r"sort=([-\w]*)", query)[1]
    forward, backward = _walk(client_as(viewer), f"/tables/?{query}")

    expected = _offset_order(sort, **filters)
    assert forward == expected and backward == expected and len(expected) > 9


def test_a_search_past_the_count_cap_walks_the_sorts_index_and_says_more(
    client_as, viewer, lake, monkeypatch
):
    monkeypatch.setattr(table_list, "SORT_FOUND_AT_MOST", 20)
    client = client_as(viewer)
    expected = _offset_order("-files", name__icontains="b")

    ids, _, _, page = _page(client, "/tables/?q=b&sort=-files")
    forward, backward = _walk(client, "/tables/?q=b&sort=-files")
    last, _, _, _ = _page(client, "/tables/?q=b&sort=-files&page=last")
    third, _, _, _ = _page(client, "/tables/?q=b&sort=-files&page=3")

    assert len(expected) > 20 and page.more and page.count == 20 and page.num_pages is None
    assert "more than 20 tables" in client.get("/tables/?q=b&sort=-files").content.decode()
    assert ids == expected[:9] and forward == expected and backward == expected
    assert last == expected[-9:] and third == expected[18:27]  # uncounted: the last 9, not page-aligned


def test_a_search_under_the_cap_is_counted_exactly(client_as, viewer, lake):
    expected = _offset_order("", name__icontains="b")

    _, _, _, page = _page(client_as(viewer), "/tables/?q=b&page=2")

    assert (page.count, page.more, page.number, page.num_pages) == (
        len(expected),
        False,
        2,
        -(-len(expected) // 9),
    )
    assert [row["id"] for row in page.object_list] == expected[9:18]


def test_numbered_pages_link_their_neighbours_and_next_is_the_following_page(client_as, viewer, lake):
    client = client_as(viewer)
    expected = _offset_order("-size")
    body = client.get("/tables/?sort=-size&page=5").content.decode()

    _, following, preceding, page = _page(client, "/tables/?sort=-size&page=5")

    assert page.nearby == [3, 4, 5, 6, 7] and 'aria-current="page">page 5 of 12<' in body
    assert _page(client, "/tables/" + following)[0] == expected[45:54]
    assert _page(client, "/tables/" + preceding)[0] == expected[27:36]


def test_previous_from_the_second_page_is_the_first_and_next_from_the_last_is_the_last(
    client_as, viewer, lake
):
    client = client_as(viewer)
    expected = _offset_order("health")
    _, _, preceding, _ = _page(client, "/tables/?sort=health&page=2")
    ids, _, _, page = _page(client, "/tables/" + preceding)
    assert ids == expected[:9] and page.number == 1 and not page.previous

    last = Table.objects.get(pk=expected[-1])
    beyond = table_list.cursor_of(table_list.sort_keys("health"), {**_row(last), "id": last.pk})
    ids, following, _, page = _page(client, f"/tables/?sort=health&after={beyond}")
    assert ids == expected[99 - 99 % 9 :] and page.number == 12 and following == ""


def _row(table: Table) -> dict:
    return {
        "health_score": table.health_score, "name": table.name, "file_count": table.file_count,
        "small_file_count": table.small_file_count, "total_bytes": table.total_bytes, "format": table.format,
        "last_maintenance_at": table.last_maintenance_at, "identifier": table.identifier,
        "catalog__name": table.catalog.name if table.catalog else None,
    }  # fmt: skip


@pytest.mark.parametrize(
    "cursor",
    ["not-base64!", "WzEsMl0", "eyJhIjoxfQ", "WyJ4IiwieSJd", "W251bGwsMV0", "W1siYSJdLDFd"],
    # garbage, [1,2] (a number for the name), {"a":1}, ["x","y"] (text for the id), [null,1], [["a"],1]
)
def test_a_position_that_is_not_one_of_the_lists_is_a_400_that_says_so(client_as, viewer, lake, cursor):
    response = client_as(viewer).get(f"/tables/?after={cursor}")

    assert response.status_code == 400
    assert (
        "after is not a position in this list: follow the list&#x27;s own links" in response.content.decode()
    )
    assert response.context["page"].object_list == []
