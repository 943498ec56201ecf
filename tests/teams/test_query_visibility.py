"""Workbench queries and cached results under teams (issue 32): a query's rows and a cached
result's data are shown to those who may read its sources only, in the API and the console, and
the export of another user's query is a 404."""

from __future__ import annotations

import pytest

from processes.models import Query, QueryStatus
from storage.models import CachedResult, CachedResultState, StorageBackend

pytestmark = pytest.mark.django_db


@pytest.fixture
def workbench(lake):
    backend = StorageBackend.objects.create(name="results", type="filesystem", config={})
    results = {
        name: CachedResult.objects.create(
            fingerprint=name * 8,
            backend=backend,
            name=f"result_{name}",
            sql=f"select * from {name}",
            state=CachedResultState.READY,
            source_snapshots={str(lake.tables[t].pk): "0" for t in sources},
        )
        for name, sources in {"ofa": ["a1"], "ofb": ["b1"], "ofab": ["a1", "b1"]}.items()
    }
    queries = {
        username: Query.objects.create(
            sql=sql,
            user=lake.users[username],
            status=QueryStatus.SUCCESS,
            columns=["id"],
            rows=[[7]],
            cached_result=result,
        )
        for username, sql, result in [
            ("alice", "select id from a.orders", results["ofa"]),
            ("bob", "select id from b.orders", results["ofb"]),
            ("root", "select id from a.orders join b.orders using (id)", results["ofab"]),
        ]
    }
    return queries, results


def _ids(answer) -> set[int]:
    assert answer.status_code == 200, answer.content
    return {row["id"] for row in answer.json()["results"]}


@pytest.mark.parametrize(
    ("username", "sees_queries", "sees_results"),
    [
        ("alice", {"alice"}, {"ofa"}),
        ("vic", set(), {"ofa"}),
        ("bob", {"bob"}, {"ofb"}),
        ("olga", set(), set()),
        ("root", {"alice", "bob", "root"}, {"ofa", "ofb", "ofab"}),
    ],
)
def test_queries_and_cached_results_show_only_what_the_user_may_read(
    lake, workbench, api_as, client_as, username, sees_queries, sees_results
):
    queries, results = workbench
    user = lake.users[username]
    api = api_as(user)
    assert _ids(api.get("/api/v1/queries/")) == {queries[n].pk for n in sees_queries}
    assert _ids(api.get("/api/v1/cached-results/")) == {results[n].pk for n in sees_results}
    client = client_as(user)
    for owner, query in queries.items():
        expected = 200 if owner in sees_queries else 404
        assert (owner, api.get(f"/api/v1/queries/{query.pk}/").status_code) == (owner, expected)
        for path in (f"/queries/{query.pk}/", f"/queries/{query.pk}/export.csv"):
            assert (owner, path, client.get(path).status_code) == (owner, path, expected)
    for name, result in results.items():
        expected = 200 if name in sees_results else 404
        assert (name, api.get(f"/api/v1/cached-results/{result.pk}/").status_code) == (name, expected)
    page = client.get("/cached-results/")
    assert page.status_code == 200
    assert {r.pk for r in page.context["page"].object_list} == {results[n].pk for n in sees_results}


def test_a_team_a_operator_cannot_invalidate_or_drop_team_bs_result(lake, workbench, api_as, client_as):
    _, results = workbench
    alice = lake.users["alice"]
    assert api_as(alice).post(f"/api/v1/cached-results/{results['ofb'].pk}/invalidate/").status_code == 404
    assert api_as(alice).delete(f"/api/v1/cached-results/{results['ofab'].pk}/").status_code == 404
    answer = client_as(alice).post(f"/cached-results/{results['ofb'].pk}/drop/")
    assert answer.status_code == 404
    assert set(CachedResult.objects.values_list("state", flat=True)) == {CachedResultState.READY}
