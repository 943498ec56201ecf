from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from devtools.demo import LAKE_CATALOG, REST_CATALOG, demo_lakehouse_build, demo_lakehouse_build_s3
from devtools.demo_teams import demo_teams_build
from devtools.seaweedfs import DEMO_STORAGES, PortsBusy, demo_storage, demo_store


class Command(BaseCommand):
    help = (
        "Build the demo lakehouse and register it: in the local warehouse (Iceberg tables in the SQL "
        "catalog, two Delta tables, a Lance and a Paimon table when their plugins are installed), or "
        "with --storage s3 / LAKEWARDEN_DEMO_STORAGE=s3 on a SeaweedFS under var/seaweedfs (Iceberg "
        "tables in its REST catalog, Delta, Lance and Paimon tables on s3://lake/demo). demo.events "
        "is left to operators (table property manual-actions), with work for a first Preview."
    )

    def add_arguments(self, parser):
        parser.add_argument("--scale", type=int, default=150, help="small commits per table (default 150)")
        parser.add_argument("--warehouse", default=None, help="folder (default LAKEWARDEN_WAREHOUSE)")
        parser.add_argument(
            "--storage",
            choices=DEMO_STORAGES,
            default=None,
            help="local or s3 (default LAKEWARDEN_DEMO_STORAGE)",
        )
        parser.add_argument(
            "--no-teams",
            action="store_true",
            help="skip the two demo teams (team-iceberg with alice, team-delta with bob); with "
            "teams, each sees only their team's catalog",
        )

    def handle(
        self, *args, scale: int, warehouse: str | None, storage: str | None, no_teams=False, **options
    ):
        if scale < 2:
            raise CommandError("--scale must be at least 2")
        report = lambda line: self.stdout.write(f"  {line}")  # noqa: E731
        try:
            on_s3 = demo_storage(storage) == "s3"
        except ValueError as error:
            raise CommandError(str(error)) from None
        if on_s3:
            result, where = self._build_on_seaweedfs(scale, report)
        else:
            root = Path(warehouse).resolve() if warehouse else Path(settings.LAKEWARDEN_WAREHOUSE)
            result, where = demo_lakehouse_build(warehouse=root, scale=scale, report=report), str(root)
        for key, reason in result["failed"].items():
            self.stderr.write(f"could not register {key}: {reason}")
        self.stdout.write(
            self.style.SUCCESS(
                f"demo lakehouse at {where}: {len(result['built'])} tables built, "
                f"{len(result['registered'])} newly registered"
            )
        )
        if result["failed"]:
            raise CommandError("some demo tables could not be registered")
        if not no_teams:
            self._teams((REST_CATALOG, LAKE_CATALOG) if on_s3 else ("demo", "warehouse-delta"), report)

    def _teams(self, catalogs: tuple[str, str], report) -> None:
        """Two teams, a user in each, their passwords printed as lakewarden_admin prints the admin's."""
        password_file = Path(settings.LAKEWARDEN_VAR_DIR) / "demo-users"
        for username, password in demo_teams_build(
            catalogs=catalogs, password_file=password_file, report=report
        ).items():
            if password:
                self.stdout.write(self.style.SUCCESS(f"created user {username!r} with password: {password}"))
            else:
                self.stdout.write(f"user {username!r} exists; password unchanged (see {password_file})")
        self.stdout.write(
            f"(passwords also in {password_file}) Sign in as each to see teams keep their tables apart; "
            "the admin sees everything."
        )

    def _build_on_seaweedfs(self, scale: int, report) -> tuple[dict, str]:
        """Start the demo SeaweedFS for the build, stop it after (``lakewarden_serve`` runs it)."""
        try:
            store = demo_store(settings.LAKEWARDEN_VAR_DIR)
            ports = store.ports
            self.stdout.write(
                f"starting SeaweedFS under {store.folder}: S3 on :{ports['s3']}, Iceberg REST on :{ports['iceberg']}"
            )
            store.start()
        except (PortsBusy, ValueError) as error:
            raise CommandError(str(error)) from None
        try:
            result = demo_lakehouse_build_s3(
                s3_properties=store.s3_properties(),
                rest_properties=store.rest_catalog_properties(),
                scale=scale,
                report=report,
            )
        finally:
            store.stop(timeout=30)
        return result, f"{store.endpoint} (s3://lake/demo, REST catalog {store.rest_uri})"
