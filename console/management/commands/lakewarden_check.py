from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from console.preflight import missing_services


class Command(BaseCommand):
    help = "Check that PostgreSQL and the Celery broker answer; one clear line per missing service."

    requires_system_checks = []

    def handle(self, *args, **options):
        problems = missing_services()
        if problems:
            raise CommandError("\n".join(problems))
        self.stdout.write("PostgreSQL and the broker answer.")
