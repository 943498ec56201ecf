"""Teams in the admin (admin role): members and grants inline. Every save and delete goes through
the services the API and the management commands call (console/teams/services.py), so each
change is validated and audited the same way."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from console.admin_site import RoleModelAdmin
from console.roles import ADMIN, has_role
from console.teams import services
from console.teams.models import Grant, Team, TeamMember
from storage.errors import ServiceError


class TeamForm(forms.ModelForm):
    class Meta:
        model = Team
        fields = ["name", "description", "sso_groups"]

    def clean_sso_groups(self):
        groups = self.cleaned_data.get("sso_groups") or []
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise forms.ValidationError('a list of group names, e.g. ["data-eng", "cn=analysts,dc=example"]')
        return groups


class _RoleInline(admin.TabularInline):
    """An inline whose permissions follow the admin role, as RoleModelAdmin's do (Django's
    per-model permissions left the inlines read-only, or hidden, for admin-role users)."""

    extra = 0

    def has_view_permission(self, request, obj=None) -> bool:
        return has_role(request.user, ADMIN)

    def has_add_permission(self, request, obj=None) -> bool:
        return has_role(request.user, ADMIN)

    def has_change_permission(self, request, obj=None) -> bool:
        return has_role(request.user, ADMIN)

    def has_delete_permission(self, request, obj=None) -> bool:
        return has_role(request.user, ADMIN)


class TeamMemberInline(_RoleInline):
    model = TeamMember
    autocomplete_fields = ["user"]
    readonly_fields = ["source"]


class GrantInline(_RoleInline):
    model = Grant
    autocomplete_fields = ["table"]


def _grant_save(form, team: Team) -> None:
    """A grant form's row through the services: a changed scope (or team) is the old grant revoked
    and the new one set."""
    data = form.cleaned_data
    scope = services.grant_scope(
        catalog=data.get("catalog"), namespace=data.get("namespace") or "", table=data.get("table")
    )
    if form.instance.pk is not None and {"team", "catalog", "namespace", "table"} & set(form.changed_data):
        services.grant_revoke(grant=Grant.objects.get(pk=form.instance.pk))
    grant, _ = services.grant_set(team=team, role=data["role"], **scope)
    form.instance = grant


def _inline_save(formset, team: Team) -> None:
    # what the admin's change message reads (formset.save() would have set them)
    formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
    for form in formset.deleted_forms:
        if form.instance.pk is None:
            continue
        if isinstance(form.instance, TeamMember):
            services.team_member_remove(team=team, username=form.instance.user.get_username())
        else:
            services.grant_revoke(grant=form.instance)
        formset.deleted_objects.append(form.instance)
    for form in formset.forms:
        if form in formset.deleted_forms or not form.has_changed():
            continue
        if formset.model is TeamMember:
            if form.instance.pk is not None and "user" in form.changed_data:
                before = TeamMember.objects.get(pk=form.instance.pk).user.get_username()
                services.team_member_remove(team=team, username=before)
            form.instance = services.team_member_add(
                team=team, username=form.cleaned_data["user"].get_username()
            )
        else:
            _grant_save(form, team)
        formset.new_objects.append(form.instance)


@admin.register(Team)
class TeamAdmin(RoleModelAdmin):
    form = TeamForm
    list_display = ["name", "description", "sso_groups", "created_at"]
    search_fields = ["name", "description"]
    inlines = [TeamMemberInline, GrantInline]

    def get_readonly_fields(self, request, obj=None):
        return ["name"] if obj is not None else []  # the commands and the API know a team by name

    def save_model(self, request, obj, form, change):
        team, _ = services.team_set(name=obj.name, description=obj.description, sso_groups=obj.sso_groups)
        obj.pk = team.pk

    def save_formset(self, request, form, formset, change):
        try:
            _inline_save(formset, form.instance)
        except ServiceError as error:
            messages.error(request, error.message)

    def delete_model(self, request, obj):
        services.team_delete(team=obj)

    def delete_queryset(self, request, queryset):
        for team in queryset:
            services.team_delete(team=team)


@admin.register(Grant)
class GrantAdmin(RoleModelAdmin):
    list_display = ["team", "role", "catalog", "namespace", "table", "created_at"]
    list_filter = ["role", "team"]
    autocomplete_fields = ["table"]

    def save_model(self, request, obj, form, change):
        _grant_save(form, form.cleaned_data["team"])
        obj.pk = form.instance.pk

    def delete_model(self, request, obj):
        services.grant_revoke(grant=obj)

    def delete_queryset(self, request, queryset):
        for grant in queryset.select_related("team", "catalog", "table"):
            services.grant_revoke(grant=grant)
