"""Resource groups under teams (issue 32, capacity view): a team user sees on the capacity page and
in ``/api/v1/resource-groups/`` only the groups holding a table their teams may see, and the
waiting processes, assigned tables and cost and benefit of those tables only; admins see all."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from processes.groups.membership import groups_for_tables
from processes.groups.models import DEFAULT_GROUP, ResourceGroup, ResourceGroupTable
from processes.models import Process, ProcessStatus
from storage.models import Catalog

pytestmark = pytest.mark.django_db

#: user: the groups they see (a1, a2 -> team-a; b1, b2 -> team-b; ab, b3 -> default)
GROUPS_SEEN = {
    "alice": ["team-a"],
    "amy": ["team-a"],
    "bob": [DEFAULT_GROUP, "team-b"],
    "olga": [],
    "root": [DEFAULT_GROUP, "team-a", "team-b"],
}


@pytest.fixture
def grouped(lake):
    """Groups by namespace and catalog; every process in its table's group; ``ab`` (no team's) and
    ``b3`` (team B's) assigned to ``default`` by name, each with a finished run measured."""
    ResourceGroup.objects.create(name="team-a", namespace_patterns=["a", "a.*"])
    team_b = ResourceGroup.objects.create(name="team-b", namespace_patterns=["b"])
    team_b.catalogs.add(Catalog.objects.get(name="lakeb"))
    default = ResourceGroup.objects.get(name=DEFAULT_GROUP)
    default.held = {
        "at": "2026-01-01T00:00:00+00:00",
        "count": 7,
        "by_action": {"rewrite": 7},
        "reason": "full",
    }
    default.save()
    for name in ("ab", "b3"):
        ResourceGroupTable.objects.create(group=default, table=lake.tables[name])
    for pk, group in groups_for_tables([t.pk for t in lake.tables.values()]).items():
        Process.objects.filter(table_id=pk).update(resource_group=group)
    for name, seconds in (("ab", 1000.0), ("b3", 30.0)):
        Process.objects.create(
            table=lake.tables[name],
            action="rewrite",
            factory="test",
            status=ProcessStatus.SUCCESS,
            resource_group=default,
            finished_at=timezone.now(),
            measured={"cost": {"worker_seconds": seconds, "bytes_read": 1, "bytes_written": 1}},
        )
    return lake


def test_the_groups_follow_the_tables_they_hold(grouped):
    names = {
        pk: group.name for pk, group in groups_for_tables([t.pk for t in grouped.tables.values()]).items()
    }
    assert {name: names[table.pk] for name, table in grouped.tables.items()} == {
        "a1": "team-a",
        "a2": "team-a",
        "ab": DEFAULT_GROUP,
        "b1": "team-b",
        "b2": "team-b",
        "b3": DEFAULT_GROUP,
    }


@pytest.mark.parametrize("username", sorted(GROUPS_SEEN))
def test_the_api_lists_and_reads_only_the_groups_of_the_users_tables(grouped, api_as, username):
    api = api_as(grouped.users[username])

    listed = api.get("/api/v1/resource-groups/")

    assert listed.status_code == 200, listed.content
    body = listed.json()
    assert [row["name"] for row in body.get("results", body)] == GROUPS_SEEN[username]
    for group in ResourceGroup.objects.all():
        expected = 200 if group.name in GROUPS_SEEN[username] else 404
        for suffix in ("", "report/"):
            answer = api.get(f"/api/v1/resource-groups/{group.pk}/{suffix}")
            assert (group.name, suffix, answer.status_code) == (group.name, suffix, expected)


@pytest.mark.parametrize(
    ("username", "tables", "runs", "seconds"),
    [("bob", {"b3"}, 2, 30.0), ("root", {"ab", "b3"}, 4, 1030.0)],
)
def test_a_shared_groups_tables_and_report_count_only_the_visible_tables(
    grouped, api_as, username, tables, runs, seconds
):
    api = api_as(grouped.users[username])
    default = ResourceGroup.objects.get(name=DEFAULT_GROUP)

    detail = api.get(f"/api/v1/resource-groups/{default.pk}/").json()
    report = api.get(f"/api/v1/resource-groups/{default.pk}/report/", {"days": 1}).json()

    assert set(detail["tables"]) == grouped.ids(tables)
    # the succeeded run measured above and each table's FAILED process of the fixture
    totals = report["totals"]
    assert (totals["runs"], totals["failed"], totals["worker_seconds"]) == (runs, runs // 2, seconds)


def _group_sections(html: str) -> list[str]:
    return [part.split('"', 1)[0] for part in html.split('id="group-')[1:]]


def test_the_capacity_page_shows_a_team_user_their_groups_counted_over_their_tables(grouped):
    pages = {}
    for username in ("bob", "root", "olga", "alice"):
        client = Client()
        client.force_login(grouped.users[username])
        response = client.get("/capacity/")
        assert response.status_code == 200
        pages[username] = response.content.decode()

    assert {name: _group_sections(page) for name, page in pages.items()} == {
        name: GROUPS_SEEN[name] for name in ("bob", "root", "olga", "alice")
    }
    bob_default = pages["bob"][
        pages["bob"].index('id="group-default"') : pages["bob"].index('id="group-team-b"')
    ]
    root_default = pages["root"][
        pages["root"].index('id="group-default"') : pages["root"].index('id="group-team-a"')
    ]
    # waiting: the PENDING rewrite of b3 for bob; of ab and b3 for an admin, who also sees the hold
    assert "<td>rewrite</td><td>1</td><td><span" in bob_default and "held back" not in bob_default
    assert "<td>rewrite</td><td>2</td><td>7</td>" in root_default
    assert "The scheduler held back 7 due runs" in root_default
    assert "<th>All</th><td>2</td><td>1</td><td>30.0 s</td>" in bob_default
    assert "<th>All</th><td>4</td><td>2</td><td>17 min 10 s</td>" in root_default
    assert 'id="team-scope"' in pages["bob"] and 'id="team-scope"' not in pages["root"]


#: user: (processes active, of them waiting, worker-seconds in the hour) in group ``shared``
SHARE = {"alice": (3, 2, 600.0), "bob": (3, 1, 1200.0), "root": (6, 3, 1800.0)}


@pytest.fixture
def shared(lake):
    """One group holding team A's ``a1``, ``a2`` and team B's ``b1``: A has its two PENDING, one
    RUNNING and a 600 s run in the hour; B its PENDING, two RUNNING and a 1200 s run."""
    group = ResourceGroup.objects.create(
        name="shared", namespace_patterns=["a", "a.*", "b"], max_concurrency=10, compute_budget_seconds=7200
    )
    now = timezone.now()
    Process.objects.filter(table__in=[lake.tables[n] for n in ("a1", "a2", "b1")]).update(
        resource_group=group
    )
    for name, running, seconds in (("a1", 1, 600), ("b1", 2, 1200)):
        for action in ("touch", "expire")[:running]:  # no start reported yet: active, no seconds spent
            Process.objects.create(
                table=lake.tables[name],
                action=action,
                factory="test",
                status=ProcessStatus.RUNNING,
                resource_group=group,
            )
        Process.objects.create(
            table=lake.tables[name],
            action="rewrite",
            factory="test",
            status=ProcessStatus.SUCCESS,
            resource_group=group,
            started_at=now - timezone.timedelta(seconds=seconds + 300),
            finished_at=now - timezone.timedelta(seconds=300),
        )
    return group


@pytest.mark.parametrize("username", sorted(SHARE))
def test_a_shared_groups_budget_use_counts_only_the_users_teams_processes(lake, shared, api_as, username):
    listed = api_as(lake.users[username]).get("/api/v1/resource-groups/")

    assert listed.status_code == 200
    body = listed.json()
    usage = next(row["usage"] for row in body.get("results", body) if row["name"] == "shared")
    active, queued, seconds = SHARE[username]
    if username == "root":  # the whole group: the two teams' sum, and what is left
        assert usage == {
            "scope": "group",
            "active": active,
            "queued": queued,
            "slots_left": 10 - active,
            "seconds_used": seconds,
            "seconds_left": 7200 - seconds,
            "held": {},
        }
    else:
        assert usage == {
            "scope": "teams",
            "active": active,
            "queued": queued,
            "slots_left": None,
            "seconds_used": seconds,
            "seconds_left": None,
            "held": {},
        }


def test_the_capacity_page_shows_a_team_user_their_teams_share_of_a_shared_group(lake, shared, client_as):
    sections = {}
    for username in SHARE:
        page = client_as(lake.users[username]).get("/capacity/")
        assert page.status_code == 200
        html = page.content.decode()
        start = html.index('id="group-shared"')
        sections[username] = html[start : html.index("</section>", start)]
        row = next(row for row in page.context["groups"] if row["group"].name == "shared")
        assert (row["budget"]["active"], row["budget"]["queued"], row["budget"]["seconds_used"]) == SHARE[
            username
        ]

    for username in ("alice", "bob"):
        active, queued, seconds = SHARE[username]
        section = sections[username]
        assert "Your teams' share" in section
        assert (
            f'<span class="value">{active}</span><span class="label">your teams\' processes active' in section
        )
        assert (
            f'<span class="value">{seconds:,.0f}</span><span class="label">your teams\' worker-seconds'
            in section
        )
        assert (
            f'<span class="value">{queued}</span><span class="label">your teams\' processes waiting'
            in section
        )
        assert "slots left" not in section and "tasks waiting in the queue" not in section
    root = sections["root"]
    assert "Your teams' share" not in root
    assert '<span class="value">6 / 10</span><span class="label">processes active · 4 slots left' in root
    assert '<span class="value">1,800 / 7,200</span>' in root
