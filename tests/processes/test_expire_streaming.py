"""Iceberg expiry's streaming difference (issue 35): the files only expired snapshots reach, found
by merging sorted runs on disk, are exactly what the previous implementation (Python sets of every
path reached) found, per kind, on the same table; the guard's refusals are reported the same way."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from processes.maintenance.iceberg.expire import KINDS, plan_expiry
from processes.maintenance.outputs import local_path
from storage.io.guard import PathGuard
from tests.processes.conftest import append_files, rows
from tests.processes.test_iceberg_expire import history_table

pytestmark = pytest.mark.django_db(transaction=True)


def previous(table, expired_ids: list[int], guard: PathGuard) -> tuple[dict[str, list[str]], dict]:
    """The expiry's difference as it was: every path each side reaches in Python sets."""

    def reach(snapshots, live_only):
        found = {kind: set() for kind in KINDS}
        for snapshot in snapshots:
            found["manifest_lists"].add(snapshot.manifest_list)
            for manifest in snapshot.manifests(table.io):
                found["manifests"].add(manifest.manifest_path)
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                    if not (live_only and int(entry.status) == 2):
                        kind = "data_files" if int(entry.data_file.content) == 0 else "delete_files"
                        found[kind].add(entry.data_file.file_path)
        return found

    snapshots = table.metadata.snapshots
    candidates = reach([s for s in snapshots if s.snapshot_id in expired_ids], live_only=False)
    keep = reach([s for s in snapshots if s.snapshot_id not in expired_ids], live_only=True)
    protected = set().union(*keep.values())
    allowed = {}
    kept = None
    for kind in KINDS:
        allowed[kind], kept = guard.split(sorted(candidates[kind] - protected), kept)
    return allowed, kept.summary()


def test_expiry_finds_exactly_the_files_the_set_based_difference_found(make_iceberg, tmp_path):
    _, table = history_table(make_iceberg)
    append_files(table, [rows(5000, 5)])
    table.refresh()
    root = local_path(table.location())
    guard = PathGuard.build(root, roots=[os.path.dirname(root), str(tmp_path)])

    expired_ids, candidates, doomed = plan_expiry(
        table, max_age=dt.timedelta(0), min_snapshots=1, guard=guard
    )
    assert candidates is not None and doomed is not None
    with candidates:
        found = {kind: [path for path, _, k in doomed.files() if k == kind] for kind in KINDS}
        kept = doomed.kept.summary()

    assert len(expired_ids) == len(table.metadata.snapshots) - 1
    assert (found, kept) == previous(table, expired_ids, guard)
    assert len(found["manifest_lists"]) == len(expired_ids)
    assert found["data_files"] and all(p.endswith(".parquet") for p in found["data_files"])
    assert doomed.first == {kind: paths[:20] for kind, paths in found.items()}


def test_files_outside_the_table_are_kept_and_reported_as_before(make_iceberg):
    _, table = history_table(make_iceberg)
    root = local_path(table.location())
    narrow = PathGuard.build(f"{root}/metadata", roots=[os.path.dirname(root)])  # data/ is outside

    expired_ids, candidates, doomed = plan_expiry(
        table, max_age=dt.timedelta(0), min_snapshots=1, guard=narrow
    )
    assert candidates is not None and doomed is not None
    with candidates:
        found = {kind: [path for path, _, k in doomed.files() if k == kind] for kind in KINDS}
        kept = doomed.kept.summary()

    assert (found, kept) == previous(table, expired_ids, narrow)
    assert found["data_files"] == [] and kept["outside the table's location"]["count"] > 0
