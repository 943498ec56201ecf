"""Partial progress of the Iceberg rewrite (``partial-progress``, ``max-commits``): file groups
committed in batches, each a ``replace`` snapshot; a late conflict or a cancel keeps the batches
that landed, and what a failed batch wrote is deleted."""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from processes.maintenance.iceberg.batches import Batching
from processes.maintenance.iceberg.rewrite import IcebergRewriteFactory, IcebergRewriteProcess
from processes.maintenance.planning import CompactionPlan, RewriteGroup
from processes.models import ProcessStatus
from tests.processes.conftest import iceberg_rows, multiset, staging_root
from tests.processes.test_iceberg_rewrite import planned

# 64 KiB output files: the 60 files of 40 rows make three groups of one partition, committed
# with max-commits 2 as batches of groups [0, 1] and [2].
TARGET = 65536
PARTIAL = {"target-file-size": TARGET, "partial-progress": True}


def process_snapshots(table, process_id: int) -> list:
    """The snapshots a process committed, oldest first."""
    table.refresh()
    return [
        s
        for s in sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
        if s.summary.additional_properties.get("lakewarden.process-id") == str(process_id)
    ]


def files_on_disk(location: str) -> set[str]:
    return {str(p) for p in (__import__("pathlib").Path(location) / "data").rglob("*.parquet")}


def files_of_every_snapshot(table) -> set[str]:
    """Every data file any snapshot of the table references (time travel included)."""
    from pyiceberg.manifest import ManifestContent

    table.refresh()
    paths = set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.content == ManifestContent.DATA:
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                    paths.add(entry.data_file.file_path.removeprefix("file://"))
    return paths


@pytest.fixture
def three_groups(make_iceberg):
    console_table, table = make_iceberg(files=60, rows_per_file=40)
    plan = planned(table, **{"target-file-size": TARGET})
    assert len(plan.groups) == 3, "the fixture is meant to plan three groups"
    return console_table, table, plan


def test_groups_are_spread_over_at_most_max_commits_batches_in_plan_order():
    groups = [RewriteGroup(index, None, []) for index in range(7)]
    plan = CompactionPlan(instant=5, groups=groups)

    batches = Batching(partial=True, max_commits=3).split(plan)
    assert [[g.index for g in b.groups] for b in batches] == [[0, 1, 2], [3, 4], [5, 6]]
    assert all(b.instant == 5 for b in batches)
    assert [len(b.groups) for b in Batching(partial=True, max_commits=10).split(plan)] == [1] * 7
    assert Batching(partial=False, max_commits=3).split(plan) == [plan]
    with pytest.raises(ValueError, match="max-commits must be at least 1"):
        Batching.from_config({"max-commits": 0})


def test_partial_progress_is_off_by_default_and_declared_in_the_schemas():
    import jsonschema

    factory = IcebergRewriteFactory()
    assert factory.properties["partial-progress"] is False and factory.properties["max-commits"] == 10
    jsonschema.validate({"partial-progress": True, "max-commits": 3}, factory.params_schema)
    jsonschema.validate({"partial-progress": True, "max-commits": 3}, factory.properties_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"max-commits": 0}, factory.params_schema)


def test_a_partial_progress_rewrite_commits_one_replace_snapshot_per_batch(three_groups, run_now):
    console_table, table, plan = three_groups
    before = multiset(iceberg_rows(table))

    process = run_now(console_table, "rewrite", {**PARTIAL, "max-commits": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    snapshots = process_snapshots(table, process.pk)
    assert [s.summary.operation.value for s in snapshots] == ["replace", "replace"]
    assert snapshots[1].parent_snapshot_id == snapshots[0].snapshot_id
    committed = process.summary["partial_progress"]["committed"]
    assert [c["groups"] for c in committed] == [[0, 1], [2]]
    assert [c["snapshot_id"] for c in committed] == [s.snapshot_id for s in snapshots]
    first_batch_files = sum(len(g.slices) for g in plan.groups[:2])
    assert snapshots[0].summary["deleted-data-files"] == str(first_batch_files)
    assert process.summary["files_in"] == plan.files_in and process.summary["groups"] == 3
    assert process.summary["snapshot_id"] == snapshots[1].snapshot_id
    assert process.progress_message == "committed batch 2 of 2"
    assert multiset(iceberg_rows(table)) == before
    assert multiset(iceberg_rows(table, snapshots[0].snapshot_id)) == before  # after the first batch
    assert not staging_root(console_table.location).exists()


def test_a_conflict_in_a_late_batch_keeps_the_batches_that_landed(three_groups, run_now, monkeypatch):
    console_table, table, _ = three_groups
    doomed_ids: list[int] = []

    def external_delete(self, context, batch):
        if self.progress.committed:
            # copy-on-write delete of a row of the batch: its planned file is no longer live
            doomed = pq.read_table(batch.groups[0].paths[0].removeprefix("file://"))["id"][0].as_py()
            doomed_ids.append(doomed)
            table.delete(f"id = {doomed}")

    monkeypatch.setattr(IcebergRewriteProcess, "before_commit", external_delete)
    expected = iceberg_rows(table)
    process = run_now(console_table, "rewrite", {**PARTIAL, "max-commits": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    report = process.summary["partial_progress"]
    assert [c["groups"] for c in report["committed"]] == [[0, 1]]
    assert [(f["attempt"], f["batch"]) for f in report["failed"]] == [(1, 2), (2, 1)]
    assert "no longer live" in report["failed"][0]["reason"]
    assert len(doomed_ids) == 2
    snapshots = process_snapshots(table, process.pk)
    assert [s.summary.operation.value for s in snapshots] == ["replace"]
    expected = expected.filter(pc.invert(pc.is_in(expected["id"], __import__("pyarrow").array(doomed_ids))))
    assert multiset(iceberg_rows(table)) == multiset(expected)
    # the files the failed batches wrote were deleted: every file on disk is one a snapshot names
    assert files_on_disk(console_table.location) <= files_of_every_snapshot(table)
    assert not staging_root(console_table.location).exists()


def test_a_cancel_between_batches_keeps_the_committed_batch(three_groups, run_now, monkeypatch):
    from processes import services
    from processes.models import Process

    console_table, table, _ = three_groups
    before = multiset(iceberg_rows(table))
    files_before = files_on_disk(console_table.location)

    def cancel_second(self, context, batch):
        if self.progress.committed:
            services.process_cancel(process=Process.objects.get(pk=context.process_id))
            context.cancelled.set()  # what the heartbeat does when it sees the request

    monkeypatch.setattr(IcebergRewriteProcess, "before_commit", cancel_second)
    process = run_now(console_table, "rewrite", {**PARTIAL, "max-commits": 2})

    assert process.status == ProcessStatus.CANCELED
    snapshots = process_snapshots(table, process.pk)
    assert len(snapshots) == 1 and snapshots[0].summary.operation.value == "replace"
    assert table.current_snapshot().snapshot_id == snapshots[0].snapshot_id
    assert multiset(iceberg_rows(table)) == before
    new_files = files_on_disk(console_table.location) - files_before
    assert new_files and new_files <= files_of_every_snapshot(table)  # only the first batch's

    retry = run_now(console_table, "rewrite", {**PARTIAL, "max-commits": 2})  # plans only the rest
    assert retry.status == ProcessStatus.SUCCESS, retry.failure
    assert retry.summary["groups"] == 1
    assert multiset(iceberg_rows(table)) == before


def test_a_batch_that_conflicted_once_is_planned_again_and_committed(three_groups, run_now, monkeypatch):
    console_table, table, _ = three_groups
    doomed_ids: list[int] = []

    def delete_once(self, context, batch):
        if self.progress.committed and not doomed_ids:
            doomed = pq.read_table(batch.groups[0].paths[0].removeprefix("file://"))["id"][0].as_py()
            doomed_ids.append(doomed)
            table.delete(f"id = {doomed}")

    monkeypatch.setattr(IcebergRewriteProcess, "before_commit", delete_once)
    before = iceberg_rows(table)
    process = run_now(console_table, "rewrite", {**PARTIAL, "max-commits": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    report = process.summary["partial_progress"]
    assert [(c["attempt"], c["batch"]) for c in report["committed"]] == [(1, 1), (2, 1)]
    assert [(f["attempt"], f["batch"]) for f in report["failed"]] == [(1, 2)]
    assert process.summary["attempts"] == 2
    assert [s.summary.operation.value for s in process_snapshots(table, process.pk)] == ["replace"] * 2
    expected = before.filter(pc.field("id") != doomed_ids[0])
    assert multiset(iceberg_rows(table)) == multiset(expected)
    assert files_on_disk(console_table.location) <= files_of_every_snapshot(table)
