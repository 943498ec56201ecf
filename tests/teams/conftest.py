"""A lakehouse shared by two teams, for the permission matrix (issue 32).

Catalog ``lake`` (a path root) holds ``a.orders`` and ``a.x.nested`` (team A's namespace ``a``),
``ab.orders`` (no team's: a namespace grant on ``a`` must not reach ``ab``) and ``b.orders`` (team
B's namespace ``b``); catalog ``lakeb`` holds ``sales.more`` and, registered by location under its
root, ``loose`` (team B's whole catalog). Every table is a real Delta table. Each table has one
PENDING and one FAILED process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from console.teams.models import Grant, Team, TeamMember
from processes.alerts.models import AlertChannel, AlertRule, RuleKind
from processes.models import Process, ProcessStatus
from storage.models import Catalog, CatalogKind, Table
from tests.console.tables import write_delta_table

TABLES = {  # name: (catalog, identifier, folder under the warehouse)
    "a1": ("lake", "a.orders", "lake/a/orders"),
    "a2": ("lake", "a.x.nested", "lake/a/x/nested"),
    "ab": ("lake", "ab.orders", "lake/ab/orders"),
    "b1": ("lake", "b.orders", "lake/b/orders"),
    "b2": ("lakeb", "sales.more", "lakeb/sales/more"),
    "b3": (None, "", "lakeb/loose"),
}
#: user: (global role, teams)
USERS = {
    "alice": ("operator", ["A"]),
    "amy": ("operator", ["A-readers"]),
    "vic": ("viewer", ["A"]),
    "bob": ("operator", ["B"]),
    "olga": ("operator", []),
    "root": ("admin", []),
}
#: what each user sees, by table name
SEES = {
    "alice": {"a1", "a2"},
    "amy": {"a1", "a2"},
    "vic": {"a1", "a2"},
    "bob": {"b1", "b2", "b3"},
    "olga": set(),
    "root": set(TABLES),
}


@pytest.fixture(scope="session")
def delta_folders(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("teams-warehouse")
    for _, _, folder in TABLES.values():
        write_delta_table(root / folder, commits=1, rows_per_commit=3)
    return root


@dataclass
class Lake:
    root: Path
    tables: dict[str, Table]
    pending: dict[str, Process]
    failed: dict[str, Process]
    users: dict[str, object]
    teams: dict[str, Team]

    def ids(self, names) -> set[int]:
        return {self.tables[name].pk for name in names}

    def name_of(self, pk: int) -> str:
        return next(name for name, table in self.tables.items() if table.pk == pk)


@pytest.fixture
def lake(db, settings, delta_folders, django_user_model, fast_passwords) -> Lake:
    settings.LAKEWARDEN_ALLOWED_ROOTS = [*settings.LAKEWARDEN_ALLOWED_ROOTS, delta_folders]
    catalogs = {
        name: Catalog.objects.create(
            name=name, kind=CatalogKind.PATH_ROOT, properties={"root": str(delta_folders / name)}
        )
        for name in ("lake", "lakeb")
    }
    tables = {}
    for name, (catalog, identifier, folder) in TABLES.items():
        tables[name] = Table.objects.create(
            catalog=catalogs[catalog] if catalog else None,
            name=identifier or folder.rsplit("/", 1)[-1],
            identifier=identifier,
            format="delta",
            location=str(delta_folders / folder),
        )
    pending = {
        n: Process.objects.create(table=t, action="rewrite", factory="test") for n, t in tables.items()
    }
    failed = {
        n: Process.objects.create(table=t, action="rewrite", factory="test", status=ProcessStatus.FAILED)
        for n, t in tables.items()
    }
    teams = {name: Team.objects.create(name=name) for name in ("A", "A-readers", "B")}
    Grant.objects.create(team=teams["A"], role="operator", catalog=catalogs["lake"], namespace="a")
    Grant.objects.create(team=teams["A-readers"], role="viewer", catalog=catalogs["lake"], namespace="a")
    Grant.objects.create(team=teams["B"], role="operator", catalog=catalogs["lake"], namespace="b")
    Grant.objects.create(team=teams["B"], role="owner", catalog=catalogs["lakeb"])
    users = {}
    for username, (role, member_of) in USERS.items():
        user = django_user_model.objects.create_user(username=username, password="correct horse battery")
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        for team in member_of:
            TeamMember.objects.create(team=teams[team], user=user)
        users[username] = user
    users["anonymous"] = None
    return Lake(delta_folders, tables, pending, failed, users, teams)


#: channel name: owning team (None: an admin's)
CHANNELS = {"admins": None, "a-hook": "A", "b-hook": "B"}
#: rule name: (kind, owning team)
RULES = {
    "every-failure": (RuleKind.PROCESS_FAILED, None),
    "a-failures": (RuleKind.PROCESS_FAILED, "A"),
    "silence": (RuleKind.SERVICE_SILENT, None),
}


@pytest.fixture
def alerting(lake):
    channels = {
        name: AlertChannel.objects.create(
            name=name,
            kind="email",
            recipients=f"{name}@example.org",
            team=lake.teams[team] if team else None,
        )
        for name, team in CHANNELS.items()
    }
    rules = {
        name: AlertRule.objects.create(name=name, kind=kind, team=lake.teams[team] if team else None)
        for name, (kind, team) in RULES.items()
    }
    # Every table's FAILED process is final (no retry budget left).
    Process.objects.filter(pk__in=[p.pk for p in lake.failed.values()]).update(
        finished_at=timezone.now(), max_retries=0
    )
    return channels, rules
