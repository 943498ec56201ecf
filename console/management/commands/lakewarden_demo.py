from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from console.demo import demo_lakehouse_build


class Command(BaseCommand):
    help = "Build the demo lakehouse (Iceberg tables in the SQL catalog, two Delta tables) and register it."

    def add_arguments(self, parser):
        parser.add_argument("--scale", type=int, default=150, help="small commits per table (default 150)")
        parser.add_argument("--warehouse", default=None, help="folder (default LAKEWARDEN_WAREHOUSE)")

    def handle(self, *args, scale: int, warehouse: str | None, **options):
        if scale < 2:
            raise CommandError("--scale must be at least 2")
        root = Path(warehouse).resolve() if warehouse else Path(settings.LAKEWARDEN_WAREHOUSE)
        result = demo_lakehouse_build(
            warehouse=root, scale=scale, report=lambda line: self.stdout.write(f"  {line}")
        )
        for key, reason in result["failed"].items():
            self.stderr.write(f"could not register {key}: {reason}")
        self.stdout.write(
            self.style.SUCCESS(
                f"demo lakehouse at {root}: {len(result['built'])} tables built, {len(result['registered'])} newly registered"
            )
        )
        if result["failed"]:
            raise CommandError("some demo tables could not be registered")
