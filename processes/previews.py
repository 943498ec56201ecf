"""Plan previews as the console shows and the Process row keeps them: the factory's ``Preview``
with the table's health score now and the one predicted after the process.

The prediction starts from the facts the table row keeps (files, small files, instants: refreshed
with the table) and applies the preview's ``details``: ``data_files_removed``/``data_files_added``,
``small_files_removed``/``small_files_added``, ``snapshots_added``/``snapshots_removed`` (a factory
that does not set them changes no fact), with the table maintained now (a successful process sets
``last_maintenance_at``). The score is ``storage.health.table_health``, the landing page's, with
the remedies of the table's format (what its enabled actions can improve)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from django.utils import timezone

from processes.health import format_remedies, remedies_of
from processes.models import Process, ProcessStatus
from processes.plugin import Preview
from storage.health import TableFacts, table_health
from storage.models import Table
from storage.selectors import jsonable

#: Failures counted by the health score (as the landing page counts them).
FAILURE_WINDOW = dt.timedelta(days=7)


def predicted_facts(facts: TableFacts, details: dict[str, Any]) -> TableFacts:
    """The facts after a process whose preview has ``details`` (never below zero)."""

    def count(key: str) -> int:
        value = details.get(key, 0)
        return int(value) if isinstance(value, int | float) else 0

    files = max(0, facts.file_count - count("data_files_removed") + count("data_files_added"))
    small = min(
        files, max(0, facts.small_file_count - count("small_files_removed") + count("small_files_added"))
    )
    instants = facts.instant_count + count("snapshots_added") - count("snapshots_removed")
    compactable = facts.compactable_file_count
    if compactable is not None:  # the files a compaction adds are one per group: not compactable
        compactable = min(small, max(0, compactable - count("small_files_removed")))
    return TableFacts(files, small, max(0, instants), compactable)


def health_prediction(table: Table, preview: Preview) -> dict[str, Any]:
    """The health score before and the predicted one after, with the facts each reads."""
    now = timezone.now()
    failures = Process.objects.filter(
        table=table, status=ProcessStatus.FAILED, created_at__gte=now - FAILURE_WINDOW
    ).count()
    before = TableFacts(
        table.file_count, table.small_file_count, table.instant_count, table.compactable_file_count
    )
    after = predicted_facts(before, preview.details)
    remedies = remedies_of(format_remedies(), table.format)
    health_before = table_health(before, table.last_maintenance_at, failures, now, remedies)
    health_after = table_health(after, now, failures, now, remedies)
    return {
        "health_before": health_before.score,
        "health_after": health_after.score,
        "facts_before": dataclasses.asdict(before),
        "facts_after": dataclasses.asdict(after),
        "reasons_before": health_before.reasons,
        "reasons_after": health_after.reasons,
    }


def preview_record(table: Table, preview: Preview | None) -> dict[str, Any]:
    """What the API answers and the Process row keeps (``available`` False: no preview offered)."""
    if preview is None:
        return {
            "available": False,
            **dataclasses.asdict(Preview()),
            "notes": ["this action offers no preview"],
        }
    return jsonable({"available": True, **dataclasses.asdict(preview), **health_prediction(table, preview)})
