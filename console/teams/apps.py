from __future__ import annotations

from django.apps import AppConfig


class TeamsConfig(AppConfig):
    """Teams and grants: their models, admin pages and permission rules (console/teams)."""

    name = "console.teams"
    label = "teams"
    verbose_name = "Lakewarden teams and grants"
