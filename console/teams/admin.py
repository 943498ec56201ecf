"""Teams in the admin (admin role): members and grants inline. Every save is a POST the audit
middleware records with its fields (console/audit)."""

from __future__ import annotations

from django.contrib import admin

from console.admin_site import RoleModelAdmin
from console.teams.models import Grant, Team, TeamMember


class TeamMemberInline(admin.TabularInline):
    model = TeamMember
    extra = 0
    autocomplete_fields = ["user"]


class GrantInline(admin.TabularInline):
    model = Grant
    extra = 0
    autocomplete_fields = ["table"]


@admin.register(Team)
class TeamAdmin(RoleModelAdmin):
    list_display = ["name", "description", "sso_groups", "created_at"]
    search_fields = ["name", "description"]
    inlines = [TeamMemberInline, GrantInline]


@admin.register(Grant)
class GrantAdmin(RoleModelAdmin):
    list_display = ["team", "role", "catalog", "namespace", "table", "created_at"]
    list_filter = ["role", "team"]
    autocomplete_fields = ["table"]
