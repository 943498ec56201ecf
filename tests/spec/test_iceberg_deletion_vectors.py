"""Iceberg v3 deletion vectors (Puffin ``deletion-vector-v1`` blobs) in reads, listings, splits,
Spark reads and compaction planning; v3 row lineage in listings.

The tables are written by ``iceberg_v3_tables`` (pyiceberg 0.12 cannot write deletion vectors):
three data files of 10, 10 and 5 rows (ids 0..24, names ``n<id>``); the vectors of the first
two share one Puffin file (positions 1, 3, 4 of the first, 0 and 9 of the second).
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest

from storage.formats.iceberg._puffin import decode_blob, read_footer
from storage.spec import load_table
from storage.spec.errors import CorruptTable
from storage.spec.models import FileContent
from storage.spec.splits import plan_splits
from tests.spec.iceberg_v3_tables import dv_blob, write_v3_table

# ids surviving the default vectors: file 0 loses ids 1, 3, 4; file 1 loses ids 10, 19
EXPECTED_IDS = [0, 2, 5, 6, 7, 8, 9, *range(11, 19), *range(20, 25)]


def expected_rows(ids=EXPECTED_IDS):
    return [{"id": i, "name": f"n{i}"} for i in ids]


@pytest.fixture
def v3(tmp_path):
    return write_v3_table(tmp_path / "v3")


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


# -- the writer writes what the spec says --------------------------------------------------------


def test_the_puffin_file_holds_both_vectors_with_a_footer(v3):
    puffin = _local(v3.puffin_path)
    data = puffin.read_bytes()
    assert data[:4] == b"PFA1" and data[-4:] == b"PFA1"
    with puffin.open("rb") as handle:
        footer = read_footer(handle, len(data), str(puffin))
    blobs = footer["blobs"]
    assert [b["type"] for b in blobs] == ["deletion-vector-v1"] * 2
    assert [b["properties"]["referenced-data-file"] for b in blobs] == v3.data_paths[:2]
    for blob, expected in zip(blobs, ([1, 3, 4], [0, 9]), strict=True):
        raw = data[blob["offset"] : blob["offset"] + blob["length"]]
        assert list(decode_blob(raw, "test")) == expected
        assert raw == dv_blob(expected)


# -- reads ---------------------------------------------------------------------------------------


def test_rows_at_deleted_positions_are_not_read(v3):
    table = load_table(str(v3.location))
    rows = table.read_arrow().to_pylist()
    assert rows == expected_rows()


def test_each_slice_reads_its_own_rows_minus_its_own_vector(v3):
    table = load_table(str(v3.location))
    slices = list(table.file_index().list_files_at())
    for file_slice, rows in zip(slices, v3.rows, strict=True):
        deleted = set(v3.deleted.get(file_slice.base_file.path, ()))
        expected = [{"id": i, "name": n} for position, (i, n) in enumerate(rows) if position not in deleted]
        assert table.read_arrow(file_slice).to_pylist() == expected


def test_filters_and_projections_apply_after_the_vectors(v3):
    table = load_table(str(v3.location))
    assert table.read_arrow(filters="id >= 8 and id <= 12").to_pylist() == expected_rows([8, 9, 11, 12])
    assert table.read_arrow(columns=["name"]).column("name").to_pylist() == [f"n{i}" for i in EXPECTED_IDS]


def test_a_vector_deleting_a_high_position_and_large_positions(tmp_path):
    # 64-bit roaring: positions beyond 2**32 are legal in the bitmap; positions inside the file
    # are what a read removes (one row group boundary crossed: row groups of 4 rows)
    v3 = write_v3_table(tmp_path / "t", sizes=(10,), deleted={0: [3, 4, 5, 9, 2**33]})
    table = load_table(str(v3.location))
    assert table.read_arrow().column("id").to_pylist() == [0, 1, 2, 6, 7, 8]


def test_an_older_position_delete_file_is_ignored_where_a_vector_exists(tmp_path):
    # the spec: a writer of a vector merges the file's position deletes into it, so readers
    # ignore position delete files for a data file that has a vector
    v3 = write_v3_table(tmp_path / "t", stale_position_delete=(0, 7))
    table = load_table(str(v3.location))
    assert table.read_arrow().to_pylist() == expected_rows()
    first = next(iter(table.file_index().list_files_at()))
    assert [d.content for d in first.delete_files] == [FileContent.DELETION_VECTOR]


def test_position_delete_files_still_apply_to_files_without_a_vector(tmp_path):
    v3 = write_v3_table(tmp_path / "t", deleted={1: [0, 9]}, stale_position_delete=(0, 7))
    table = load_table(str(v3.location))
    ids = [i for i in range(25) if i not in (7, 10, 19)]
    assert table.read_arrow().to_pylist() == expected_rows(ids)


# -- listings and splits -------------------------------------------------------------------------


def test_each_slice_carries_exactly_its_own_vector(v3):
    table = load_table(str(v3.location))
    slices = list(table.file_index().list_files_at())
    assert [s.base_file.path for s in slices] == v3.data_paths
    for file_slice, blob in zip(slices[:2], v3.blobs, strict=True):
        (dv,) = file_slice.delete_files
        assert dv.content is FileContent.DELETION_VECTOR
        assert dv.file_format == "puffin"
        assert dv.path == v3.puffin_path
        assert dv.extra["referenced_data_file"] == file_slice.base_file.path
        assert dv.extra["content_offset"] == blob.offset
        assert dv.size_bytes == dv.extra["content_size_in_bytes"] == blob.length
        assert dv.extra["file_size_in_bytes"] == _local(v3.puffin_path).stat().st_size
        assert dv.record_count == len(blob.positions)
    assert slices[2].delete_files == ()
    partitions = table.file_index().partitions_at()
    assert [(p.file_count, p.delete_file_count) for p in partitions] == [(3, 2)]


def test_row_lineage_first_row_ids_are_listed(tmp_path):
    # data files without a first_row_id inherit the manifest's (0) plus the rows before them;
    # a file with its own keeps it
    v3 = write_v3_table(tmp_path / "t", sizes=(10, 10, 5, 3), own_first_row_ids={1: 500})
    table = load_table(str(v3.location))
    listed = [s.base_file.extra.get("first_row_id") for s in table.file_index().list_files_at()]
    assert listed == v3.first_row_ids == [0, 500, 10, 15]


def test_splits_weigh_the_vector_bytes(v3):
    table = load_table(str(v3.location))
    slices = list(table.file_index().list_files_at())
    # one part per bin: each split is one slice, weighed as base bytes + its vector's blob bytes
    splits = list(plan_splits(slices, target_size=1, open_file_cost=0))
    weights = {s.parts[0].file_slice.path: s.weight for s in splits}
    for file_slice in slices:
        base = file_slice.base_file
        blob = sum(d.size_bytes for d in file_slice.delete_files)
        assert weights[base.path] == base.size_bytes + blob
    assert weights[v3.data_paths[0]] == slices[0].base_file.size_bytes + v3.blobs[0].length
    # a split read through the table API applies the vectors too
    rows = [r for split in table.plan_splits() for r in table.read_arrow(split).to_pylist()]
    assert sorted(rows, key=lambda r: r["id"]) == expected_rows()


@pytest.mark.spark
def test_the_spark_data_source_reads_the_same_rows(v3, spark):
    from storage.spec.spark_source import read_table

    frame = read_table(spark, str(v3.location))
    rows = sorted((r["id"], r["name"]) for r in frame.collect())
    assert rows == [(i, f"n{i}") for i in EXPECTED_IDS]
    filtered = read_table(spark, str(v3.location), filters="id < 12")
    assert sorted(r["id"] for r in filtered.collect()) == [0, 2, 5, 6, 7, 8, 9, 11]


# -- corrupt Puffin files ------------------------------------------------------------------------


def _corrupt(v3, offset: int, value: bytes) -> None:
    path = _local(v3.puffin_path)
    data = bytearray(path.read_bytes())
    data[offset : offset + len(value)] = value
    path.write_bytes(bytes(data))


def _assert_corrupt(v3, *words: str) -> None:
    table = load_table(str(v3.location))
    with pytest.raises(CorruptTable) as raised:
        table.read_arrow()
    message = str(raised.value)
    assert v3.puffin_path in message
    for word in words:
        assert word in message


def test_a_bad_puffin_magic_is_corrupt(v3):
    _corrupt(v3, 0, b"XXXX")
    _assert_corrupt(v3, "Puffin magic")


def test_a_bad_vector_magic_is_corrupt(v3):
    _corrupt(v3, v3.blobs[1].offset + 4, b"\x00")
    _assert_corrupt(v3, "magic")


def test_a_bad_crc_is_corrupt(v3):
    blob = v3.blobs[0]
    crc_at = blob.offset + blob.length - 4
    original = _local(v3.puffin_path).read_bytes()[crc_at : crc_at + 4]
    _corrupt(v3, crc_at, struct.pack(">I", struct.unpack(">I", original)[0] ^ 1))
    _assert_corrupt(v3, "CRC-32")


def test_a_flipped_bitmap_byte_fails_the_crc(v3):
    blob = v3.blobs[0]
    _corrupt(v3, blob.offset + 10, b"\xff")
    _assert_corrupt(v3, "CRC-32")


def test_an_offset_out_of_range_is_corrupt(tmp_path):
    v3 = write_v3_table(tmp_path / "t", offset_shift=10_000)
    _assert_corrupt(v3, "outside the file")


def test_a_length_field_that_disagrees_is_corrupt(v3):
    _corrupt(v3, v3.blobs[0].offset, struct.pack(">I", 9999))
    _assert_corrupt(v3, "length")


def test_a_missing_puffin_file_is_corrupt(v3):
    _local(v3.puffin_path).unlink()
    _assert_corrupt(v3, "missing")


def test_a_cardinality_other_than_the_manifest_record_count_is_corrupt(v3):
    from storage.formats.iceberg._puffin import read_deletion_vector

    table = load_table(str(v3.location))
    file_slice = next(iter(table.file_index().list_files_at()))
    (dv,) = file_slice.delete_files
    io = table.pyiceberg_table.io
    assert list(read_deletion_vector(io, dv, file_slice.base_file.path)) == [1, 3, 4]
    with pytest.raises(CorruptTable, match="holds 3 positions, its manifest entry says 4"):
        read_deletion_vector(io, dataclasses.replace(dv, record_count=4), file_slice.base_file.path)
    with pytest.raises(CorruptTable, match="belongs to"):
        read_deletion_vector(io, dv, v3.data_paths[1])


def test_a_vector_found_through_the_footer_when_the_entry_lacks_its_offset(v3):
    from storage.formats.iceberg._puffin import read_deletion_vector

    table = load_table(str(v3.location))
    second = list(table.file_index().list_files_at())[1]
    (dv,) = second.delete_files
    extra = {k: v for k, v in dv.extra.items() if k not in ("content_offset", "content_size_in_bytes")}
    bare = dataclasses.replace(dv, extra=extra)
    assert list(read_deletion_vector(table.pyiceberg_table.io, bare, second.base_file.path)) == [0, 9]


# -- compaction ------------------------------------------------------------------------------------


def test_the_summary_counts_each_vector_of_a_shared_puffin_file_once(v3):
    """The snapshot summary here lacks the size totals, so the summary counts by listing: both
    vectors live in one Puffin file, and each must be subtracted and weighed."""
    table = load_table(str(v3.location))
    slices = list(table.file_index().list_files_at())
    vectors = [d for s in slices for d in s.delete_files if d.content is FileContent.DELETION_VECTOR]

    summary = table.summary()

    assert len(vectors) == 2 and len({v.path for v in vectors}) == 1
    assert summary.record_count == len(expected_rows()) == len(table.read_arrow())
    assert summary.total_bytes == sum(s.base_file.size_bytes for s in slices) + sum(
        v.size_bytes for v in vectors
    )
    assert summary.file_count == len(slices)
