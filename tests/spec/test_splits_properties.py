"""Property tests: whatever the slices and parameters, a plan reads every byte and row group once."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.spec.models import DataFile, FileContent, FileSlice, PartitionDescriptor
from storage.spec.splits import plan_splits
from tests.spec.test_splits import assert_plan_is_sound, parts_by_path

DELETE_KINDS = [
    FileContent.POSITION_DELETES,
    FileContent.EQUALITY_DELETES,
    FileContent.DELETION_VECTOR,
    FileContent.LOG,
]


@st.composite
def offsets_for(draw, size: int) -> tuple[int, ...] | None:
    shape = draw(st.sampled_from(["none", "parquet", "anywhere", "garbage"]))
    if shape == "none" or size <= 4:
        return None
    if shape == "parquet":
        # Parquet-like: the first row group right after the 4-byte magic, the rest ascending.
        rest = draw(st.lists(st.integers(5, size - 1), unique=True, max_size=30)) if size > 5 else []
        return (4, *sorted(rest))
    if shape == "anywhere":
        return tuple(sorted(draw(st.lists(st.integers(0, size - 1), unique=True, min_size=1, max_size=30))))
    # Metadata that is wrong: unsorted, repeated or outside the file.
    return tuple(draw(st.lists(st.integers(-3, size + 3), min_size=1, max_size=10)))


@st.composite
def file_slices(draw, index: int) -> FileSlice:
    deletes = tuple(
        DataFile(
            path=f"delete-{index}-{n}",
            size_bytes=draw(st.integers(0, 400)),
            record_count=draw(st.integers(0, 50)),
            content=draw(st.sampled_from(DELETE_KINDS)),
        )
        for n in range(draw(st.integers(0, 3)))
    )
    if deletes and draw(st.booleans()) and all(d.content is FileContent.LOG for d in deletes):
        base = None  # a Hudi merge-on-read file group with log files only
    else:
        size = draw(st.integers(0, 6000))
        base = DataFile(
            path=f"base-{index}.parquet",
            size_bytes=size,
            record_count=draw(st.integers(0, 10**9)),
            split_offsets=draw(offsets_for(size)),
        )
    return FileSlice(partition=PartitionDescriptor(path=""), base_file=base, delete_files=deletes)


@st.composite
def slice_lists(draw) -> list[FileSlice]:
    return [draw(file_slices(n)) for n in range(draw(st.integers(0, 25)))]


plan_parameters = st.fixed_dictionaries(
    {
        "target_size": st.integers(1, 3000),
        "open_file_cost": st.integers(0, 300),
        "lookback": st.integers(1, 6),
    }
)


def valid_offsets(fs: FileSlice) -> tuple[int, ...] | None:
    offsets = fs.base_file.split_offsets if fs.base_file else None
    if not offsets or offsets[0] < 0 or offsets[-1] >= fs.base_file.size_bytes:
        return None
    if any(b <= a for a, b in itertools.pairwise(offsets)):
        return None
    return offsets


@settings(max_examples=300, deadline=None)
@given(slices=slice_lists(), parameters=plan_parameters)
def test_every_byte_of_every_file_is_planned_exactly_once(slices, parameters):
    splits = list(plan_splits(iter(slices), **parameters))

    assert_plan_is_sound(slices, splits, parameters["target_size"], parameters["open_file_cost"])


@settings(max_examples=300, deadline=None)
@given(slices=slice_lists(), parameters=plan_parameters)
def test_every_row_group_is_read_by_exactly_one_part_and_no_part_reads_none(slices, parameters):
    by_path = parts_by_path(plan_splits(slices, **parameters))

    for fs in slices:
        offsets = valid_offsets(fs)
        if offsets is None:
            continue
        parts = by_path[fs.path]
        # The row_groups_in_range rule: a row group belongs to the part holding its start offset.
        owners = [[p for p in parts if p.start <= offset < p.start + p.length] for offset in offsets]
        assert all(len(found) == 1 for found in owners)
        assert {id(p) for found in owners for p in found} == {id(p) for p in parts}


@settings(max_examples=300, deadline=None)
@given(slices=slice_lists(), parameters=plan_parameters)
def test_cut_parts_stay_within_the_target_unless_one_row_group_is_bigger(slices, parameters):
    target = parameters["target_size"]
    by_path = parts_by_path(plan_splits(slices, **parameters))

    for fs in slices:
        parts = by_path[fs.path]
        if len(parts) == 1:
            continue
        offsets = valid_offsets(fs)
        assert offsets is not None and not fs.delete_files and fs.base_file.size_bytes > target
        for part in parts:
            groups_in_part = sum(part.start <= o < part.start + part.length for o in offsets)
            assert part.length <= target or groups_in_part == 1


@settings(max_examples=200, deadline=None)
@given(slices=slice_lists(), parameters=plan_parameters)
def test_the_same_slices_in_the_same_order_give_the_same_plan(slices, parameters):
    assert list(plan_splits(iter(slices), **parameters)) == list(plan_splits(iter(slices), **parameters))
