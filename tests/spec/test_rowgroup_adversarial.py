"""Adversarial checks of row-group skipping (``storage.spec.rowgroups``) and of deleted-position
masks: every read with a filter (skipping active) must return exactly the rows of the same read
without a filter, filtered afterwards by the exact Arrow filter. Values are compared, never counts.

* a sweep over every Iceberg and Delta fixture written by other engines: each primitive column,
  literals taken from the data (min, median, max) with every operator;
* parquet files written with other conventions: statistics for some columns only, dictionary
  pages, INT96 and millisecond timestamps, decimals on INT32/INT64/FIXED_LEN_BYTE_ARRAY,
  NaN and signed zeros, struct leaves under null parents, empty row groups, unicode strings;
* position deletes inside and after skipped groups, with split parts.
"""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from storage.formats.iceberg.read import SliceReader
from storage.spec.expressions import (
    Comparison,
    In,
    IsNull,
    Not,
    NotIn,
    NotNull,
    Or,
    StartsWith,
    bind_filter,
    to_arrow,
)
from storage.spec.models import DataFile, FileContent, FileSlice, PartitionDescriptor
from storage.spec.splits import row_group_start
from tests.spec.iceberg_writer import FILE_PATH_FIELD_ID, ROW_POSITION_FIELD_ID, fid
from tests.spec.test_hudi import hudi_table_path, table_copy  # noqa: F401 - fixtures

D = decimal.Decimal
UTC = dt.UTC

# -- helpers ----------------------------------------------------------------------------------------


def _key(row: dict[str, Any]) -> str:
    return repr(sorted(row.items()))  # NaN compares equal by its repr


def _same_rows(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert sorted(map(_key, got)) == sorted(map(_key, want))


_FLOAT_BITS = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}


def _has_float(data_type: pa.DataType) -> bool:
    if pa.types.is_floating(data_type):
        return True
    if pa.types.is_dictionary(data_type):
        return _has_float(data_type.value_type)
    return any(_has_float(data_type.field(i).type) for i in range(data_type.num_fields))


def _float_bits(array: pa.Array) -> list[pa.Array] | None:
    """The floating-point leaves of ``array`` (as seen by ``to_pylist``: under null parents
    masked) viewed as integers of the same width; None for a layout not taken apart here."""
    t = array.type
    if pa.types.is_floating(t):
        return [array.view(_FLOAT_BITS[t.bit_width])]
    if not _has_float(t):
        return []
    children: list[pa.Array]
    if pa.types.is_struct(t):
        children = array.flatten()  # parent nulls merged into the children
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        children = [array.flatten()]  # the values of the lists, as sliced
    else:
        return None
    leaves: list[pa.Array] = []
    for child in children:
        found = _float_bits(child)
        if found is None:
            return None
        leaves += found
    return leaves


def _identical(got: pa.Table | None, want: pa.Table) -> bool:
    """Whether ``got`` holds exactly the rows of ``want`` in the same order, so that their
    ``to_pylist`` rows are equal value for value (and so by repr): the same column names, types
    and order, equal values, floats compared bit for bit (NaN equals NaN, -0.0 differs from
    0.0: Arrow's ``equals`` alone calls -0.0 and 0.0 equal and NaN unequal). False decides
    nothing: the caller then compares Python rows as before."""
    if got is None or not got.schema.equals(want.schema) or got.num_rows != want.num_rows:
        return False
    for index in range(want.num_columns):
        mine, theirs = got.column(index).combine_chunks(), want.column(index).combine_chunks()
        if not pa.types.is_floating(mine.type) and not mine.equals(theirs):
            return False  # nested floats are checked here too, then bit for bit below
        bits, wanted_bits = _float_bits(mine), _float_bits(theirs)
        if bits is None or wanted_bits is None or len(bits) != len(wanted_bits):
            return False
        if not all(a.equals(b) for a, b in zip(bits, wanted_bits, strict=True)):
            return False
    return True


def _as_table(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table | None:
    """The batches as one table (empty with ``schema`` when there are none); None when they
    do not make one table (the caller then compares Python rows)."""
    if not batches:
        return schema.empty_table()
    try:
        return pa.Table.from_batches(batches)
    except pa.ArrowInvalid:
        return None


def _family(data_type: pa.DataType) -> bool:
    """Whether filters with literals of this column's values can be written."""
    t = pa.types
    return any(
        test(data_type)
        for test in (
            t.is_integer,
            t.is_floating,
            t.is_string,
            t.is_large_string,
            t.is_binary,
            t.is_large_binary,
            t.is_boolean,
            t.is_decimal,
            t.is_date32,
            t.is_timestamp,
            t.is_time,
        )
    )


def _literals(column: pa.ChunkedArray) -> list[Any]:
    values = [v for v in column.to_pylist() if v is not None and not (isinstance(v, float) and v != v)]
    if not values:
        return []
    ordered = sorted(set(values))
    return [ordered[0], ordered[len(ordered) // 2], ordered[-1]]


def _boundary_filters(name: str, low: Any, middle: Any, high: Any, other: str) -> list[Any]:
    """The fixture sweep's set: every operator at the median, the edges at the minimum and maximum."""
    found = _filters(name, middle, other)
    found += [Comparison(op, name, low) for op in ("=", "<", "<=", "!=")]
    found += [Comparison(op, name, high) for op in ("=", ">", ">=")] + [Not(Comparison("<=", name, high))]
    return found


def _filters(name: str, value: Any, other: str) -> list[Any]:
    found: list[Any] = [Comparison(op, name, value) for op in ("=", "!=", "<", "<=", ">", ">=")]
    found += [
        In(name, (value,)),
        NotIn(name, (value,)),
        Not(Comparison(">", name, value)),
        Not(Comparison("<=", name, value)),
        Or(Comparison("=", name, value), IsNull(other)),
        Or(Comparison(">", name, value), Comparison("<", name, value)),
    ]
    if isinstance(value, str) and value:
        found += [StartsWith(name, value[:1]), StartsWith(name, value), Not(StartsWith(name, value[:1]))]
    return found


def _sweep(table: Any, schema: pa.Schema, everything: pa.Table | None = None) -> int:
    """Every filter over every primitive column of ``table`` read with skipping equals the
    unfiltered read filtered by Arrow; returns the number of filters checked. ``everything``:
    the unfiltered read when the caller already has it."""
    if everything is None:
        everything = pa.Table.from_batches(list(table.read()), schema=schema)
    everything = everything.combine_chunks()  # one chunk: each Arrow filter below is one pass
    checked = 0
    primitive = [f.name for f in schema if _family(f.type)]
    for field in schema:
        if not _family(field.type):
            continue
        other = next((n for n in primitive if n != field.name), field.name)
        filters = [IsNull(field.name), NotNull(field.name)]
        picks = _literals(everything.column(field.name))
        if picks:
            low, high = picks[0], picks[-1]
            filters += _boundary_filters(field.name, low, picks[len(picks) // 2], high, other)
        for expr in filters:
            bound = bind_filter(expr, schema)
            assert bound is not None
            wanted = everything.filter(to_arrow(bound))
            batches = list(table.read(filters=expr))
            if batches and _identical(pa.Table.from_batches(batches), wanted):
                checked += 1  # the same rows in the same order (the slow comparison below agrees)
                continue
            want = wanted.to_pylist()
            got = [row for batch in batches for row in batch.to_pylist()]
            try:
                _same_rows(got, want)
            except AssertionError:
                raise AssertionError(f"filter {expr!r}: {len(got)} rows read, {len(want)} expected") from None
            checked += 1
    return checked


ICEBERG_FIXTURES = [
    "spark_v2_position_deletes",
    "spark_v1_day_partitioned",
    "spark_v2_lineitem_partitioned",
    "spark_v2_equality_deletes",
    "trino_timetravel",
]
DELTA_FIXTURES = [
    "cdf-table",
    "data-reader-partition-values",
    "partition-type-primitives",
    "simple_table",
    "simple_table_with_checkpoint",
    "table-with-dv-small",
    "table_with_column_mapping",
]


@pytest.mark.parametrize("name", ICEBERG_FIXTURES)
def test_every_filter_on_every_column_of_an_iceberg_fixture_returns_the_filtered_rows(
    external_tables, tmp_path, name
):
    """A private relocated copy whose parquet files are rewritten with the same rows in about
    eight row groups each, so that files surviving pruning by manifest bounds still skip groups."""
    import subprocess
    import sys

    from storage.formats.iceberg import IcebergAdapter
    from storage.spec import rowgroups

    target = tmp_path / name
    tool = external_tables.parent / "tools" / "relocate_iceberg.py"
    subprocess.run(
        [sys.executable, str(tool), str(external_tables / "iceberg" / name), str(target)],
        check=True,
        capture_output=True,
    )
    table = IcebergAdapter.open(str(target))
    reference = pa.Table.from_batches(list(table.read()), schema=table.schema)
    for path in target.rglob("*.parquet"):
        data = pq.read_table(path)  # field ids kept in the field metadata
        pq.write_table(data, path, row_group_size=max(1, data.num_rows // 8))
    table = IcebergAdapter.open(str(target))
    everything = pa.Table.from_batches(list(table.read()), schema=table.schema)
    if not _identical(everything, reference):  # the rewrite kept every row
        _same_rows(everything.to_pylist(), reference.to_pylist())
    before = rowgroups.totals["skipped"]
    assert _sweep(table, table.schema, everything) > 0
    if reference.num_rows > 8:
        assert rowgroups.totals["skipped"] > before


@pytest.mark.parametrize("name", DELTA_FIXTURES)
def test_every_filter_on_every_column_of_a_delta_fixture_returns_the_filtered_rows(delta_fixture, name):
    from storage.formats.delta import DeltaAdapter

    table = DeltaAdapter.open(str(delta_fixture(name)))
    assert _sweep(table, table.schema) > 0


# -- synthetic files through the Iceberg slice reader -------------------------------------------------


def _slice(
    path: Path, deletes: tuple[DataFile, ...] = (), partition: dict[str, Any] | None = None
) -> FileSlice:
    rows = pq.ParquetFile(path).metadata.num_rows
    base = DataFile(
        path=str(path), size_bytes=path.stat().st_size, record_count=rows, partition=partition or {}
    )
    return FileSlice(PartitionDescriptor(""), base, deletes)


def _read(
    schema: pa.Schema, piece: FileSlice, expr: Any, start: int | None = None, length: int | None = None
):
    reader = SliceReader(PyArrowFileIO(), schema, None, bind_filter(expr, schema))
    rows = [row for batch in reader.read(piece, start, length) for row in batch.to_pylist()]
    return rows, reader.row_groups_skipped


def _all(
    schema: pa.Schema, piece: FileSlice, start: int | None = None, length: int | None = None
) -> pa.Table:
    reader = SliceReader(PyArrowFileIO(), schema, None, None)
    return pa.Table.from_batches(list(reader.read(piece, start, length)), schema=schema)


def _check(schema: pa.Schema, piece: FileSlice, filters: list[Any]) -> int:
    """Each filter read with skipping equals the full read filtered by Arrow; returns the
    number of row groups skipped over all filters (to show skipping was active)."""
    everything = _all(schema, piece).combine_chunks()
    skipped = 0
    for expr in filters:
        bound = bind_filter(expr, schema)
        assert bound is not None
        wanted = everything.filter(to_arrow(bound))
        reader = SliceReader(PyArrowFileIO(), schema, None, bind_filter(expr, schema))
        batches = list(reader.read(piece))
        if not _identical(_as_table(batches, schema), wanted):  # else the rows, as Python values
            got = [row for batch in batches for row in batch.to_pylist()]
            assert repr(got) == repr(wanted.to_pylist()), f"filter {expr!r}"
        skipped += reader.row_groups_skipped
    return skipped


def _sweep_file(schema: pa.Schema, piece: FileSlice) -> int:
    everything = _all(schema, piece)
    filters: list[Any] = []
    names = [f.name for f in schema if _family(f.type)]
    for name in names:
        other = next((n for n in names if n != name), name)
        filters += [IsNull(name), NotNull(name)]
        column = everything.column(name)
        values = [v for v in column.to_pylist() if v is not None and not (isinstance(v, float) and v != v)]
        ordered = sorted(set(values))
        # every group boundary value, plus min, median and max
        picks = ordered[:: max(1, len(ordered) // 8)] + [ordered[-1]] if ordered else []
        for value in dict.fromkeys(picks):
            filters += _filters(name, value, other)
    return _check(schema, piece, filters)


def test_a_column_written_without_statistics_is_never_skipped_on(tmp_path):
    path = tmp_path / "partial.parquet"
    fields = [fid("id", pa.int64(), 1), fid("v", pa.int64(), 2), fid("s", pa.string(), 3)]
    table = pa.table(
        {"id": range(300), "v": [i % 7 for i in range(300)], "s": [f"s{i:03d}" for i in range(300)]},
        schema=pa.schema(fields),
    )
    pq.write_table(table, path, row_group_size=50, write_statistics=["id"])
    metadata = pq.ParquetFile(path).metadata
    assert (
        metadata.row_group(0).column(1).statistics is None or not metadata.row_group(0).column(1).is_stats_set
    )
    schema = pa.schema(fields)
    filters = [
        "v = 3",
        "v > 5",
        "v is null",
        "s = 's120'",
        "s starts with 's2'",
        "id < 60 and v = 6",
        "id > 250 or s < 's010'",
    ]
    assert _check(schema, _slice(path), filters) > 0


def test_dictionary_encoded_and_dictionary_typed_string_columns(tmp_path):
    path = tmp_path / "dict.parquet"
    words = ["apple", "banana", "cherry", "damson", "elder", "fig"]
    values = [words[i // 50] for i in range(300)]
    table = pa.table(
        {
            "id": pa.array(range(300), pa.int64()),
            "w": pa.array(values).dictionary_encode(),  # the file's Arrow schema says dictionary
            "p": pa.array(values),  # plain type, dictionary pages
        }
    )
    pq.write_table(table, path, row_group_size=50, use_dictionary=True)
    schema = pa.schema([fid("id", pa.int64(), 1), fid("w", pa.string(), 2), fid("p", pa.string(), 3)])
    # files written without field ids: columns matched by name
    assert _sweep_file(schema, _slice(path)) > 0


def test_timestamps_in_seconds_milliseconds_and_int96(tmp_path):
    base = dt.datetime(2024, 3, 10, 1, 59, 59, 999000)
    stamps = [base + dt.timedelta(milliseconds=333 * i) for i in range(300)]
    aware = [s.replace(tzinfo=UTC) for s in stamps]
    table = pa.table(
        {
            "id": pa.array(range(300), pa.int64()),
            "ms": pa.array(stamps, pa.timestamp("ms")),
            "ms_tz": pa.array(aware, pa.timestamp("ms", tz="America/New_York")),
            "us_tz": pa.array(aware, pa.timestamp("us", tz="UTC")),
        }
    )
    plain = tmp_path / "ms.parquet"
    pq.write_table(table, plain, row_group_size=50, coerce_timestamps=None)
    int96 = tmp_path / "int96.parquet"
    pq.write_table(table, int96, row_group_size=50, use_deprecated_int96_timestamps=True)
    schema = pa.schema(
        [
            fid("id", pa.int64(), 1),
            pa.field("ms", pa.timestamp("us")),
            pa.field("ms_tz", pa.timestamp("us", tz="UTC")),
            pa.field("us_tz", pa.timestamp("us", tz="UTC")),
        ]
    )
    schema = pa.schema([pa.field(f.name, f.type) for f in schema])
    assert _sweep_file(schema, _slice(plain)) > 0
    _sweep_file(schema, _slice(int96))
    # literals between stored milliseconds and at a group's exact maximum
    cut = stamps[49]
    filters = [
        Comparison(">", "ms", cut),
        Comparison(">=", "ms", cut + dt.timedelta(microseconds=1)),
        Comparison("<=", "ms", cut - dt.timedelta(microseconds=1)),
        Comparison(">", "ms_tz", aware[49]),
        Comparison(">=", "us_tz", aware[49] + dt.timedelta(microseconds=1)),
        Comparison("=", "ms_tz", aware[100].astimezone(dt.timezone(dt.timedelta(hours=5)))),
    ]
    _check(schema, _slice(plain), filters)
    _check(schema, _slice(int96), filters)


def test_decimals_on_int32_int64_and_fixed_bytes_read_as_wider_decimals(tmp_path):
    values = [D(i * 37 - 5000).scaleb(-2) for i in range(300)]
    table = pa.table(
        {
            "id": pa.array(range(300), pa.int64()),
            "d32": pa.array(values, pa.decimal128(7, 2)),
            "d64": pa.array(values, pa.decimal128(15, 2)),
            "dfl": pa.array(values, pa.decimal128(25, 2)),
            "dsc": pa.array(
                [v.quantize(D("0.1"), rounding=decimal.ROUND_FLOOR) for v in values], pa.decimal128(6, 1)
            ),
        }
    )
    path = tmp_path / "dec.parquet"
    pq.write_table(table, path, row_group_size=50, store_decimal_as_integer=True)
    kinds = {pq.ParquetFile(path).schema.column(i).physical_type for i in range(1, 5)}
    assert kinds == {"INT32", "INT64", "FIXED_LEN_BYTE_ARRAY"}
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("d32", pa.decimal128(9, 2)),
            pa.field("d64", pa.decimal128(18, 4)),
            pa.field("dfl", pa.decimal128(38, 2)),
            pa.field("dsc", pa.decimal128(10, 3)),
        ]
    )
    assert _sweep_file(schema, _slice(path)) > 0
    filters = [
        Comparison(">", "d32", D("-31.500")),
        Comparison(">=", "d64", D("-31.4999")),
        Comparison("<", "dsc", D("-31.45")),
        Comparison("=", "dsc", D("-31.500")),
        In("dfl", (D("-31.50"), D("60.00"))),
    ]
    _check(schema, _slice(path), filters)


def test_nan_and_signed_zeros_in_double_columns(tmp_path):
    nan = float("nan")
    groups = [
        [nan] * 50,  # only NaN: no min/max
        [1.0] * 49 + [nan],  # NaN hidden from the bounds
        [-0.0] * 50,
        [0.0] * 25 + [-0.0] * 25,
        [None] * 25 + [nan] * 25,
        [float("inf")] * 25 + [float("-inf")] * 25,
    ]
    values = [v for group in groups for v in group]
    table = pa.table({"id": pa.array(range(len(values)), pa.int64()), "x": pa.array(values, pa.float64())})
    path = tmp_path / "nan.parquet"
    pq.write_table(table, path, row_group_size=50)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("x", pa.float64())])
    filters: list[Any] = []
    for literal in (0.0, -0.0, 1.0, 0.5, float("inf"), -1.0):
        filters += _filters("x", literal, "id")
    filters += [
        "x != 1.0",
        "not (x = 1.0)",
        "x not in (1.0, 0.0)",
        "not (x < 5)",
        "x is null",
        "x is not null",
    ]
    assert _check(schema, _slice(path), filters) > 0


def test_struct_leaves_under_null_parents(tmp_path):
    rows = []
    for i in range(300):
        if (i // 50) % 2 == 0:
            rows.append(None)  # the parent is null: the leaf reads as null
        else:
            rows.append({"a": i, "b": None if i % 3 else f"b{i}"})
    struct = pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string())])
    table = pa.table({"id": pa.array(range(300), pa.int64()), "s": pa.array(rows, struct)})
    path = tmp_path / "struct.parquet"
    pq.write_table(table, path, row_group_size=50)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("s", struct)])
    filters = [
        "s.a is null",
        "s.a is not null",
        "s.a < 60",
        "s.a >= 290",
        "s.b is null and id < 50",
        "s.b is not null",
        "not (s.a > 100)",
        "s.a != 70 and id > 60",
        "s.b starts with 'b1'",
    ]
    assert _check(schema, _slice(path), filters) > 0


def test_booleans_dates_and_times(tmp_path):
    n = 300
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "b": pa.array([(i // 50) % 3 == 0 if i % 50 else None for i in range(n)], pa.bool_()),
            "d": pa.array([dt.date(2024, 2, 27) + dt.timedelta(days=i // 10) for i in range(n)], pa.date32()),
            "t": pa.array([dt.time(i // 60 % 24, i % 60, 59, 999999) for i in range(n)], pa.time64("us")),
            "t32": pa.array([dt.time(i // 60 % 24, i % 60, 30) for i in range(n)], pa.time32("ms")),
        }
    )
    path = tmp_path / "bdt.parquet"
    pq.write_table(table, path, row_group_size=50)
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("b", pa.bool_()),
            pa.field("d", pa.date32()),
            pa.field("t", pa.time64("us")),
            pa.field("t32", pa.time64("us")),
        ]
    )
    assert _sweep_file(schema, _slice(path)) > 0
    _check(schema, _slice(path), ["b = false", "b != true", "not (b = true)", "b is null", "b in (false)"])


def test_unicode_and_binary_strings_near_the_bounds(tmp_path):
    words = sorted(
        [
            "a",
            "a\u0000",
            "a ",
            "ab",
            "ab\U0001f600",
            "ab\uffff",
            "abc",
            "\u00e9t\u00e9",
            "\u00e9",
            "z" * 5000,
            "z" * 5000 + "a",
            "\U0001f600",
            "",
            "Z",
        ]
    )
    values = [words[(i * 7) % len(words)] if i < 140 else words[i % len(words)] for i in range(280)]
    values = sorted(values[:140]) + values[140:]  # sorted groups first: tight bounds
    table = pa.table(
        {
            "id": pa.array(range(len(values)), pa.int64()),
            "s": pa.array(values, pa.string()),
            "bin": pa.array([v.encode() for v in values], pa.binary()),
        }
    )
    path = tmp_path / "unicode.parquet"
    pq.write_table(table, path, row_group_size=20)
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("s", pa.large_string()), pa.field("bin", pa.binary())]
    )
    filters: list[Any] = []
    for word in words:
        filters += _filters("s", word, "id")
        filters += [Comparison(op, "bin", word.encode()) for op in ("=", "<", ">", ">=", "<=")]
        if word:
            filters += [StartsWith("bin", word.encode()[:2]), StartsWith("s", word[:1] + "\uffff")]
    assert _check(schema, _slice(path), filters) > 0


def test_integers_widened_and_unsigned_file_columns(tmp_path):
    n = 300
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "i8": pa.array([(i % 256) - 128 for i in range(n)], pa.int8()),
            "u32": pa.array([2**32 - 1 - i if i >= 150 else i for i in range(n)], pa.uint32()),
        }
    )
    path = tmp_path / "ints.parquet"
    pq.write_table(table, path, row_group_size=50)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("i8", pa.int64()), pa.field("u32", pa.int64())])
    filters: list[Any] = []
    for literal in (-128, -1, 0, 127, 149):
        filters += _filters("i8", literal, "id")
    for literal in (0, 149, 2**31, 2**32 - 1, 2**32 - 150):
        filters += _filters("u32", literal, "id")
    assert _check(schema, _slice(path), filters) > 0


def test_empty_row_groups_and_position_deletes_around_skipped_groups(tmp_path):
    path = tmp_path / "empty.parquet"
    schema = pa.schema([fid("id", pa.int64(), 1), fid("name", pa.string(), 2)])
    with pq.ParquetWriter(path, schema) as writer:
        start = 0
        for size in (0, 40, 0, 0, 60, 1, 0, 50):
            ids = list(range(start, start + size))
            writer.write_table(pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=schema))
            start += size
    metadata = pq.ParquetFile(path).metadata
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert 0 in sizes and sum(sizes) == 151
    deleted = [0, 39, 40, 99, 100, 101, 150]
    delete_path = tmp_path / "deletes.parquet"
    delete_schema = pa.schema(
        [
            fid("file_path", pa.string(), FILE_PATH_FIELD_ID, nullable=False),
            fid("pos", pa.int64(), ROW_POSITION_FIELD_ID, nullable=False),
        ]
    )
    pq.write_table(
        pa.table({"file_path": [str(path)] * len(deleted), "pos": deleted}, schema=delete_schema), delete_path
    )
    deletes = DataFile(
        path=str(delete_path),
        size_bytes=delete_path.stat().st_size,
        record_count=len(deleted),
        content=FileContent.POSITION_DELETES,
    )
    piece = _slice(path, (deletes,))
    everything = _all(schema, piece)
    assert everything.column("id").to_pylist() == [i for i in range(151) if i not in deleted]
    filters = [
        "id >= 100",
        "id = 100",
        "id = 101 or id = 39",
        "id > 95 and id < 102",
        "id >= 140",
        "name = 'n101'",
    ]
    for expr in filters:
        bound = bind_filter(expr, schema)
        assert bound is not None
        got, _ = _read(schema, piece, expr)
        assert got == everything.filter(to_arrow(bound)).to_pylist(), expr
    got, skipped = _read(schema, piece, "id = 101 or id = 102")
    assert got == [{"id": 102, "name": "n102"}] and skipped > 0


def test_split_parts_with_skipping_and_deletes_tile_the_file(tmp_path):
    path = tmp_path / "parts.parquet"
    schema = pa.schema([fid("id", pa.int64(), 1), fid("v", pa.int32(), 2)])
    n = 1000
    ids = list(range(n))
    table = pa.table(
        {"id": ids, "v": [(i * 7919) % 1000 if (i // 100) % 2 else i for i in ids]}, schema=schema
    )
    pq.write_table(table, path, row_group_size=100)
    deleted = sorted({i for i in range(0, n, 13)} | {99, 100, 101, 499, 500, 999})
    delete_path = tmp_path / "deletes.parquet"
    delete_schema = pa.schema(
        [
            fid("file_path", pa.string(), FILE_PATH_FIELD_ID, nullable=False),
            fid("pos", pa.int64(), ROW_POSITION_FIELD_ID, nullable=False),
        ]
    )
    pq.write_table(
        pa.table({"file_path": [str(path)] * len(deleted), "pos": deleted}, schema=delete_schema), delete_path
    )
    deletes = DataFile(
        path=str(delete_path),
        size_bytes=delete_path.stat().st_size,
        record_count=len(deleted),
        content=FileContent.POSITION_DELETES,
    )
    piece = _slice(path, (deletes,))
    metadata = pq.ParquetFile(path).metadata
    cuts = [0] + [row_group_start(metadata.row_group(g)) for g in (3, 4, 7)] + [path.stat().st_size]
    everything = _all(schema, piece)
    for expr in ("id >= 450 and id < 520", "v < 50", "v = 500 or id = 999", "id in (0, 100, 101, 102, 998)"):
        bound = bind_filter(expr, schema)
        assert bound is not None
        want = everything.filter(to_arrow(bound)).to_pylist()
        got: list[dict[str, Any]] = []
        for low, high in zip(cuts, cuts[1:], strict=False):
            rows, _ = _read(schema, piece, expr, low, high - low)
            got += rows
        assert got == want, expr


def test_a_renamed_and_retyped_column_uses_its_field_ids_statistics(tmp_path):
    # the file calls field 1 "b" and field 2 "a"; the table renamed them the other way round
    path = tmp_path / "renamed.parquet"
    file_schema = pa.schema([fid("b", pa.int32(), 1), fid("a", pa.int32(), 2)])
    table = pa.table({"b": list(range(300)), "a": [299 - i for i in range(300)]}, schema=file_schema)
    pq.write_table(table, path, row_group_size=50)
    schema = pa.schema([fid("a", pa.int64(), 1), fid("b", pa.int64(), 2), fid("c", pa.int64(), 3)])
    filters = [
        "a < 10",
        "b < 10",
        "a >= 290 and b <= 9",
        "c is null and a = 5",
        "c is not null",
        "c = 1 or a = 7",
    ]
    assert _check(schema, _slice(path), filters) > 0


def test_position_deletes_and_row_ids_in_row_groups_larger_than_a_batch(tmp_path):
    from storage.formats.iceberg._lineage import FIELDS as LINEAGE

    n = 200_000  # groups of 70,000 rows: more than one 65,536-row batch each
    path = tmp_path / "big.parquet"
    schema = pa.schema([fid("id", pa.int64(), 1)])
    pq.write_table(
        pa.table({"id": pa.array(range(n), pa.int64())}, schema=schema), path, row_group_size=70_000
    )
    deleted = [0, 65_535, 65_536, 69_999, 70_000, 135_535, 135_536, 139_999, 140_000, 199_999]
    delete_path = tmp_path / "deletes.parquet"
    delete_schema = pa.schema(
        [
            fid("file_path", pa.string(), FILE_PATH_FIELD_ID, nullable=False),
            fid("pos", pa.int64(), ROW_POSITION_FIELD_ID, nullable=False),
        ]
    )
    pq.write_table(
        pa.table({"file_path": [str(path)] * len(deleted), "pos": deleted}, schema=delete_schema), delete_path
    )
    deletes = DataFile(
        path=str(delete_path),
        size_bytes=delete_path.stat().st_size,
        record_count=len(deleted),
        content=FileContent.POSITION_DELETES,
    )
    base = DataFile(
        path=str(path), size_bytes=path.stat().st_size, record_count=n, extra={"first_row_id": 1_000_000}
    )
    piece = FileSlice(PartitionDescriptor(""), base, (deletes,))
    read_schema = pa.schema([*schema, LINEAGE[0]])
    reader = SliceReader(
        PyArrowFileIO(),
        read_schema,
        ["id", "_row_id"],
        bind_filter("id >= 135000 and id < 140001", read_schema),
    )
    rows = [row for batch in reader.read(piece) for row in batch.to_pylist()]
    assert reader.row_groups_skipped == 1  # the first group only: 140,000 starts the third
    expected = [i for i in range(135_000, 140_001) if i not in deleted]
    assert rows == [{"id": i, "_row_id": 1_000_000 + i} for i in expected]
    reader = SliceReader(
        PyArrowFileIO(), read_schema, ["id", "_row_id"], bind_filter("_row_id > 1199990", read_schema)
    )
    rows = [row for batch in reader.read(piece) for row in batch.to_pylist()]
    assert rows == [{"id": i, "_row_id": 1_000_000 + i} for i in range(199_991, 199_999)]


# -- a hand-written Delta table: column mapping, partitions, a later column, a deletion vector ------


def _delta_table(root: Path) -> Path:
    import struct

    from pyroaring import BitMap64

    from tests.spec import _delta_log_writer as w
    from tests.spec._delta_log_writer import z85 as _z85

    table_path = root / "mapped"
    fields = [
        w.mapped("id", "long", 1, "col-id"),
        w.mapped("ts", "timestamp", 2, "col-ts"),
        w.mapped("amount", "decimal(12,2)", 3, "col-amount"),
        w.mapped("name", "string", 4, "col-name"),
        w.mapped("region", "string", 5, "col-region"),
        w.mapped("later", "integer", 6, "col-later"),
    ]
    start = dt.datetime(2024, 1, 1, tzinfo=UTC)

    def data(ids: range, later: bool) -> pa.Table:
        columns: dict[str, Any] = {
            "col-id": pa.array(ids, pa.int32()),
            "col-ts": pa.array(
                [start + dt.timedelta(seconds=7 * i) for i in ids], pa.timestamp("ms", tz="UTC")
            ),
            "col-amount": pa.array([D(i * 13 % 997).scaleb(-2) for i in ids], pa.decimal128(9, 2)),
            "col-name": pa.array([None if i % 11 == 0 else f"name-{i:05d}" for i in ids]),
        }
        if later:
            columns["col-later"] = pa.array([i // 40 for i in ids], pa.int32())
        return pa.table(columns)

    adds = []
    for ids, region, later in (
        (range(0, 300), "eu", False),
        (range(300, 500), "us", True),
        (range(500, 600), None, True),
    ):
        action = w.data_file(
            table_path, data(ids, later), partition={"col-region": region}, row_group_size=50
        )
        adds.append(action)
    deleted = [0, 49, 50, 149, 299]
    blob = struct.pack("<i", 1681511377) + BitMap64(deleted).serialize()
    adds[0]["add"]["deletionVector"] = {
        "storageType": "i",
        "pathOrInlineDv": _z85(blob),
        "sizeInBytes": len(blob),
        "cardinality": len(deleted),
    }
    w.commit(
        table_path,
        0,
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["columnMapping", "deletionVectors"],
                "writerFeatures": ["columnMapping", "deletionVectors"],
            }
        },
        w.metadata(
            fields,
            partition_columns=["region"],
            configuration={
                "delta.columnMapping.mode": "name",
                "delta.columnMapping.maxColumnId": "6",
                "delta.enableDeletionVectors": "true",
            },
        ),
        *adds,
    )
    return table_path


def test_a_delta_table_with_column_mapping_partitions_a_later_column_and_a_deletion_vector(tmp_path):
    from storage.formats.delta import DeltaAdapter
    from storage.spec import rowgroups

    table = DeltaAdapter.open(str(_delta_table(tmp_path)))
    everything = pa.Table.from_batches(list(table.read()), schema=table.schema)
    ids = everything.column("id").to_pylist()
    assert sorted(ids) == [i for i in range(600) if i not in (0, 49, 50, 149, 299)]
    before = rowgroups.totals["skipped"]
    assert _sweep(table, table.schema) > 0
    assert rowgroups.totals["skipped"] > before
    for expr in (
        "id >= 45 and id < 155",
        "region = 'eu' and id > 250",
        "region is null or later = 2",
        "later is null and id < 60",
        "later = 9 or id = 50",
        "ts >= timestamp '2024-01-01 00:17:30+00:00' and ts < timestamp '2024-01-01 00:35:00Z'",
        "amount = 6.37",
    ):
        bound = bind_filter(expr, table.schema)
        assert bound is not None
        wanted = everything.filter(to_arrow(bound))
        batches = list(table.read(filters=expr))
        if not _identical(_as_table(batches, table.schema), wanted):
            _same_rows([row for batch in batches for row in batch.to_pylist()], wanted.to_pylist())


# -- files by other parquet writers: DuckDB, Polars, parquet-rs (deltalake) ------------------------


def _mixed(n: int) -> pa.Table:
    """Columns whose statistics other writers treat in their own ways: long strings (truncated
    bounds), multi-byte characters at the truncation point, NaN, nulls, decimals, timestamps."""
    emoji = "\U0001f600"
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "v": pa.array([(i * 7919) % n for i in range(n)], pa.int32()),
            "long_s": pa.array(
                [None if i % 17 == 0 else "x" * 62 + emoji + f"{i // 300:04d}" for i in range(n)]
            ),
            "edge": pa.array(["\u00e9" * 40 + chr(0x4E00 + i // 500) + "\uffff" * (i % 3) for i in range(n)]),
            "dec": pa.array([D(i).scaleb(-2) for i in range(n)], pa.decimal128(10, 2)),
            "dbl": pa.array([float("nan") if i % 1000 == 999 else i / 7 for i in range(n)], pa.float64()),
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=i) for i in range(n)],
                pa.timestamp("us", tz="UTC"),
            ),
            "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i // 100) for i in range(n)], pa.date32()),
            "b": pa.array([i % 3 == 0 for i in range(n)], pa.bool_()),
        }
    )


def _writer_filters() -> list[Any]:
    filters: list[Any] = []
    prefix = "x" * 62
    emoji = "\U0001f600"
    for word in (
        prefix,
        prefix + emoji,
        prefix + emoji + "0003",
        prefix + emoji + "0010",
        prefix + "\U0001f601",
    ):
        filters += [Comparison(op, "long_s", word) for op in ("=", "<", "<=", ">", ">=")]
        filters += [StartsWith("long_s", word)]
    base = "\u00e9" * 40
    for word in (base, base + "\u4e00", base + "\u4e05\uffff", base + "\u4e05\uffff\uffff", base + "\u4e0b"):
        filters += [Comparison(op, "edge", word) for op in ("=", "<", ">", ">=")] + [StartsWith("edge", word)]
    filters += [
        "id >= 2000 and id < 2100",
        "v = 17",
        "dec >= 40.96 and dec < 41.00",
        "dbl > 800",
        "not (dbl <= 800)",
        "dbl != 1.0",
        "ts >= timestamp '2024-01-01 01:08:16Z'",
        "d = date '2024-01-21'",
        "b = true and id > 5000",
        "long_s is null and id < 100",
    ]
    return filters


def _writer_check(path: Path) -> int:
    file_schema = pq.ParquetFile(path).schema_arrow
    schema = pa.schema([pa.field(f.name, f.type) for f in file_schema])
    return _check(schema, _slice(path), _writer_filters())


def test_a_duckdb_file(tmp_path):
    import duckdb

    path = tmp_path / "duck.parquet"
    data = _mixed(6000)
    connection = duckdb.connect()
    connection.register("data", data)
    connection.execute(f"COPY data TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE 2048)")
    assert pq.ParquetFile(path).metadata.num_row_groups > 1
    assert _writer_check(path) > 0


def test_a_polars_file(tmp_path):
    import polars as pl

    path = tmp_path / "polars.parquet"
    pl.from_arrow(_mixed(6000)).write_parquet(path, row_group_size=1000, statistics=True)
    assert pq.ParquetFile(path).metadata.num_row_groups > 1
    assert _writer_check(path) > 0


def test_a_parquet_rs_file_through_deltalake(tmp_path):
    from deltalake import WriterProperties, write_deltalake

    from storage.formats.delta import DeltaAdapter

    path = tmp_path / "delta"
    write_deltalake(str(path), _mixed(6000), writer_properties=WriterProperties(max_row_group_size=1000))
    files = list(path.glob("*.parquet"))
    assert len(files) == 1 and pq.ParquetFile(files[0]).metadata.num_row_groups > 1
    assert _writer_check(files[0]) > 0
    table = DeltaAdapter.open(str(path))
    everything = pa.Table.from_batches(list(table.read()), schema=table.schema).combine_chunks()
    for expr in _writer_filters():
        bound = bind_filter(expr, table.schema)
        assert bound is not None
        wanted = everything.filter(to_arrow(bound))
        batches = list(table.read(filters=expr))
        if not _identical(_as_table(batches, table.schema), wanted):  # else the rows, as Python values
            got = [row for batch in batches for row in batch.to_pylist()]
            assert repr(got) == repr(wanted.to_pylist()), f"filter {expr!r}"


# -- equality deletes on several columns -------------------------------------------------------------


def test_equality_deletes_on_three_columns_of_floats_dates_and_strings(tmp_path):
    """Float keys compare as Iceberg's Java reader compares them (``Float.compare``): NaN equals
    NaN, -0.0 and 0.0 differ; nulls equal nulls; deleted tuples match whole rows only."""
    from tests.spec.test_delete_application import _equality_deletes

    nan = float("nan")
    day = dt.date(2024, 1, 1)
    schema = pa.schema(
        [
            fid("id", pa.int64(), 1),
            fid("x", pa.float64(), 2),
            fid("d", pa.date32(), 3),
            fid("s", pa.string(), 4),
        ]
    )
    xs = [0.0, -0.0, nan, 1.5, None, 0.0, nan, 1.5] * 25
    ds = [day, day, day, None, day, day + dt.timedelta(days=1), day, None] * 25
    ss = ["a", "a", "b", "c", None, "a", None, "c"] * 25
    data = pa.table({"id": pa.array(range(200), pa.int64()), "x": xs, "d": ds, "s": ss}, schema=schema)
    path = tmp_path / "data.parquet"
    pq.write_table(data, path, row_group_size=40)
    deleted_tuples = [(0.0, day, "a"), (nan, day, "b"), (1.5, None, "c"), (None, day, None), (nan, day, "z")]
    fields = [fid("x", pa.float64(), 2), fid("d", pa.date32(), 3), fid("s", pa.string(), 4)]
    deletes = _equality_deletes(
        tmp_path / "eq.parquet",
        {
            "x": pa.array([t[0] for t in deleted_tuples], pa.float64()),
            "d": pa.array([t[1] for t in deleted_tuples], pa.date32()),
            "s": pa.array([t[2] for t in deleted_tuples], pa.string()),
        },
        fields,
    )
    # within each block of 8: 0 (0.0, day, a) deleted; 1 (-0.0, day, a) kept; 2 (nan, day, b) deleted;
    # 3 (1.5, null, c) deleted; 4 (null, day, null) deleted; 5 (0.0, day+1, a) kept;
    # 6 (nan, day, null) kept; 7 (1.5, null, c) deleted
    survivors = [i for i in range(200) if i % 8 in (1, 5, 6)]
    piece = _slice(path, (deletes,))
    reader = SliceReader(PyArrowFileIO(), schema, ["id"], None)
    assert [r["id"] for b in reader.read(piece) for r in b.to_pylist()] == survivors
    reader = SliceReader(PyArrowFileIO(), schema, ["id"], bind_filter("id >= 150 and id < 170", schema))
    assert [r["id"] for b in reader.read(piece) for r in b.to_pylist()] == [
        i for i in survivors if 150 <= i < 170
    ]
    assert reader.row_groups_skipped == 3


# -- found failing: see the report ----------------------------------------------------------------


@pytest.mark.parametrize("tz", [None, "UTC"])
def test_a_row_group_whose_maximum_timestamp_is_the_largest_datetime_is_read(tmp_path, tz):
    """'9999-12-31 23:59:59.999999' is the usual open end of validity ranges (SCD2 tables). The
    evaluator widens timestamp upper bounds by a millisecond, which overflows Python's datetime."""
    zone = UTC if tz else None
    stamps = [dt.datetime(2020, 1, 1, tzinfo=zone) + dt.timedelta(days=i) for i in range(100)]
    stamps += [dt.datetime.max.replace(tzinfo=zone)] * 10
    path = tmp_path / "open_end.parquet"
    table = pa.table(
        {"id": pa.array(range(110), pa.int64()), "ts": pa.array(stamps, pa.timestamp("us", tz=tz))}
    )
    pq.write_table(table, path, row_group_size=50)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("ts", pa.timestamp("us", tz=tz))])
    suffix = "Z" if tz else ""
    rows, _ = _read(schema, _slice(path), f"ts < timestamp '2020-01-05 00:00:00{suffix}'")
    assert [r["id"] for r in rows] == [0, 1, 2, 3]
    rows, _ = _read(schema, _slice(path), f"ts >= timestamp '9999-12-31 23:59:59.999999{suffix}'")
    assert [r["id"] for r in rows] == list(range(100, 110))


def test_nanosecond_time_statistics_do_not_drop_rows(tmp_path):
    """pyarrow returns time64[ns] statistics as datetime.time, cut to microseconds: a maximum
    of 00:00:09.000000999 reads as 00:00:09, so 't > 00:00:09' skipped the group holding it."""
    nanos = [i * 1_000_000_000 + 999 for i in range(100)]
    path = tmp_path / "time_ns.parquet"
    table = pa.table({"id": pa.array(range(100), pa.int64()), "t": pa.array(nanos, pa.time64("ns"))})
    pq.write_table(table, path, row_group_size=10)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("t", pa.time64("ns"))])
    rows, _ = _read(schema, _slice(path), "t > time '00:00:09'")
    assert [r["id"] for r in rows] == list(range(9, 100))


# -- Hudi base files cut into split parts -----------------------------------------------------------

# one partitioned table: the others add only time (same writer, same types); ~45 s each
HUDI_FIXTURES = ["cow_v6_simplekeygen_nonhivestyle"]


@pytest.mark.parametrize("name", HUDI_FIXTURES)
def test_every_filter_on_hudi_base_files_read_in_parts_of_one_row_group(table_copy, name):
    """Each base file rewritten with one row per row group (the same rows), every slice read as
    parts starting at each group: a filter on any column returns what hudi-rs returns unfiltered,
    filtered by Arrow."""
    from storage.spec.models import Split, SplitPart
    from tests.spec.test_hudi import _open as hudi_open

    table = hudi_open(table_copy(name))
    schema = table.read_schema
    pieces = [p for p in table.file_index().list_files_at() if p.base_file is not None and not p.delete_files]
    assert pieces
    everything = pa.Table.from_batches([b for p in pieces for b in table.read(p)])  # hudi-rs, whole files
    parts = []
    for piece in pieces:
        assert piece.base_file is not None
        base = Path(piece.base_file.path)
        data = pq.read_table(base)
        # Hudi's footer as Hudi wrote it (its key-value metadata, no ARROW:schema): pyarrow's
        # ARROW:schema would carry a second copy of the 431 KB bloom filter, decoded again on each
        # read of the file's Arrow schema (several per part read), for no difference in types
        with pq.ParquetWriter(base, data.schema, store_schema=False) as writer:
            writer.write_table(data, row_group_size=1)
            writer.add_key_value_metadata(data.schema.metadata or {})
        assert pq.read_schema(base).equals(data.schema)  # the same columns and types read back
        metadata = pq.ParquetFile(base).metadata
        starts = [row_group_start(metadata.row_group(g)) for g in range(metadata.num_row_groups)]
        ends = [*starts[1:], base.stat().st_size]
        starts[0] = 0
        parts += [SplitPart(piece, s, e - s, 0) for s, e in zip(starts, ends, strict=True)]
    split = Split(parts=tuple(parts), weight=1)
    from storage.spec import rowgroups

    before = rowgroups.totals["skipped"]
    names = [f.name for f in schema if _family(f.type)]
    checked = 0
    for column in names:
        other = next(n for n in names if n != column)
        filters: list[Any] = [IsNull(column), NotNull(column)]
        picks = _literals(everything.column(column))
        if picks:
            filters += _boundary_filters(column, picks[0], picks[len(picks) // 2], picks[-1], other)
        for expr in filters:
            bound = bind_filter(expr, schema)
            assert bound is not None
            want = everything.filter(to_arrow(bound, schema)).to_pylist()
            got = [row for batch in table.read(split, filters=expr) for row in batch.to_pylist()]
            try:
                _same_rows(got, want)
            except AssertionError:
                raise AssertionError(f"filter {expr!r}: {len(got)} rows read, {len(want)} expected") from None
            checked += 1
    assert checked > 0
    assert rowgroups.totals["skipped"] > before  # the parts did skip on statistics


def test_filter_columns_after_lists_maps_nulls_and_nested_structs(tmp_path):
    n = 300
    inner = pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string())])
    nested = pa.struct([pa.field("x", pa.int64()), pa.field("y", pa.struct([pa.field("z", pa.string())]))])
    table = pa.table(
        {
            "l": pa.array([[{"a": i, "b": "q"}] * (i % 3) for i in range(n)], pa.list_(inner)),
            "nothing": pa.nulls(n),
            "m": pa.array([[("k", {"a": -i, "b": None})] for i in range(n)], pa.map_(pa.string(), inner)),
            "s": pa.array(
                [{"x": n - i, "y": {"z": f"z{i // 50}"} if i % 7 else None} for i in range(n)], nested
            ),
            "id": pa.array(range(n), pa.int64()),
            "v": pa.array([i // 60 for i in range(n)], pa.int16()),
        }
    )
    path = tmp_path / "nested.parquet"
    pq.write_table(table, path, row_group_size=50)
    schema = pa.schema([pa.field(f.name, pa.int64() if f.name == "v" else f.type) for f in table.schema])
    filters = [
        "id >= 120 and id < 130",
        "v = 3",
        "v > 3 or id < 2",
        "s.x <= 50",
        "s.x > 290",
        "s.y.z = 'z2'",
        "s.y.z is null and id > 280",
        "s.y.z starts with 'z5'",
        "nothing is null and id = 7",
        "nothing is not null",
    ]
    assert _check(schema, _slice(path), filters) > 0
