"""Row-group skipping by parquet statistics (``storage.spec.rowgroups``) in the Iceberg slice
reader: the groups a read plans are asserted, and every filter returns exactly the rows a read
without skipping returns (the whole file read, then the exact Arrow filter)."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from storage.formats.iceberg.read import SliceReader
from storage.spec import rowgroups
from storage.spec.expressions import bind_filter, to_arrow
from storage.spec.models import DataFile, FileSlice, PartitionDescriptor, Split, SplitPart
from storage.spec.rowgroups import leaf_index, usable
from storage.spec.splits import row_group_start
from storage.spec.table import output_columns
from tests.spec.iceberg_writer import fid
from tests.spec.test_hudi import _open as hudi_open
from tests.spec.test_hudi import hudi_table_path, table_copy  # noqa: F401 - fixtures

GROUP = 50
GROUPS = 6
UTC = dt.UTC
D = decimal.Decimal


def write(path: Path, columns: dict[str, pa.Array], fields: list[pa.Field], group: int = GROUP) -> Path:
    pq.write_table(pa.table(columns, schema=pa.schema(fields)), path, row_group_size=group)
    return path


def file_slice(path: Path, *, partition: dict[str, Any] | None = None, **extra: Any) -> FileSlice:
    rows = pq.ParquetFile(path).metadata.num_rows
    base = DataFile(
        path=str(path),
        size_bytes=path.stat().st_size,
        record_count=rows,
        partition=partition or {},
        extra=extra,
    )
    return FileSlice(PartitionDescriptor(""), base)


def read(schema: pa.Schema, piece: FileSlice, filters: str | None, columns: list[str] | None = None) -> Any:
    """(rows as a list of dicts, the row groups the reader planned, groups it skipped)."""
    reader = SliceReader(PyArrowFileIO(), schema, columns, bind_filter(filters, schema))
    assert piece.base_file is not None
    with open(piece.base_file.path, "rb") as handle:
        planned = reader.plan_row_groups(pq.ParquetFile(handle), piece.base_file, None, None)
    reader.row_groups_skipped = 0
    rows = [row for batch in reader.read(piece) for row in batch.to_pylist()]
    return rows, planned, reader.row_groups_skipped


def reference(
    schema: pa.Schema, piece: FileSlice, filters: str | None, columns: list[str] | None = None
) -> Any:
    """The rows without any skipping: every row group read, then the exact filter."""
    reader = SliceReader(PyArrowFileIO(), schema, None, None)
    table = pa.Table.from_batches(list(reader.read(piece)), schema=schema)
    expr = bind_filter(filters, schema)
    if expr is not None:
        table = table.filter(to_arrow(expr))
    return table.select(output_columns(columns, schema)).to_pylist()


def same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    return repr(a) == repr(b)  # NaN compares equal by its repr


# -- a file of disjoint id ranges ------------------------------------------------------------------


@pytest.fixture
def ranges(tmp_path: Path) -> tuple[pa.Schema, FileSlice]:
    """Four row groups of 100 rows: ids 0-99, 100-199, 200-299, 300-399; written as int32 and
    read as a long (schema evolution)."""
    path = write(
        tmp_path / "ranges.parquet",
        {"id": pa.array(range(400), pa.int32()), "name": [f"n{i}" for i in range(400)]},
        [fid("id", pa.int32(), 1), fid("name", pa.string(), 2)],
        group=100,
    )
    schema = pa.schema([fid("id", pa.int64(), 1), fid("name", pa.string(), 2)])
    return schema, file_slice(path)


def test_only_the_row_groups_that_can_match_are_read(ranges):
    schema, piece = ranges
    rows, planned, skipped = read(schema, piece, "id >= 150 and id < 155")
    assert rows == [{"id": i, "name": f"n{i}"} for i in range(150, 155)]
    assert planned == [1]
    assert skipped == 3
    rows, planned, _ = read(schema, piece, "id < 5 or id = 399", ["name"])
    assert rows == [
        {"name": "n0"},
        {"name": "n1"},
        {"name": "n2"},
        {"name": "n3"},
        {"name": "n4"},
        {"name": "n399"},
    ]
    assert planned == [0, 3]


def test_a_filter_no_group_can_match_reads_no_group(ranges):
    schema, piece = ranges
    assert read(schema, piece, f"id > {2**40}") == ([], [], 4)
    assert read(schema, piece, "id is null") == ([], [], 4)


def test_a_filter_on_an_unskippable_expression_reads_every_group(ranges):
    schema, piece = ranges
    rows, planned, skipped = read(schema, piece, "id != 7")
    assert len(rows) == 399 and {r["id"] for r in rows} == set(range(400)) - {7}
    assert planned == [0, 1, 2, 3] and skipped == 0


def test_a_split_part_skips_only_among_its_own_row_groups(ranges):
    schema, piece = ranges
    assert piece.base_file is not None
    cut = row_group_start(pq.ParquetFile(piece.base_file.path).metadata.row_group(2))
    reader = SliceReader(PyArrowFileIO(), schema, None, bind_filter("id >= 150", schema))
    first = [r["id"] for b in reader.read(piece, 0, cut) for r in b.to_pylist()]
    assert first == list(range(150, 200))
    assert reader.row_groups_skipped == 1
    rest = [r["id"] for b in reader.read(piece, cut, piece.base_file.size_bytes - cut) for r in b.to_pylist()]
    assert rest == list(range(200, 400))
    assert reader.row_groups_skipped == 1


def test_a_renamed_column_uses_the_statistics_of_its_field_id_not_its_name(tmp_path):
    # the file's "a" (id 1) is the table's "b"; the file's "b" (id 2) is the table's "c"
    path = write(
        tmp_path / "renamed.parquet",
        {"a": pa.array(range(400), pa.int64()), "b": pa.array(range(1000, 1400), pa.int64())},
        [fid("a", pa.int64(), 1), fid("b", pa.int64(), 2)],
        group=100,
    )
    schema = pa.schema([fid("b", pa.int64(), 1), fid("c", pa.int64(), 2)])
    piece = file_slice(path)
    rows, planned, _ = read(schema, piece, "b < 3")
    assert rows == [{"b": 0, "c": 1000}, {"b": 1, "c": 1001}, {"b": 2, "c": 1002}]
    assert planned == [0]
    rows, planned, _ = read(schema, piece, "c >= 1398")
    assert rows == [{"b": 398, "c": 1398}, {"b": 399, "c": 1399}]
    assert planned == [3]


# -- columns a file lacks ----------------------------------------------------------------------------


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    return write(
        tmp_path / "old.parquet",
        {"id": pa.array(range(200), pa.int64())},
        [fid("id", pa.int64(), 1)],
    )


def test_a_column_added_later_reads_as_null_and_is_skipped_on_as_all_null(old_file):
    schema = pa.schema([fid("id", pa.int64(), 1), fid("x", pa.int64(), 2)])
    piece = file_slice(old_file)
    rows, planned, _ = read(schema, piece, "x is null and id < 2")
    assert rows == [{"id": 0, "x": None}, {"id": 1, "x": None}]
    assert planned == [0]
    assert read(schema, piece, "x = 1") == ([], [], 4)
    assert read(schema, piece, "x is not null") == ([], [], 4)


def test_a_column_with_an_initial_default_is_not_taken_for_all_null(old_file):
    field = pa.field("x", pa.int64(), True, {b"PARQUET:field_id": b"2", b"iceberg.initial-default": b"7"})
    schema = pa.schema([fid("id", pa.int64(), 1), field])
    piece = file_slice(old_file)
    rows, planned, _ = read(schema, piece, "x = 7 and id >= 198")
    assert rows == [{"id": 198, "x": 7}, {"id": 199, "x": 7}]
    assert planned == [3]
    assert read(schema, piece, "x is null") == ([], [], 4)
    assert read(schema, piece, "x > 7") == ([], [], 4)
    rows, _, _ = read(schema, piece, "x is not null")
    assert len(rows) == 200 and {r["x"] for r in rows} == {7}


def test_a_column_filled_by_its_identity_partition_value_is_not_taken_for_all_null(old_file):
    schema = pa.schema([fid("id", pa.int64(), 1), fid("region", pa.string(), 2)])
    piece = file_slice(old_file, partition={"region": "eu"}, identity_columns={2: "region"})
    rows, planned, _ = read(schema, piece, "region = 'eu' and id < 1")
    assert rows == [{"id": 0, "region": "eu"}]
    assert planned == [0]
    assert read(schema, piece, "region = 'us'") == ([], [], 4)
    assert read(schema, piece, "region is null") == ([], [], 4)
    rows, _, _ = read(schema, piece, "region starts with 'e'")
    assert len(rows) == 200


# -- every kind of statistic, against a read without skipping -----------------------------------------


def _values() -> dict[str, list[Any]]:
    ids = list(range(GROUP * GROUPS))
    nan = math.nan
    v: list[Any] = []
    for group in range(GROUPS):
        for row in range(GROUP):
            value: Any = float(group * 100 + row)
            if group == 0:
                value = None  # a null-only group
            elif group == 1 and row % 7 == 0:
                value = nan  # NaN among values
            elif group == 2:
                value = nan  # a NaN-only group
            elif group == 3:
                value = -0.0 if row % 2 else 0.0
            v.append(value)
    prefixes = ["aa", "ab", "abc", "b", "ba", "\u00e9t\u00e9"]
    s = [f"{prefixes[i // GROUP]}{'z' * 70}{i:04d}" for i in ids]  # long strings: truncatable
    s[GROUP * 4] = None
    base = dt.datetime(2024, 1, 1, tzinfo=UTC)
    ts = [base + dt.timedelta(hours=i // GROUP * 24, milliseconds=i % GROUP) for i in ids]
    dec = [D(i) / 4 for i in ids]
    day = [dt.date(2024, 1, 1) + dt.timedelta(days=i // GROUP) for i in ids]
    f32 = [0.1 if i // GROUP == 2 else 0.5 for i in ids]
    st = [None if i // GROUP == 5 else {"x": i} for i in ids]
    return {"id": ids, "v": v, "s": s, "ts": ts, "dec": dec, "day": day, "f32": f32, "st": st}


FILE_FIELDS = [
    fid("id", pa.int32(), 1),
    fid("v", pa.float32(), 2),
    fid("s", pa.string(), 3),
    fid("ts", pa.timestamp("ms", tz="UTC"), 4),
    fid("dec", pa.decimal128(9, 2), 5),
    fid("day", pa.date32(), 6),
    fid("f32", pa.float32(), 7),
    fid("st", pa.struct([fid("x", pa.int64(), 9)]), 8),
]
TABLE_FIELDS = [
    fid("id", pa.int64(), 1),
    fid("v", pa.float64(), 2),
    fid("s", pa.string(), 3),
    fid("ts", pa.timestamp("us", tz="UTC"), 4),
    fid("dec", pa.decimal128(12, 2), 5),
    fid("day", pa.date32(), 6),
    fid("f32", pa.float32(), 7),
    fid("st", pa.struct([fid("x", pa.int64(), 9)]), 8),
]

# (filter, the row groups it must read: None when not asserted)
FILTERS: list[tuple[str, list[int] | None]] = [
    ("v > 420", [2, 4, 5]),  # the NaN-only group has no bounds
    ("v > 1000", [2]),  # the NaN-only group has no bounds
    ("v < 0", [2]),
    ("v <= 0", [2, 3]),
    ("v = 0", [2, 3]),
    ("v = -0.0", [2, 3]),
    ("not (v < 5)", list(range(GROUPS))),  # NaN satisfies it: float bounds say nothing
    ("not (v > 5)", None),
    ("v != 120", None),
    ("v in (101.0, 520.0)", None),
    ("v not in (0.0)", None),
    ("v is null", [0]),
    ("v is not null", [1, 2, 3, 4, 5]),
    ("v is null or id = 260", [0, 5]),
    ("s starts with 'ab'", [1, 2]),
    ("s starts with 'abc'", [2]),
    ("not (s starts with 'a')", [3, 4, 5]),
    ("s >= 'b'", [3, 4, 5]),
    (f"s > 'ab{'z' * 70}'", [1, 3, 4, 5]),
    ("s = 'b'", []),
    ("s < 'ab'", [0]),
    ("s is null", [4]),
    ("s starts with '\u00e9'", [5]),
    ("ts >= timestamp '2024-01-04 00:00:00+00:00'", [3, 4, 5]),
    ("ts < timestamp '2024-01-02 00:00:00.000001Z'", [0, 1]),
    ("ts = timestamp '2024-01-03 00:00:00.049Z'", [2]),
    ("ts > timestamp '2024-01-03 00:00:00.049Z'", [2, 3, 4, 5]),  # upper bounds + 1 ms
    ("dec > 74.5", [5]),
    ("dec > 74.75", []),
    ("dec = 12.25", [0]),
    ("day = date '2024-01-03'", [2]),
    ("f32 = 0.1", None),
    ("f32 in (0.1)", None),
    ("st.x < 3", [0]),
    ("st.x is null", [5]),
    ("st.x >= 240", [4]),
    ("id between 45 and 55", [0, 1]),
    ("not (id >= 10 and id < 290)", [0, 5]),
]


@pytest.fixture
def many(tmp_path: Path) -> tuple[pa.Schema, FileSlice]:
    columns = _values()
    arrays = {f.name: pa.array(columns[f.name], f.type) for f in FILE_FIELDS}
    path = write(tmp_path / "many.parquet", arrays, FILE_FIELDS)
    return pa.schema(TABLE_FIELDS), file_slice(path)


@pytest.mark.parametrize(("filters", "groups"), FILTERS, ids=[f for f, _ in FILTERS])
def test_skipping_never_changes_the_rows(many, filters, groups):
    schema, piece = many
    rows, planned, _ = read(schema, piece, filters)
    assert same(rows, reference(schema, piece, filters))
    if groups is not None:
        assert planned == groups
        assert {r["id"] // GROUP for r in rows} <= set(groups)


def test_float32_columns_are_never_skipped_on(many):
    schema, piece = many
    rows, planned, _ = read(schema, piece, "f32 in (0.1)")
    assert planned == list(range(GROUPS))
    # `in` compares in double, as `=` does: float32(0.1) is not 0.1 (test_expressions' float32 test)
    assert rows == []
    rows, planned, _ = read(schema, piece, "f32 in (0.5)")
    assert planned == list(range(GROUPS))
    assert [r["id"] for r in rows] == [i for i in range(GROUPS * GROUP) if i // GROUP != 2]


def test_a_nanosecond_file_column_is_never_skipped_on(tmp_path):
    stamps = [dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i) for i in range(200)]
    path = write(
        tmp_path / "ns.parquet",
        {"ts": pa.array([s.replace() for s in stamps], pa.timestamp("ns"))},
        [fid("ts", pa.timestamp("ns"), 1)],
    )
    schema = pa.schema([fid("ts", pa.timestamp("us"), 1)])
    rows, planned, _ = read(schema, file_slice(path), "ts >= timestamp '2024-01-01 00:03:00'")
    assert [r["ts"] for r in rows] == stamps[180:]
    assert planned == [0, 1, 2, 3]


def test_statistics_are_used_only_across_exact_conversions():
    assert usable(pa.int32(), pa.int64())
    assert not usable(pa.int64(), pa.int32())
    assert not usable(pa.uint32(), pa.int64())
    assert usable(pa.float32(), pa.float64())
    assert not usable(pa.float32(), pa.float32())
    assert not usable(pa.int32(), pa.float64())
    assert usable(pa.decimal128(9, 2), pa.decimal128(12, 2))
    assert not usable(pa.decimal128(9, 2), pa.decimal128(9, 3))
    assert usable(pa.timestamp("ms"), pa.timestamp("us"))
    assert not usable(pa.timestamp("us"), pa.timestamp("ms"))
    assert not usable(pa.timestamp("us"), pa.timestamp("us", tz="UTC"))
    assert not usable(pa.timestamp("ns"), pa.timestamp("ns"))
    assert not usable(pa.date32(), pa.timestamp("us"))
    assert usable(pa.large_string(), pa.string())
    assert not usable(pa.binary(), pa.string())


def test_leaf_columns_are_counted_past_lists_maps_and_structs(tmp_path):
    fields = [
        pa.field("l", pa.list_(pa.struct([("a", pa.int32()), ("b", pa.string())]))),
        pa.field("m", pa.map_(pa.string(), pa.struct([("x", pa.float64()), ("y", pa.bool_())]))),
        pa.field("s", pa.struct([("c", pa.int64()), ("d", pa.struct([("e", pa.string())]))])),
        pa.field("z", pa.int64()),
    ]
    path = tmp_path / "nested.parquet"
    pq.write_table(pa.table({f.name: pa.nulls(1, f.type) for f in fields}, schema=pa.schema(fields)), path)
    metadata = pq.ParquetFile(path).metadata
    schema = pq.ParquetFile(path).schema_arrow
    names = [metadata.schema.column(j).path for j in range(metadata.num_columns)]
    assert names[leaf_index(schema, [3], metadata.num_columns)] == "z"
    assert names[leaf_index(schema, [2, 0], metadata.num_columns)] == "s.c"
    assert names[leaf_index(schema, [2, 1, 0], metadata.num_columns)] == "s.d.e"
    assert leaf_index(schema, [0], metadata.num_columns) is None  # a list: no single leaf
    assert leaf_index(schema, [1], metadata.num_columns) is None
    assert leaf_index(schema, [2], metadata.num_columns) is None
    assert leaf_index(schema, [3], metadata.num_columns + 1) is None


def test_hudi_base_file_parts_skip_row_groups(table_copy):
    path = table_copy("cow_v6_nonpartitioned")
    table = hudi_open(path)
    (piece,) = table.file_index().list_files_at()
    assert piece.base_file is not None and not piece.delete_files
    everything = pa.Table.from_batches(list(table.read(piece)))  # hudi-rs, before the rewrite
    expected = everything.filter(pc.field("id") >= 3).to_pylist()
    assert sorted(r["id"] for r in expected) == [3, 4]
    base = Path(piece.base_file.path)
    original = pq.read_table(base)
    assert original.column("id").to_pylist() == [2, 3, 1, 4]
    pq.write_table(original, base, row_group_size=1)  # the same rows, one per row group
    cut = row_group_start(pq.ParquetFile(base).metadata.row_group(2))
    assert cut < piece.base_file.size_bytes
    parts = (SplitPart(piece, 0, cut, 0), SplitPart(piece, cut, base.stat().st_size - cut, 0))
    before = dict(rowgroups.totals)
    rows = [
        r for batch in table.read(Split(parts=parts, weight=1), filters="id >= 3") for r in batch.to_pylist()
    ]
    assert repr(rows) == repr(expected)
    assert rowgroups.totals["skipped"] - before["skipped"] == 2
    assert rowgroups.totals["kept"] - before["kept"] == 2
