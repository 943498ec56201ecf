"""Iceberg tables with identity partitions on ``read_table``'s fast path (Spark's own parquet
reader): a data file that stores the partition's source column is read as it is, one that lacks it
(a Hive-style import) gets its partition value joined in per file, as Delta's partition values are.
Every fast read is compared, row for row and value for value, with the data source's read of the
same table (``via="source"``) and with the spec API's; what the fast path cannot read exactly goes
through the data source with its reason.

The tables are written by pyiceberg in a SQL catalog on Postgres; pyiceberg 0.12 writes no position
deletes, so those are added as one more snapshot from the spec (``iceberg_writer``).
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

from storage.spec.registry import load_table
from storage.spec.spark.plain import parquet_plan, read_path
from storage.spec.spark.rowindex import ParquetPlan
from storage.spec.spark_source import read_table, register

pytestmark = pytest.mark.spark

ODD = ["eu west/ä=b", "a%2Fb", "x+y z", "[*?]{a,b}", "", None]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory, sql_catalog):
    root = tmp_path_factory.mktemp("spark identity")
    catalog = sql_catalog("spark_identity", f"file://{root}")
    catalog.create_namespace("sid")
    return catalog


@pytest.fixture(scope="module")
def lakewarden(spark):
    register(spark)
    return spark


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def _normal(value: Any) -> Any:
    """A spec API value as Spark's ``collect`` gives it: aware datetimes as naive UTC ones (the
    session and the machine are on UTC)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: json.dumps(r, default=repr, sort_keys=True))


def _spec_rows(location: str, filters: str | None = None) -> list[dict]:
    table = load_table(location)
    rows = [r for b in table.read(filters=filters) for r in b.to_pylist()]
    return _sorted([{k: _normal(v) for k, v in r.items()} for r in rows])


def _fast_and_source(spark, location: str, **kwargs) -> tuple[list[dict], list[dict]]:
    fast = read_table(spark, location, format="iceberg", **kwargs)
    source = read_table(spark, location, format="iceberg", via="source", **kwargs)
    assert fast.inputFiles(), "the fast read is not Spark's parquet scan"
    assert not source.inputFiles(), "the forced read is not the data source"
    assert fast.schema == source.schema
    return (
        _sorted([r.asDict(recursive=True) for r in fast.collect()]),
        _sorted([r.asDict(recursive=True) for r in source.collect()]),
    )


def _add_file(table: Any, rows: pa.Table, partition: tuple[Any, ...], *, statistics: bool = True) -> str:
    """Writes ``rows`` as one parquet file and commits it with the ``partition`` tuple (pyiceberg's
    internal values: days, micros...), as a Hive-style import does; without column statistics
    when not ``statistics`` (a writer in metrics mode ``none``). Returns the file's URI."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file
    from pyiceberg.typedef import Record

    path = _local(table.location()) / "data" / "hive-import" / f"{uuid.uuid4().hex}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, path)
    data_file = parquet_file_to_data_file(table.io, table.metadata, f"file://{path}")
    data_file[3] = Record(*partition)  # DataFile.partition has no setter
    if not statistics:
        for index in range(6, 12):  # column sizes, value/null/NaN counts, bounds
            data_file[index] = None
    with table.transaction() as transaction:
        with transaction.update_snapshot().fast_append() as append:
            append.append_data_file(data_file)
    return f"file://{path}"


# -- identity partitions of several types, files written by pyiceberg ------------------------------


def _typed_table(catalog: Any, name: str) -> Any:
    """id long and six identity-partitioned columns of six types; rows with odd strings and nulls,
    one data file per partition (pyiceberg writes the partition columns into the files)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import (
        BooleanType,
        DateType,
        DecimalType,
        LongType,
        NestedField,
        StringType,
        TimestampType,
        TimestamptzType,
    )

    types = [StringType(), DateType(), TimestampType(), TimestamptzType(), DecimalType(10, 2), BooleanType()]
    names = ["s", "d", "ts", "tstz", "dec", "flag"]
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        *[
            NestedField(i + 2, n, t, required=False)
            for i, (n, t) in enumerate(zip(names, types, strict=True))
        ],
    )
    spec = PartitionSpec(
        *[PartitionField(i + 2, 1000 + i, IdentityTransform(), n) for i, n in enumerate(names)]
    )
    table = catalog.create_table(f"sid.{name}", schema, partition_spec=spec)
    count = len(ODD)
    table.append(
        pa.table(
            {
                "id": pa.array(range(count), pa.int64()),
                "s": pa.array(ODD, pa.string()),
                "d": pa.array([dt.date(2024, 2, 29), dt.date(1969, 12, 31), None] * 2, pa.date32()),
                "ts": pa.array([dt.datetime(2024, 1, 1, 23, 59, 59, 999999), None] * 3, pa.timestamp("us")),
                "tstz": pa.array(
                    [dt.datetime(1970, 1, 1, tzinfo=dt.UTC), None, dt.datetime(2030, 6, 1, 1, tzinfo=dt.UTC)]
                    * 2,
                    pa.timestamp("us", tz="UTC"),
                ),
                "dec": pa.array([Decimal("12345678.90"), Decimal("-0.01"), None] * 2, pa.decimal128(10, 2)),
                "flag": pa.array([True, False, None, True, False, None], pa.bool_()),
            }
        )
    )
    return catalog.load_table(f"sid.{name}")


def test_identity_partitions_of_six_types_are_read_from_the_files(lakewarden, catalog):
    location = _typed_table(catalog, "typed").metadata_location
    table = load_table(location)
    plan = parquet_plan(table)

    fast, source = _fast_and_source(lakewarden, location)

    # every file stores its partition columns: a plain parquet scan, nothing joined
    assert isinstance(plan, ParquetPlan) and len(plan.paths) == 6 and not plan.joins
    assert table.parquet_partition_columns() == ("s", "d", "ts", "tstz", "dec", "flag")
    assert [r["s"] for r in sorted(fast, key=lambda r: r["id"])] == ODD
    assert {r["id"]: r["tstz"] for r in fast}[2] == dt.datetime(2030, 6, 1, 1)
    assert {r["id"]: r["dec"] for r in fast}[1] == Decimal("-0.01")
    assert fast == source == _spec_rows(location)
    condition = "s = '[*?]{a,b}' or (d = date '2024-02-29' and flag = true)"
    fast, source = _fast_and_source(lakewarden, location, filters=condition)
    assert sorted(r["id"] for r in fast) == [0, 3]
    assert fast == source == _spec_rows(location, condition)


# -- files that lack the column ------------------------------------------------------------------


def _region_day_table(catalog: Any, name: str) -> Any:
    """(id long, region string, day date) identity-partitioned by region and day: ids 0-5 written
    by pyiceberg (the files store region and day); then three imported files holding only id:
    ids 10-12 in ('eu west/ä=b', 2024-02-29), 13-14 in ('us', null), 15 in (null, 1970-01-02)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DateType, LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "region", StringType(), required=False),
        NestedField(3, "day", DateType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(2, 1000, IdentityTransform(), "region"),
        PartitionField(3, 1001, IdentityTransform(), "day"),
    )
    table = catalog.create_table(f"sid.{name}", schema, partition_spec=spec)
    table.append(
        pa.table(
            {
                "id": pa.array(range(6), pa.int64()),
                "region": pa.array(["eu", "eu", "us", None, "x+y z", "eu"], pa.string()),
                "day": pa.array([dt.date(2024, 1, 1)] * 3 + [None, dt.date(2024, 1, 2), None], pa.date32()),
            }
        )
    )
    table = catalog.load_table(f"sid.{name}")
    for ids, partition in (
        ((10, 11, 12), ("eu west/ä=b", 19782)),
        ((13, 14), ("us", None)),
        ((15,), (None, 1)),
    ):
        _add_file(table, pa.table({"id": pa.array(ids, pa.int64())}), partition)
        table = catalog.load_table(f"sid.{name}")
    return table


REGION_DAY = {
    0: ("eu", dt.date(2024, 1, 1)),
    1: ("eu", dt.date(2024, 1, 1)),
    2: ("us", dt.date(2024, 1, 1)),
    3: (None, None),
    4: ("x+y z", dt.date(2024, 1, 2)),
    5: ("eu", None),
    10: ("eu west/ä=b", dt.date(2024, 2, 29)),
    11: ("eu west/ä=b", dt.date(2024, 2, 29)),
    12: ("eu west/ä=b", dt.date(2024, 2, 29)),
    13: ("us", None),
    14: ("us", None),
    15: (None, dt.date(1970, 1, 2)),
}


def test_files_that_lack_the_column_get_their_partition_value_per_file(lakewarden, catalog):
    location = _region_day_table(catalog, "imported").metadata_location
    plan = parquet_plan(load_table(location))

    fast, source = _fast_and_source(lakewarden, location)

    assert isinstance(plan, ParquetPlan) and plan.partition_columns == ("region", "day")
    imported = [p for p in plan.paths if "/hive-import/" in p]
    assert sorted(plan.partition_values) == sorted(imported)  # the files pyiceberg wrote fill nothing
    assert sorted(map(len, plan.groups())) == [3, 5]  # one plain scan, one joined scan
    assert {r["id"]: (r["region"], r["day"]) for r in fast} == REGION_DAY
    assert fast == source == _spec_rows(location)
    condition = "region = 'eu west/ä=b' or day is null"
    fast, source = _fast_and_source(lakewarden, location, filters=condition, columns=["id", "day"])
    assert sorted(r["id"] for r in fast) == [3, 5, 10, 11, 12, 13, 14]
    assert fast == source


def test_filled_timestamps_and_decimals_are_exact(lakewarden, catalog):
    """Imported files lacking identity columns of timestamp, timestamptz and decimal types: their
    values (microseconds before 1970 and at a leap day's last one, a negative cent) are joined in
    exactly; a file pyiceberg wrote keeps its own."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DecimalType, LongType, NestedField, TimestampType, TimestamptzType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "ts", TimestampType(), required=False),
        NestedField(3, "tstz", TimestamptzType(), required=False),
        NestedField(4, "dec", DecimalType(10, 2), required=False),
    )
    spec = PartitionSpec(
        *[
            PartitionField(i, 1000 + i, IdentityTransform(), n)
            for i, n in ((2, "ts"), (3, "tstz"), (4, "dec"))
        ]
    )
    table = catalog.create_table("sid.times", schema, partition_spec=spec)
    stored = dt.datetime(2001, 2, 3, 4, 5, 6, 7)
    table.append(
        pa.table(
            {
                "id": pa.array([0], pa.int64()),
                "ts": pa.array([stored], pa.timestamp("us")),
                "tstz": pa.array([stored.replace(tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")),
                "dec": pa.array([Decimal("1.50")], pa.decimal128(10, 2)),
            }
        )
    )
    leap, before = 1_709_251_199_999_999, -1  # 2024-02-29 23:59:59.999999, 1969-12-31 23:59:59.999999
    _add_file(
        catalog.load_table("sid.times"),
        pa.table({"id": pa.array([1, 2], pa.int64())}),
        (leap, before, Decimal("-0.01")),
    )
    _add_file(
        catalog.load_table("sid.times"), pa.table({"id": pa.array([3], pa.int64())}), (None, None, None)
    )
    location = catalog.load_table("sid.times").metadata_location
    plan = parquet_plan(load_table(location))

    fast, source = _fast_and_source(lakewarden, location)

    assert isinstance(plan, ParquetPlan) and plan.partition_columns == ("ts", "tstz", "dec")
    leap_day, last_1969 = (
        dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
    )
    assert {r["id"]: (r["ts"], r["tstz"], r["dec"]) for r in fast} == {
        0: (stored, stored, Decimal("1.50")),
        1: (leap_day, last_1969, Decimal("-0.01")),
        2: (leap_day, last_1969, Decimal("-0.01")),
        3: (None, None, None),
    }
    assert fast == source == _spec_rows(location)


def _position_deletes(table: Any, deleted: dict[str, list[int]]) -> str:
    """A metadata file beside the table's whose current snapshot is the table's plus one position
    delete file per data file of ``deleted`` (in that file's partition, of the current spec);
    returns its path."""
    import fastavro

    from tests.spec.iceberg_writer import FILE_PATH_FIELD_ID, ROW_POSITION_FIELD_ID, SpecWriter, entry, fid

    writer = SpecWriter(_local(table.location()), base=table.location())
    metadata = json.loads(_local(table.metadata_location).read_text())
    snapshot_id, sequence = 7_000_000_000_000_000_001, metadata["last-sequence-number"] + 1
    slices = load_table(table.metadata_location).file_index().list_files_at()
    partitions = {s.base.path: dict(s.partition.values) for s in slices}
    delete_schema = pa.schema(
        [
            fid("file_path", pa.string(), FILE_PATH_FIELD_ID, False),
            fid("pos", pa.int64(), ROW_POSITION_FIELD_ID, False),
        ]
    )
    entries = []
    for path, positions in deleted.items():
        rows = pa.table({"file_path": [path] * len(positions), "pos": positions}, schema=delete_schema)
        record = writer.parquet(rows)
        record.update(content=1, partition=partitions[path], record_count=len(positions))
        entries.append(entry(record, snapshot_id, sequence))
    avro_types = {"string": "string", "date": {"type": "int", "logicalType": "date"}}
    spec = table.spec()
    fields = [
        {
            "name": f.name,
            "type": ["null", avro_types[str(table.schema().find_type(f.source_id))]],
            "field-id": f.field_id,
            "default": None,
        }
        for f in spec.fields
    ]
    manifest = writer.manifest(
        [], snapshot_id, fields, entries=entries, content="deletes", spec_id=spec.spec_id
    )
    with open(_local(table.current_snapshot().manifest_list), "rb") as handle:
        rows = list(fastavro.reader(handle))
    rows.append(
        writer.listed(manifest, snapshot_id, sequence, spec_id=spec.spec_id, content=1, files=len(entries))
    )
    timestamp = metadata["last-updated-ms"] + 1
    metadata["snapshots"].append(
        {
            "snapshot-id": snapshot_id,
            "parent-snapshot-id": metadata["current-snapshot-id"],
            "sequence-number": sequence,
            "timestamp-ms": timestamp,
            "summary": {"operation": "delete"},
            "manifest-list": writer.write_manifest_list(rows),
            "schema-id": metadata["current-schema-id"],
        }
    )
    metadata["snapshot-log"].append({"snapshot-id": snapshot_id, "timestamp-ms": timestamp})
    metadata.update(
        {"current-snapshot-id": snapshot_id, "last-sequence-number": sequence, "last-updated-ms": timestamp}
    )
    metadata["refs"] = {"main": {"snapshot-id": snapshot_id, "type": "branch"}}
    path = _local(table.location()) / "metadata" / "with-deletes.metadata.json"
    path.write_text(json.dumps(metadata))
    return str(path)


def test_position_deletes_and_partition_values_together(lakewarden, catalog):
    table = _region_day_table(catalog, "with_deletes")
    paths = {tuple(sorted(r["id"] for r in _ids_of(p))): p for p in _data_paths(table)}
    # ids 10-12 (an imported file) lose 11; ids 0, 1 (a file pyiceberg wrote) lose 0
    location = _position_deletes(table, {paths[(10, 11, 12)]: [1], paths[(0, 1)]: [0]})
    plan = parquet_plan(load_table(location))

    fast, source = _fast_and_source(lakewarden, location)

    assert isinstance(plan, ParquetPlan) and sorted(len(p) for p in plan.deleted.values()) == [1, 1]
    assert {r["id"]: (r["region"], r["day"]) for r in fast} == {
        k: v for k, v in REGION_DAY.items() if k not in (0, 11)
    }
    assert fast == source == _spec_rows(location)


def _data_paths(table: Any) -> list[str]:
    return [s.base.path for s in load_table(table.metadata_location).file_index().list_files_at()]


def _ids_of(path: str) -> list[dict]:
    return pq.read_table(_local(path), columns=["id"]).to_pylist()


# -- partition evolution ------------------------------------------------------------------------


def test_files_under_different_specs_each_read_as_their_own_spec_says(lakewarden, catalog):
    """Spec 0 unpartitioned (ids 0-1), spec 1 identity(region) (ids 2-3 written by pyiceberg, 4-5
    imported without region), spec 2 drops region for identity(day) (id 6 imported without day or
    region: region reads as null, no longer partitioned by it)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import DateType, LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "region", StringType(), required=False),
        NestedField(3, "day", DateType(), required=False),
    )
    table = catalog.create_table("sid.evolved", schema)

    def rows(ids: list[int], regions: list[str | None], days: list[dt.date | None]) -> pa.Table:
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "region": pa.array(regions, pa.string()),
                "day": pa.array(days, pa.date32()),
            }
        )

    table.append(rows([0, 1], ["eu", None], [dt.date(2024, 1, 1), None]))
    with table.update_spec() as update:
        update.add_identity("region")
    table = catalog.load_table("sid.evolved")
    table.append(rows([2, 3], ["us", "eu"], [None, dt.date(2024, 1, 3)]))
    _add_file(table, pa.table({"id": pa.array([4, 5], pa.int64())}), ("apac",))
    table = catalog.load_table("sid.evolved")
    with table.update_spec() as update:
        update.remove_field("region")
        update.add_identity("day")
    table = catalog.load_table("sid.evolved")
    table.append(rows([7], ["eu"], [dt.date(2024, 1, 7)]))
    table = catalog.load_table("sid.evolved")
    # v2 keeps a removed field out of the new spec: the tuple is (day) alone
    _add_file(table, pa.table({"id": pa.array([6], pa.int64())}), (19724,))
    location = catalog.load_table("sid.evolved").metadata_location
    plan = parquet_plan(load_table(location))

    fast, source = _fast_and_source(lakewarden, location)

    assert isinstance(plan, ParquetPlan) and plan.partition_columns == ("region", "day")
    assert {r["id"]: (r["region"], r["day"]) for r in fast} == {
        0: ("eu", dt.date(2024, 1, 1)),
        1: (None, None),
        2: ("us", None),
        3: ("eu", dt.date(2024, 1, 3)),
        4: ("apac", None),
        5: ("apac", None),
        6: (None, dt.date(2024, 1, 2)),
        7: ("eu", dt.date(2024, 1, 7)),
    }
    assert fast == source == _spec_rows(location)


# -- a table written by Spark -----------------------------------------------------------------------


def test_the_spark_written_lineitem_fixture_takes_the_plain_path(lakewarden, iceberg_fixture):
    """Identity partition on l_shipmode with a space in a value (``l_shipmode=REG+AIR``): Spark
    wrote the column into every file, so nothing is joined (fixtures README: 7 files, 1,000 rows)."""
    location = str(iceberg_fixture("spark_v2_lineitem_partitioned"))
    plan = parquet_plan(load_table(location))

    fast, source = _fast_and_source(lakewarden, location)

    assert isinstance(plan, ParquetPlan) and len(plan.paths) == 7 and not plan.joins
    assert len(fast) == 1000
    assert sum(1 for r in fast if r["l_shipmode"] == "REG AIR") > 0
    assert fast == source
    fast, source = _fast_and_source(lakewarden, location, filters="l_shipmode = 'REG AIR'")
    assert 0 < len(fast) < 1000 and {r["l_shipmode"] for r in fast} == {"REG AIR"}
    assert fast == source


# -- what still falls back ------------------------------------------------------------------------


def _string_table(catalog: Any, name: str) -> Any:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False), NestedField(2, "p", StringType(), required=False)
    )
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
    table = catalog.create_table(f"sid.{name}", schema, partition_spec=spec)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "p": pa.array(["a", "b"], pa.string())}))
    return catalog.load_table(f"sid.{name}")


def _falls_back(spark, location: str, reason: str) -> list[dict]:
    found = read_path(load_table(location), location)
    frame = read_table(spark, location, format="iceberg")
    assert found.way == "source" and reason in found.reason, found.reason
    assert not frame.inputFiles()
    return _sorted([r.asDict(recursive=True) for r in frame.collect()])


def test_a_renamed_partition_column_falls_back_with_the_reason(lakewarden, catalog):
    table = _string_table(catalog, "renamed")
    with table.update_schema() as update:
        update.rename_column("p", "q")
    location = catalog.load_table("sid.renamed").metadata_location

    rows = _falls_back(lakewarden, location, "under its names")

    assert rows == [{"id": 1, "q": "a"}, {"id": 2, "q": "b"}] == _spec_rows(location)


def test_a_file_that_stores_the_column_under_another_name_falls_back(lakewarden, catalog):
    """The file holds field id 2 as ``q`` and no statistics (so its footer is read): Iceberg reads
    it by id, Spark's reader by name would read nulls. (pyiceberg imports no such file: it is
    imported with the column named ``p``, then rewritten in place with the same size.)"""
    table = _string_table(catalog, "other_name")

    def rows(name: str) -> pa.Table:
        fields = [
            pa.field("id", pa.int64(), metadata={b"PARQUET:field_id": b"1"}),
            pa.field(name, pa.string(), metadata={b"PARQUET:field_id": b"2"}),
        ]
        return pa.table([pa.array([3], pa.int64()), pa.array(["from file"])], schema=pa.schema(fields))

    path = _add_file(table, rows("p"), ("c",), statistics=False)
    size = _local(path).stat().st_size
    pq.write_table(rows("q"), _local(path))
    assert _local(path).stat().st_size == size
    location = catalog.load_table("sid.other_name").metadata_location

    found = _falls_back(lakewarden, location, f"data file {path} stores column p as q")

    assert found == [{"id": 1, "p": "a"}, {"id": 2, "p": "b"}, {"id": 3, "p": "from file"}]
    assert found == _spec_rows(location)


def test_a_struct_field_partition_source_a_file_lacks_falls_back(lakewarden, catalog):
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
    table = catalog.create_table("sid.nested", schema, partition_spec=spec)
    notes = pa.array([{"note": "a"}], pa.struct([("note", pa.string())]))
    _add_file(table, pa.table({"id": pa.array([1], pa.int64()), "info": notes}), ("eu",))
    location = catalog.load_table("sid.nested").metadata_location

    rows = _falls_back(lakewarden, location, "lacks column info.region, an identity partition source inside")

    assert rows == [{"id": 1, "info": {"region": "eu", "note": "a"}}] == _spec_rows(location)
