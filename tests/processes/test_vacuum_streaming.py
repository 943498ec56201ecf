"""Delta vacuum's streaming scan (issue 35): the files it deletes and keeps are exactly the ones the
previous implementation (deltalake's ``DeltaTable.vacuum`` dry run, then the path guard) named, on
the same tables, except the deletion vector files of live files, which deltalake deletes; and its
peak memory does not grow with the number of objects (10k and 200k, each in a subprocess)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from processes.maintenance.delta.vacuum import vacuum_scan
from storage.io.guard import PathGuard
from tests.processes.memory_probe import CAN_RESET_PEAK, probe

REPO = Path(__file__).resolve().parents[2]
DAY = 86400


def backdate_removes(path: Path, version: int, days: float) -> None:
    log = path / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    for action in actions:
        if "remove" in action:
            action["remove"]["deletionTimestamp"] = int((time.time() - days * DAY) * 1000)
    log.write_text("".join(json.dumps(action) + "\n" for action in actions))


def age(folder: Path, days: float, *, skip: str = "young") -> None:
    when = time.time() - days * DAY
    for directory, _, names in os.walk(folder, followlinks=True):
        for name in names:
            if skip not in name:
                os.utime(Path(directory, name), (when, when))


def rows(*values: int) -> pa.Table:
    return pa.table({"a": list(values), "p": [f"v{v % 2}" for v in values]})


@pytest.fixture
def hostile_table(tmp_path):
    """A partitioned table with expired and kept tombstones (the kept ones in a checkpoint),
    untracked files old and young, hidden folders and files, a nested table and a symlink to a
    folder outside the table; its guard knows the nested table."""
    root = tmp_path / "wh" / "t"
    write_deltalake(str(root), rows(1, 2), partition_by=["p"])
    write_deltalake(str(root), rows(3), partition_by=["p"], mode="overwrite")  # v1 removes v0's files
    backdate_removes(root, 1, 1)  # within the retention: kept, in the checkpoint
    DeltaTable(str(root)).create_checkpoint()
    write_deltalake(str(root), rows(4, 5), partition_by=["p"], mode="append")
    write_deltalake(str(root), rows(6), partition_by=["p"], mode="overwrite")  # v3 removes v1's, v2's
    backdate_removes(root, 3, 20)  # expired
    for relative in (
        "untracked.parquet",
        "p=v0/untracked.parquet",
        "p=v1/young-untracked.parquet",
        "_hidden/x.parquet",
        ".dot/y.parquet",
        "_top.parquet",
        "p=v0/_under.parquet",
        "_change_data/c.parquet",
    ):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(b"x" * 7)
    write_deltalake(str(root / "sub"), rows(7))  # a nested table
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.parquet").write_bytes(b"not the table's")
    os.symlink(outside, root / "linked")
    age(tmp_path, 30)
    guard = PathGuard.build(str(root), roots=[str(tmp_path / "wh")], others=[str(root / "sub")])
    return root, guard


def removed_in(root: Path, version: int) -> set[str]:
    """The paths commit ``version`` removed."""
    log = (root / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return {json.loads(line)["remove"]["path"] for line in log if '"remove"' in line}


def previous(root: Path, guard: PathGuard, full: bool) -> tuple[set[str], dict]:
    """What vacuum deleted before: deltalake's dry run, then the guard over its answer."""
    found = DeltaTable(str(root)).vacuum(retention_hours=168, dry_run=True, full=full)
    allowed, kept = guard.split([p for p in found if p and not p.endswith("/")], path=lambda p: f"{root}/{p}")
    return set(allowed), kept.summary()


def streamed(root: Path, guard: PathGuard, full: bool) -> tuple[set[str], dict, int]:
    with vacuum_scan(str(root), hours=168, full=full, guard=guard) as found:
        deleted = {stored.location.removeprefix(f"{root}/") for stored in found.scan.removable}
        return deleted, found.scan.kept.summary(), found.scan.young


def test_full_vacuum_deletes_and_keeps_exactly_what_deltalakes_did(hostile_table):
    root, guard = hostile_table
    before = {p.name for p in (root / "p=v1").iterdir()}

    deleted, kept, young = streamed(root, guard, full=True)

    assert (deleted, kept) == previous(root, guard, full=True)
    assert deleted == removed_in(root, 3) | {
        "_change_data/c.parquet",
        "p=v0/_under.parquet",
        "p=v0/untracked.parquet",
        "untracked.parquet",
    }
    assert set(kept) == {f"inside another registered table ({root}/sub)", "through a symlink"}
    assert kept["through a symlink"] == {"count": 1, "files": [f"{root}/linked/secret.parquet"]}
    assert young == 2 + 1  # v0's files removed a day ago, the young untracked file
    assert {p.name for p in (root / "p=v1").iterdir()} == before  # nothing deleted


def test_lite_vacuum_deletes_only_expired_tombstones_as_deltalake_did(hostile_table):
    root, guard = hostile_table

    deleted, kept, young = streamed(root, guard, full=False)

    assert (deleted, kept) == previous(root, guard, full=False)
    assert deleted == removed_in(root, 3) and len(deleted) == 3
    assert kept == {} and young == 2  # v0's files, removed a day ago


def test_live_deletion_vector_files_are_kept_where_deltalake_deleted_them(tmp_path):
    fixtures = Path(os.environ.get("LAKEWARDEN_FIXTURES", REPO.parent / "shared" / "fixtures"))
    source = fixtures / "delta" / "table-with-dv-small"
    if not source.exists():
        pytest.skip(f"no fixture tables at {fixtures}")
    root = tmp_path / "wh" / "dv"
    shutil.copytree(source, root)
    age(root, 30)
    guard = PathGuard.build(str(root), roots=[str(tmp_path / "wh")])
    vector = "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"

    assert previous(root, guard, full=True) == ({vector}, {})  # deltalake: the live vector goes
    assert streamed(root, guard, full=True) == (set(), {}, 0)


@pytest.mark.skipif(not CAN_RESET_PEAK, reason="needs Linux's clear_refs")
def test_the_vacuum_scan_does_not_grow_with_the_number_of_objects(tmp_path):
    small = probe(tmp_path, "vacuum", 10_000)
    large = probe(tmp_path, "vacuum", 200_000)

    # 20x the objects: the peak grows by at most one sorted run being sorted in memory (the log's
    # actions or the listing: spill.RUN_ITEMS tuples) and the merge's blocks.
    growth = large["growth_mb"] - small["growth_mb"]
    assert growth < 30, (small, large)
    assert large["growth_mb"] < 50, large
