"""Split planning: cutting at row groups, weights, bin packing, streaming, parameter checks."""

from __future__ import annotations

import glob
import itertools
import math
import tracemalloc
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.spec.models import DataFile, FileContent, FileSlice, PartitionDescriptor, Split
from storage.spec.splits import (
    part_weight,
    plan_splits,
    row_group_offsets,
    row_groups_in_range,
    summarise_splits,
)

MIB = 1024 * 1024
NO_PARTITION = PartitionDescriptor(path="")


def data_file(path: str, size: int, rows: int = 0, offsets: tuple[int, ...] | None = None) -> DataFile:
    return DataFile(path=path, size_bytes=size, record_count=rows, split_offsets=offsets)


def delete_file(path: str, size: int, content: FileContent = FileContent.POSITION_DELETES) -> DataFile:
    return DataFile(path=path, size_bytes=size, record_count=1, content=content)


def file_slice(base: DataFile | None, deletes: Iterable[DataFile] = ()) -> FileSlice:
    return FileSlice(partition=NO_PARTITION, base_file=base, delete_files=tuple(deletes))


def row_groups_file(path: str, group_sizes: list[int], rows: int = 0, footer: int = 1000) -> DataFile:
    """A parquet-shaped file: 4 magic bytes, row groups of the given sizes, then a footer."""
    offsets = tuple(itertools.accumulate([4, *group_sizes[:-1]]))
    return data_file(path, 4 + sum(group_sizes) + footer, rows, offsets)


def parts_by_path(splits: Iterable[Split]) -> dict[str, list]:
    found = defaultdict(list)
    for split in splits:
        for part in split.parts:
            found[part.file_slice.path].append(part)
    return {path: sorted(parts, key=lambda p: p.start) for path, parts in found.items()}


def assert_plan_is_sound(slices: list[FileSlice], splits: list[Split], target_size: int, open_file_cost: int):
    """The invariants every plan keeps, whatever the input (also used by the property tests)."""
    by_path = parts_by_path(splits)
    assert set(by_path) == {s.path for s in slices}, "every slice appears, and nothing else"
    for fs in slices:
        parts = by_path[fs.path]
        assert all(p.file_slice == fs for p in parts)
        if fs.base_file is None or fs.delete_files:
            assert len(parts) == 1, "slices with deletes or logs are read whole"
        size = fs.base_file.size_bytes if fs.base_file else 0
        assert parts[0].start == 0 and parts[-1].start + parts[-1].length == size
        for before, after in itertools.pairwise(parts):
            assert before.start + before.length == after.start, "parts are contiguous, no gap, no overlap"
        if fs.base_file is not None:
            inner_cuts = {p.start for p in parts[1:]}
            assert inner_cuts <= set(fs.base_file.split_offsets or ()), "cuts only at row-group offsets"
            assert sum(p.estimated_rows for p in parts) == fs.base_file.record_count
            assert all(p.estimated_rows >= 0 for p in parts)
    for split in splits:
        assert split.parts
        assert split.weight == sum(part_weight(p, open_file_cost=open_file_cost) for p in split.parts)
        assert split.weight <= target_size or len(split.parts) == 1


def test_a_file_larger_than_the_target_is_cut_at_row_groups_into_parts_near_the_target():
    groups = [30 * MIB] * 10
    big = file_slice(row_groups_file("big.parquet", groups, rows=10_000))
    splits = list(plan_splits([big], target_size=128 * MIB, open_file_cost=4 * MIB))

    parts = parts_by_path(splits)["big.parquet"]
    assert len(parts) > 1
    offsets = big.base_file.split_offsets
    for part in parts[:-1]:
        assert part.length <= 128 * MIB
        # Greedy like Iceberg's: the next row group would have taken the part over the target.
        next_group = offsets.index(part.start + part.length)
        following_end = offsets[next_group + 1] if next_group + 1 < len(offsets) else big.base_file.size_bytes
        assert following_end - part.start > 128 * MIB
    assert_plan_is_sound([big], splits, 128 * MIB, 4 * MIB)


def test_a_row_group_bigger_than_the_target_makes_a_split_of_its_own():
    big = file_slice(row_groups_file("rg.parquet", [10 * MIB, 300 * MIB, 10 * MIB], rows=999))
    splits = list(plan_splits([big], target_size=128 * MIB))

    oversized = [s for s in splits if s.weight > 128 * MIB]
    assert len(oversized) == 1 and len(oversized[0].parts) == 1
    assert oversized[0].parts[0].length >= 300 * MIB
    assert_plan_is_sound([big], splits, 128 * MIB, 4 * MIB)


def test_a_large_file_without_row_group_offsets_stays_whole():
    big = file_slice(data_file("no-offsets.parquet", 500 * MIB, rows=10))
    (split,) = plan_splits([big], target_size=128 * MIB)

    assert [(p.start, p.length) for p in split.parts] == [(0, 500 * MIB)]


def test_invalid_row_group_offsets_are_ignored_rather_than_trusted():
    unsorted = file_slice(data_file("a.parquet", 500 * MIB, offsets=(4, 300 * MIB, 100 * MIB)))
    outside = file_slice(data_file("b.parquet", 500 * MIB, offsets=(4, 600 * MIB)))
    splits = list(plan_splits([unsorted, outside], target_size=128 * MIB))

    assert {path: len(parts) for path, parts in parts_by_path(splits).items()} == {
        "a.parquet": 1,
        "b.parquet": 1,
    }


def test_a_slice_with_deletes_is_never_cut_and_its_weight_counts_the_delete_bytes():
    base = row_groups_file("merged.parquet", [50 * MIB] * 6)
    deletes = [delete_file("d1.parquet", 3 * MIB), delete_file("d2.parquet", 7 * MIB)]
    (split,) = plan_splits([file_slice(base, deletes)], target_size=128 * MIB, open_file_cost=4 * MIB)

    (part,) = split.parts
    assert (part.start, part.length) == (0, base.size_bytes)
    assert split.weight == base.size_bytes + 10 * MIB
    assert split.size_bytes == base.size_bytes


def test_small_deletes_weigh_one_open_file_cost_per_file_opened():
    tiny = file_slice(data_file("t.parquet", 1000), [delete_file("d1", 10), delete_file("d2", 10)])
    (split,) = plan_splits([tiny], target_size=128 * MIB, open_file_cost=4 * MIB)

    assert split.weight == 3 * 4 * MIB


def test_a_hudi_log_only_slice_is_one_empty_range_weighted_by_its_logs():
    logs = [
        DataFile(path="f1.log.1", size_bytes=20 * MIB, record_count=70, content=FileContent.LOG),
        DataFile(path="f1.log.2", size_bytes=5 * MIB, record_count=30, content=FileContent.LOG),
    ]
    (split,) = plan_splits([file_slice(None, logs)], target_size=128 * MIB)

    (part,) = split.parts
    assert (part.start, part.length, part.estimated_rows) == (0, 0, 100)
    assert split.weight == 25 * MIB


def test_estimated_rows_of_the_parts_of_a_file_add_up_to_its_record_count():
    files = [
        file_slice(row_groups_file(f"f{n}.parquet", [7 * MIB + n] * 23, rows=1_000_003 * n))
        for n in range(1, 6)
    ]
    splits = list(plan_splits(files, target_size=32 * MIB))

    assert sum(s.estimated_rows for s in splits) == sum(f.record_count for f in files)
    assert_plan_is_sound(files, splits, 32 * MIB, 4 * MIB)


def test_open_file_cost_packs_many_tiny_files_into_few_equally_weighted_splits():
    tiny = [file_slice(data_file(f"tiny-{n}.parquet", 1024, rows=10)) for n in range(1000)]
    per_split = (128 * MIB) // (4 * MIB)

    splits = list(plan_splits(tiny, target_size=128 * MIB, open_file_cost=4 * MIB))

    assert len(splits) == math.ceil(len(tiny) / per_split)
    assert sorted(len(s.parts) for s in splits)[1:] == [per_split] * (len(splits) - 1)
    assert_plan_is_sound(tiny, splits, 128 * MIB, 4 * MIB)
    # Without the open cost, the same files would all be crammed into a single split.
    assert len(list(plan_splits(tiny, target_size=128 * MIB, open_file_cost=0))) == 1


def test_a_part_goes_into_the_first_open_bin_it_fits():
    files = [file_slice(data_file(name, size * MIB)) for name, size in [("a", 100), ("b", 60), ("c", 28)]]
    splits = list(plan_splits(files, target_size=128 * MIB, open_file_cost=0, lookback=5))

    assert [[p.file_slice.path for p in s.parts] for s in splits] == [["a", "c"], ["b"]]


def test_when_more_bins_than_the_lookback_are_open_the_heaviest_is_emitted_first():
    files = [
        file_slice(data_file(name, size * MIB)) for name, size in [("light", 30), ("heavy", 80), ("fits", 60)]
    ]
    splits = list(plan_splits(files, target_size=100 * MIB, open_file_cost=0, lookback=1))

    # Iceberg's largest-bin-first: the 80 MiB bin leaves, the 30 MiB bin stays open for "fits".
    assert [[p.file_slice.path for p in s.parts] for s in splits] == [["heavy"], ["light", "fits"]]


def test_the_same_input_order_gives_the_same_plan():
    files = [
        file_slice(row_groups_file(f"f{n}.parquet", [(n * 7919) % 40 * MIB + 1] * (n % 5 + 1), rows=n * 10))
        for n in range(200)
    ]
    assert list(plan_splits(files, target_size=64 * MIB)) == list(plan_splits(files, target_size=64 * MIB))


def counting(slices: Iterator[FileSlice], seen: list[int]) -> Iterator[FileSlice]:
    for fs in slices:
        seen[0] += 1
        yield fs


def tiny_slices(count: int) -> Iterator[FileSlice]:
    return (file_slice(data_file(f"s3://bucket/t/part-{n:06d}.parquet", 2048, rows=5)) for n in range(count))


def test_splits_stream_out_before_the_input_is_exhausted():
    seen = [0]
    splits = plan_splits(counting(tiny_slices(100_000), seen), target_size=128 * MIB, lookback=10)

    first = next(splits)

    # At most lookback + 1 bins of 32 tiny files are held before the first one leaves.
    assert len(first.parts) == 32
    assert seen[0] <= 11 * 32 + 1
    rest = sum(1 for _ in splits)
    assert seen[0] == 100_000
    assert rest + 1 == math.ceil(100_000 / 32)


def peak_memory_planning(count: int) -> int:
    tracemalloc.start()
    try:
        for _ in plan_splits(tiny_slices(count), target_size=128 * MIB, lookback=10):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_number_of_files_when_splits_are_consumed():
    small, large = peak_memory_planning(5_000), peak_memory_planning(50_000)

    # Ten times the files, the same bounded set of open bins.
    assert large < small * 1.5


def test_parameters_are_checked_when_planning_is_asked_for_not_when_it_is_consumed():
    # No next(): a bad parameter must fail at the call so the API can answer 400 straight away.
    with pytest.raises(ValueError, match="target_size must be positive"):
        plan_splits([], target_size=-1)
    with pytest.raises(ValueError, match="target_size must be positive"):
        plan_splits([], target_size=0)
    with pytest.raises(ValueError, match="open_file_cost must be zero or more"):
        plan_splits([], open_file_cost=-5)
    with pytest.raises(ValueError, match="lookback must be positive"):
        plan_splits([], lookback=0)
    with pytest.raises(ValueError, match="target_size must be an integer"):
        plan_splits([], target_size="128MB")
    with pytest.raises(ValueError, match="lookback must be an integer"):
        plan_splits([], lookback=2.5)


def test_no_slices_plan_no_splits():
    assert list(plan_splits([])) == []


def test_the_summary_adds_up_the_splits_it_is_given():
    files = [file_slice(row_groups_file(f"f{n}.parquet", [9 * MIB] * 12, rows=1000 + n)) for n in range(8)]
    files.append(file_slice(data_file("merged.parquet", 5 * MIB, rows=7), [delete_file("d", MIB)]))
    splits = list(plan_splits(files, target_size=64 * MIB))

    summary = summarise_splits(iter(splits))

    assert summary["count"] == len(splits)
    assert summary["parts"] == sum(len(s.parts) for s in splits)
    assert summary["total_weight"] == sum(s.weight for s in splits)
    assert summary["min_weight"] == min(s.weight for s in splits)
    assert summary["max_weight"] == max(s.weight for s in splits)
    assert summary["mean_weight"] == pytest.approx(summary["total_weight"] / len(splits))
    assert summary["total_bytes"] == sum(f.base_file.size_bytes for f in files)
    assert summary["estimated_rows"] == sum(f.record_count for f in files)


def test_the_summary_of_no_splits_is_zeros():
    assert summarise_splits([]) == {
        "count": 0,
        "parts": 0,
        "total_weight": 0,
        "min_weight": 0,
        "max_weight": 0,
        "mean_weight": 0.0,
        "total_bytes": 0,
        "estimated_rows": 0,
    }


# A real parquet file: the parts' row groups read every row exactly once.


def write_parquet(path: Path, rows: int, *, use_dictionary: bool) -> pa.Table:
    table = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "name": pa.array([f"name-{n % 97}" for n in range(rows)]),
            "amount": pa.array([n * 0.25 for n in range(rows)]),
        }
    )
    pq.write_table(table, path, row_group_size=1_000, use_dictionary=use_dictionary)
    return table


@pytest.mark.parametrize("use_dictionary", [True, False], ids=["dictionary-pages", "plain-pages"])
def test_reading_each_parts_row_groups_returns_every_row_of_a_parquet_file_once(tmp_path, use_dictionary):
    path = tmp_path / "data.parquet"
    table = write_parquet(path, 20_000, use_dictionary=use_dictionary)
    parquet = pq.ParquetFile(path)
    metadata = parquet.metadata
    size = path.stat().st_size
    base = data_file(str(path), size, metadata.num_rows, row_group_offsets(metadata))

    splits = list(plan_splits([file_slice(base)], target_size=size // 5, open_file_cost=0))

    parts = parts_by_path(splits)[str(path)]
    assert len(parts) >= 5
    groups_read = [row_groups_in_range(metadata, p.start, p.length) for p in parts]
    assert all(groups_read), "every part reads at least one row group"
    assert sorted(itertools.chain.from_iterable(groups_read)) == list(range(metadata.num_row_groups))
    ids = pa.concat_arrays(
        [
            parquet.read_row_groups(groups, columns=["id"]).column("id").combine_chunks()
            for groups in groups_read
        ]
    )
    assert sorted(ids.to_pylist()) == table.column("id").to_pylist()
    for part, groups in zip(parts, groups_read, strict=True):
        actual_rows = sum(metadata.row_group(g).num_rows for g in groups)
        # The byte-proportional estimate is close to the rows actually in the part's row groups.
        assert abs(part.estimated_rows - actual_rows) <= 0.1 * metadata.num_rows


def test_a_part_covering_the_whole_file_reads_every_row_group(tmp_path):
    path = tmp_path / "whole.parquet"
    write_parquet(path, 5_000, use_dictionary=True)
    metadata = pq.ParquetFile(path).metadata

    assert row_groups_in_range(metadata, 0, path.stat().st_size) == list(range(metadata.num_row_groups))
    assert row_groups_in_range(metadata, 0, 0) == []


@pytest.mark.parametrize("use_dictionary", [True, False], ids=["dictionary-pages", "plain-pages"])
def test_row_group_offsets_agree_with_the_split_offsets_pyiceberg_writes(tmp_path, use_dictionary):
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    path = tmp_path / "data.parquet"
    write_parquet(path, 8_000, use_dictionary=use_dictionary)
    metadata = pq.ParquetFile(path).metadata
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "amount", DoubleType(), required=False),
    )

    statistics = data_file_statistics_from_parquet_metadata(
        metadata, compute_statistics_plan(schema, {}), parquet_path_to_id_mapping(schema)
    )

    assert list(row_group_offsets(metadata)) == statistics.split_offsets


@pytest.mark.parametrize("table", ["spark_v2_position_deletes", "spark_v2_lineitem_partitioned"])
def test_row_group_offsets_agree_with_the_split_offsets_spark_wrote_in_iceberg_manifests(
    iceberg_fixture, table
):
    import fastavro

    location = iceberg_fixture(table)
    checked = 0
    for manifest in glob.glob(str(location / "metadata" / "*-m*.avro")):
        with open(manifest, "rb") as stream:
            for entry in fastavro.reader(stream):
                written = entry["data_file"]
                path = written["file_path"].removeprefix("file://")
                if not written.get("split_offsets") or not Path(path).exists():
                    continue
                assert list(row_group_offsets(pq.ParquetFile(path).metadata)) == written["split_offsets"]
                checked += 1
    assert checked > 0
