"""Identity partition values come from metadata when a data file lacks the column.

The Iceberg spec: columns not present in a data file are read from the partition tuple for
identity-partitioned columns (files added from Hive layouts, writers that drop partition columns).
The tables here are written by pyiceberg in a SQL catalog on Postgres; their data files are written by
pyarrow WITHOUT the partition column and registered with a hand-set partition tuple (pyiceberg
0.12's ``add_files`` takes partition values from column statistics, so it would record null).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.spec import load_table

UTC = dt.UTC


@pytest.fixture(scope="module")
def catalog(tmp_path_factory, sql_catalog):
    root = tmp_path_factory.mktemp("identity")
    catalog = sql_catalog("identity", f"file://{root}")
    catalog.create_namespace("ident")
    return catalog


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def _add_file(table: Any, rows: pa.Table, partition: tuple[Any, ...], folder: str) -> None:
    """Writes ``rows`` as one parquet file (no field ids: a Hive-style import) under ``folder`` and
    commits it with ``partition`` (pyiceberg's internal values: days, micros, Decimal...) as tuple."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file
    from pyiceberg.typedef import Record

    path = _local(table.location()) / "data" / folder / f"{uuid.uuid4().hex}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, path)
    data_file = parquet_file_to_data_file(table.io, table.metadata, f"file://{path}")
    data_file[3] = Record(*partition)  # DataFile.partition has no setter
    with table.transaction() as transaction:
        with transaction.update_snapshot().fast_append() as append:
            append.append_data_file(data_file)


def _ids(*values: int) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64())})


def _identity_table(catalog: Any, name: str, partition_type: Any, values: tuple[Any, Any]) -> Any:
    """Columns (id long, p <type>) identity-partitioned by p. Files, none holding p: ids 1-3 with
    p = values[0], ids 4-5 with p = values[1], id 6 with a null partition value."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "p", partition_type, required=False),
    )
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
    table = catalog.create_table(f"ident.{name}", schema, partition_spec=spec)
    _add_file(table, _ids(1, 2, 3), (values[0],), "p=first")
    _add_file(table, _ids(4, 5), (values[1],), "p=second")
    _add_file(table, _ids(6), (None,), "p=__HIVE_DEFAULT_PARTITION__")
    return catalog.load_table(f"ident.{name}")


def _py(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """Python values of a column; nanosecond timestamps as their integer nanoseconds."""
    if pa.types.is_timestamp(column.type) and column.type.unit == "ns":
        column = column.cast(pa.int64())
    return column.to_pylist()


def _rows(table: pa.Table) -> list[tuple[Any, Any]]:
    ordered = table.sort_by("id")
    return list(zip(ordered.column("id").to_pylist(), _py(ordered.column("p")), strict=True))


def _expected(first: Any, second: Any) -> list[tuple[int, Any]]:
    return [(1, first), (2, first), (3, first), (4, second), (5, second), (6, None)]


# (Iceberg type, partition tuple values as pyiceberg stores them, the values a read gives,
#  a filter selecting exactly the rows of the first value, or None where the filter syntax has
#  no literal for the type)
_U1, _U2 = uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7"), uuid.UUID(int=0)
_BIG = Decimal("1234567890123456789012345678.0123456789")
_NEGATIVE_BIG = Decimal("-9999999999999999999999999999.9999999999")  # the smallest decimal(38, 10)
_TS1 = dt.datetime(2024, 2, 29, 23, 59, 59, 999999)
_TS2 = dt.datetime(1969, 12, 31, 23, 59, 59, 1)


def _micros(value: dt.datetime) -> int:
    naive = value.replace(tzinfo=None) - dt.datetime(1970, 1, 1)
    return (naive.days * 86_400 + naive.seconds) * 1_000_000 + naive.microseconds


def _cases() -> list[Any]:
    from pyiceberg import types as t

    return [
        pytest.param(t.BooleanType(), (True, False), (True, False), "p = true", id="boolean"),
        pytest.param(t.IntegerType(), (-(2**31), 2**31 - 1), None, "p = -2147483648", id="int"),
        pytest.param(t.LongType(), (2**63 - 1, -(2**63)), None, "p = 9223372036854775807", id="long"),
        pytest.param(t.FloatType(), (3.25, -0.0), None, "p = 3.25", id="float"),
        pytest.param(t.DoubleType(), (0.1, -1e300), None, "p = 0.1", id="double"),
        pytest.param(
            t.DecimalType(9, 2),
            (Decimal("1234567.89"), Decimal("-0.01")),
            None,
            "p = 1234567.89",
            id="decimal",
        ),
        pytest.param(t.DecimalType(38, 10), (_BIG, _NEGATIVE_BIG), None, f"p = {_BIG}", id="decimal38"),
        pytest.param(
            t.DateType(),
            (19782, -1),
            (dt.date(2024, 2, 29), dt.date(1969, 12, 31)),
            "p = date '2024-02-29'",
            id="date",
        ),
        pytest.param(
            t.TimeType(),
            (86_399_999_999, 0),
            (dt.time(23, 59, 59, 999999), dt.time(0)),
            "p = time '23:59:59.999999'",
            id="time",
        ),
        pytest.param(
            t.TimestampType(),
            (_micros(_TS1), _micros(_TS2)),
            (_TS1, _TS2),
            "p = timestamp '2024-02-29 23:59:59.999999'",
            id="timestamp",
        ),
        pytest.param(
            t.TimestamptzType(),
            (_micros(_TS1), _micros(_TS2)),
            (_TS1.replace(tzinfo=UTC), _TS2.replace(tzinfo=UTC)),
            # the same instant written in another zone: the column holds UTC instants
            "p = timestamp '2024-03-01 01:59:59.999999+02:00'",
            id="timestamptz",
        ),
        pytest.param(t.StringType(), ("eu west/ä=b", ""), None, "p = 'eu west/ä=b'", id="string"),
        pytest.param(t.UUIDType(), (_U1, _U2), None, None, id="uuid"),
        pytest.param(t.FixedType(3), (b"\x00\xff\x10", b"abc"), None, "p = x'00ff10'", id="fixed"),
        pytest.param(t.BinaryType(), (b"\x00\x01", b""), None, "p = x'0001'", id="binary"),
    ]


@pytest.mark.parametrize(("partition_type", "stored", "read", "equal_first"), _cases())
def test_identity_partition_values_fill_a_column_the_files_lack(
    catalog, request, partition_type, stored, read, equal_first
):
    name = request.node.callspec.id
    table = load_table(_identity_table(catalog, name, partition_type, stored).metadata_location)
    first, second = read or stored

    assert _rows(table.read_arrow()) == _expected(first, second)
    only_p = table.read_arrow(columns=["p"])
    assert only_p.column_names == ["p"]
    assert sorted(_py(only_p.column("p")), key=repr) == sorted([first] * 3 + [second] * 2 + [None], key=repr)
    assert _rows(table.read_arrow(filters="p is null")) == [(6, None)]
    assert _rows(table.read_arrow(filters="p is not null")) == _expected(first, second)[:5]
    if equal_first is not None:
        assert _rows(table.read_arrow(filters=equal_first)) == _expected(first, second)[:3]
        projected = table.read_arrow(columns=["p"], filters=equal_first)
        assert _py(projected.column("p")) == [first] * 3


def test_nanosecond_timestamps_keep_their_nanoseconds(catalog, tmp_path):
    """pyiceberg 0.12 cannot write v3 metadata (nor ``timestamp_ns`` columns), so the table is
    written as a v2 table of longs and its metadata rewritten as v3 with a ``timestamp_ns`` or
    ``timestamptz_ns`` column: the manifests hold the longs written, which v3 reads as nanoseconds."""
    from pyiceberg.types import LongType

    nanos = (1_709_251_199_999_999_999, -1)  # 2024-02-29 23:59:59.999999999, a nanosecond before 1970
    table = _identity_table(catalog, "timestamp_ns", LongType(), nanos)
    for iceberg_type, tz in (("timestamp_ns", None), ("timestamptz_ns", "UTC")):
        metadata = json.loads(_local(table.metadata_location).read_text())
        metadata["format-version"] = 3
        metadata["next-row-id"] = 0
        for schema in metadata["schemas"]:
            schema["fields"][1]["type"] = iceberg_type
        path = tmp_path / f"{iceberg_type}.metadata.json"
        path.write_text(json.dumps(metadata))
        spec_table = load_table(str(path))

        result = spec_table.read_arrow()
        assert result.schema.field("p").type == pa.timestamp("ns", tz)
        assert _rows(result) == _expected(*nanos)
        after = "p > timestamp '1970-01-01 00:00:00'"
        assert _rows(spec_table.read_arrow(filters=after)) == _expected(*nanos)[:3]


def test_the_file_values_win_over_the_partition_tuple(catalog):
    """A file that holds the column keeps its values (nulls too); only a missing column is filled."""
    from pyiceberg.types import StringType

    table = _identity_table(catalog, "file_wins", StringType(), ("eu", "us"))
    holds_p = pa.table(
        {"id": pa.array([7, 8], pa.int64()), "p": pa.array(["from file", None], pa.large_string())}
    )
    _add_file(table, holds_p, ("from tuple",), "p=from tuple")
    spec_table = load_table(catalog.load_table("ident.file_wins").metadata_location)

    rows = _rows(spec_table.read_arrow())

    assert rows == [*_expected("eu", "us"), (7, "from file"), (8, None)]
    assert _rows(spec_table.read_arrow(filters="p = 'from tuple'")) == []


def test_each_file_is_filled_by_its_own_partition_spec(catalog):
    """Spec 0 is identity(region); spec 1 buckets region and is identity(category). A file of
    spec 0 gets region from its tuple and a null category; a file of spec 1 gets its category
    but a null region (a bucket is no column value)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "region", StringType(), required=False),
        NestedField(3, "category", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
    table = catalog.create_table("ident.evolved", schema, partition_spec=spec)
    _add_file(table, _ids(1, 2), ("eu",), "region=eu")
    with table.update_spec() as update:
        update.remove_field("region")
        update.add_field("region", BucketTransform(4), "region_bucket")
        update.add_identity("category")
    table = catalog.load_table("ident.evolved")
    _add_file(table, _ids(3), (2, "books"), "region_bucket=2/category=books")
    spec_table = load_table(catalog.load_table("ident.evolved").metadata_location)

    result = spec_table.read_arrow().sort_by("id")

    assert result.select(["id", "region", "category"]).to_pylist() == [
        {"id": 1, "region": "eu", "category": None},
        {"id": 2, "region": "eu", "category": None},
        {"id": 3, "region": None, "category": "books"},
    ]
    assert spec_table.read_arrow(filters="category = 'books'").column("id").to_pylist() == [3]
    assert spec_table.read_arrow(filters="region = 'eu'").column("id").to_pylist() == [1, 2]


def test_a_struct_field_partitioned_by_identity_is_filled_inside_its_struct(catalog):
    """The struct is in the file without the partitioned child (and without field ids: matched by
    name); a null struct stays null."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType, StructType

    info = StructType(
        NestedField(3, "region", StringType(), required=False),
        NestedField(4, "note", StringType(), required=False),
    )
    schema = Schema(
        NestedField(1, "id", LongType(), required=False), NestedField(2, "info", info, required=False)
    )
    spec = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "info.region"))
    table = catalog.create_table("ident.nested", schema, partition_spec=spec)
    notes = pa.array([{"note": "a"}, None], pa.struct([("note", pa.string())]))
    _add_file(table, pa.table({"id": pa.array([1, 2], pa.int64()), "info": notes}), ("eu",), "region=eu")
    spec_table = load_table(catalog.load_table("ident.nested").metadata_location)

    assert spec_table.read_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "info": {"region": "eu", "note": "a"}},
        {"id": 2, "info": None},
    ]
    assert spec_table.read_arrow(filters="info.region = 'eu'").column("id").to_pylist() == [1]


def test_split_parts_and_incremental_reads_fill_the_column_too(catalog):
    from pyiceberg.types import DateType

    table = load_table(_identity_table(catalog, "by_split", DateType(), (19782, 0)).metadata_location)
    expected = _expected(dt.date(2024, 2, 29), dt.date(1970, 1, 1))

    splits = list(table.plan_splits(target_size=1))
    from_splits = pa.concat_tables(table.read_arrow(split) for split in splits)
    first = table.timeline().instants()[0]
    from storage.spec.models import ReadingMode

    added_later = table.read_arrow(first, mode=ReadingMode.INCREMENTAL)

    assert len(splits) == 3
    assert _rows(from_splits) == expected
    assert _rows(added_later) == expected[3:]


@pytest.mark.spark
def test_the_spark_reader_reads_identity_partition_values_from_metadata(catalog, spark):
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DateType, DecimalType, LongType, NestedField, StringType

    from storage.spec.spark_source import parquet_paths_if_plain, read_table

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "region", StringType(), required=False),
        NestedField(3, "day", DateType(), required=False),
        NestedField(4, "price", DecimalType(38, 10), required=False),
    )
    spec = PartitionSpec(
        PartitionField(2, 1000, IdentityTransform(), "region"),
        PartitionField(3, 1001, IdentityTransform(), "day"),
        PartitionField(4, 1002, IdentityTransform(), "price"),
    )
    table = catalog.create_table("ident.spark", schema, partition_spec=spec)
    _add_file(table, _ids(1, 2), ("eu", 19782, _BIG), "region=eu/day=2024-02-29/price=big")
    _add_file(table, _ids(3), ("us", None, None), "region=us/day=null/price=null")
    location = catalog.load_table("ident.spark").metadata_location
    # Spark's own parquet reader would read the missing columns as nulls: the data source reads
    assert parquet_paths_if_plain(load_table(location)) is None

    def rows(**options: Any) -> list[tuple[Any, ...]]:
        frame = read_table(spark, location, format="iceberg", **options)
        return sorted(tuple(row) for row in frame.collect())

    assert rows() == [
        (1, "eu", dt.date(2024, 2, 29), _BIG),
        (2, "eu", dt.date(2024, 2, 29), _BIG),
        (3, "us", None, None),
    ]
    assert rows(filters="region = 'us'") == [(3, "us", None, None)]
    assert rows(filters="day = date '2024-02-29'", columns=["day"]) == [(dt.date(2024, 2, 29),)] * 2
