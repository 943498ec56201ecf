"""/metrics per team (issue 32): a team's scrape token answers with the series of the team's tables
only (no other table, no family counting every team's work); the global token keeps answering
everything. Tokens are made on the Teams page (admins and team owners), in the API (admins) and by
``manage.py lakewarden_team NAME --metrics-token``; only their digest is kept, and the audit trail
records each one without the token."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from console.audit.models import AuditEvent
from console.teams import services
from console.teams.models import MetricsToken

pytestmark = pytest.mark.django_db

GLOBAL = "metrics-token-for-the-tests-0123456789"


@pytest.fixture
def scraping(settings):
    settings.LAKEWARDEN_METRICS_TOKEN = GLOBAL
    settings.LAKEWARDEN_METRICS_ALLOWED_IPS = []


def _scrape(token: str | None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return Client().get("/metrics", **headers)


def _seen(token: str) -> tuple[set[str], set[int]]:
    """(metric families, table ids in any label) of one scrape with ``token``."""
    answer = _scrape(token)
    assert answer.status_code == 200, answer.content
    families, tables = set(), set()
    for family in text_string_to_metric_families(answer.content.decode()):
        families.add(family.name)
        tables |= {int(s.labels["table_id"]) for s in family.samples if "table_id" in s.labels}
    return families, tables


@pytest.mark.parametrize(
    ("team", "sees"), [("A", {"a1", "a2"}), ("B", {"b1", "b2", "b3"}), ("A-readers", {"a1", "a2"})]
)
def test_a_teams_token_scrapes_exactly_the_teams_tables(lake, scraping, team, sees):
    token = services.team_metrics_token_create(team=lake.teams[team])

    families, tables = _seen(token)

    assert tables == lake.ids(sees)
    assert families == {
        f"lakewarden_table_{name}"
        for name in ("files", "small_files", "bytes", "snapshots", "delete_files", "health_score")
    } | {"lakewarden_table_seconds_since_maintenance"}


def test_the_global_token_still_scrapes_everything(lake, scraping):
    services.team_metrics_token_create(team=lake.teams["A"])

    families, tables = _seen(GLOBAL)

    assert tables == lake.ids(lake.tables)
    assert {"lakewarden_processes", "lakewarden_process_backlog", "lakewarden_table_files"} <= families


def test_a_replaced_or_revoked_or_wrong_token_is_refused(lake, scraping, api_as):
    old = services.team_metrics_token_create(team=lake.teams["A"])
    new = services.team_metrics_token_create(team=lake.teams["A"])
    assert _scrape(old).status_code == 401
    assert _scrape(new).status_code == 200
    assert _scrape(new + "x").status_code == 401
    assert _scrape(None).status_code == 401
    root = api_as(lake.users["root"])
    assert root.delete(f"/api/v1/teams/{lake.teams['A'].pk}/metrics-token/").status_code == 204
    assert _scrape(new).status_code == 401
    assert root.delete(f"/api/v1/teams/{lake.teams['A'].pk}/metrics-token/").status_code == 404
    # only the digest is kept, and the trail never holds a token
    assert not MetricsToken.objects.filter(digest__in=[old, new]).exists()
    details = [str(e.details) for e in AuditEvent.objects.filter(action="team.metrics-token")]
    assert len(details) == 3 and not any(old in d or new in d for d in details)


def test_a_team_token_works_without_the_global_settings_but_not_from_a_refused_address(lake, settings):
    token = services.team_metrics_token_create(team=lake.teams["B"])
    settings.LAKEWARDEN_METRICS_TOKEN = None
    settings.LAKEWARDEN_METRICS_ALLOWED_IPS = []
    assert _seen(token)[1] == lake.ids({"b1", "b2", "b3"})
    assert _scrape(None).status_code == 403
    settings.LAKEWARDEN_METRICS_ALLOWED_IPS = ["10.9.9.9/32"]  # the test client is 127.0.0.1
    assert _scrape(token).status_code == 403


def test_admins_make_tokens_in_the_api_and_nobody_else(lake, scraping, api_as):
    path = f"/api/v1/teams/{lake.teams['A'].pk}/metrics-token/"
    for username in ("alice", "bob", "vic", "olga"):
        assert (username, api_as(lake.users[username]).post(path).status_code) == (username, 403)
    assert not MetricsToken.objects.exists()

    answer = api_as(lake.users["root"]).post(path)

    assert answer.status_code == 201 and answer.json()["team"] == "A"
    assert _seen(answer.json()["token"])[1] == lake.ids({"a1", "a2"})


@pytest.mark.parametrize(
    ("username", "on_a", "on_b"),
    [("root", 302, 302), ("bob", 404, 302), ("alice", 403, 404), ("olga", 404, 404), ("vic", 403, 403)],
)
def test_the_teams_page_makes_tokens_for_admins_and_team_owners(
    lake, scraping, client_as, username, on_a, on_b
):
    """bob is an operator of B, which owns catalog lakeb; alice is an operator of A, which owns nothing."""
    client = client_as(lake.users[username])
    for team, expected in (("A", on_a), ("B", on_b)):
        answer = client.post(f"/teams/{lake.teams[team].pk}/metrics-token/")
        assert (team, answer.status_code) == (team, expected)
        assert MetricsToken.objects.filter(team=lake.teams[team]).exists() is (expected == 302)
    if on_b == 302:
        page = client.get("/teams/")
        said = " ".join(str(m) for m in page.context["messages"])
        token = said.split("Metrics token of B: ", 1)[1].split(" ", 1)[0]
        assert _seen(token)[1] == lake.ids({"b1", "b2", "b3"})


def test_the_team_command_prints_a_token_that_scrapes_the_teams_tables(lake, scraping):
    out = io.StringIO()
    call_command("lakewarden_team", "A", "--metrics-token", stdout=out)

    token = out.getvalue().rsplit("(shown once): ", 1)[1].strip()

    assert _seen(token)[1] == lake.ids({"a1", "a2"})
    assert sorted(lake.teams["A"].members.values_list("username", flat=True)) == ["alice", "vic"]
