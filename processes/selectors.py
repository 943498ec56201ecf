"""Process reads shared by the console and the API (one filterset for both lists)."""

from __future__ import annotations

from dataclasses import dataclass

import django_filters
from django.db.models import F, QuerySet

from processes.models import ACTIVE_STATUSES, Process, ProcessStatus
from processes.plugin import known_actions
from processes.registry import configured_factories


class ProcessFilter(django_filters.FilterSet):
    table = django_filters.NumberFilter(field_name="table_id")
    action = django_filters.CharFilter()
    status = django_filters.MultipleChoiceFilter(choices=ProcessStatus.choices)
    active = django_filters.BooleanFilter(method="filter_active")

    class Meta:
        model = Process
        fields = ["table", "action", "status", "active"]

    def filter_active(self, queryset, name, value):
        return (
            queryset.filter(status__in=ACTIVE_STATUSES)
            if value
            else queryset.exclude(status__in=ACTIVE_STATUSES)
        )


def process_list() -> QuerySet[Process]:
    return Process.objects.select_related("table", "requested_by").defer("table__metrics").order_by("-id")


#: What a row of a console process list shows (templatetags ``process_rows``), nothing more: the
#: params and summary JSON, the user and the table's other columns stay in the database.
ROW_FIELDS = (
    "id",
    "table_id",
    "action",
    "status",
    "trigger",
    "failure",
    "attempt",
    "progress_done",
    "progress_total",
    "progress_message",
    "created_at",
    "started_at",
    "heartbeat_at",
    "finished_at",
)


def process_list_rows() -> QuerySet[Process]:
    """The console's process lists: ``process_list()`` loading only :data:`ROW_FIELDS`, and the
    table's name as ``table_name`` (no Table object per row)."""
    return Process.objects.only(*ROW_FIELDS).annotate(table_name=F("table__name")).order_by("-id")


@dataclass
class ProcessPage:
    """Newest first, keyset-paged by id: the hundredth page costs what the first does."""

    items: list[Process]
    older: int | None  # pass as ?before= for the next page
    first: bool


def process_page(queryset: QuerySet[Process], before: str | None, size: int = 50) -> ProcessPage:
    try:
        before_id = int(before) if before else None
    except ValueError:
        before_id = None
    if before_id is not None:
        queryset = queryset.filter(id__lt=before_id)
    items = list(queryset.order_by("-id")[: size + 1])
    older = items[size - 1].pk if len(items) > size else None
    return ProcessPage(items[:size], older, before_id is None)


def actions_for_format(table_format: str) -> list[dict]:
    """The actions an operator can run now on a table of this format, with their params schema."""
    offered = []
    for configured in configured_factories():
        actions = configured.factory.supported_actions().get(table_format, set())
        for action in sorted(actions):
            offered.append(
                {
                    "action": action,
                    "factory": configured.name,
                    "description": known_actions().get(action, ""),
                    "params_schema": type(configured.factory).params_schema,
                }
            )
    return offered


def declined_actions_for_format(table_format: str) -> list[dict[str, str]]:
    """Actions enabled factories say they do not offer for this format, with the reason."""
    declined: list[dict[str, str]] = []
    for configured in configured_factories():
        for action, reason in sorted(configured.factory.declined_actions().get(table_format, {}).items()):
            if not any(d["action"] == action for d in declined):
                declined.append({"action": action, "factory": configured.name, "reason": reason})
    return declined
