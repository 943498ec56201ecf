"""The ``lakewarden`` Spark data source and the parquet fast path, against the spec API's own reads
and the format libraries' answers (deltalake's ``scan``, pyiceberg's ``scan``, hudi-rs's ``read``).

Every Spark test uses the run's one session (the ``spark`` fixture). A few tests drive the reader
directly, as Spark's Python worker does, to look at the partitions it plans.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import pickle
import re
from pathlib import Path

import hudi
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyiceberg import expressions as ice
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    In,
    IsNull,
    LessThanOrEqual,
    Not,
    StringEndsWith,
    StringStartsWith,
)

from storage.spec import load_table
from storage.spec.errors import FilterError
from storage.spec.expressions import Comparison, Or, StartsWith, parse_filter, to_arrow
from storage.spec.expressions import In as InExpr
from storage.spec.expressions import IsNull as IsNullExpr
from storage.spec.expressions import Not as NotExpr
from storage.spec.spark_source import (
    LakewardenReader,
    SourceOptions,
    SplitPartition,
    arrow_schema_to_spark,
    parquet_paths_if_plain,
    read_table,
    register,
    spark_filter_to_expression,
)

# --- helpers ------------------------------------------------------------------------------------


def _key(row: dict) -> str:
    return json.dumps(row, default=repr, sort_keys=True)


def _rows(table: pa.Table, columns: list[str] | None = None) -> list[dict]:
    if columns is not None:
        table = table.select(columns)
    return sorted(table.to_pylist(), key=_key)


def _spark_rows(frame) -> list[dict]:
    return _rows(frame.toArrow())


def _spec_rows(location, columns=None, filters=None, instant=None) -> list[dict]:
    table = load_table(str(location))
    at = table.schema_at(table.timeline().get(instant)) if instant is not None else table.schema
    columns = columns or at.names
    read = table.read(instant, columns=columns, filters=filters)
    schema = pa.schema([at.field(c) for c in columns])
    return _rows(pa.Table.from_batches(list(read), schema=schema))


def _scan_partitions(frame) -> int:
    """The number of input partitions of the frame's scan (one per planned split)."""
    return frame.rdd.getNumPartitions()


def _spark_filters_above_scan(frame) -> bool:
    plan = frame._jdf.queryExecution().executedPlan().toString()
    return re.search(r"\bFilter\b", plan) is not None  # a Filter node, not "RuntimeFilters: []"


def _source(spark, location, **options):
    reader = spark.read.format("lakewarden").option("location", str(location))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _plan(location, schema: pa.Schema, **options) -> LakewardenReader:
    """The reader as Spark's planner makes it: options parsed, output schema given."""
    parsed = SourceOptions.parse({"location": str(location), **{k: str(v) for k, v in options.items()}})
    return LakewardenReader(parsed, arrow_schema_to_spark(schema))


@pytest.fixture(scope="module")
def lakewarden(spark):
    register(spark)
    return spark


@pytest.fixture
def delta_orders(tmp_path) -> Path:
    """Partitioned by region, three appends (three files per partition), then a delete that
    rewrites the first append's files."""
    path = tmp_path / "orders"
    for batch in range(3):
        ids = list(range(batch * 40, batch * 40 + 40))
        write_deltalake(
            str(path),
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "region": [["eu", "us", "ap", "sa"][i % 4] for i in ids],
                    "amount": pa.array([decimal.Decimal(i) / 4 for i in ids], pa.decimal128(10, 2)),
                    "ts": pa.array(
                        [dt.datetime(2024, 1, 1 + i % 28, tzinfo=dt.UTC) for i in ids],
                        pa.timestamp("us", "UTC"),
                    ),
                    "note": [None if i % 7 == 0 else f"note-{i}" for i in ids],
                }
            ),
            partition_by=["region"],
            mode="append",
        )
    DeltaTable(str(path)).delete("id < 20")
    return path


@pytest.fixture
def delta_plain(tmp_path) -> Path:
    """Unpartitioned, two appends, nothing deleted: plain parquet files."""
    path = tmp_path / "plain"
    for batch in range(2):
        ids = list(range(batch * 10, batch * 10 + 10))
        write_deltalake(
            str(path),
            pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}),
            mode="append",
        )
    return path


def _deltalake_rows(path: Path, columns=None) -> list[dict]:
    table = DeltaTable(str(path))
    return _rows(pa.Table.from_batches(list(pa.RecordBatchReader.from_stream(table.scan()))), columns)


# --- schema -------------------------------------------------------------------------------------


def test_the_spark_schema_maps_arrow_types_to_their_spark_equivalents():
    schema = pa.schema(
        [
            ("s", pa.large_string()),
            ("b", pa.large_binary()),
            ("d", pa.decimal128(38, 10)),
            ("tz", pa.timestamp("us", "UTC")),
            ("naive", pa.timestamp("us")),
            ("day", pa.date32()),
            ("i", pa.int32()),
            ("l", pa.int64()),
            ("f", pa.float32()),
            ("nested", pa.struct([("x", pa.int16()), ("y", pa.list_(pa.string()))])),
            ("tags", pa.map_(pa.string(), pa.int64())),
        ]
    )

    spark_schema = arrow_schema_to_spark(schema)

    assert spark_schema.simpleString() == (
        "struct<s:string,b:binary,d:decimal(38,10),tz:timestamp,naive:timestamp_ntz,day:date,"
        "i:int,l:bigint,f:float,nested:struct<x:smallint,y:array<string>>,tags:map<string,bigint>>"
    )


def test_a_source_without_a_location_is_refused_with_a_message_naming_the_option():
    with pytest.raises(ValueError, match="location"):
        SourceOptions.parse({})
    with pytest.raises(ValueError, match="target_size"):
        SourceOptions.parse({"location": "/t", "target_size": "-1"})


# --- Spark filters ------------------------------------------------------------------------------


def test_spark_filters_become_the_expressions_that_say_the_same_thing():
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])

    def translate(spark_filter):
        return spark_filter_to_expression(spark_filter, schema)

    assert translate(EqualTo(("id",), 3)) == Comparison("=", "id", 3)
    assert translate(GreaterThan(("ID",), 3)) == Comparison(">", "id", 3)
    assert translate(Not(LessThanOrEqual(("id",), 3))) == NotExpr(Comparison("<=", "id", 3))
    assert translate(In(("name",), ("a", "b"))) == InExpr("name", ("a", "b"))
    assert translate(IsNull(("score",))) == IsNullExpr("score")
    assert translate(StringStartsWith(("name",), "ab")) == StartsWith("name", "ab")
    assert translate(EqualNullSafe(("name",), None)) == IsNullExpr("name")
    # ``not (a <=> v)`` keeps the rows where a is null.
    assert translate(Not(EqualNullSafe(("id",), 3))) == Or(
        NotExpr(Comparison("=", "id", 3)), IsNullExpr("id")
    )
    assert translate(Not(IsNull(("id",)))) == NotExpr(IsNullExpr("id"))
    assert translate(EqualNullSafe(("id",), 3)) == Comparison("=", "id", 3)


def test_spark_filters_that_cannot_be_said_exactly_are_left_to_spark():
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])

    def translate(spark_filter):
        return spark_filter_to_expression(spark_filter, schema)

    assert translate(StringEndsWith(("name",), "z")) is None
    assert translate(GreaterThan(("score",), 1.0)) is None  # NaN orders differently in Spark
    assert translate(In(("id",), (1, None))) is None
    assert translate(EqualTo(("missing",), 1)) is None
    assert translate(EqualTo(("id",), "not a number")) is None


# --- planning, without Spark --------------------------------------------------------------------


def test_the_reader_plans_one_partition_per_split_and_they_pickle(delta_orders):
    table = load_table(str(delta_orders))
    reader = _plan(delta_orders, table.schema, target_size=1)

    partitions = reader.partitions()

    splits = list(table.plan_splits(target_size=1))
    assert len(partitions) == len(splits) > 4
    assert all(isinstance(p, SplitPartition) for p in partitions)
    assert [{part.file_slice.path for part in p.split.parts} for p in partitions] == [
        {part.file_slice.path for part in s.parts} for s in splits
    ]
    restored = pickle.loads(pickle.dumps(partitions))
    rows = [row for p in restored for batch in reader.read(p) for row in batch.to_pylist()]
    assert sorted(rows, key=_key) == _spec_rows(delta_orders)
    # statistics stay on the driver: a partition needs paths, ranges and deletes only
    assert all(p.file_slice.base_file.lower_bounds is None for s in restored for p in s.split.parts)


def test_pushed_filters_prune_splits_on_the_driver(delta_orders):
    table = load_table(str(delta_orders))
    everything = _plan(delta_orders, table.schema, target_size=1)
    filtered = _plan(delta_orders, table.schema, target_size=1)

    left = list(filtered.pushFilters([EqualTo(("region",), "eu"), StringEndsWith(("note",), "1")]))

    assert [type(f) for f in left] == [StringEndsWith]
    assert 0 < len(filtered.partitions()) < len(everything.partitions())


# --- reads through Spark ------------------------------------------------------------------------


@pytest.mark.spark
def test_a_partitioned_delta_table_with_a_delete_reads_as_deltalake_reads_it(lakewarden, delta_orders):
    frame = _source(lakewarden, delta_orders)

    assert _spark_rows(frame) == _deltalake_rows(delta_orders, frame.columns) == _spec_rows(delta_orders)
    assert frame.count() == 100  # 120 written, 20 deleted


@pytest.mark.spark
def test_a_delta_table_with_a_deletion_vector_reads_without_the_deleted_rows(lakewarden, delta_fixture):
    path = delta_fixture("table-with-dv-small")

    frame = _source(lakewarden, path, format="delta")

    assert _spark_rows(frame) == _deltalake_rows(path) == _spec_rows(path)
    assert parquet_paths_if_plain(load_table(str(path))) is None


@pytest.mark.spark
def test_iceberg_position_deletes_are_applied(lakewarden, iceberg_fixture):
    path = iceberg_fixture("spark_v2_position_deletes")
    table = load_table(str(path))

    frame = _source(lakewarden, path, format="iceberg", target_size=256 * 1024)

    assert frame.count() == 6592  # Spark's own count of the table (fixtures README)
    assert _spark_rows(frame) == _spec_rows(path)
    assert frame.count() == table.pyiceberg_table.scan().to_arrow().num_rows


@pytest.mark.spark
def test_iceberg_equality_deletes_are_applied(lakewarden, iceberg_fixture):
    path = iceberg_fixture("spark_v2_equality_deletes")

    frame = _source(lakewarden, path)

    assert _spark_rows(frame) == _spec_rows(path)
    assert sorted((r.id, r.name) for r in frame.collect()) == [(4, "d"), (5, "e")]


@pytest.mark.spark
def test_an_earlier_iceberg_instant_reads_the_rows_it_had(lakewarden, iceberg_fixture):
    path = iceberg_fixture("spark_v2_position_deletes")
    table = load_table(str(path))
    instants = table.timeline().instants()
    before_deletes = instants[2]

    frame = _source(lakewarden, path, instant=before_deletes.id)

    assert frame.count() == sum(b.num_rows for b in table.read(before_deletes.id))
    assert frame.count() == table.pyiceberg_table.scan(snapshot_id=before_deletes.id).to_arrow().num_rows


@pytest.mark.spark
@pytest.mark.parametrize(
    "name", ["cow_v6_nonpartitioned", "mor_parquet_v6_simplekeygen_nonhivestyle", "mor_avro_v6_trips_8i1u"]
)
def test_hudi_tables_read_as_hudi_rs_reads_them(lakewarden, hudi_fixture, name):
    path = hudi_fixture(name)

    frame = _source(lakewarden, path, format="hudi")

    reference = pa.Table.from_batches(hudi.HudiTable(str(path)).read())
    assert _spark_rows(frame) == _spec_rows(path)
    assert sorted(map(_key, _spark_rows(frame.select(frame.columns[0])))) == sorted(
        map(_key, _rows(reference, [frame.columns[0]]))
    )
    assert frame.count() == reference.num_rows


@pytest.mark.spark
def test_spark_filters_prune_partitions_yet_return_the_rows_spark_filtering_returns(lakewarden, delta_orders):
    condition = (F.col("region") == "eu") & (F.col("id") >= 30) & F.col("note").endswith("4")

    pushed = _source(lakewarden, delta_orders, target_size=1).filter(condition)
    unpushed = _source(lakewarden, delta_orders, target_size=1, pushdown="false").filter(condition)

    assert _scan_partitions(pushed) < _scan_partitions(unpushed)
    assert _spark_rows(pushed) == _spark_rows(unpushed)
    assert _spark_rows(pushed)  # the condition matches some rows


@pytest.mark.spark
def test_the_filter_option_prunes_and_filters_like_a_spec_read(lakewarden, delta_orders):
    text = "region in ('eu', 'us') and amount > 10 and note is not null"

    filtered = _source(lakewarden, delta_orders, target_size=1, filter=text)
    everything = _source(lakewarden, delta_orders, target_size=1)

    assert _scan_partitions(filtered) < _scan_partitions(everything)
    assert _spark_rows(filtered) == _spec_rows(delta_orders, filters=text)
    # the same rows as reading everything and filtering in pyarrow
    table = load_table(str(delta_orders))
    everything_read = pa.Table.from_batches(list(table.read()), schema=table.schema)
    assert _spark_rows(filtered) == _rows(everything_read.filter(to_arrow(parse_filter(text, table.schema))))


@pytest.mark.spark
def test_the_columns_option_narrows_the_schema_while_filters_may_use_other_columns(lakewarden, delta_orders):
    frame = _source(lakewarden, delta_orders, columns=json.dumps(["id", "note"]), filter="region = 'ap'")

    assert frame.columns == ["id", "note"]
    assert _spark_rows(frame) == _spec_rows(delta_orders, columns=["id", "note"], filters="region = 'ap'")


@pytest.mark.spark
def test_a_bad_filter_text_fails_at_load_with_the_parser_message(lakewarden, delta_orders):
    with pytest.raises(Exception, match="unknown column 'regoin'"):
        _source(lakewarden, delta_orders, filter="regoin = 'eu'")
    with pytest.raises(FilterError, match="unknown column 'regoin'"):
        read_table(lakewarden, str(delta_orders), filters="regoin = 'eu'")


@pytest.mark.spark
def test_an_unknown_instant_fails_at_load_naming_the_instant(lakewarden, delta_orders):
    with pytest.raises(Exception, match=r"InstantNotFound: no version 99"):
        _source(lakewarden, delta_orders, instant=99)


# --- fast path ----------------------------------------------------------------------------------


@pytest.mark.spark
def test_plain_files_are_handed_to_spark_parquet(lakewarden, delta_plain):
    table = load_table(str(delta_plain))

    paths = parquet_paths_if_plain(table)
    frame = read_table(lakewarden, str(delta_plain), filters="id >= 5", columns=["name", "id"])

    assert sorted(paths) == sorted(s.base_file.path for s in table.file_index().list_files_at())
    assert frame.inputFiles()  # a parquet scan, not the data source
    assert frame.columns == ["name", "id"]
    assert _spark_rows(frame) == _spec_rows(delta_plain, columns=["name", "id"], filters="id >= 5")


@pytest.mark.spark
def test_a_copy_on_write_hudi_table_takes_the_fast_path(lakewarden, hudi_fixture):
    path = hudi_fixture("cow_v6_nonpartitioned")

    frame = read_table(lakewarden, str(path))

    assert parquet_paths_if_plain(load_table(str(path)))
    assert frame.inputFiles()
    assert _spark_rows(frame) == _spec_rows(path)


@pytest.mark.spark
def test_tables_with_something_to_merge_take_the_data_source(lakewarden, iceberg_fixture, hudi_fixture):
    # position deletes are applied by Spark's parquet reader (test_spark_positional_deletes.py)
    for path in (
        iceberg_fixture("spark_v2_equality_deletes"),
        hudi_fixture("mor_parquet_v6_simplekeygen_nonhivestyle"),
    ):
        table = load_table(str(path))
        assert any(s.delete_files for s in table.file_index().list_files_at())
        assert parquet_paths_if_plain(table) is None

        frame = read_table(lakewarden, str(path))

        assert not frame.inputFiles()
        assert _spark_rows(frame) == _spec_rows(path)


@pytest.mark.spark
def test_an_iceberg_snapshot_before_any_delete_is_plain(lakewarden, iceberg_fixture):
    path = iceberg_fixture("spark_v2_position_deletes")
    table = load_table(str(path))
    first = table.timeline().instants()[0]

    frame = read_table(lakewarden, str(path), instant=first.id)

    assert parquet_paths_if_plain(table, first.id) is not None
    assert frame.inputFiles()
    assert _spark_rows(frame) == _spec_rows(path, instant=first.id)


@pytest.mark.spark
def test_partition_columns_kept_out_of_delta_files_are_joined_to_sparks_parquet_read(
    lakewarden, delta_orders
):
    """Delta keeps partition values in its log, not in the files: the read is Spark's Parquet
    reader over the pruned files (only region=sa's), with the values joined from the log; the
    rows equal the spec API's and the data source's."""
    table = load_table(str(delta_orders))
    assert not any(s.delete_files for s in table.file_index().list_files_at())
    assert parquet_paths_if_plain(table) is None  # not plain: the partition column is not in the files

    frame = read_table(lakewarden, str(delta_orders), filters="region = 'sa'")
    source = read_table(lakewarden, str(delta_orders), filters="region = 'sa'", via="source")

    files = frame.inputFiles()
    assert files and all("/region=sa/" in path for path in files), files
    assert not source.inputFiles()
    expected = _spec_rows(delta_orders, filters="region = 'sa'")
    assert expected and {row["region"] for row in expected} == {"sa"}
    assert _spark_rows(frame) == expected
    assert _spark_rows(source) == expected


@pytest.mark.spark
def test_a_filter_matching_no_file_gives_an_empty_frame_with_the_table_schema(lakewarden, delta_plain):
    frame = read_table(lakewarden, str(delta_plain), filters="id > 1000")

    assert frame.count() == 0
    assert frame.schema == T.StructType(
        [T.StructField("id", T.LongType(), True), T.StructField("name", T.StringType(), True)]
    )


@pytest.mark.spark
@pytest.mark.parametrize(
    "condition",
    [
        "ts >= timestamp'2024-01-15 00:00:00'",
        "amount between 12.5 and 20",
        "note is null",
        "id in (21, 22, 23)",
        "note like 'note-3%'",
        "region <> 'eu'",
        "not (id <=> 25)",
    ],
)
def test_typed_spark_filters_are_taken_by_the_source_and_agree_with_spark(
    lakewarden, delta_orders, condition
):
    pushed = _source(lakewarden, delta_orders, target_size=1).filter(condition)
    unpushed = _source(lakewarden, delta_orders, target_size=1, pushdown="false").filter(condition)

    assert _spark_rows(pushed) == _spark_rows(unpushed)
    # the source took the whole condition: Spark plans no filter of its own above the scan
    assert not _spark_filters_above_scan(pushed)
    assert _spark_filters_above_scan(unpushed)


@pytest.mark.spark
@pytest.mark.parametrize(
    ("name", "condition"),
    [
        ("mor_parquet_v6_simplekeygen_nonhivestyle", "byteField = 10"),
        ("mor_avro_v6_trips_8i1u", "city = 'chennai'"),
    ],
)
def test_hudi_partition_filters_prune_file_groups_and_merge_logs(lakewarden, hudi_fixture, name, condition):
    path = hudi_fixture(name)

    pushed = _source(lakewarden, path, target_size=1).filter(condition)
    everything = _source(lakewarden, path, target_size=1)

    assert _scan_partitions(pushed) < _scan_partitions(everything)
    assert _spark_rows(pushed) == _spec_rows(path, filters=condition)
    assert _spark_rows(pushed) == _spark_rows(everything.filter(condition))
    assert _spark_rows(pushed)


@pytest.mark.spark
def test_iceberg_filters_are_applied_after_deletes(lakewarden, iceberg_fixture):
    path = iceberg_fixture("spark_v2_position_deletes")
    condition = "l_partkey_int < 500 and l_shipdate_date >= date'1996-01-01'"

    pushed = _source(lakewarden, path).filter(condition)

    assert not _spark_filters_above_scan(pushed)
    assert _spark_rows(pushed) == _spec_rows(path, filters=condition)
    table = load_table(str(path))
    row_filter = ice.And(
        ice.LessThan("l_partkey_int", 500), ice.GreaterThanOrEqual("l_shipdate_date", "1996-01-01")
    )
    reference = table.pyiceberg_table.scan(row_filter=row_filter).to_arrow()
    assert pushed.count() == reference.num_rows
