"""The one place that decides who sees and operates what (issue 32).

``visible(user, queryset)`` narrows a queryset of tables, or of rows pointing at a table
(``via="table"``: processes), to what the user may see; ``catalogs_visible(user, queryset)``
does the same for catalogs; ``can(user, action, obj)`` answers one permission on one object
(through the ``rules`` predicates below). Every surface calls these: the API's querysets and its
object permission (console/permissions.py), the console's lookups (console/decorators.py), the
lists, the overview and the search.

The rules:

- Teams are enforced once a team exists (``teams_enforced``). Before that, nothing changes: the
  global roles (viewer, operator, admin) decide alone, as they always have.
- Admins are global: they see and do everything, teams or not.
- Everyone else sees the tables their teams hold a grant on (a table, its catalog, or its
  namespace or one above it) and nothing else; anonymous users see nothing.
- An action needs both the global role (the ceiling, as before) and a grant of that strength on
  the object: ``operate`` (run, preview, cancel, kill, retry, restore) an operator or owner grant,
  ``view`` any grant. A viewer-role user with an operator grant still only views.
"""

from __future__ import annotations

from typing import Any

import rules
from django.db.models import Model, Q, QuerySet

from console.roles import ADMIN, OPERATOR, VIEWER, has_role
from console.teams.models import OPERATOR as GRANT_OPERATOR
from console.teams.models import OWNER as GRANT_OWNER
from console.teams.models import VIEWER as GRANT_VIEWER
from console.teams.models import Grant, MetricsToken, Team, TeamMember, roles_at_least
from processes.alerts.selectors import episodes_about_tables_q, with_subject_table
from storage.access import cached_results_readable
from storage.models import Catalog, Table
from storage.selectors import catalog_tables_q

#: Actions ``can`` knows, and the grant role each needs at least.
ACTIONS = {"view": GRANT_VIEWER, "operate": GRANT_OPERATOR, "own": GRANT_OWNER}
_CACHE = "_lakewarden_access"


def teams_enforced() -> bool:
    """True once any team exists: from then on non-admins see only what their teams are granted."""
    return Team.objects.exists()


def _state(user) -> dict[str, Any]:
    """Per user object (so per request): whether teams are enforced, and the user's grants."""
    cached = getattr(user, _CACHE, None)
    if cached is None:
        cached = {"enforced": teams_enforced(), "grants": None}
        if getattr(user, "is_authenticated", False):
            setattr(user, _CACHE, cached)
    return cached


def forget(user) -> None:
    """Drop what ``_state`` kept on this user object (after their teams or grants changed)."""
    if user is not None:
        user.__dict__.pop(_CACHE, None)


def unrestricted(user) -> bool:
    """True when ``user`` sees everything: teams are not enforced, or the user is an admin."""
    if not _state(user)["enforced"]:
        return True
    return has_role(user, ADMIN)


def _grants(user) -> list[Grant]:
    state = _state(user)
    if state["grants"] is None:
        state["grants"] = list(
            Grant.objects.filter(team__memberships__user=user).select_related("catalog").distinct()
        )
    return state["grants"]


def _grant_q(grant: Grant) -> Q:
    if grant.table_id is not None:
        return Q(pk=grant.table_id)
    if grant.namespace:
        return Q(catalog_id=grant.catalog_id, identifier__startswith=grant.namespace + ".")
    return catalog_tables_q(grant.catalog)


def _grants_q(grants, role: str) -> Q | None:
    allowed = roles_at_least(role)
    condition: Q | None = None
    for grant in grants:
        if grant.role in allowed:
            condition = _grant_q(grant) if condition is None else condition | _grant_q(grant)
    return condition


def tables_q(user, role: str = GRANT_VIEWER) -> Q | None:
    """The condition on ``Table`` of what ``user``'s grants of at least ``role`` cover; None when
    they cover nothing. Only meaningful when not ``unrestricted(user)``."""
    if not getattr(user, "is_authenticated", False):
        return None
    return _grants_q(_grants(user), role)


def team_tables(team: Team | int) -> QuerySet[Table]:
    """The tables ``team``'s grants (of any role) cover: what its alerts watch and its metrics
    token scrapes."""
    grants = Grant.objects.filter(team=team).select_related("catalog")
    return Table.objects.filter(_grants_q(grants, GRANT_VIEWER) or Q(pk__isnull=True))


def visible(user, queryset: QuerySet, *, via: str = "", role: str = GRANT_VIEWER) -> QuerySet:
    """``queryset`` (of tables, or of rows whose ``via`` field is a table) narrowed to what
    ``user`` may see (``role``: what a grant must allow at least)."""
    if unrestricted(user):
        return queryset
    # Nothing granted: a condition no row meets, not ``none()``, which cannot be compiled into
    # the raw SQL the health ranking embeds (EmptyResultSet).
    condition = tables_q(user, role) or Q(pk__isnull=True)
    if not via:
        return queryset.filter(condition)
    return queryset.filter(**{f"{via}__in": Table.objects.filter(condition).values("pk")})


def tables_visible_to(user, role: str = GRANT_VIEWER) -> QuerySet[Table]:
    return visible(user, Table.objects.all(), role=role)


def tables_scope(user) -> QuerySet[Table] | None:
    """What the storage selectors' ``tables=`` take: None (every table) when ``user`` is
    unrestricted, else the tables the user may see."""
    return None if unrestricted(user) else tables_visible_to(user)


def queries_visible(user, queryset: QuerySet) -> QuerySet:
    """Workbench queries (their SQL and result rows): every one for an unrestricted user, else the
    user's own (each was checked against their grants when it was submitted and when it ran)."""
    if unrestricted(user):
        return queryset
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    return queryset.filter(user=user)


def cached_results_visible(user, queryset: QuerySet) -> QuerySet:
    """Cached results whose every source table the user may read."""
    return cached_results_readable(queryset, tables_scope(user))


def catalogs_visible(user, queryset: QuerySet[Catalog]) -> QuerySet[Catalog]:
    """Catalogs a grant names (the catalog or a namespace of it) or holding a table the user sees."""
    if unrestricted(user):
        return queryset
    named = {grant.catalog_id for grant in _grants(user) if grant.catalog_id is not None}
    holding = tables_visible_to(user).filter(catalog__isnull=False).values("catalog_id")
    return queryset.filter(Q(pk__in=named) | Q(pk__in=holding))


def _table_id(obj: Model) -> int | None:
    if isinstance(obj, Table):
        return obj.pk
    return getattr(obj, "table_id", None)


def is_tables(obj: object) -> bool:
    """True for a table or a row of one (a process...): what grants govern."""
    return isinstance(obj, Table) or getattr(obj, "table_id", None) is not None


def _granted(role: str):
    @rules.predicate(name=f"granted_{role}")
    def granted(user, obj) -> bool:
        table_id = _table_id(obj) if obj is not None else None
        if table_id is None:
            return False
        return tables_visible_to(user, role).filter(pk=table_id).exists()

    return granted


@rules.predicate
def _is_admin(user) -> bool:
    return has_role(user, ADMIN)


@rules.predicate
def _teams_off(user) -> bool:
    return not _state(user)["enforced"]


@rules.predicate
def _viewer(user) -> bool:
    return has_role(user, VIEWER)


@rules.predicate
def _operator(user) -> bool:
    return has_role(user, OPERATOR)


RULES = rules.RuleSet()
RULES.add_rule("view", _is_admin | (_viewer & (_teams_off | _granted(GRANT_VIEWER))))
RULES.add_rule("operate", _is_admin | (_operator & (_teams_off | _granted(GRANT_OPERATOR))))
# Owning (a later slice: managing the object's grants) is an admin's alone while teams are off.
RULES.add_rule("own", _is_admin | (_operator & ~_teams_off & _granted(GRANT_OWNER)))


def teams_managed(user) -> QuerySet[Team]:
    """The teams ``user`` manages (members and grants): every team for an admin; for an operator,
    the teams they belong to that hold an owner grant (team owners); none for anyone else."""
    if has_role(user, ADMIN):
        return Team.objects.all()
    if not has_role(user, OPERATOR):
        return Team.objects.none()
    owning = Grant.objects.filter(role=GRANT_OWNER).values("team_id")
    return Team.objects.filter(pk__in=owning, memberships__user=user).distinct()


def metrics_token_team(token: str) -> int | None:
    """The team whose ``/metrics`` scrape token ``token`` is (its digest is what is kept), or None."""
    found = MetricsToken.objects.filter(digest=MetricsToken.digest_of(token))
    return found.values_list("team_id", flat=True).first()


def alerts_allowed(user) -> bool:
    """Alerts are an admin's, and a team member's with the operator role (their team's only)."""
    if has_role(user, ADMIN):
        return True
    return has_role(user, OPERATOR) and TeamMember.objects.filter(user=user).exists()


def teams_of(user) -> QuerySet[Team]:
    """The teams ``user`` belongs to (none for anonymous)."""
    if not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user)


def owned_visible(user, queryset: QuerySet, *, via: str = "team") -> QuerySet:
    """Rows a team owns (alert channels and rules; ``via``: the path to the owning team, e.g.
    ``channel__team`` for deliveries): every one for an admin, else those of the user's teams."""
    if has_role(user, ADMIN):
        return queryset
    return queryset.filter(**{f"{via}__in": teams_of(user).values("pk")})


def alert_teams_assignable(user) -> QuerySet[Team]:
    """The teams ``user`` may give a new alert channel or rule: any (or none: an admin's) for an
    admin, else one of their own teams."""
    return Team.objects.all() if has_role(user, ADMIN) else teams_of(user)


def episodes_visible(user, queryset: QuerySet) -> QuerySet:
    """Alert episodes: every one for an admin; else those of the user's teams' rules and those
    about a table the user may see, whoever's rule fired (the rule's channels are not shown
    with them: ``owned_visible`` keeps those to their teams)."""
    if has_role(user, ADMIN):
        return queryset
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    mine = Q(rule__team__in=teams_of(user).values("pk"))
    return with_subject_table(queryset).filter(mine | episodes_about_tables_q(tables_visible_to(user)))


def scope_owned(team: Team, grant: Grant) -> bool:
    """Whether one of ``team``'s owner grants covers ``grant``'s scope (what a team owner may grant
    their team: nothing beyond what the team owns)."""
    for owner in team.grants.filter(role=GRANT_OWNER):
        if owner.table_id is not None:
            if grant.table_id == owner.table_id:
                return True
        elif grant.table_id is not None:
            if Table.objects.filter(pk=grant.table_id).filter(_grant_q(owner)).exists():
                return True
        elif grant.catalog_id == owner.catalog_id and (
            not owner.namespace
            or grant.namespace == owner.namespace
            or grant.namespace.startswith(owner.namespace + ".")
        ):
            return True
    return False


def can(user, action: str, obj: Model | None = None) -> bool:
    """May ``user`` do ``action`` (``view``, ``operate``, ``own``) on ``obj`` (a table, or a row
    with a ``table_id`` such as a process)?"""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; actions are {', '.join(ACTIONS)}")
    return RULES.test_rule(action, user, obj)
