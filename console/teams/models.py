"""Team, TeamMember and Grant: the object model SSO groups map onto (issue 32)."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models
from django.db.models import Q

from storage.models import Catalog, Table

VIEWER = "viewer"
OPERATOR = "operator"
OWNER = "owner"
#: A grant's roles, weakest first: an operator grant allows what a viewer grant does, and more.
GRANT_ROLES = (VIEWER, OPERATOR, OWNER)


class GrantRole(models.TextChoices):
    VIEWER = VIEWER, "viewer"
    OPERATOR = OPERATOR, "operator"
    OWNER = OWNER, "owner"


def roles_at_least(role: str) -> tuple[str, ...]:
    """The grant roles that allow what ``role`` allows (``operator``: operator and owner)."""
    return GRANT_ROLES[GRANT_ROLES.index(role) :]


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    description = models.CharField(max_length=255, blank=True)
    sso_groups = models.JSONField(
        default=list,
        blank=True,
        help_text="OIDC group claims or LDAP group DNs whose members join the team at each sign-in",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="TeamMember", related_name="lakewarden_teams", blank=True
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class MemberSource(models.TextChoices):
    MANUAL = "manual", "added by an admin"
    SSO = "sso", "from an SSO group (set again at each sign-in)"


class TeamMember(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    source = models.CharField(max_length=10, choices=MemberSource.choices, default=MemberSource.MANUAL)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="team_member_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team}"


class Grant(models.Model):
    """A team's role on one scope: a table, or a catalog, or a namespace of a catalog (and the
    namespaces below it: ``sales`` covers ``sales.orders`` and ``sales.eu.orders``)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="grants")
    role = models.CharField(max_length=10, choices=GrantRole.choices)
    catalog = models.ForeignKey(Catalog, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=255, blank=True, help_text="Within the catalog; blank: all of it")
    table = models.ForeignKey(Table, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__name", "id"]
        constraints = [
            models.CheckConstraint(
                name="grant_one_scope",
                condition=(Q(table__isnull=False, catalog__isnull=True, namespace=""))
                | Q(table__isnull=True, catalog__isnull=False),
            ),
            models.UniqueConstraint(
                fields=["team", "catalog", "namespace", "table"],
                name="grant_scope_unique",
                nulls_distinct=False,
            ),
        ]

    def scope_label(self) -> str:
        if self.table_id is not None:
            return f"table {self.table_id} ({self.table.name})"
        if self.namespace:
            return f"namespace {self.catalog.name}.{self.namespace}"
        return f"catalog {self.catalog.name}"

    def __str__(self) -> str:
        return f"{self.team.name}: {self.role} on {self.scope_label()}"


class MetricsToken(models.Model):
    """A team's ``/metrics`` scrape token: the scrape answers with the series of the team's tables
    only. Only the token's SHA-256 is kept; the token itself is shown once, when it is made."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="metrics_token")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"metrics token of {self.team.name}"

    @staticmethod
    def digest_of(token: str) -> str:
        """What is kept of a token, and looked up when one is sent: its SHA-256, in hex."""
        return hashlib.sha256(token.encode()).hexdigest()
