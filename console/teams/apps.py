from __future__ import annotations

from django.apps import AppConfig


class TeamsConfig(AppConfig):
    """Teams and grants: their models, admin pages and permission rules (console/teams)."""

    name = "console.teams"
    label = "teams"
    verbose_name = "Lakewarden teams and grants"

    def ready(self) -> None:
        # The query planner, the worker and the cached results (storage, processes) ask who may
        # read which table through storage.access, never importing console: the rule is given here.
        from console.teams import access
        from storage.access import table_access_register, team_tables_register

        table_access_register(access.tables_scope)
        team_tables_register(access.team_tables)
