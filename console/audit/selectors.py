"""Audit reads shared by the console page and the API: one filterset, newest first, narrowed to
what the reader may see (``audit_visible``)."""

from __future__ import annotations

import datetime as dt

import django_filters
from django import forms
from django.db.models import CharField, Q, QuerySet
from django.db.models.functions import Cast
from django.utils import timezone
from django_filters.fields import IsoDateTimeField

from console.audit.models import AuditEvent
from console.teams import access
from console.teams.models import Grant, Team
from processes.alerts.models import AlertChannel, AlertRule
from processes.models import Process, Query
from storage.models import CachedResult, Table


class MomentField(forms.Field):
    """An ISO date-time, or a date (the start of that day, or its end for ``end_of_day``)."""

    default_error_messages = {"invalid": "Enter a date (2026-11-24) or an ISO date-time."}

    def __init__(self, *args, end_of_day: bool = False, **kwargs) -> None:
        self.end_of_day = end_of_day
        super().__init__(*args, **kwargs)

    def to_python(self, value):
        if value in self.empty_values:
            return None
        value = str(value).strip()
        try:
            day = dt.date.fromisoformat(value)
        except ValueError:
            day = None
        if day is not None:  # a day: from its start, or to its end
            moment = dt.datetime.combine(day, dt.time.max if self.end_of_day else dt.time.min)
            return timezone.make_aware(moment, dt.UTC)
        try:
            moment = IsoDateTimeField().to_python(value)
            # In UTC: Postgres refuses offsets beyond ±15:59 that Python accepts (+16:42).
            return moment.astimezone(dt.UTC) if moment is not None else None
        except (forms.ValidationError, OverflowError, ValueError):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from None


class MomentFilter(django_filters.Filter):
    field_class = MomentField


class AuditFilter(django_filters.FilterSet):
    """``user``: a username (exact, any case); ``action``: a name, or a prefix ending in a dot
    (``process.``); ``target``: words found in the target's model, id or label; ``since``/``until``:
    an ISO date or date-time (``until`` a date means to its end)."""

    user = django_filters.CharFilter(method="filter_user")
    action = django_filters.CharFilter(method="filter_action")
    target = django_filters.CharFilter(method="filter_target")
    since = MomentFilter(field_name="at", lookup_expr="gte")
    until = MomentFilter(field_name="at", lookup_expr="lte", end_of_day=True)

    class Meta:
        model = AuditEvent
        fields = ["user", "action", "target", "since", "until"]

    def filter_user(self, queryset, name, value):
        return queryset.filter(username__iexact=value.strip())

    def filter_action(self, queryset, name, value):
        value = value.strip()
        return (
            queryset.filter(action__startswith=value)
            if value.endswith(".")
            else queryset.filter(action=value)
        )

    def filter_target(self, queryset, name, value):
        for word in value.split():
            queryset = queryset.filter(
                Q(target_model__icontains=word) | Q(target_id=word) | Q(target_label__icontains=word)
            )
        return queryset


def _ids(queryset: QuerySet) -> QuerySet:
    """The primary keys of ``queryset`` as text, as ``target_id`` keeps them (a subquery)."""
    return queryset.order_by().annotate(id_text=Cast("pk", CharField())).values("id_text")


def _targets(label: str, queryset: QuerySet) -> Q:
    return Q(target_model=label, target_id__in=_ids(queryset))


def audit_visible(user, events: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
    """The events ``user`` may read (issue 32). Admins, and everyone while no team exists: all of
        them. A team owner: their own, and those whose target is a table or process they see, a query
        of theirs, a cached result they may read, or one of the teams they own (and its grants, alert
    channels and alert rules).
        Anyone else: their own only."""
    if access.unrestricted(user):
        return events
    if not getattr(user, "is_authenticated", False):
        return events.none()
    condition = Q(user=user)
    owned = access.teams_managed(user)
    if owned.exists():
        condition |= (
            _targets(Table._meta.label, access.tables_visible_to(user))
            | _targets(Process._meta.label, access.visible(user, Process.objects.all(), via="table"))
            | _targets(Query._meta.label, access.queries_visible(user, Query.objects.all()))
            | _targets(
                CachedResult._meta.label, access.cached_results_visible(user, CachedResult.objects.all())
            )
            | _targets(Team._meta.label, owned)
            | _targets(Grant._meta.label, Grant.objects.filter(team__in=owned.values("pk")))
            | _targets(AlertChannel._meta.label, AlertChannel.objects.filter(team__in=owned.values("pk")))
            | _targets(AlertRule._meta.label, AlertRule.objects.filter(team__in=owned.values("pk")))
        )
    return events.filter(condition)


def audit_events(user=None) -> QuerySet[AuditEvent]:
    """Newest first: every event (``user`` None: the system's own reads), else what ``user`` may read."""
    events = AuditEvent.objects.order_by("-at", "-id")
    return events if user is None else audit_visible(user, events)


def audit_filter(params, user=None) -> AuditFilter:
    return AuditFilter(params, queryset=audit_events(user))
