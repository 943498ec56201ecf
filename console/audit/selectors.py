"""Audit reads shared by the console page and the API: one filterset, newest first."""

from __future__ import annotations

import datetime as dt

import django_filters
from django import forms
from django.db.models import Q, QuerySet
from django.utils import timezone
from django_filters.fields import IsoDateTimeField

from console.audit.models import AuditEvent


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


def audit_events() -> QuerySet[AuditEvent]:
    return AuditEvent.objects.order_by("-at", "-id")


def audit_filter(params) -> AuditFilter:
    return AuditFilter(params, queryset=audit_events())
