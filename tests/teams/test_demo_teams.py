"""The demo's two teams (issue 32): ``manage.py lakewarden_demo`` creates team-iceberg (alice) and
team-delta (bob), prints their passwords as the admin's are printed, and each user sees only their
team's catalog; running it again changes nothing."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.db import connection

from console.teams.models import Grant, Team
from storage.models import Catalog, Table
from storage.selectors import catalog_tables_q

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def demo_output(warehouse, settings, tmp_path):
    settings.LAKEWARDEN_VAR_DIR = tmp_path / "var"
    with connection.cursor() as cursor:  # the SQL catalog's own tables are not Django's
        cursor.execute("select to_regclass('iceberg_tables') is not null")
        if cursor.fetchone()[0]:
            cursor.execute("delete from iceberg_tables where catalog_name = 'demo'")
            cursor.execute("delete from iceberg_namespace_properties where catalog_name = 'demo'")

    def run() -> str:
        out = io.StringIO()
        call_command("lakewarden_demo", scale=2, warehouse=str(warehouse), storage="local", stdout=out)
        return out.getvalue()

    return run


def _password(output: str, username: str) -> str:
    prefix = f"created user {username!r} with password: "
    (line,) = [line for line in output.splitlines() if line.startswith(prefix)]
    return line.removeprefix(prefix)


def test_the_demo_creates_two_teams_each_seeing_only_its_catalog(demo_output, settings, api_as):
    output = demo_output()
    passwords = {name: _password(output, name) for name in ("alice", "bob")}
    kept = (settings.LAKEWARDEN_VAR_DIR / "demo-users").read_text().splitlines()
    assert kept == [f"alice {passwords['alice']}", f"bob {passwords['bob']}"]
    assert (settings.LAKEWARDEN_VAR_DIR / "demo-users").stat().st_mode & 0o777 == 0o600
    assert sorted(str(g) for g in Grant.objects.all()) == [
        "team-delta: owner on catalog warehouse-delta",
        "team-iceberg: owner on catalog demo",
    ]
    for username, catalog in (("alice", "demo"), ("bob", "warehouse-delta")):
        user = authenticate(username=username, password=passwords[username])
        assert user is not None and user.groups.filter(name="operator").exists()
        listed = api_as(user).get("/api/v1/tables/", {"page_size": 500}).json()["results"]
        in_catalog = catalog_tables_q(Catalog.objects.get(name=catalog))
        expected = set(Table.objects.filter(in_catalog).values_list("pk", flat=True))
        assert expected and {row["id"] for row in listed} == expected, username


def test_running_the_demo_again_keeps_the_teams_and_passwords(demo_output, settings):
    demo_output()
    before = (settings.LAKEWARDEN_VAR_DIR / "demo-users").read_text()
    again = demo_output()
    assert "created user" not in again
    assert "user 'alice' exists; password unchanged" in again
    assert (settings.LAKEWARDEN_VAR_DIR / "demo-users").read_text() == before
    assert sorted(Team.objects.values_list("name", flat=True)) == ["team-delta", "team-iceberg"]
    assert Grant.objects.count() == 2
