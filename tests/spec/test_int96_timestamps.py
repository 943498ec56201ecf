"""INT96 timestamps outside the nanosecond range, and casts that must not wrap (issue 29, item 15).

Databricks (and Impala, Hive, Spark 2) write timestamps as INT96; Databricks writes 9999-12-31
as "end of time". Decoded as nanoseconds since the epoch (pyarrow's default) it overflows to
1816-03-29 and an unsafe cast passed that on. Here the data files hold real INT96 columns (checked
in the footer) and every reader must give the exact values; a value a table's column cannot hold
is a ``CorruptTable`` naming the column, never a wrapped number.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.formats.delta import DeltaAdapter
from storage.spec import load_table
from storage.spec.errors import CorruptTable
from storage.spec.parquet import cast_column
from tests.spec import _delta_log_writer as w
from tests.spec.iceberg_writer import SpecWriter, fid

UTC = dt.UTC
END_OF_TIME = dt.datetime(9999, 12, 31)
# (id, naive wall-clock value); the last one is null
VALUES = [
    (1, END_OF_TIME),
    (2, dt.datetime(2020, 1, 1, 12, 0, 0, 123456)),
    (3, dt.datetime(1, 1, 1)),
    (4, dt.datetime(1677, 9, 21)),  # before the nanosecond range starts (1677-09-21 00:12:43)
    (5, None),
]


def _rows(schema: pa.Schema | None = None) -> pa.Table:
    """``id`` (long) and ``ts`` (microseconds) of ``VALUES``."""
    return pa.table(
        {
            "id": pa.array([i for i, _ in VALUES], pa.int64()),
            "ts": pa.array([v for _, v in VALUES], pa.timestamp("us")),
        },
        schema=schema,
    )


def _check_int96(path: Path) -> None:
    physical = pq.ParquetFile(path).schema.column(1).physical_type
    assert physical == "INT96", physical  # the file really holds INT96
    # what the old reader saw: decoded as nanoseconds, 9999-12-31 wraps round to 1816-03-29
    wrapped = pq.read_table(path).column("ts").to_pylist()[0]
    assert (wrapped.year, wrapped.month, wrapped.day) == (1816, 3, 29)


def _delta_int96_table(root: Path, delta_type: str) -> Path:
    root.mkdir(parents=True)
    pq.write_table(_rows(), root / "part-00000.parquet", use_deprecated_int96_timestamps=True)
    _check_int96(root / "part-00000.parquet")
    add = {
        "add": {
            "path": "part-00000.parquet",
            "partitionValues": {},
            "size": (root / "part-00000.parquet").stat().st_size,
            "modificationTime": w.COMMIT_MILLIS,
            "dataChange": True,
            "stats": json.dumps({"numRecords": len(VALUES)}),
        }
    }
    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
    if delta_type == "timestamp_ntz":
        protocol = w.protocol("timestampNtz")
    fields = [w.field("id", "long"), w.field("ts", delta_type)]
    w.commit(root, 0, protocol, w.metadata(fields), add)
    return root


def _expected(aware: bool) -> list[tuple[int, dt.datetime | None]]:
    if not aware:
        return VALUES
    return [(i, None if v is None else v.replace(tzinfo=UTC)) for i, v in VALUES]


def _pairs(batches) -> list[tuple[int, dt.datetime | None]]:
    rows = (
        batches.to_pylist() if isinstance(batches, pa.Table) else [r for b in batches for r in b.to_pylist()]
    )
    return sorted((row["id"], row["ts"]) for row in rows)


def _ids(batches) -> list[int]:
    return sorted(row["id"] for batch in batches for row in batch.to_pylist())


@pytest.mark.parametrize(("delta_type", "aware"), [("timestamp", True), ("timestamp_ntz", False)])
def test_delta_int96_timestamps_read_exactly_to_9999_12_31(tmp_path, delta_type, aware):
    table = DeltaAdapter.open(str(_delta_int96_table(tmp_path / "t", delta_type)))
    rows = pa.Table.from_batches(list(table.read()), schema=table.schema)
    assert rows.schema.field("ts").type == pa.timestamp("us", "UTC" if aware else None)
    assert _pairs(rows) == _expected(aware)
    assert rows.sort_by("id").column("ts")[0].as_py().isoformat().startswith("9999-12-31T00:00:00")
    # every split reads the same values, and a filter on the column sees them
    assert _pairs(b for split in table.plan_splits() for b in table.read(split)) == _expected(aware)
    zone = "Z" if aware else ""
    assert _ids(table.read(filters=f"ts > '9000-01-01T00:00:00{zone}'", columns=["id"])) == [1]
    assert _ids(table.read(filters=f"ts < '1700-01-01T00:00:00{zone}'", columns=["id"])) == [3, 4]


def _fields(ts_type: str) -> list[dict]:
    return [
        {"id": 1, "name": "id", "required": False, "type": "long"},
        {"id": 2, "name": "ts", "required": False, "type": ts_type},
    ]


@pytest.mark.parametrize(("iceberg_type", "aware"), [("timestamptz", True), ("timestamp", False)])
def test_iceberg_int96_data_files_read_exactly_to_9999_12_31(tmp_path, iceberg_type, aware):
    # parquet imported from a Hive/Spark table (add_files, migrate): INT96, with field ids
    writer = SpecWriter(tmp_path / "ice")
    schema = pa.schema([fid("id", pa.int64(), 1), fid("ts", pa.timestamp("us"), 2)])
    data_file = writer.parquet(_rows(schema), name="imported.parquet", use_deprecated_int96_timestamps=True)
    _check_int96(writer.root / "data" / "imported.parquet")
    table = load_table(writer.one_snapshot_table(_fields(iceberg_type), [data_file]))
    rows = table.read_arrow()
    assert _pairs(rows) == _expected(aware)
    first = rows.sort_by("id").column("ts")[0].as_py()
    assert first == (END_OF_TIME.replace(tzinfo=UTC) if aware else END_OF_TIME)


def test_iceberg_refuses_a_file_value_its_column_cannot_hold_instead_of_wrapping_it(tmp_path):
    # an int column whose file holds a long 2**40: the unsafe cast used to give 0
    writer = SpecWriter(tmp_path / "ice")
    schema = pa.schema([fid("id", pa.int64(), 1), fid("n", pa.int64(), 2)])
    data_file = writer.parquet(pa.table({"id": [1, 2], "n": [7, 2**40]}, schema=schema))
    fields = [
        {"id": 1, "name": "id", "required": False, "type": "long"},
        {"id": 2, "name": "n", "required": False, "type": "int"},
    ]
    table = load_table(writer.one_snapshot_table(fields, [data_file]))
    with pytest.raises(CorruptTable, match=r"column 'n' of data file .*\.parquet holds int64 values"):
        table.read_arrow()


def test_iceberg_refuses_a_microsecond_value_a_nanosecond_column_cannot_hold(tmp_path):
    writer = SpecWriter(tmp_path / "ice")
    schema = pa.schema([fid("id", pa.int64(), 1), fid("ts", pa.timestamp("us"), 2)])
    data_file = writer.parquet(pa.table({"id": [1], "ts": [END_OF_TIME]}, schema=schema))
    location = writer.one_snapshot_table(_fields("timestamp_ns"), [data_file], format_version=3)
    with pytest.raises(CorruptTable, match="column 'ts' .* out of bounds"):
        load_table(location).read_arrow()


def test_cast_column_truncates_finer_time_values_only():
    nanos = pa.array([1_000_000_001, None], pa.timestamp("ns"))
    assert cast_column(nanos, pa.timestamp("us"), what="x").cast(pa.int64()).to_pylist() == [1_000_000, None]
    nested = pa.StructArray.from_arrays([nanos], ["t"])
    cast = cast_column(nested, pa.struct([("t", pa.timestamp("us"))]), what="x")
    assert cast.field(0).cast(pa.int64()).to_pylist() == [1_000_000, None]
    with pytest.raises(CorruptTable, match="column 'n' holds int64 values"):
        cast_column(pa.array([2**40]), pa.int32(), what="column 'n'")
    with pytest.raises(CorruptTable):
        cast_column(pa.array([1.5]), pa.int64(), what="column 'f'")


def test_spark_batches_truncate_nanoseconds_and_refuse_overflow():
    from storage.spec.spark.types import conform_batch

    batch = pa.RecordBatch.from_pydict(
        {"t": pa.array([1_000_000_001], pa.timestamp("ns", "UTC")), "n": pa.array([5], pa.int64())}
    )
    out = conform_batch(batch, pa.schema([("t", pa.timestamp("us", "UTC")), ("n", pa.int32())]))
    assert out.column("t").cast(pa.int64()).to_pylist() == [1_000_000]
    assert out.column("n").to_pylist() == [5]
    big = pa.RecordBatch.from_pydict({"n": pa.array([2**40], pa.int64())})
    with pytest.raises(CorruptTable, match="column 'n'"):
        conform_batch(big, pa.schema([("n", pa.int32())]))
