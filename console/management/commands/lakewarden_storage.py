from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from storage.errors import ServiceError
from storage.models import StorageSource
from storage.results.plugin import StorageDescriptor
from storage.services import storage_backend_register


class Command(BaseCommand):
    help = (
        "Register a result storage from a YAML file "
        "(intermediate-result-storage: {type: ..., config: {...}}), the same way the console does."
    )

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("yaml_file")
        parser.add_argument("--quota-bytes", type=int, default=None)
        parser.add_argument("--default", action="store_true")

    def handle(self, *args, name: str, yaml_file: str, quota_bytes, default: bool, **options):
        try:
            descriptor = StorageDescriptor.from_yaml(Path(yaml_file).read_text())
        except (OSError, ValueError) as error:
            raise CommandError(f"{yaml_file}: {error}") from None
        try:
            backend = storage_backend_register(
                name=name,
                descriptor=descriptor,
                quota_bytes=quota_bytes,
                source=StorageSource.YAML,
                is_default=default,
            )
        except ServiceError as error:
            raise CommandError(error.message) from None
        self.stdout.write(self.style.SUCCESS(f"registered storage {backend.name} ({backend.type})"))
