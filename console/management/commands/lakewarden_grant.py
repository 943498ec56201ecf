from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from console.teams.models import GRANT_ROLES, Team
from console.teams.services import grant_find, grant_revoke, grant_set
from storage.errors import ServiceError


class Command(BaseCommand):
    help = (
        "Give a team a role (viewer, operator, owner) on a catalog, a namespace (catalog.namespace, "
        "and every namespace below it) or a table (idempotent: a grant on the same scope takes the "
        "new role); --revoke removes it. Every change is audited."
    )

    def add_arguments(self, parser):
        parser.add_argument("team")
        parser.add_argument("role", choices=GRANT_ROLES)
        scope = parser.add_mutually_exclusive_group(required=True)
        scope.add_argument("--catalog", help="a catalog's name")
        scope.add_argument("--namespace", help="catalog.namespace, e.g. lake.sales")
        scope.add_argument("--table", type=int, help="a table's id")
        parser.add_argument("--revoke", action="store_true", help="remove the team's grant on the scope")

    def handle(self, *args, team: str, role: str, catalog, namespace, table, revoke: bool, **options):
        found = Team.objects.filter(name=team).first()
        if found is None:
            raise CommandError(f"no team named {team!r}: create it with lakewarden_team {team}")
        try:
            if revoke:
                grant = grant_find(team=found, catalog=catalog, namespace=namespace, table=table)
                if grant is not None:
                    grant_revoke(grant=grant)
                self.stdout.write(self.style.SUCCESS(f"revoked: {grant}" if grant else "no such grant"))
                return
            grant, created = grant_set(
                team=found, role=role, catalog=catalog, namespace=namespace, table=table
            )
        except ServiceError as error:
            raise CommandError(error.message) from None
        self.stdout.write(self.style.SUCCESS(f"{'granted' if created else 'kept'}: {grant}"))
