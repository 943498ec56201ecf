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


def test_block_merge_and_batch_join_match_sorted_and_a_dict_at_every_boundary(tmp_path, monkeypatch):
    """Tiny blocks and batches put run, block and batch ends everywhere: a key's pairs spread over
    several batches (its smallest tag must win), items repeated across runs."""
    import random
    from operator import itemgetter

    from processes.maintenance import spill

    monkeypatch.setattr(spill, "FAN_IN", 3)
    monkeypatch.setattr(spill, "BLOCK_ITEMS", 2)
    monkeypatch.setattr(spill, "BATCH_ITEMS", 3)
    rng = random.Random(35)
    items = [(f"k{rng.randrange(60):02d}", rng.randrange(3), 0.0) for _ in range(300)]
    pairs = [(f"k{rng.randrange(40):02d}", rng.randrange(4)) for _ in range(200)]
    listed = spill.SortedRuns(str(tmp_path), "listed", run_items=7)
    listed.extend(items)
    tagged = spill.SortedRuns(str(tmp_path), "tagged", unique=True, run_items=5)
    for pair in pairs:
        tagged.add(pair)
    smallest: dict[str, int] = {}
    for key, tag in sorted(pairs):
        smallest.setdefault(key, tag)

    assert list(listed) == sorted(items) and listed.count == 300
    assert list(tagged) == sorted(set(pairs))
    expected = [(item, smallest.get(item[0])) for item in sorted(items)]
    assert list(spill.joined(listed, tagged, key=itemgetter(0))) == expected
    assert list(spill.joined(sorted(items), sorted(pairs), key=itemgetter(0))) == expected  # plain lists
    keys = spill.SortedRuns(str(tmp_path), "keys", unique=True, run_items=5)
    keys.extend(key for key, _ in pairs)
    unreferenced = [item for item in sorted(items) if item[0] not in smallest]
    assert unreferenced and list(spill.missing(listed, keys, key=itemgetter(0))) == unreferenced


def test_paths_with_newlines_spaces_and_unicode_are_never_split_or_merged(tmp_path):
    """A file name holding a newline names one file: never two (that would delete the wrong
    ones). Local disk allows any byte but ``/`` and NUL in a name."""
    import time

    from processes.maintenance.iceberg import orphans
    from storage.io.guard import PathGuard

    root = tmp_path / "wh" / "t"
    data = root / "data"
    data.mkdir(parents=True)
    names = [
        "a",
        "b",
        "a\nb",
        "b\n",
        "\nb",
        "with space.parquet",
        "é\u00a0ü 日本.parquet",
        "z\r\nz",
        "tab\tx",
    ]
    for name in names:
        (data / name).write_bytes(b"x")
    referenced = [f"{data}/a\nb", f"{data}/with space.parquet", f"{data}/z"]  # "z" is no file
    guard = PathGuard.build(str(root), roots=[str(tmp_path / "wh")])

    with orphans.scan_location(str(root), referenced, guard=guard, cutoff=time.time() + 60) as scan:
        found = [stored.location for stored in scan.orphans]

    kept = {"a\nb", "with space.parquet"}
    assert found == sorted(f"{data}/{name}" for name in names if name not in kept)
    assert f"{data}/a" in found and f"{data}/b" in found  # the two halves of "a\nb" are files of their own
    assert len(scan.orphans) == len(names) - 2
