from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from console.teams.services import team_metrics_token_create, team_set
from storage.errors import ServiceError


def _names(value: str | None) -> list[str] | None:
    return None if value is None else [name for name in value.split(",") if name.strip()]


class Command(BaseCommand):
    help = (
        "Create a team or bring it to what is given (idempotent): --members sets its hand-added "
        "members, --sso-group (repeatable) the SSO groups whose members join it at sign-in. "
        "What is not given is left as it is. Every change is audited."
    )

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--members", help="usernames, comma-separated (an empty string: none)")
        parser.add_argument(
            "--sso-group",
            action="append",
            dest="sso_groups",
            help="an OIDC group claim value or an LDAP group DN mapped to the team (repeatable)",
        )
        parser.add_argument("--description")
        parser.add_argument(
            "--metrics-token",
            action="store_true",
            help="also make a new /metrics scrape token of the team (replacing its old one) and print it: "
            "a scrape sending it gets the series of the team's tables only",
        )

    def handle(self, *args, name: str, members, sso_groups, description, metrics_token=False, **options):
        try:
            team, created = team_set(
                name=name, members=_names(members), sso_groups=sso_groups, description=description
            )
        except ServiceError as error:
            raise CommandError(error.message) from None
        usernames = ", ".join(sorted(team.members.values_list("username", flat=True))) or "no members"
        groups = ", ".join(team.sso_groups) or "no SSO groups"
        verb = "created" if created else "updated"
        self.stdout.write(self.style.SUCCESS(f"team {team.name} {verb}: {usernames}; {groups}"))
        if metrics_token:
            token = team_metrics_token_create(team=team)
            self.stdout.write(f"metrics token of {team.name} (shown once): {token}")
