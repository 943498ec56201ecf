"""The Teams page (issue 32): teams, their members and grants; admins manage every team, team
owners (operators in a team holding an owner grant) theirs, granting only within what their team
owns. Every change goes through console/teams/services.py (validated, audited)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Prefetch, Subquery
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from console.decorators import role_required
from console.roles import ADMIN, OPERATOR, has_role
from console.teams import services
from console.teams.access import catalogs_visible, forget, scope_owned, teams_managed
from console.teams.models import GRANT_ROLES, Grant, MetricsToken, Team, TeamMember
from storage.errors import InvalidInput, ServiceError
from storage.models import Catalog, Table


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150)


class GrantForm(forms.Form):
    role = forms.ChoiceField(choices=[(r, r) for r in GRANT_ROLES])
    catalog = forms.ModelChoiceField(queryset=Catalog.objects.all(), required=False)
    namespace = forms.CharField(
        max_length=255, required=False, help_text="within the catalog; blank: all of it"
    )
    table = forms.ModelChoiceField(queryset=Table.objects.all(), required=False, help_text="a table's id")

    def clean(self):
        data = super().clean()
        if not self.errors and (data.get("table") is None) == (data.get("catalog") is None):
            raise forms.ValidationError("give either a catalog (and maybe a namespace of it) or a table id")
        if data.get("table") is not None and data.get("namespace"):
            raise forms.ValidationError("a namespace goes with a catalog, not with a table")
        return data


def _teams(user):
    """The teams the page shows: those ``user`` manages, and those they belong to (read only)."""
    shown = Team.objects.filter(pk__in=teams_managed(user).values("pk")) | Team.objects.filter(
        memberships__user=user
    )
    made = MetricsToken.objects.filter(team=OuterRef("pk")).values("created_at")
    return (
        shown.distinct()
        .annotate(metrics_token_made=Subquery(made))
        .prefetch_related(
            Prefetch(
                "memberships", queryset=TeamMember.objects.select_related("user").order_by("user__username")
            ),
            Prefetch("grants", queryset=Grant.objects.select_related("catalog", "table")),
        )
    )


@require_GET
def team_list(request):
    managed = set(teams_managed(request.user).values_list("pk", flat=True))
    context = {
        "teams": list(_teams(request.user)),
        "managed": managed,
        "is_admin": has_role(request.user, ADMIN),
        "roles": GRANT_ROLES,
        "catalogs": catalogs_visible(request.user, Catalog.objects.order_by("name")),
    }
    return render(request, "console/teams.html", context)


def _managed_team(request, pk: int) -> Team:
    """The team ``pk`` if the user manages it: 403 for a team of theirs they do not manage, 404
    for any other (as for a missing one)."""
    team = teams_managed(request.user).filter(pk=pk).first()
    if team is not None:
        return team
    if Team.objects.filter(pk=pk, memberships__user=request.user).exists():
        raise PermissionDenied("Only an admin or an owner of this team manages it.")
    raise Http404("no such team")


def _done(request, work, success: str):
    try:
        work()
    except ServiceError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, success)
        forget(request.user)
    return redirect("console:team-list")


def _form_error(request, form: forms.Form):
    first = next(iter(form.errors.values()))[0]
    messages.error(request, first)
    return redirect("console:team-list")


@role_required(OPERATOR)
@require_POST
def team_member_add(request, pk: int):
    team = _managed_team(request, pk)
    form = MemberForm(request.POST)
    if not form.is_valid():
        return _form_error(request, form)
    username = form.cleaned_data["username"].strip()
    return _done(
        request, lambda: services.team_member_add(team=team, username=username), f"{username} joined {team}."
    )


@role_required(OPERATOR)
@require_POST
def team_member_remove(request, pk: int, member_pk: int):
    team = _managed_team(request, pk)
    membership = TeamMember.objects.filter(team=team, pk=member_pk).select_related("user").first()
    if membership is None:
        raise Http404("no such member")
    username = membership.user.get_username()
    return _done(
        request, lambda: services.team_member_remove(team=team, username=username), f"{username} left {team}."
    )


def _check_owned(request, team: Team, grant: Grant) -> None:
    if not has_role(request.user, ADMIN) and not scope_owned(team, grant):
        raise InvalidInput(f"{team} owns no catalog, namespace or table covering {grant.scope_label()}")


@role_required(OPERATOR)
@require_POST
def team_grant_add(request, pk: int):
    team = _managed_team(request, pk)
    form = GrantForm(request.POST)
    if not form.is_valid():
        return _form_error(request, form)
    data = form.cleaned_data
    wanted = Grant(team=team, role=data["role"], catalog=data["catalog"], namespace="", table=data["table"])
    wanted.namespace = (data.get("namespace") or "").strip(".") if wanted.catalog else ""

    def grant() -> None:
        _check_owned(request, team, wanted)
        scope = services.grant_scope(catalog=wanted.catalog, namespace=wanted.namespace, table=wanted.table)
        services.grant_set(team=team, role=wanted.role, **scope)

    return _done(request, grant, f"{team}: {wanted.role} on {wanted.scope_label()}.")


@role_required(OPERATOR)
@require_POST
def team_grant_remove(request, pk: int, grant_pk: int):
    team = _managed_team(request, pk)
    grant = Grant.objects.filter(team=team, pk=grant_pk).select_related("team", "catalog", "table").first()
    if grant is None:
        raise Http404("no such grant")
    label = grant.scope_label()

    def revoke() -> None:
        _check_owned(request, team, grant)
        services.grant_revoke(grant=grant)

    return _done(request, revoke, f"{team}: grant on {label} revoked.")


@role_required(OPERATOR)
@require_POST
def team_metrics_token(request, pk: int):
    """A new ``/metrics`` scrape token of the team (replacing its old one), shown once."""
    team = _managed_team(request, pk)
    token = services.team_metrics_token_create(team=team)
    messages.success(
        request,
        f"Metrics token of {team}: {token} (shown this once; a scrape sending "
        f"'Authorization: Bearer <token>' gets the series of {team}'s tables only).",
    )
    return redirect("console:team-list")
