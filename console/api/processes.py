"""REST API for processes and plugins (``/api/v1/processes/``, ``/api/v1/plugins/``)."""

from __future__ import annotations

import django_filters
from django import forms
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from console.api.base import ApiDefaults
from console.api.schema import CONFLICT
from console.api.serializers import mask_secrets
from console.permissions import table_for_operation
from console.roles import OPERATOR
from console.teams.access import visible
from processes import selectors, services
from processes.models import Process, ProcessStatus
from processes.plugin import known_actions
from processes.registry import configured_factories
from storage.models import Table


class ProcessSerializer(serializers.ModelSerializer):
    table_name = serializers.CharField(source="table.name", read_only=True)
    progress_percent = serializers.IntegerField(read_only=True)
    duration_seconds = serializers.FloatField(read_only=True, allow_null=True)
    # null for processes the scheduler started (or whose user was deleted)
    requested_by = serializers.CharField(
        source="requested_by.username", default=None, read_only=True, allow_null=True
    )

    class Meta:
        model = Process
        fields = [
            "id",
            "table",
            "table_name",
            "action",
            "factory",
            "status",
            "trigger",
            "params",
            "preview",
            "summary",
            "failure",
            "attempt",
            "max_retries",
            "retry_of",
            "requested_by",
            "progress_done",
            "progress_total",
            "progress_percent",
            "progress_message",
            "cancel_requested",
            "worker",
            "not_before",
            "created_at",
            "started_at",
            "heartbeat_at",
            "finished_at",
            "duration_seconds",
        ]


class ProcessCreateSerializer(serializers.Serializer):
    table = serializers.PrimaryKeyRelatedField(queryset=Table.objects.all())
    action = serializers.CharField(max_length=64)
    params = serializers.DictField(required=False, default=dict)


class ProcessPreviewRequestSerializer(serializers.Serializer):
    action = serializers.CharField(max_length=64, help_text="the action, as for a process submission")
    params = serializers.DictField(
        required=False, default=dict, help_text="the parameters, as for a submission"
    )


class ProcessPreviewSerializer(serializers.Serializer):
    """What ``POST /api/v1/tables/{id}/processes/preview/`` answers (nothing is written)."""

    action = serializers.CharField()
    factory = serializers.CharField()
    available = serializers.BooleanField(help_text="false when the action's factory offers no preview")
    groups = serializers.IntegerField(help_text="file groups (rewrite), manifests, columns... planned")
    files_in = serializers.IntegerField(help_text="files read")
    bytes_in = serializers.IntegerField()
    files_out = serializers.IntegerField(help_text="files expected to be written")
    bytes_out = serializers.IntegerField(help_text="bytes expected to be written")
    objects_to_delete = serializers.IntegerField(help_text="objects the process deletes from storage")
    bytes_to_delete = serializers.IntegerField()
    details = serializers.DictField(
        help_text="action-specific facts (per-group rows, snapshots to expire...)"
    )
    notes = serializers.ListField(child=serializers.CharField())
    health_before = serializers.IntegerField(
        required=False, help_text="health score now (0 healthy .. 100 needs attention), from the kept facts"
    )
    health_after = serializers.IntegerField(
        required=False, help_text="health score predicted after the process"
    )
    facts_before = serializers.DictField(required=False)
    facts_after = serializers.DictField(required=False)
    reasons_before = serializers.ListField(child=serializers.CharField(), required=False)
    reasons_after = serializers.ListField(child=serializers.CharField(), required=False)


class KillSerializer(serializers.Serializer):
    grace_seconds = serializers.IntegerField(required=False, min_value=0, max_value=3600)


def _actions() -> set[str]:
    """Actions registered, or served by an installed factory (enabled or not)."""
    served = {action for c in configured_factories(include_disabled=True) for _, action in c.factory.pairs()}
    return set(known_actions()) | served


class ProcessFilterForm(forms.Form):
    """The list's filters, strict: an unknown value is a 400 naming the allowed ones, never ignored.
    The value goes into the message as a parameter: django-filter %-formats every message, so a
    ``%`` written into it was a 500 (``?action=%``, issue 29 item 12). ``history`` is the processes
    the user may see (the filter set gives it): an action is looked up there, never in another
    team's history."""

    history = Process.objects.none()

    def clean_active(self):
        value = self.cleaned_data.get("active")
        raw = (self.data.get("active") or "").strip()
        if value is None and raw:
            raise forms.ValidationError("%(value)r is not true or false", params={"value": raw})
        return value

    def clean_action(self):
        action = self.cleaned_data.get("action")
        # An action of an uninstalled plugin that is still in the history is a fine filter too.
        if action and action not in _actions() and not self.history.filter(action=action).exists():
            raise forms.ValidationError(
                "%(value)r is not an action; actions are %(actions)s",
                params={"value": action, "actions": ", ".join(sorted(_actions()))},
            )
        return action


class ProcessNameFilter(selectors.ProcessFilter):
    """The shared filters and the table's name: part of it, in any case (``?table_name=orders``
    finds demo.orders), for operators who know a table by name rather than by id. The console's
    list uses it as it is (an invalid value is left out); the API's list through ``ProcessFilter``."""

    table_name = django_filters.CharFilter(
        field_name="table__name",
        lookup_expr="icontains",
        label="Table name contains (case-insensitive)",
    )


class ProcessFilter(ProcessNameFilter):
    status = django_filters.MultipleChoiceFilter(
        choices=ProcessStatus.choices,
        error_messages={
            "invalid_choice": f"%(value)r is not a status; statuses are {', '.join(ProcessStatus.values)}"
        },
    )

    class Meta(ProcessNameFilter.Meta):
        form = ProcessFilterForm

    @property
    def form(self):
        form = super().form
        form.history = self.queryset  # already narrowed to the user's teams (the view's queryset)
        return form


class ProcessViewSet(ApiDefaults, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = ProcessSerializer
    queryset = Process.objects.none()
    filter_backends = [DjangoFilterBackend]
    filterset_class = ProcessFilter
    write_role = OPERATOR
    action_roles = {"cancel": OPERATOR, "kill": OPERATOR, "retry": OPERATOR, "create": OPERATOR}

    def get_queryset(self):
        return visible(self.request.user, selectors.process_list(), via="table")  # console/teams

    @extend_schema(request=ProcessCreateSerializer, responses={201: ProcessSerializer, 409: CONFLICT})
    def create(self, request):
        data = ProcessCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        table_for_operation(request, data.validated_data["table"])
        process = services.process_create(user=request.user, **data.validated_data)
        return Response(ProcessSerializer(process).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: ProcessSerializer, 409: CONFLICT})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        return Response(ProcessSerializer(services.process_cancel(process=self.get_object())).data)

    @extend_schema(request=KillSerializer, responses={200: ProcessSerializer, 409: CONFLICT})
    @action(detail=True, methods=["post"])
    def kill(self, request, pk=None):
        data = KillSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        process = services.process_kill(
            process=self.get_object(), grace_seconds=data.validated_data.get("grace_seconds")
        )
        return Response(ProcessSerializer(process).data)

    @extend_schema(request=None, responses={201: ProcessSerializer, 409: CONFLICT})
    @action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        retry = services.process_retry(process=self.get_object(), user=request.user)
        return Response(ProcessSerializer(retry).data, status=status.HTTP_201_CREATED)


class TriggerStrategySerializer(serializers.Serializer):
    format = serializers.CharField()
    action = serializers.CharField()
    interval_seconds = serializers.FloatField()
    on_new_snapshot = serializers.BooleanField()
    parallelism = serializers.IntegerField()


class PluginSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    enabled = serializers.BooleanField()
    priority = serializers.IntegerField()
    properties = serializers.DictField()
    properties_schema = serializers.DictField(help_text="JSON Schema of the properties, with defaults")
    params_schema = serializers.DictField(help_text="JSON Schema of the parameters a run-now may pass")
    strategies = TriggerStrategySerializer(many=True)


class PluginViewSet(ApiDefaults, viewsets.ViewSet):
    @extend_schema(responses={200: PluginSerializer(many=True)})
    def list(self, request):
        plugins = []
        for configured in configured_factories(include_disabled=True):
            factory = configured.factory
            strategies = []
            for fmt, action_name in sorted(factory.pairs()):
                strategy = factory.trigger_strategy(fmt, action_name)
                strategies.append(
                    {
                        "format": fmt,
                        "action": action_name,
                        "interval_seconds": strategy.interval.total_seconds(),
                        "on_new_snapshot": strategy.on_new_snapshot,
                        "parallelism": strategy.parallelism,
                    }
                )
            plugins.append(
                {
                    "name": configured.name,
                    "description": factory.description,
                    "enabled": configured.enabled,
                    "priority": configured.priority,
                    "properties": mask_secrets(factory.properties),
                    "properties_schema": type(factory).properties_schema,
                    "params_schema": type(factory).params_schema,
                    "strategies": strategies,
                }
            )
        return Response(PluginSerializer(plugins, many=True).data)
