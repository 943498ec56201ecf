"""REST API of the trash: a process's trash batch (``GET /api/v1/processes/{id}/trash/``, viewer),
its restore (``POST /api/v1/processes/{id}/restore/``, operator) and the list of batches
(``GET /api/v1/trash/?table=&state=``, viewer), all from the bookkeeping, never a store listing."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api.base import ApiDefaults
from console.api.schema import CONFLICT
from console.decorators import visible_or_404
from console.roles import OPERATOR
from console.teams.access import visible
from processes.models import Process
from processes.trash import process_trash, process_trash_restore
from storage.errors import InvalidInput
from storage.trash.models import TrashBatch, TrashState


class TrashBatchSerializer(serializers.ModelSerializer):
    table_name = serializers.CharField(source="table.name", read_only=True)
    process = serializers.IntegerField(source="process_id", read_only=True)

    class Meta:
        model = TrashBatch
        fields = [
            "id",
            "table",
            "table_name",
            "process",
            "action",
            "location",
            "state",
            "created_at",
            "expires_at",
            "state_changed_at",
            "state_changed_by",
            "file_count",
            "total_bytes",
            "kinds",
            "failed_count",
        ]


class ProcessTrashView(ApiDefaults, APIView):
    @extend_schema(responses={200: TrashBatchSerializer})
    def get(self, request, pk: int):
        visible_or_404(request, Process.objects.all(), via="table", pk=pk)  # console/teams
        return Response(TrashBatchSerializer(process_trash(process_id=pk)).data)


class ProcessTrashRestoreView(ApiDefaults, APIView):
    write_role = OPERATOR

    @extend_schema(request=None, responses={200: TrashBatchSerializer, 409: CONFLICT})
    def post(self, request, pk: int):
        visible_or_404(request, Process.objects.all(), via="table", action="operate", pk=pk)
        batch = process_trash_restore(process_id=pk, user=request.user)
        return Response(TrashBatchSerializer(batch).data)


class TrashBatchListView(ApiDefaults, generics.ListAPIView):
    serializer_class = TrashBatchSerializer

    def get_queryset(self):
        batches = visible(self.request.user, TrashBatch.objects.select_related("table"), via="table")
        batches = batches.order_by("-created_at", "-pk")
        table, state = self.request.query_params.get("table"), self.request.query_params.get("state")
        if table:
            if not table.isdigit():
                raise InvalidInput(f"table={table!r} is not a table id", field="table")
            batches = batches.filter(table_id=int(table))
        if state:
            if state not in TrashState.values:
                raise InvalidInput(
                    f"{state!r} is not a state; states are {', '.join(TrashState.values)}", field="state"
                )
            batches = batches.filter(state=state)
        return batches
