"""Orphan cleanup in bounded memory: the streaming difference's peak RSS does not grow with the
number of objects under the table location (issue 35, at 10k and 200k objects instead of 10M).

Each size runs in a fresh subprocess (``memory_probe``, shared with the vacuum's test): N empty
files under a table location on local disk, every tenth unreferenced, then ``scan_location``
(listing, both sides spilled as sorted runs, merged, every candidate through the path guard)
measured by the peak resident set of that process; the orphans found are compared by value.
"""

from __future__ import annotations

import pytest

from tests.processes.memory_probe import CAN_RESET_PEAK, probe


@pytest.mark.skipif(not CAN_RESET_PEAK, reason="needs Linux's clear_refs")
def test_the_streaming_difference_does_not_grow_with_the_number_of_objects(tmp_path):
    small = probe(tmp_path, "orphans", 10_000)
    large = probe(tmp_path, "orphans", 200_000)

    # 20x the objects: the peak grows by at most one sorted run being sorted in memory
    # (spill.RUN_ITEMS tuples, about 15 MB with paths of this length) and the merge's blocks.
    growth = large["growth_mb"] - small["growth_mb"]
    assert growth < 25, (small, large)
    assert large["growth_mb"] < 40, large


def test_sorted_runs_merge_in_passes_and_the_difference_is_exact(tmp_path, monkeypatch):
    from processes.maintenance import spill

    monkeypatch.setattr(spill, "FAN_IN", 3)  # 34 runs of 3: merged in passes of 3
    names = [f"s3://b/t/data/{i * 7919 % 100:03d}-\udcff-é" for i in range(100)]  # any str
    referenced = spill.SortedRuns(str(tmp_path), "referenced", unique=True, run_items=3)
    referenced.extend(name for name in names + names[:40] if names.index(name) % 4)  # repeats
    listed = spill.SortedRuns(str(tmp_path), "listed", run_items=3)
    listed.extend((name, len(name), 0.0) for name in reversed(names))

    found = [item[0] for item in spill.missing(listed, referenced, key=lambda item: item[0])]

    assert found == sorted(name for position, name in enumerate(names) if position % 4 == 0)
    assert len(list(tmp_path.iterdir())) <= 3 + 3  # the passes removed the runs they merged


def test_progress_reports_objects_bytes_and_candidates_while_scanning(tmp_path, monkeypatch):
    import time

    from processes.maintenance.iceberg import orphans
    from storage.io.guard import PathGuard

    monkeypatch.setattr(orphans.ListingProgress, "EVERY", 2)
    root = tmp_path / "wh" / "t"
    (root / "data").mkdir(parents=True)
    for i in range(6):
        (root / "data" / f"{i}.parquet").write_bytes(b"x" * 10)

    class Context:
        reports: list[tuple[int, int, str]] = []

        def check_cancelled(self) -> None:
            pass

        def report_progress(self, done: int, total: int, message: str = "") -> None:
            self.reports.append((done, total, message))

    context = Context()
    referenced = [f"{root}/data/{i}.parquet" for i in range(4)]
    guard = PathGuard.build(str(root), roots=[str(tmp_path)])
    with orphans.scan_location(
        str(root), referenced, guard=guard, cutoff=time.time() + 60, context=context
    ) as scan:
        assert [o.location for o in scan.orphans] == [f"{root}/data/4.parquet", f"{root}/data/5.parquet"]

    assert (6, 0, "listing: 6 objects seen, 60 bytes") in context.reports
    assert context.reports[-1] == (
        2,
        6,
        "comparing: 6 objects seen (60 bytes), 2 unreferenced (20 bytes), 2 old enough to remove",
    )
