"""A partial-progress Iceberg rewrite on a real object store (SeaweedFS: S3 + its Iceberg REST
catalog) whose real Celery heavy worker is killed with SIGKILL after its first batch committed:
the committed batch stays, no row is lost or doubled, and the automatic retry rewrites only the
rest and sweeps what the dead attempt wrote and never committed."""

from __future__ import annotations

import pytest

from processes.maintenance.iceberg.batches import Batching
from processes.maintenance.iceberg.rewrite import plan_rewrite, spec_view
from processes.maintenance.planning import CompactionSettings
from processes.models import Process, ProcessStatus
from tests.e2e.conftest import only_factory, process_status, wait_for
from tests.e2e.test_objectstore_e2e import (  # noqa: F401  (fixtures)
    _live_iceberg_objects,
    _objects,
    _s3_root_allowed,
    rest_iceberg,
)
from tests.processes.conftest import multiset

pytestmark = pytest.mark.e2e

# Files of 500 rows (~15 KiB) are all small under min-file-size and pack 64 KiB groups: the plan
# has several groups, spread over two batches (two commits).
PROPERTIES = {
    "interval": 3600,
    "target-file-size": 65536,
    "min-file-size": 65536,
    "min-input-files": 2,
    "partial-progress": True,
    "max-commits": 2,
}


def snapshots_of(table, process_id: int) -> list:
    table.refresh()
    return [
        s
        for s in table.metadata.snapshots
        if s.summary.additional_properties.get("lakewarden.process-id") == str(process_id)
    ]


def test_a_worker_killed_after_the_first_batch_keeps_it_and_the_retry_finishes_the_rest(
    celery_processes, seaweedfs, rest_iceberg
):
    table, iceberg = rest_iceberg(files=10, rows_per_file=500)
    rows_before = multiset(iceberg.scan().to_arrow())
    plan = plan_rewrite(spec_view(iceberg), CompactionSettings.from_config(PROPERTIES))
    batches = Batching(partial=True, max_commits=2).split(plan)
    assert len(batches) == 2, f"the table is meant to plan two batches ({len(plan.groups)} groups)"
    data_prefix = f"{iceberg.location()}/data"
    objects_before = _objects(seaweedfs, data_prefix)
    only_factory("iceberg-rewrite", **PROPERTIES)
    doomed = celery_processes.start_with_doomed_heavy_worker("before-commit-batch-2=hang:600")

    process = wait_for(
        lambda: Process.objects.filter(table=table, action="rewrite").first(),
        message="the scheduler to trigger the rewrite",
    )
    # The second batch is written and the worker holds right before its commit.
    wait_for(
        lambda: process_status(process.pk).progress_message == "committing batch 2 of 2",
        timeout=240,
        message="the second batch's commit step\n" + celery_processes.logs(),
    )
    first = snapshots_of(iceberg, process.pk)
    assert len(first) == 1 and first[0].summary.operation.value == "replace"
    assert first[0].summary["deleted-data-files"] == str(batches[0].files_in)
    written = _objects(seaweedfs, data_prefix) - objects_before
    committed_objects = _live_iceberg_objects(iceberg) - objects_before
    uncommitted = written - committed_objects
    assert committed_objects and uncommitted, "both batches wrote objects; only the first committed"

    celery_processes.kill_hard(doomed)
    failed = wait_for(
        lambda: (p := process_status(process.pk)).status == ProcessStatus.FAILED and p,
        timeout=30,
        message="the lost worker's process to be failed\n" + celery_processes.logs(),
    )
    assert "worker lost" in failed.failure
    iceberg.refresh()
    assert iceberg.current_snapshot().snapshot_id == first[0].snapshot_id  # the first batch stays
    assert multiset(iceberg.scan().to_arrow()) == rows_before

    celery_processes.start_worker(name="rescuer", queues="heavy", concurrency=1)
    retry = wait_for(lambda: Process.objects.filter(retry_of=failed).first(), message="an automatic retry")
    finished = wait_for(
        lambda: (p := process_status(retry.pk)).status in ("SUCCESS", "FAILED") and p,
        timeout=240,
        message="the retry to finish\n" + celery_processes.logs(),
    )

    assert finished.status == ProcessStatus.SUCCESS, finished.failure
    assert finished.summary["files_in"] == batches[1].files_in  # only what the first batch left
    assert finished.summary["swept_leftover_objects"] == len(uncommitted)
    iceberg.refresh()
    history = [entry.snapshot_id for entry in iceberg.metadata.snapshot_log]
    assert first[0].snapshot_id in history
    assert multiset(iceberg.scan().to_arrow()) == rows_before
    remaining = _objects(seaweedfs, data_prefix)
    assert not (uncommitted & remaining)  # the dead attempt's uncommitted objects are gone
    assert committed_objects <= remaining
