"""Record lookup: ``GET /api/v1/tables/{id}/records/?key=...&key=...&column=...&at=...``, or the
same as a JSON body ``POST``ed there (``{"key": [...], "column": ..., "at": ...}``): 1,000 keys do
not fit in a URL (gunicorn's request line, Django's 1,000 query parameters).

Which file (file group, partition) holds each record key at an instant, through the table's
``RecordIndex`` (storage/spec/record_index.py). Input is parsed here with clear 400s; the console's
lookup box (console/views/records.py) uses the same parsing and lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.response import Response

from console.api.base import ApiDefaults
from console.api.serializers import InstantSerializer
from console.roles import VIEWER
from console.teams.access import tables_scope
from storage import selectors
from storage.errors import Conflict, InvalidInput
from storage.models import Table
from storage.services import table_open
from storage.spec import FilterError, InstantNotFound, SpecError
from storage.spec.models import Instant
from storage.spec.record_index import MAX_KEYS, RecordIndexError, RecordLocation

MAX_KEY_LENGTH = 1000


@dataclass(frozen=True)
class RecordQuery:
    keys: tuple[str, ...] = ()
    column: str | None = None
    at: str | None = None


@dataclass
class RecordLookup:
    instant: Instant | None
    key_columns: tuple[str, ...]
    method: str
    files_read: int
    results: list[RecordLocation] = field(default_factory=list)


def record_query_parse(params: Any) -> RecordQuery:
    """``key`` (repeated; the console's box also sends ``keys``, one per line), ``column``, ``at``."""
    raw = list(params.getlist("key")) if hasattr(params, "getlist") else list(params.get("key") or [])
    raw += (params.get("keys") or "").splitlines()
    keys = tuple(dict.fromkeys(k.strip() for k in raw if k.strip()))
    if len(keys) > MAX_KEYS:
        raise InvalidInput(f"at most {MAX_KEYS} keys per lookup, not {len(keys)}", field="key")
    for key in keys:
        selectors.text_param(key, "key")
        if len(key) > MAX_KEY_LENGTH:
            raise InvalidInput(f"a key is longer than {MAX_KEY_LENGTH} characters", field="key")
    column = selectors.text_param((params.get("column") or "").strip(), "column") or None
    at = selectors.text_param((params.get("at") or "").strip(), "at") or None
    return RecordQuery(keys=keys, column=column, at=at)


def table_records(*, table: Table, query: RecordQuery) -> RecordLookup:
    """Tags ``query.keys``; spec errors become 400 (bad key, column, instant) or 409 (unreadable)."""
    if not query.keys:
        raise InvalidInput("give at least one key (?key=...)", field="key")
    try:
        spec_table = table_open(table)
        index = spec_table.record_index(query.column)
        timeline = spec_table.timeline()
        instant = timeline.get(query.at) if query.at else timeline.latest()
        results = index.tag(query.keys, instant)
        return RecordLookup(instant, index.key_columns, index.method, index.files_read, results)
    except RecordIndexError as error:
        raise InvalidInput(str(error), field=error.field) from error
    except InstantNotFound as error:
        raise InvalidInput(str(error), field="at") from error
    except FilterError as error:
        raise InvalidInput(str(error), field="column") from error
    except (SpecError, OSError) as error:
        raise Conflict(f"{table.name} cannot be read: {error}") from error


def lookup_data(lookup: RecordLookup) -> dict[str, Any]:
    return {
        "instant": InstantSerializer(lookup.instant).data if lookup.instant else None,
        "key_columns": list(lookup.key_columns),
        "method": lookup.method,
        "files_read": lookup.files_read,
        "records": [
            {
                "key": selectors.jsonable(r.key),
                "found": r.found,
                "file_path": r.file_path,
                "file_group_id": r.file_group_id,
                "partition": r.partition,
                "instant_id": None if r.instant_id is None else str(r.instant_id),
            }
            for r in lookup.results
        ],
    }


class RecordLocationSerializer(serializers.Serializer):
    key = serializers.JSONField(help_text="the key, typed as its column; a list for a composite key")
    found = serializers.BooleanField()
    file_path = serializers.CharField(allow_null=True)
    file_group_id = serializers.CharField(allow_null=True)
    partition = serializers.CharField(allow_null=True)
    instant_id = serializers.CharField(allow_null=True)


class RecordLookupSerializer(serializers.Serializer):
    instant = InstantSerializer(allow_null=True)
    key_columns = serializers.ListField(child=serializers.CharField())
    method = serializers.CharField()
    files_read = serializers.IntegerField()
    records = RecordLocationSerializer(many=True)


class RecordLookupRequestSerializer(serializers.Serializer):
    key = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        help_text=f"the record keys (at most {MAX_KEYS}); for a composite key the column values"
        " separated by commas",
    )
    column = serializers.CharField(required=False, allow_blank=True, help_text="as for GET")
    at = serializers.CharField(required=False, allow_blank=True, help_text="as for GET")


class TableRecordViewSet(ApiDefaults, viewsets.ViewSet):
    action_roles = {"create": VIEWER}  # a lookup, posted only because its keys outgrow a URL

    @extend_schema(
        operation_id="tables_records_list",
        parameters=[
            OpenApiParameter("table_pk", int, OpenApiParameter.PATH, description="the table's id"),
            OpenApiParameter(
                "key",
                str,
                many=True,
                required=True,
                description=(
                    f"a record key (repeat for several, at most {MAX_KEYS}); for a composite key the"
                    " column values separated by commas"
                ),
            ),
            OpenApiParameter(
                "column",
                str,
                description=(
                    "the key column(s), comma-separated; default: the table's record key (Hudi record"
                    " key fields, Iceberg identifier fields). Required for Delta"
                ),
            ),
            OpenApiParameter(
                "at",
                str,
                description="instant id (Iceberg snapshot id, Delta version, Hudi instant time); latest when absent",
            ),
        ],
        responses={200: RecordLookupSerializer},
        description="Which data file (file group, partition) holds each record key at an instant; a"
        " key absent or deleted there has found=false.",
    )
    def list(self, request, table_pk=None):
        table = get_object_or_404(selectors.table_list(tables=tables_scope(request.user)), pk=table_pk)
        query = record_query_parse(request.query_params)
        return Response(lookup_data(table_records(table=table, query=query)))

    @extend_schema(
        operation_id="tables_records_lookup",
        parameters=[OpenApiParameter("table_pk", int, OpenApiParameter.PATH, description="the table's id")],
        request=RecordLookupRequestSerializer,
        responses={200: RecordLookupSerializer},
        description="The lookup of GET with the keys in a JSON body, for more keys than a URL holds;"
        " viewers may post it (it changes nothing).",
    )
    def create(self, request, table_pk=None):
        table = get_object_or_404(selectors.table_list(tables=tables_scope(request.user)), pk=table_pk)
        data = RecordLookupRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        query = record_query_parse(data.validated_data)
        return Response(lookup_data(table_records(table=table, query=query)))
