"""Delta type widening (``typeWidening``, ``typeWidening-preview``): files written before a type
change hold the narrow type; every read (``read``, listings, splits, the Spark data source) gives
the table's current type with the values converted exactly, and pruning on statistics recorded in
the narrow type never drops a matching file.

The table is written here from the protocol (deltalake 1.6 cannot widen types): version 0 in the
narrow types, version 1 widens ``b`` byte -> short, version 2 widens every column (partition
column, struct field and array element included); one file per version. The Spark-written
``type-widening`` fixture of ../shared/fixtures/delta is read too.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path

import pyarrow as pa
import pytest

from storage.formats.delta import DeltaAdapter, check_protocol
from storage.spec.errors import UnsupportedFeature
from tests.spec import _delta_log_writer as w

D = decimal.Decimal


def _narrow_fields(b_type: str = "byte", b_changes: list | None = None) -> list[dict]:
    b = w.field("b", b_type, delta_typeChanges=b_changes) if b_changes else w.field("b", b_type)
    return [
        w.field("id", "long"),
        w.field("p", "integer"),
        b,
        w.field("f", "float"),
        w.field("i", "integer"),
        w.field("s", "short"),
        w.field("l", "long"),
        w.field("dec", "decimal(5,2)"),
        w.field("d", "date"),
        w.field("st", {"type": "struct", "fields": [w.field("x", "integer")]}),
        w.field("arr", {"type": "array", "elementType": "integer", "containsNull": True}),
    ]


def _wide_fields() -> list[dict]:
    def widened(name: str, old: str, new: str) -> dict:
        return w.field(name, new, delta_typeChanges=w.changes((old, new)))

    return [
        w.field("id", "long"),
        widened("p", "integer", "long"),
        w.field("b", "long", delta_typeChanges=w.changes(("byte", "short"), ("short", "long"))),
        widened("f", "float", "double"),
        widened("i", "integer", "double"),
        widened("s", "short", "decimal(12,2)"),
        widened("l", "long", "decimal(21,1)"),
        widened("dec", "decimal(5,2)", "decimal(10,5)"),
        widened("d", "date", "timestamp_ntz"),
        w.field("st", {"type": "struct", "fields": [widened("x", "integer", "long")]}),
        w.field(
            "arr",
            {"type": "array", "elementType": "long", "containsNull": True},
            delta_typeChanges=w.changes(("integer", "long"), field_path="element"),
        ),
    ]


def _file(ids, b, f, i, s, l_, dec, d, st, arr, *, b_type, wide: bool) -> pa.Table:
    st_type = pa.struct([("x", pa.int64() if wide else pa.int32())])
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "b": pa.array(b, b_type),
            "f": pa.array(f, pa.float64() if wide else pa.float32()),
            "i": pa.array(i, pa.float64() if wide else pa.int32()),
            "s": pa.array(s, pa.decimal128(12, 2) if wide else pa.int16()),
            "l": pa.array(l_, pa.decimal128(21, 1) if wide else pa.int64()),
            "dec": pa.array(dec, pa.decimal128(10, 5) if wide else pa.decimal128(5, 2)),
            "d": pa.array(d, pa.timestamp("us") if wide else pa.date32()),
            "st": pa.array(st, st_type),
            "arr": pa.array(arr, pa.list_(pa.int64() if wide else pa.int32())),
        }
    )


# Statistics as a writer of the narrow types records them: floats in their shortest form.
STATS_V0 = json.dumps(
    {
        "numRecords": 2,
        "minValues": {"id": 1, "b": -128, "f": -0.1, "i": -7, "s": -32768, "l": -1, "dec": -0.01,
                      "d": "1969-12-31", "st": {"x": 2147483647}},
        "maxValues": {"id": 2, "b": 127, "f": 3.4, "i": 2147483647, "s": 5, "l": 9223372036854775807,
                      "dec": 123.45, "d": "2024-02-29", "st": {"x": 2147483647}},
        "nullCount": {"id": 0, "b": 0, "f": 0, "i": 0, "s": 0, "l": 0, "dec": 0, "d": 0, "st": {"x": 1},
                      "arr": 0},
    }
)  # fmt: skip


def _stats(row: dict) -> str:
    bounds = {k: v for k, v in row.items() if k not in ("st", "arr")}
    return json.dumps({"numRecords": 1, "minValues": bounds, "maxValues": bounds})


@pytest.fixture
def widened_table(tmp_path) -> Path:
    path = tmp_path / "widened"
    features = ("typeWidening", "timestampNtz")
    file_a = _file(
        [1, 2], [127, -128], [3.4, -0.1], [2147483647, -7], [-32768, 5], [2**63 - 1, -1],
        [D("123.45"), D("-0.01")], [dt.date(2024, 2, 29), dt.date(1969, 12, 31)],
        [{"x": 2147483647}, None], [[1, -(2**31)], []], b_type=pa.int8(), wide=False,
    )  # fmt: skip
    w.commit(
        path,
        0,
        w.protocol(*features),
        w.metadata(_narrow_fields(), ["p"], {"delta.enableTypeWidening": "true"}),
        w.data_file(path, file_a, stats=STATS_V0, partition={"p": "1"}),
    )
    file_b = _file(
        [3], [30000], [1.5], [0], [0], [0], [D("0.00")], [dt.date(2000, 1, 1)], [{"x": -1}], [None],
        b_type=pa.int16(), wide=False,
    )  # fmt: skip
    stats_b = _stats({"id": 3, "b": 30000, "f": 1.5, "i": 0, "s": 0, "l": 0, "dec": 0.0, "d": "2000-01-01"})
    w.commit(
        path,
        1,
        w.metadata(
            _narrow_fields("short", w.changes(("byte", "short"))), ["p"], {"delta.enableTypeWidening": "true"}
        ),
        w.data_file(path, file_b, stats=stats_b, partition={"p": "1"}),
    )
    file_c = _file(
        [4], [2**40], [0.1], [0.5], [D("12.34")], [D("0.5")], [D("1.23456")],
        [dt.datetime(2024, 3, 1, 12, 30, 0, 5)], [{"x": 2**40}], [[2**40]], b_type=pa.int64(), wide=True,
    )  # fmt: skip
    stats_c = _stats(
        {
            "id": 4,
            "b": 2**40,
            "f": 0.1,
            "i": 0.5,
            "s": 12.34,
            "l": 0.5,
            "dec": 1.23456,
            "d": "2024-03-01T12:30:00.000",
        }
    )
    w.commit(
        path,
        2,
        w.metadata(_wide_fields(), ["p"], {"delta.enableTypeWidening": "true"}),
        w.data_file(path, file_c, stats=stats_c, partition={"p": "5000000000"}),
        operation="ALTER TABLE CHANGE COLUMN",
    )
    return path


F32_3_4 = 3.4000000953674316  # the float 3.4, as a double
F32_MINUS_0_1 = -0.10000000149011612

EXPECTED = [
    {"id": 1, "p": 1, "b": 127, "f": F32_3_4, "i": 2147483647.0, "s": D("-32768.00"),
     "l": D("9223372036854775807.0"), "dec": D("123.45000"), "d": dt.datetime(2024, 2, 29),
     "st": {"x": 2147483647}, "arr": [1, -(2**31)]},
    {"id": 2, "p": 1, "b": -128, "f": F32_MINUS_0_1, "i": -7.0, "s": D("5.00"), "l": D("-1.0"),
     "dec": D("-0.01000"), "d": dt.datetime(1969, 12, 31), "st": None, "arr": []},
    {"id": 3, "p": 1, "b": 30000, "f": 1.5, "i": 0.0, "s": D("0.00"), "l": D("0.0"), "dec": D("0.00000"),
     "d": dt.datetime(2000, 1, 1), "st": {"x": -1}, "arr": None},
    {"id": 4, "p": 5000000000, "b": 2**40, "f": 0.1, "i": 0.5, "s": D("12.34"), "l": D("0.5"),
     "dec": D("1.23456"), "d": dt.datetime(2024, 3, 1, 12, 30, 0, 5), "st": {"x": 2**40}, "arr": [2**40]},
]  # fmt: skip

WIDE_TYPES = {
    "p": pa.int64(), "b": pa.int64(), "f": pa.float64(), "i": pa.float64(), "s": pa.decimal128(12, 2),
    "l": pa.decimal128(21, 1), "dec": pa.decimal128(10, 5), "d": pa.timestamp("us"),
}  # fmt: skip


def _exact(value):
    """Values compared with their types: 1 == 1.0 == Decimal(1) must not pass, nor a lost scale."""
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_exact(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return ("decimal", str(value))
    return (type(value).__name__, value)


def _rows(batches, key: str = "id") -> list:
    rows = [row for batch in batches for row in batch.to_pylist()]
    return _exact(sorted(rows, key=lambda r: r[key]))


def test_the_reader_accepts_the_type_widening_features_and_still_refuses_unknown_ones():
    for feature in ("typeWidening", "typeWidening-preview"):
        check_protocol({"minReaderVersion": 3, "readerFeatures": [feature]}, "t")
    with pytest.raises(UnsupportedFeature, match="someFutureFeature"):
        check_protocol({"minReaderVersion": 3, "readerFeatures": ["typeWidening", "someFutureFeature"]}, "t")


def test_reading_widens_every_old_value_exactly_to_the_current_type(widened_table):
    table = DeltaAdapter.open(str(widened_table))
    for name, type_ in WIDE_TYPES.items():
        assert table.schema.field(name).type == type_, name
    assert table.schema.field("st").type == pa.struct([("x", pa.int64())])
    assert _rows(table.read()) == _exact(EXPECTED)
    arrow = pa.Table.from_batches(list(table.read()), schema=table.schema)
    assert arrow.schema.field("arr").type.value_type == pa.int64()


def test_each_old_version_reads_in_the_types_it_had(widened_table):
    table = DeltaAdapter.open(str(widened_table))
    first = _rows(table.read(0, columns=["id", "b", "f", "dec", "d"]))
    assert first == _exact(
        [
            {"id": 1, "b": 127, "f": F32_3_4, "dec": D("123.45"), "d": dt.date(2024, 2, 29)},
            {"id": 2, "b": -128, "f": F32_MINUS_0_1, "dec": D("-0.01"), "d": dt.date(1969, 12, 31)},
        ]
    )
    assert table.schema_at(0).field("b").type == pa.int8()
    assert table.schema_at(1).field("b").type == pa.int16()
    assert [r["b"] for r in _rows(table.read(1, columns=["id", "b"]))] == [
        ("int", 127),
        ("int", -128),
        ("int", 30000),
    ]


FILTERS = [
    # (filter, ids of the matching rows); the float 3.4 read as a double is above 3.4 and its
    # statistic says 3.4: a reader comparing the narrow statistic as it is drops the file.
    ("f = 3.4000000953674316", [1]),
    ("f > 3.4", [1]),
    ("f < -0.1", [2]),
    ("b > 200", [3, 4]),
    ("b = -128", [2]),
    ("p = 5000000000", [4]),
    ("s < -30000", [1]),
    ("l > 9223372036854775806", [1]),
    ("dec = 123.45", [1]),
    ("i = 2147483647", [1]),
    ("d >= timestamp '2024-02-29 00:00:00'", [1, 4]),
    ("d < timestamp '1970-01-01 00:00:00'", [2]),
]


@pytest.mark.parametrize(("text", "ids"), FILTERS, ids=[f[0] for f in FILTERS])
def test_filters_prune_on_narrow_statistics_without_losing_a_matching_row(widened_table, text, ids):
    table = DeltaAdapter.open(str(widened_table))
    assert _rows(table.read(filters=text)) == _exact([r for r in EXPECTED if r["id"] in ids])
    kept = list(table.file_index().list_files_at(filters=text))
    assert _rows(table.read(kept, filters=text)) == _exact([r for r in EXPECTED if r["id"] in ids])


def test_statistics_in_the_narrow_type_still_prune(widened_table):
    table = DeltaAdapter.open(str(widened_table))
    index = table.file_index()
    assert len(list(index.list_files_at())) == 3
    kept = list(index.list_files_at(filters="b > 200"))  # the byte file's maximum is 127
    assert sorted(s.base_file.lower_bounds["id"] for s in kept) == [3, 4]
    assert [s.partition.values["p"] for s in index.list_files_at(filters="p = 5000000000")] == [5000000000]
    old = list(index.list_files_at(0))
    assert len(old) == 1 and old[0].base_file.lower_bounds["b"] == -128
    assert [p.record_count for p in index.partitions_at()] == [3, 1]


def test_splits_read_the_widened_values(widened_table):
    table = DeltaAdapter.open(str(widened_table))
    splits = list(table.plan_splits(target_size=1, open_file_cost=0))
    assert len(splits) == 3
    assert _rows(b for split in splits for b in table.read(split)) == _exact(EXPECTED)
    old_splits = list(table.plan_splits(0))
    assert _rows(b for split in old_splits for b in table.read(split, columns=["id", "b"])) == _exact(
        [{"id": 1, "b": 127}, {"id": 2, "b": -128}]
    )


def test_the_table_is_not_handed_to_sparks_plain_parquet_reader(widened_table):
    assert DeltaAdapter.open(str(widened_table)).plain_parquet_layout() is False


@pytest.mark.spark
def test_spark_reads_the_widened_values(spark, widened_table):
    from storage.spec.spark_source import read_table

    frame = read_table(spark, str(widened_table))
    rows = sorted((r.asDict(recursive=True) for r in frame.collect()), key=lambda r: r["id"])
    assert _exact(rows) == _exact(EXPECTED)
    pruned = read_table(spark, str(widened_table), filters="f > 3.4")
    assert [r["id"] for r in pruned.collect()] == [1]


def test_the_spark_written_type_widening_fixture_reads_its_old_file_widened(delta_fixture):
    path = delta_fixture("type-widening")
    table = DeltaAdapter.open(str(path))
    rows = _rows(table.read(), key="byte_long")
    assert len(rows) == 2
    old = next(r for r in rows if r["byte_long"] == ("int", 1))
    assert old == _exact(
        {"byte_long": 1, "int_long": 2, "float_double": F32_3_4, "byte_double": 5.0, "short_double": 6.0,
         "int_double": 7.0, "decimal_decimal_same_scale": D("123.45"),
         "decimal_decimal_greater_scale": D("67.89000"), "byte_decimal": D("1.0"), "short_decimal": D("2.0"),
         "int_decimal": D("3.0"), "long_decimal": D("4.0"), "date_timestamp_ntz": dt.datetime(2024, 9, 9)}
    )  # fmt: skip
    kept = list(table.file_index().list_files_at(filters="float_double = 3.4000000953674316"))
    assert [
        r["float_double"] for r in _rows(table.read(kept, filters="float_double > 3.4"), key="byte_long")
    ] == [("float", F32_3_4)]


def test_the_change_data_feed_of_a_widened_table_is_refused_by_name(tmp_path):
    from storage.spec.models import ReadingMode

    path = tmp_path / "feed"
    fields = [w.field("id", "long", delta_typeChanges=w.changes(("integer", "long")))]
    data = pa.table({"id": pa.array([1], pa.int32())})
    w.commit(
        path,
        0,
        w.protocol("typeWidening"),
        w.metadata(fields, configuration={"delta.enableChangeDataFeed": "true"}),
        w.data_file(path, data),
    )
    table = DeltaAdapter.open(str(path))
    assert [r["id"] for r in _rows(table.read())] == [("int", 1)]
    with pytest.raises(UnsupportedFeature, match="type widening \\(typeWidening\\)"):
        table.read(None, mode=ReadingMode.CDC, end_instant=0)


def test_a_table_with_an_unknown_reader_feature_is_still_refused_at_open(tmp_path):
    path = tmp_path / "future"
    w.commit(
        path,
        0,
        w.protocol("typeWidening", "someFutureFeature"),
        w.metadata([w.field("id", "long")]),
        w.data_file(path, pa.table({"id": pa.array([1], pa.int64())})),
    )
    with pytest.raises(UnsupportedFeature, match="someFutureFeature") as refused:
        DeltaAdapter.open(str(path))
    assert "typeWidening," not in str(refused.value).split("supports")[0]
