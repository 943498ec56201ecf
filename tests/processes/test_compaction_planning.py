"""Compaction planning: which files are grouped, and how (no table needed)."""

from __future__ import annotations

from processes.maintenance.planning import CompactionSettings, bin_pack, plan_compaction
from storage.spec.models import DataFile, FileContent, FileSlice, PartitionDescriptor

MIB = 1024 * 1024


def file_slice(name: str, size: int, partition: str = "", deletes: int = 0) -> FileSlice:
    delete_files = tuple(
        DataFile(f"{name}-del-{i}", 100, 1, content=FileContent.POSITION_DELETES) for i in range(deletes)
    )
    return FileSlice(PartitionDescriptor(partition), DataFile(name, size, 10), delete_files)


def test_bins_never_exceed_the_capacity_and_hold_every_file_once():
    slices = [file_slice(f"f{i}", (i % 7 + 1) * MIB) for i in range(60)]
    bins = bin_pack(slices, 16 * MIB)
    assert sorted(s.path for b in bins for s in b) == sorted(s.path for s in slices)
    assert all(sum(s.size_bytes for s in b) <= 16 * MIB for b in bins)
    assert len(bins) == -(-sum(s.size_bytes for s in slices) // (16 * MIB))  # as few as the bytes allow


def test_only_files_under_an_eighth_of_the_target_are_candidates():
    settings = CompactionSettings(target_file_size=128 * MIB, min_input_files=2)
    slices = [file_slice(f"small{i}", 15 * MIB) for i in range(4)] + [file_slice("big", 17 * MIB)]
    plan = plan_compaction(slices, settings, instant=1)
    assert {s.path for g in plan.groups for s in g.slices} == {f"small{i}" for i in range(4)}


def test_min_file_size_makes_larger_files_candidates_too():
    settings = CompactionSettings(target_file_size=128 * MIB, min_file_size=64 * MIB, min_input_files=2)
    plan = plan_compaction([file_slice("a", 40 * MIB), file_slice("b", 50 * MIB)], settings, instant=1)
    assert plan.files_in == 2 and len(plan.groups) == 1


def test_a_partition_with_too_few_small_files_is_left_alone():
    settings = CompactionSettings(target_file_size=128 * MIB, min_input_files=5)
    slices = [file_slice(f"eu{i}", MIB, "region=eu") for i in range(4)]
    slices += [file_slice(f"us{i}", MIB, "region=us") for i in range(5)]
    plan = plan_compaction(slices, settings, instant=1)
    assert [g.partition.path for g in plan.groups] == ["region=us"]
    assert plan.partitions == 1 and plan.files_in == 5


def test_groups_never_mix_partitions():
    settings = CompactionSettings(target_file_size=128 * MIB, min_input_files=2)
    slices = [file_slice(f"f{i}", MIB, f"day={i % 3}") for i in range(30)]
    plan = plan_compaction(slices, settings, instant=1)
    assert len(plan.groups) == 3
    assert all(len({s.partition.path for s in g.slices}) == 1 for g in plan.groups)


def test_a_lone_file_is_rewritten_only_for_its_deletes():
    settings = CompactionSettings(target_file_size=128 * MIB, min_input_files=2, delete_file_threshold=2)
    plain = plan_compaction([file_slice("a", 200 * MIB)], settings, instant=1)
    deleted = plan_compaction([file_slice("a", 200 * MIB, deletes=2)], settings, instant=1)
    assert plain.empty and not deleted.empty and deleted.groups[0].has_deletes
