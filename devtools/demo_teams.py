"""The demo's two teams (issue 32), so a newcomer sees isolation at once: ``team-iceberg`` owns the
demo's Iceberg catalog and ``team-delta`` its Delta catalog, with one operator each (``alice`` and
``bob``). Signed in as alice, the console, the API and the workbench show the Iceberg tables only;
as bob, the Delta tables only; the admin still sees everything. Each is a team owner and manages
their team on the Teams page.

Every change goes through the team services (audited); safe to run again: an existing user keeps
their password, and the generated ones are kept in ``var/demo-users`` (mode 0600)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from console.roles import OPERATOR
from console.teams import services as team_services
from console.teams.models import OWNER

#: (team, user, description): the catalog each team owns is given by the caller.
DEMO_TEAMS = (
    ("team-iceberg", "alice", "owns the demo's Iceberg catalog"),
    ("team-delta", "bob", "owns the demo's Delta catalog"),
)


def _user(username: str, password_file: Path) -> tuple[Any, str | None]:
    """The operator ``username``, created with a generated password (returned) when missing."""
    users = get_user_model()
    user = users.objects.filter(username=username).first()
    if user is not None:
        return user, None
    password = secrets.token_urlsafe(12)
    user = users.objects.create_user(username=username, password=password)
    user.groups.add(Group.objects.get_or_create(name=OPERATOR)[0])
    password_file.parent.mkdir(parents=True, exist_ok=True)
    with password_file.open("a") as kept:
        kept.write(f"{username} {password}\n")
    password_file.chmod(0o600)
    return user, password


def demo_teams_build(
    *, catalogs: tuple[str, str], password_file: Path, report: Callable[[str], None]
) -> dict[str, str | None]:
    """The two teams, owners of ``catalogs`` (the Iceberg one, the Delta one), a user in each.
    Returns {username: the password generated now, or None for a user who existed}."""
    created: dict[str, str | None] = {}
    for (team_name, username, description), catalog in zip(DEMO_TEAMS, catalogs, strict=True):
        user, password = _user(username, password_file)
        team, _ = team_services.team_set(name=team_name, description=description)
        team_services.team_member_add(team=team, username=user.get_username())
        team_services.grant_set(team=team, role=OWNER, catalog=catalog)
        created[username] = password
        report(f"team {team_name}: {username} (operator), owner of catalog {catalog}")
    return created
