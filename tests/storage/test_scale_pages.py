"""The overview and tables pages at scale (issue 17): ranked and paged in the database, a number
of queries that does not grow with the number of tables, and the same ranking as the score."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

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
    assert page.paginator.count == 2000 and page.paginator.num_pages == 40
