"""The stored health score (issue 34): the tables list and the overview sort by the score kept on
the table row, so it must equal the score computed now wherever its inputs change: a refresh, a
process's commit or failure (tests/processes/test_fresh_figures.py), a factory switched
(tests/processes/test_health_remedies.py) and the passing of time (the health beat)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from processes.health import health_scores, health_store, tables_by_health
from processes.models import Process, ProcessStatus
from processes.services import transition
from processes.tasks import store_health_task
from storage.models import Table
from storage.refresh import refresh_facts
from tests.storage.test_active_refresh import append_delta

pytestmark = pytest.mark.django_db


def _stored(table: Table) -> int | None:
    return Table.objects.values_list("health_score", flat=True).get(pk=table.pk)


def _computed(table: Table) -> int:
    return health_scores(timezone.now(), [table.pk])[table.pk]


def test_a_registration_and_a_refresh_store_the_score_of_the_tables_facts(make_delta):
    table, path = make_delta(files=12)
    # 40 x 12/12 x 12/20 + 15 x 12/10,000 + 10 x 12/500 + 20 x 12/50 (never maintained)
    assert _stored(table) == _computed(table) == 29

    append_delta(path, 1000)  # another writer's commit: 13 small files
    refresh_facts(table.pk)

    assert (
        _stored(table)
        == _computed(table)
        == round(40 * 13 / 20 + 15 * 13 / 10_000 + 10 * 13 / 500 + 20 * 13 / 50)
    )
    assert _stored(table) == 31


def test_a_failed_process_counts_in_the_stored_score_at_once():
    table = Table.objects.create(name="t", format="delta", location="/lake/t", file_count=50)
    assert _stored(table) == 20  # never maintained, 50 files: the whole staleness weight
    process = Process.objects.create(table=table, action="rewrite", factory="f", status=ProcessStatus.RUNNING)

    transition(process, ProcessStatus.FAILED, failure="boom")

    assert _stored(table) == _computed(table) == 25  # 15 x 1/3 failures


def test_the_health_beat_brings_stored_scores_to_now_and_writes_only_those_that_moved(monkeypatch):
    now = timezone.now()
    table = Table.objects.create(
        name="t",
        format="delta",
        location="/lake/t",
        file_count=100,
        last_maintenance_at=now - dt.timedelta(days=3),
    )
    fresh = Table.objects.create(name="u", format="delta", location="/lake/u", file_count=100)
    assert (_stored(table), _stored(fresh)) == (2, 20)  # 20 x 3/30 days; never maintained

    monkeypatch.setattr(timezone, "now", lambda: now + dt.timedelta(days=15))
    assert store_health_task() == 1  # only the maintained table's score moved with time

    assert _stored(table) == _computed(table) == 12  # 20 x 18/30 days
    assert store_health_task() == 0


def test_bulk_rows_are_scored_by_a_pass_over_every_table_in_batches(monkeypatch):
    monkeypatch.setattr("processes.health.STORE_BATCH", 3)
    tables = Table.objects.bulk_create(
        Table(name=f"t{i}", format="iceberg", location=f"/lake/t{i}", file_count=10 * i) for i in range(8)
    )
    assert {_stored(table) for table in tables} == {None}  # a bulk insert stores nothing

    assert health_store() == 8  # unscored rows are written, a score of 0 too
    assert [_stored(table) for table in tables] == [_computed(table) for table in tables]
    assert [_stored(table) for table in tables] == [0, 4, 8, 12, 16, 20, 20, 20]


def test_the_overviews_stored_ranking_is_the_live_ranking_once_stored():
    for i, files in enumerate((10, 400, 60, 0)):
        Table.objects.create(
            name=f"t{i}", format="delta", location=f"/lake/t{i}", file_count=files, small_file_count=files
        )

    live = [(h.table.name, h.score, h.reasons) for h in tables_by_health(limit=None)]
    stored = [(h.table.name, h.score, h.reasons) for h in tables_by_health(limit=None, stored=True)]

    assert stored == live
    assert [(name, score) for name, score, _ in stored] == [("t1", 20), ("t2", 20), ("t0", 4), ("t3", 0)]
