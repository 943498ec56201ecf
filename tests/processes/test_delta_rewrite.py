"""The Delta rewrite (compaction) process on real deltalake tables."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable, write_deltalake

from processes.maintenance.delta.rewrite import DeltaRewriteProcess
from processes.models import ProcessStatus
from tests.processes.conftest import delta_files, delta_read, delta_rows, multiset, staging_root

pytestmark = pytest.mark.django_db(transaction=True)


def last_commit(path) -> list[dict]:
    log = sorted((path / "_delta_log").glob("*.json"))[-1]
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_small_files_are_compacted_without_a_data_change(make_delta, run_now):
    console_table, path = make_delta(files=120, partitioned=True)
    before, version = multiset(delta_read(path)), DeltaTable(str(path)).version()

    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 120
    assert process.summary["files_out"] == 2 == process.summary["engines"]["arrow"]
    assert len(delta_files(path)) == 2
    assert DeltaTable(str(path)).version() == version + 1 == process.summary["version"]
    assert multiset(delta_read(path)) == before
    assert multiset(DeltaTable(str(path)).to_pyarrow_table().cast(delta_read(path).schema)) == before
    actions = last_commit(path)
    info = actions[0]["commitInfo"]  # a compaction, as Delta Spark and delta-rs record it
    assert info["operation"] == "OPTIMIZE" and info["readVersion"] == version
    assert info["operationMetrics"]["numRemovedFiles"] == "120" and info["lakewarden.process-id"] == str(
        process.pk
    )
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    assert len(adds) == 2 and len(removes) == 120
    assert not any(a["dataChange"] for a in adds + removes)
    stats = [json.loads(a["stats"]) for a in adds]
    assert sum(s["numRecords"] for s in stats) == 600
    assert {a["partitionValues"]["region"] for a in adds} == {"eu", "us"}
    assert all(s["minValues"]["id"] <= s["maxValues"]["id"] for s in stats)
    assert not staging_root(console_table.location).exists()


def test_an_append_committed_during_the_rewrite_is_kept_exactly_once(make_delta, run_now, monkeypatch):
    console_table, path = make_delta(files=30)
    appended = delta_rows(50_000, 7)
    expected = multiset(delta_read(path)) + multiset(appended)

    def external_append(self, context, plan):
        write_deltalake(str(path), appended, mode="append")

    monkeypatch.setattr(DeltaRewriteProcess, "before_commit", external_append)
    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["attempts"] == 1
    assert multiset(delta_read(path)) == expected


def test_a_planned_file_removed_meanwhile_makes_the_rewrite_plan_again(make_delta, run_now, monkeypatch):
    import pyarrow.compute as pc

    console_table, path = make_delta(files=30)
    expected = multiset(delta_read(path).filter(pc.field("id") != 3))
    calls = []

    def external_delete(self, context, plan):
        if not calls:
            DeltaTable(str(path)).delete("id = 3")
        calls.append(plan)

    monkeypatch.setattr(DeltaRewriteProcess, "before_commit", external_delete)
    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["attempts"] == 2
    assert multiset(delta_read(path)) == expected


def test_a_cancel_just_before_the_commit_leaves_the_delta_table_as_it_was(make_delta, run_now, monkeypatch):
    from processes import services
    from processes.models import Process

    console_table, path = make_delta(files=20)
    version, files = DeltaTable(str(path)).version(), delta_files(path)

    def cancel(self, context, plan):
        services.process_cancel(process=Process.objects.get(pk=context.process_id))
        context.cancelled.set()

    monkeypatch.setattr(DeltaRewriteProcess, "before_commit", cancel)
    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.CANCELED
    assert DeltaTable(str(path)).version() == version
    assert delta_files(path) == files
    assert not list(path.rglob("*-compacted.parquet"))
    assert not staging_root(console_table.location).exists()


def test_the_records_chart_stays_flat_across_a_compaction_whose_removes_carry_no_statistics(
    make_delta, run_now
):
    """Delta remove actions need not carry stats (ours do not): the timeline series takes each
    removed file's records from its add, so the records line does not jump at a compaction."""
    from storage.metrics import timeline_series
    from storage.spec import load_table

    table, path = make_delta(files=12, rows_per_file=5)
    process = run_now(table, "rewrite")
    assert process.status == ProcessStatus.SUCCESS, process.failure

    series = timeline_series(load_table(str(path), format="delta"))
    assert [point["records"] for point in series] == [5 * n for n in range(1, 13)] + [60]
    assert [point["files"] for point in series][-2:] == [12, 1]
    assert series[-1]["bytes"] == load_table(str(path), format="delta").summary().total_bytes
