"""The overview and tables pages at scale (issue 17): ranked and paged in the database, a number
of queries that does not grow with the number of tables, and the same ranking as the score."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.table_list import _order
from processes.health import format_remedies, health_store, remedies_of, tables_by_health
from processes.models import Process, ProcessStatus
from storage.health import table_health
from storage.models import Table

pytestmark = pytest.mark.django_db


def _tables(count: int, seed: int = 17) -> list[Table]:
    """Tables with varied facts, ties in score, names that sort differently by locale and codepoint."""
    rng = random.Random(seed)
    now = timezone.now()
    rows = []
    for i in range(count):
        files = rng.choice([0, 5, 60, 4_000, 12_000, rng.randrange(0, 20_000)])
        small = rng.randrange(0, files + 1)
        maintained = rng.choice(
            [None, now - dt.timedelta(days=rng.randrange(0, 60), hours=rng.randrange(24))]
        )
        rows.append(
            Table(
                name=rng.choice(["a", "B", "b", "_x", "Ä"]) + f"{rng.randrange(50)}",
                format=rng.choice(["delta", "iceberg", "hudi", "paimon"]),
                location=f"/lake/s{seed}/t{i}",
                file_count=files,
                small_file_count=small,
                compactable_file_count=rng.choice([0, small, rng.randrange(0, small + 1)]),
                instant_count=rng.choice([0, 3, 260, 900]),
                last_maintenance_at=maintained,
            )
        )
    tables = Table.objects.bulk_create(rows)
    failed = [Process(table=t, action="a", factory="f", status=ProcessStatus.FAILED) for t in tables[::7]]
    failed += [Process(table=t, action="b", factory="f", status=ProcessStatus.FAILED) for t in tables[::21]]
    Process.objects.bulk_create(failed)
    return tables


def _python_ranking(now) -> list[tuple[int, int]]:
    """(score, id) unhealthiest first, as the overview ranked in Python before issue 17."""
    failures: dict[int, int] = {}
    for table_id in Process.objects.filter(status=ProcessStatus.FAILED).values_list("table_id", flat=True):
        failures[table_id] = failures.get(table_id, 0) + 1
    scored = []
    remedies = format_remedies()
    for table in Table.objects.all():
        fixes = remedies_of(remedies, table.format)
        score = table_health(table, table.last_maintenance_at, failures.get(table.pk, 0), now, fixes).score
        scored.append((-score, table.name, table.pk))
    return [(-score, pk) for score, _, pk in sorted(scored)]


def test_the_database_ranks_tables_exactly_as_the_health_score(monkeypatch):
    _tables(600)
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)
    health_store()  # the health beat's pass: rows inserted in bulk skip what stores the score

    ranked = tables_by_health(limit=None)

    assert [(h.score, h.table.pk) for h in ranked] == _python_ranking(now)
    assert [(h.score, h.table.pk) for h in tables_by_health(limit=10)] == _python_ranking(now)[:10]
    assert len({h.score for h in ranked}) > 10  # a ranking, not one tie


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured.captured_queries)


@pytest.mark.parametrize(
    "url",
    [
        "/",
        "/tables/",
        "/tables/?page=7",
        "/tables/?format=delta&page=3",
        "/tables/?q=a1",
        "/tables/?sort=-health&page=7",
        "/tables/?sort=size&format=hudi&page=2",
        "/tables/?sort=-last_maintenance&q=b",
    ],
)
def test_the_pages_cost_the_same_queries_with_2000_tables_as_with_20(client_as, viewer, url):
    client = client_as(viewer)
    _tables(20, seed=1)
    client.get(url)  # the session and caches of a first request
    small = _queries(client, url)
    _tables(1980, seed=2)

    assert _queries(client, url) == small


def test_the_tables_page_shows_a_page_in_name_order(client_as, viewer):
    _tables(2000)
    ordered = list(Table.objects.order_by("name", "id").values_list("pk", flat=True))

    page = client_as(viewer).get("/tables/?page=3").context["page"]

    assert [row["id"] for row in page.object_list] == ordered[100:150]
    assert page.count == 2000 and page.num_pages == 40


@pytest.mark.parametrize(
    "sort", ["", "-name", "-health", "health", "-size", "small_files", "last_maintenance"]
)
def test_pages_past_the_middle_read_from_the_end_are_the_offset_pages(client_as, viewer, sort):
    _tables(230)
    health_store()
    key = sort.removeprefix("-")
    in_order = list(Table.objects.order_by(*_order(key, sort.startswith("-"))).values_list("id", flat=True))
    client = client_as(viewer)

    pages = [client.get(f"/tables/?sort={sort}&page={n}").context["page"] for n in (2, 3, 4, 5)]

    assert [[row["id"] for row in page.object_list] for page in pages] == [
        in_order[50:100], in_order[100:150], in_order[150:200], in_order[200:230]
    ]  # fmt: skip


def test_the_worst_first_order_is_the_stored_scores_then_names_by_code_point(client_as, viewer):
    _tables(230)
    health_store()
    rows = list(Table.objects.values_list("health_score", "name", "id"))
    expected = [pk for _, _, pk in sorted(rows, key=lambda row: (-row[0], row[1], row[2]))]
    client = client_as(viewer)

    shown = [
        row["id"]
        for n in (1, 2, 3, 4, 5)
        for row in client.get(f"/tables/?sort=-health&page={n}").context["page"].object_list
    ]

    assert shown == expected and len(shown) == 230


def test_a_search_finding_few_tables_pages_them_in_order(client_as, viewer):
    _tables(400)
    rows = Table.objects.values_list("name", "id", "location")
    found = sorted((name, pk) for name, pk, location in rows if "B" in name.upper() + " " + location.upper())
    client = client_as(viewer)

    shown = [
        row["id"] for n in (1, 2) for row in client.get(f"/tables/?q=b&page={n}").context["page"].object_list
    ]

    assert len(found) > 50 and shown == [pk for _, pk in found][:100], (len(shown), len(found))
