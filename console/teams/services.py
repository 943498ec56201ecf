"""Changing teams, members and grants: one function per change, each audited (console/audit).

The management commands, the API and the admin call these. Inside an audited request the change
is added to the request's audit row; outside one (a management command, a sign-in) it is a row of
its own.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from console.audit import recording
from console.teams import access
from console.teams.models import GRANT_ROLES, OWNER, Grant, MemberSource, MetricsToken, Team, TeamMember
from storage.errors import InvalidInput
from storage.models import Catalog, Table

logger = logging.getLogger(__name__)


def _audit(action: str, obj: Any, change: dict[str, Any]) -> None:
    target = (obj._meta.label, str(obj.pk), str(obj)[:255])
    if recording.note_action(action, target):
        audit = recording.current()
        if audit is not None:
            audit.note(change)
        return
    recording.write(
        action=action,
        target_model=target[0],
        target_id=target[1],
        target_label=target[2],
        details={"changes": [change]},
    )


def _members(team: Team) -> list[str]:
    return sorted(team.members.values_list("username", flat=True))


def _team_state(team: Team) -> dict[str, Any]:
    return {"description": team.description, "sso_groups": team.sso_groups, "members": _members(team)}


def _clean_names(values: Iterable[str], what: str) -> list[str]:
    names = []
    for value in values:
        if not isinstance(value, str) or "\x00" in value:
            raise InvalidInput(f"{what} must be strings without NUL characters", field=what)
        if value.strip() and value.strip() not in names:
            names.append(value.strip())
    return names


def _users(usernames: list[str]) -> list:
    found = {u.username: u for u in get_user_model().objects.filter(username__in=usernames)}
    missing = [name for name in usernames if name not in found]
    if missing:
        raise InvalidInput(f"no such user: {', '.join(missing)}", field="members")
    return [found[name] for name in usernames]


def team_set(
    *,
    name: str,
    members: Iterable[str] | None = None,
    sso_groups: Iterable[str] | None = None,
    description: str | None = None,
) -> tuple[Team, bool]:
    """Create the team ``name`` or bring it to what is given (idempotent): ``members`` (usernames)
    become its hand-added members (members who came through SSO stay), ``sso_groups`` its mapped
    groups; what is None is left as it is. Returns (team, created)."""
    name = (name or "").strip()
    if not name or len(name) > 100 or "\x00" in name:
        raise InvalidInput("a team's name is 1 to 100 characters, without NUL", field="name")
    usernames = _clean_names(members, "members") if members is not None else None
    groups = _clean_names(sso_groups, "sso_groups") if sso_groups is not None else None
    with transaction.atomic():
        users = _users(usernames) if usernames is not None else None
        team, created = Team.objects.select_for_update().get_or_create(name=name)
        before = {} if created else _team_state(team)
        if groups is not None:
            team.sso_groups = groups
        if description is not None:
            team.description = description[:255]
        team.save()
        if users is not None:
            manual = team.memberships.filter(source=MemberSource.MANUAL)
            manual.exclude(user__in=users).delete()
            for user in users:
                TeamMember.objects.get_or_create(
                    team=team, user=user, defaults={"source": MemberSource.MANUAL}
                )
        after = _team_state(team)
        if created or before != after:
            _audit("team.change", team, {"created": created, "before": before, "after": after})
    return team, created


def team_delete(*, team: Team) -> None:
    with transaction.atomic():
        _audit("team.delete", team, {"before": _team_state(team), "after": {}})
        team.delete()


def _scope(
    *, catalog: str | None, namespace: str | None, table: int | str | None
) -> tuple[Catalog | None, str, Table | None]:
    """(catalog, namespace, table) of a grant named by ``--catalog C``, ``--namespace C.N`` or
    ``--table ID``: exactly one of them."""
    given = [v for v in (catalog, namespace, table) if v not in (None, "")]
    if len(given) != 1:
        raise InvalidInput("name exactly one scope: a catalog, a namespace (catalog.namespace) or a table id")
    if table not in (None, ""):
        found = Table.objects.filter(pk=table).first() if str(table).isdigit() else None
        if found is None:
            raise InvalidInput(f"no table with id {table}", field="table")
        return None, "", found
    if namespace:
        catalog_name, _, namespace = namespace.partition(".")
        if not namespace.strip("."):
            raise InvalidInput("a namespace is named catalog.namespace, e.g. lake.sales", field="namespace")
        namespace = namespace.strip(".")
    else:
        catalog_name = catalog or ""
    found_catalog = Catalog.objects.filter(name=catalog_name).first()
    if found_catalog is None:
        raise InvalidInput(f"no catalog named {catalog_name!r}", field="catalog")
    return found_catalog, namespace or "", None


def grant_set(
    *,
    team: Team,
    role: str,
    catalog: str | None = None,
    namespace: str | None = None,
    table: int | None = None,
) -> tuple[Grant, bool]:
    """Give ``team`` ``role`` on one scope (idempotent: a grant on the same scope takes the new
    role). Returns (grant, created)."""
    if role not in GRANT_ROLES:
        raise InvalidInput(f"role must be one of {', '.join(GRANT_ROLES)}, not {role!r}", field="role")
    scope_catalog, scope_namespace, scope_table = _scope(catalog=catalog, namespace=namespace, table=table)
    with transaction.atomic():
        grant, created = Grant.objects.select_for_update().get_or_create(
            team=team,
            catalog=scope_catalog,
            namespace=scope_namespace,
            table=scope_table,
            defaults={"role": role},
        )
        before = None if created else grant.role
        if grant.role != role:
            grant.role = role
            grant.save(update_fields=["role"])
        if created or before != role:
            change = {"team": team.name, "scope": grant.scope_label(), "before": before, "after": role}
            _audit("grant.change", grant, change)
    return grant, created


def grant_find(
    *, team: Team, catalog: str | None = None, namespace: str | None = None, table: int | None = None
) -> Grant | None:
    """The team's grant on the scope named as for ``grant_set``, or None."""
    scope_catalog, scope_namespace, scope_table = _scope(catalog=catalog, namespace=namespace, table=table)
    return Grant.objects.filter(
        team=team, catalog=scope_catalog, namespace=scope_namespace, table=scope_table
    ).first()


def grant_revoke(*, grant: Grant) -> None:
    with transaction.atomic():
        change = {"team": grant.team.name, "scope": grant.scope_label(), "before": grant.role, "after": None}
        _audit("grant.delete", grant, change)
        grant.delete()


def table_owner_assign(*, table: Table, user) -> Grant | None:
    """A table registered by location belongs to the registering user's team: an owner grant for
    that team when the user is in exactly one team. A user in no team or in several gets none (an
    admin grants it; until then admins and the teams whose catalog or namespace grants cover the
    table see it), and the log says so."""
    if table.catalog_id is not None or not access.teams_enforced():
        return None
    teams = list(Team.objects.filter(memberships__user=user).distinct()[:2])
    if len(teams) != 1:
        logger.info(
            "table %s registered by %s, who is in %s: no team owns it until an admin grants it",
            table.pk,
            user,
            "no team" if not teams else "several teams",
        )
        return None
    grant, _ = grant_set(team=teams[0], role=OWNER, table=table.pk)
    return grant


def sso_teams_set(*, user, groups: Iterable[str], ignore_case: bool = False) -> list[str]:
    """At each SSO sign-in: the user joins every team one of ``groups`` maps to and leaves the
    teams they had joined through SSO whose groups they no longer hold (hand-added memberships
    stay). Returns the names of the user's SSO teams."""

    def norm(value: str) -> str:
        return value.strip().lower() if ignore_case else value.strip()

    held = {norm(str(g)) for g in groups}
    wanted = [t for t in Team.objects.exclude(sso_groups=[]) if held & {norm(str(g)) for g in t.sso_groups}]
    with transaction.atomic():
        current = {m.team_id: m for m in TeamMember.objects.filter(user=user).select_related("team")}
        for team in wanted:
            if team.pk not in current:
                TeamMember.objects.create(team=team, user=user, source=MemberSource.SSO)
                _audit("team.member.sso", team, {"user": user.get_username(), "joined": True})
        wanted_ids = {t.pk for t in wanted}
        for team_id, membership in current.items():
            if membership.source == MemberSource.SSO and team_id not in wanted_ids:
                _audit("team.member.sso", membership.team, {"user": user.get_username(), "joined": False})
                membership.delete()
    access.forget(user)
    return sorted(t.name for t in wanted)


def team_member_add(*, team: Team, username: str) -> TeamMember:
    """Add the user ``username`` to ``team`` by hand (idempotent: an SSO membership stays SSO)."""
    (user,) = _users(_clean_names([username], "members") or [""])
    with transaction.atomic():
        membership, created = TeamMember.objects.get_or_create(
            team=team, user=user, defaults={"source": MemberSource.MANUAL}
        )
        if created:
            _audit("team.member", team, {"user": user.get_username(), "joined": True})
    return membership


def team_member_remove(*, team: Team, username: str) -> None:
    """Remove ``username`` from ``team`` (a member through an SSO group joins again at their next
    sign-in while the group maps to the team)."""
    with transaction.atomic():
        removed, _ = TeamMember.objects.filter(team=team, user__username=username).delete()
        if not removed:
            raise InvalidInput(f"{username!r} is not a member of {team.name}", field="members")
        _audit("team.member", team, {"user": username, "joined": False})


def grant_scope(*, catalog: Catalog | None, namespace: str, table: Table | None) -> dict[str, Any]:
    """The keyword arguments ``grant_set`` and ``grant_find`` take for a scope given as objects
    (a form's or the admin's cleaned data)."""
    if table is not None:
        return {"table": table.pk}
    if catalog is None:
        raise InvalidInput("name a catalog (and, if you like, a namespace of it) or a table", field="catalog")
    if namespace.strip("."):
        return {"namespace": f"{catalog.name}.{namespace.strip('.')}"}
    return {"catalog": catalog.name}


def team_metrics_token_create(*, team: Team) -> str:
    """A new ``/metrics`` scrape token for ``team`` (replacing the one it had): returned once, only
    its digest kept. A scrape sending it gets the series of the team's tables only."""
    token = f"lwm_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        replaced = MetricsToken.objects.filter(team=team).delete()[0] > 0
        MetricsToken.objects.create(team=team, digest=MetricsToken.digest_of(token))
        _audit("team.metrics-token", team, {"team": team.name, "replaced": replaced})
    return token


def team_metrics_token_revoke(*, team: Team) -> bool:
    """Remove ``team``'s scrape token; False when it had none."""
    with transaction.atomic():
        removed = MetricsToken.objects.filter(team=team).delete()[0] > 0
        if removed:
            _audit("team.metrics-token", team, {"team": team.name, "revoked": True})
    return removed
