from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from processes.registry import PluginConflict, configured_factories, coordinators
from processes.seeding import plugin_configs_seed
from storage.errors import InvalidInput


class Command(BaseCommand):
    help = "Seed plugin configuration from conf/plugins/process-factories.yaml and check for conflicts."

    def add_arguments(self, parser):
        parser.add_argument(
            "--file", default=str(Path(settings.BASE_DIR) / "conf" / "plugins" / "process-factories.yaml")
        )
        parser.add_argument("--overwrite", action="store_true", help="update existing rows from the file")

    def handle(self, *args, file: str, overwrite: bool, **options):
        try:
            if Path(file).exists():
                for name, outcome in plugin_configs_seed(path=Path(file), overwrite=overwrite).items():
                    self.stdout.write(f"  {name}: {outcome}")
            pairs = coordinators(configured_factories())
        except (InvalidInput, PluginConflict) as error:
            raise CommandError(str(error)) from None
        for (fmt, action), configured in sorted(pairs.items()):
            self.stdout.write(f"  {fmt:8} {action:20} ← {configured.name}")
