"""Cached results under teams (issue 32): a result whose source table was deleted is shown to no
restricted user (every source must exist and be readable), and the filter is one condition in
SQL: listing results costs the same queries at 5 tables as at 50."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console.teams.access import cached_results_visible
from storage.models import CachedResult, CachedResultState, StorageBackend, Table

pytestmark = pytest.mark.django_db


def _result(backend, name: str, table_ids) -> CachedResult:
    return CachedResult.objects.create(
        fingerprint=name.ljust(16, "0"),
        backend=backend,
        name=name,
        sql=f"select 1 -- {name}",
        state=CachedResultState.READY,
        source_snapshots={str(pk): "0" for pk in table_ids},
    )


@pytest.fixture
def backend():
    return StorageBackend.objects.create(name="results", type="filesystem", config={})


def _visible(user) -> set[str]:
    return set(cached_results_visible(user, CachedResult.objects.all()).values_list("name", flat=True))


@pytest.mark.parametrize(
    ("username", "expected"),
    [
        ("alice", {"of_a1", "of_a1_a2"}),
        ("vic", {"of_a1", "of_a1_a2"}),
        ("bob", {"of_b1"}),
        ("olga", set()),
        ("root", {"of_a1", "of_a1_a2", "of_b1", "of_a1_gone", "of_gone", "of_a1_b1"}),
    ],
)
def test_a_result_is_visible_only_when_every_source_exists_and_is_readable(
    lake, backend, api_as, username, expected
):
    t = lake.tables
    gone = Table.objects.create(name="gone", format="delta", location=str(lake.root / "gone"))
    gone_id = gone.pk
    gone.delete()
    results = {
        name: _result(backend, name, ids)
        for name, ids in {
            "of_a1": [t["a1"].pk],
            "of_a1_a2": [t["a1"].pk, t["a2"].pk],
            "of_b1": [t["b1"].pk],
            "of_a1_gone": [t["a1"].pk, gone_id],  # one source deleted since
            "of_gone": [gone_id],
            "of_a1_b1": [t["a1"].pk, t["b1"].pk],
        }.items()
    }
    user = lake.users[username]

    assert _visible(user) == expected
    answer = api_as(user).get("/api/v1/cached-results/")
    assert answer.status_code == 200
    assert {row["id"] for row in answer.json()["results"]} == {results[n].pk for n in expected}
    for name, result in results.items():
        detail = api_as(user).get(f"/api/v1/cached-results/{result.pk}/")
        assert (name, detail.status_code) == (name, 200 if name in expected else 404)


def _add_tables(lake, count: int) -> list[Table]:
    catalog = lake.tables["a1"].catalog
    return Table.objects.bulk_create(
        Table(
            catalog=catalog,
            name=f"{'ab'[i % 2]}.extra{i}",  # every other one team A's, the others team B's
            identifier=f"{'ab'[i % 2]}.extra{i}",
            format="delta",
            location=str(lake.root / "extra" / str(i)),
        )
        for i in range(count)
    )


def _list_queries(lake, api_as) -> tuple[int, set[int]]:
    # A fresh user object, as each request has: what the access rule keeps on it is asked again.
    api = api_as(type(lake.users["alice"]).objects.get(username="alice"))
    with CaptureQueriesContext(connection) as captured:
        answer = api.get("/api/v1/cached-results/")
    assert answer.status_code == 200
    return len(captured.captured_queries), {row["id"] for row in answer.json()["results"]}


def test_listing_results_costs_the_same_queries_at_5_and_at_50_tables(lake, backend, api_as):
    ofa = _result(backend, "of_a1", [lake.tables["a1"].pk])
    _result(backend, "of_b1", [lake.tables["b1"].pk])

    lake.tables["ab"].delete()
    assert Table.objects.count() == 5
    few_queries, few_seen = _list_queries(lake, api_as)
    extra = _add_tables(lake, 45)
    assert Table.objects.count() == 50
    more = [_result(backend, f"extra{t.pk}", [t.pk]) for t in extra]
    many_queries, many_seen = _list_queries(lake, api_as)

    assert few_seen == {ofa.pk}
    assert many_seen == {ofa.pk} | {r.pk for r, t in zip(more, extra, strict=True) if t.name.startswith("a.")}
    assert many_queries == few_queries
