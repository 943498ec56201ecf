"""Iceberg ``compute-statistics``: NDV theta sketches in a Puffin file registered on the snapshot,
hashed exactly as Iceberg's Java ``ThetaSketchAgg`` hashes (checked against the Java DataSketches
library in Spark's JVM, the Python DataSketches library, pyiceberg's single-value serialization)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import uuid
from decimal import Decimal
from pathlib import Path

import datasketches
import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import zstandard

from processes.maintenance.iceberg.statistics import IcebergComputeStatisticsFactory
from processes.maintenance.iceberg.statistics.sketches import (
    KINDS,
    SEED_HASH,
    ThetaSketch,
    murmur3_h1,
    value_hashes,
)
from processes.maintenance.outputs import local_path
from processes.models import ProcessStatus
from storage.formats.iceberg._puffin import read_footer

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("small", pa.int32()),
        pa.field("day", pa.date32()),
        pa.field("name", pa.string()),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("flag", pa.bool_()),
        pa.field("score", pa.float64()),
        pa.field("tags", pa.list_(pa.string())),
    ]
)
PRIMITIVE = ["id", "small", "day", "name", "amount", "flag", "score"]


def stats_rows(start: int, count: int) -> pa.Table:
    ids = range(start, start + count)
    return pa.table(
        {
            "id": list(ids),
            "small": [None if i % 11 == 0 else i % 7 for i in ids],
            "day": [None if i % 13 == 0 else dt.date(2024, 1, 1) + dt.timedelta(days=i % 30) for i in ids],
            "name": [None if i % 19 == 0 else ("" if i % 17 == 0 else f"name-{i % 50}") for i in ids],
            "amount": [None if i % 29 == 0 else Decimal(i % 23 - 11) / 4 for i in ids],
            "flag": [i % 3 == 0 for i in ids],
            "score": [(i % 9) * 0.5 for i in ids],
            "tags": [[f"t{i % 3}"] for i in ids],
        }
    ).cast(SCHEMA)


def true_ndv(rows: pa.Table, column: str) -> int:
    """Distinct non-null values; an empty string is no value to a theta sketch (DataSketches
    rejects empty input, so Iceberg's Java sketches never count it)."""
    values = rows.column(column)
    if pa.types.is_string(values.type):
        values = values.filter(pc.not_equal(values, ""))
    return pc.count_distinct(values, mode="only_valid").as_py()


@pytest.fixture
def stats_table(iceberg_catalog):
    """(console Table, pyiceberg table, first snapshot id): three appends and a copy-on-write
    delete (so the current snapshot reads with a delete applied to one file)."""
    from storage import services

    row, catalog = iceberg_catalog
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.facts", schema=SCHEMA)
    table.append(stats_rows(0, 400))
    first = table.current_snapshot().snapshot_id
    table.append(stats_rows(400, 400))
    table.append(stats_rows(800, 400))
    table.delete("id >= 1150")
    table.refresh()
    console_table = services.table_register(catalog=row, identifier=f"{namespace}.facts")
    return console_table, table, first


def stats_files(table) -> set[str]:
    root = Path(local_path(table.location()))
    return {str(p) for p in root.rglob("*.stats")}


def parse_puffin(path: str) -> tuple[bytes, dict, int]:
    """(file bytes, footer JSON, footer size), parsed here without the project's reader."""
    data = Path(local_path(path)).read_bytes()
    assert data[:4] == b"PFA1" and data[-4:] == b"PFA1"
    payload_size = int.from_bytes(data[-12:-8], "little")
    assert data[-8:-4] == bytes(4)  # no flags: the footer is plain JSON
    start = len(data) - 12 - payload_size - 4
    assert data[start : start + 4] == b"PFA1"
    return data, json.loads(data[start + 4 : len(data) - 12]), len(data) - start


def blob_payload(data: bytes, blob: dict) -> bytes:
    stored = data[blob["offset"] : blob["offset"] + blob["length"]]
    if blob.get("compression-codec") == "zstd":
        return zstandard.ZstdDecompressor().decompress(stored)
    assert "compression-codec" not in blob
    return stored


def iceberg_value(field_type, value):
    """A Python value as pyiceberg's ``to_bytes`` takes it."""
    from pyiceberg.types import DateType

    if isinstance(field_type, DateType):
        return (value - dt.date(1970, 1, 1)).days
    return value


def java_sketch_bytes(spark, field_type, values) -> bytes:
    """What Iceberg's ThetaSketchAgg writes: a Java Alpha sketch (default seed) updated with the
    ByteBuffer of every value's Iceberg single-value serialization (pyiceberg's ``to_bytes``)."""
    from pyiceberg.conversions import to_bytes

    jvm = spark._jvm
    sketch = (
        jvm.org.apache.datasketches.theta.UpdateSketch.builder()
        .setFamily(jvm.org.apache.datasketches.common.Family.ALPHA)
        .build()
    )
    for value in {v for v in values if v is not None}:
        serialized = to_bytes(field_type, iceberg_value(field_type, value))
        sketch.update(jvm.java.nio.ByteBuffer.wrap(bytearray(serialized)))
    return bytes(sketch.compact().toByteArray())


def test_statistics_hold_the_exact_distinct_count_of_every_column_as_iceberg_writes_them(
    stats_table, run_now, spark
):
    console_table, table, _ = stats_table
    snapshot = table.current_snapshot()
    rows = table.scan().to_arrow()
    assert rows.num_rows == 1150

    process = run_now(console_table, "compute-statistics")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot.snapshot_id  # no new snapshot
    [stats] = table.metadata.statistics
    schema = table.schema()
    assert stats.snapshot_id == snapshot.snapshot_id
    assert stats.statistics_path == process.summary["statistics_file"]
    folder, name = os.path.split(local_path(stats.statistics_path))
    assert folder == os.path.join(local_path(table.location()), "metadata")
    assert re.fullmatch(rf"{snapshot.snapshot_id}-[0-9a-f-]{{36}}\.stats", name)
    data, footer, footer_size = parse_puffin(stats.statistics_path)
    assert (stats.file_size_in_bytes, stats.file_footer_size_in_bytes) == (len(data), footer_size)
    with open(local_path(stats.statistics_path), "rb") as handle:
        assert read_footer(handle, len(data), stats.statistics_path) == footer
    expected = {c: true_ndv(rows, c) for c in PRIMITIVE}
    assert expected == {"id": 1150, "small": 7, "day": 30, "name": 50, "amount": 23, "flag": 2, "score": 9}
    assert [b["fields"] for b in footer["blobs"]] == [[schema.find_field(c).field_id] for c in PRIMITIVE]
    for column, blob, meta in zip(PRIMITIVE, footer["blobs"], stats.blob_metadata, strict=True):
        assert blob["type"] == meta.type == "apache-datasketches-theta-v1"
        assert blob["snapshot-id"] == meta.snapshot_id == snapshot.snapshot_id
        assert blob["sequence-number"] == meta.sequence_number == snapshot.sequence_number
        assert meta.fields == blob["fields"] and blob["compression-codec"] == "zstd"
        assert blob["properties"] == meta.properties == {"ndv": str(expected[column])}
        payload = blob_payload(data, blob)
        sketch = datasketches.compact_theta_sketch.deserialize(payload)
        assert sketch.get_estimate() == expected[column] and not sketch.is_estimation_mode()
        field_type = schema.find_field(column).field_type
        assert payload == java_sketch_bytes(spark, field_type, rows.column(column).to_pylist()), column
    assert process.summary["ndv"] == expected and process.summary["rows_read"] == 1150


def test_a_second_run_replaces_the_statistics_and_an_older_snapshot_gets_its_own(stats_table, run_now):
    console_table, table, first = stats_table
    current = table.current_snapshot().snapshot_id

    one = run_now(console_table, "compute-statistics", {"columns": ["name", "id", "name"]})
    two = run_now(console_table, "compute-statistics", {"columns": ["name", "id"], "engine": "local"})
    old = run_now(console_table, "compute-statistics", {"snapshot-id": first, "blob-compression": "none"})

    assert [p.status for p in (one, two, old)] == [ProcessStatus.SUCCESS] * 3, two.failure or old.failure
    table.refresh()
    by_snapshot = {s.snapshot_id: s for s in table.metadata.statistics}
    assert sorted(by_snapshot) == sorted([current, first]) and len(table.metadata.statistics) == 2
    assert by_snapshot[current].statistics_path == two.summary["statistics_file"]
    assert two.summary["replaced_statistics_files"] == [one.summary["statistics_file"]]
    assert one.summary["ndv"] == two.summary["ndv"] == {"name": 50, "id": 1150}
    # the Spark tasks and the worker alone write the same sketches
    first_blobs, second_blobs = (parse_puffin(p.summary["statistics_file"]) for p in (one, two))
    assert [blob_payload(first_blobs[0], b) for b in first_blobs[1]["blobs"]] == [
        blob_payload(second_blobs[0], b) for b in second_blobs[1]["blobs"]
    ]
    # the first snapshot, read with its own rows: 400 of them
    rows = table.scan(snapshot_id=first).to_arrow()
    assert old.summary["ndv"] == {c: true_ndv(rows, c) for c in PRIMITIVE}
    data, footer, _ = parse_puffin(old.summary["statistics_file"])
    for column, blob in zip(PRIMITIVE, footer["blobs"], strict=True):
        sketch = datasketches.compact_theta_sketch.deserialize(blob_payload(data, blob))
        assert blob["snapshot-id"] == first and sketch.get_estimate() == true_ndv(rows, column)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"columns": ["id", "nope"]}, "unknown column 'nope'"),
        ({"columns": ["tags"]}, "not a primitive type"),
        ({"snapshot-id": 12345}, "snapshot-id 12345 is not a snapshot"),
    ],
    ids=["unknown", "not-primitive", "no-such-snapshot"],
)
def test_bad_input_is_refused_clearly_and_changes_nothing(stats_table, params, message):
    from processes import services
    from processes.models import Process
    from storage.errors import InvalidInput

    console_table, table, _ = stats_table
    before = table.metadata_location

    with pytest.raises(InvalidInput) as refused:
        services.process_create(table=console_table, action="compute-statistics", params=params)

    assert message in refused.value.message and not Process.objects.exists()
    table.refresh()
    assert table.metadata_location == before and table.metadata.statistics == []
    assert stats_files(table) == set()


def test_a_failed_commit_leaves_no_puffin_file(stats_table, run_now, monkeypatch):
    from processes.maintenance.iceberg import statistics as iceberg_statistics

    console_table, table, _ = stats_table

    def refuse(table, stats):
        raise iceberg_statistics.StatisticsConflict("the catalog refused")

    monkeypatch.setattr(iceberg_statistics, "commit_statistics", refuse)
    process = run_now(console_table, "compute-statistics")

    assert process.status == ProcessStatus.FAILED and "the catalog refused" in process.failure
    table.refresh()
    assert table.metadata.statistics == [] and stats_files(table) == set()


def test_the_trigger_offers_statistics_for_a_snapshot_without_them(stats_table, run_now):
    from processes.runtime import TableRuntime

    console_table, table, _ = stats_table
    factory = IcebergComputeStatisticsFactory()
    assert factory.trigger(TableRuntime(console_table, factory.properties), "compute-statistics") is not None
    assert run_now(console_table, "compute-statistics").status == ProcessStatus.SUCCESS
    assert factory.trigger(TableRuntime(console_table, factory.properties), "compute-statistics") is None


def test_the_factory_and_its_defaults_are_listed_by_the_api(api_as, viewer):
    plugins = {p["name"]: p for p in api_as(viewer).get("/api/v1/plugins/").json()}

    listed = plugins["iceberg-compute-statistics"]
    assert listed["properties"] == IcebergComputeStatisticsFactory.default_properties
    assert listed["strategies"] == [
        {
            "format": "iceberg",
            "action": "compute-statistics",
            "interval_seconds": 86400.0,
            "on_new_snapshot": True,
            "parallelism": 1,
        }
    ]


# --- hashing and sketches, against independent implementations -----------------------------------


def test_the_vectorised_murmur3_is_mmh3_for_every_width():
    rows = np.random.default_rng(7).integers(0, 256, (40, 40), dtype=np.uint8)
    for width in range(1, 41):
        part = np.ascontiguousarray(rows[:, :width])
        expected = [mmh3.hash64(r.tobytes(), 9001, signed=False)[0] for r in part]
        assert [int(h) for h in murmur3_h1(part)] == expected, width
    assert SEED_HASH == datasketches.update_theta_sketch().compact().get_seed_hash()


def _types_and_values():
    from pyiceberg import types as t

    return [
        (t.BooleanType(), pa.bool_(), [True, False, None]),
        (t.IntegerType(), pa.int32(), [0, -1, 2**31 - 1, -(2**31), None]),
        (t.LongType(), pa.int64(), [0, -1, 2**63 - 1, -(2**63)]),
        (t.FloatType(), pa.float32(), [0.0, -0.0, 1.5, -3.25]),
        (t.DoubleType(), pa.float64(), [0.0, -0.0, 1e300, -2.5]),
        (t.DateType(), pa.date32(), [0, -1, 19000]),
        (t.TimeType(), pa.time64("us"), [0, 86_399_999_999]),
        (t.TimestampType(), pa.timestamp("us"), [0, -1, 1_700_000_000_000_000]),
        (t.TimestamptzType(), pa.timestamp("us", tz="UTC"), [5, 1_700_000_000_000_000]),
        (t.StringType(), pa.large_string(), ["", "a", "héllo wörld", "x" * 40]),
        (t.BinaryType(), pa.large_binary(), [b"", b"\x00", b"\xff\xfe" * 9]),
        (t.FixedType(3), pa.binary(3), [b"abc", b"\x00\x00\x01"]),
        (t.UUIDType(), pa.uuid(), [uuid.UUID(int=1).bytes, uuid.uuid4().bytes]),
    ]


def test_every_kind_hashes_the_iceberg_single_value_serialization():
    from pyiceberg.conversions import to_bytes
    from pyiceberg.types import DecimalType

    cases = _types_and_values()
    decimals = ["0.00", "-0.01", "1.28", "-1.28", "327.67", "-327.68", "99999999.99"]
    cases.append((DecimalType(10, 2), pa.decimal128(10, 2), [Decimal(d) for d in decimals]))
    big = ["12345678901234567890123456789012345678", "-99999999999999999999999999999999999999"]
    cases.append((DecimalType(38, 0), pa.decimal128(38, 0), [Decimal(d) for d in big]))
    for field_type, arrow_type, values in cases:
        if arrow_type == pa.uuid():
            array = pa.ExtensionArray.from_storage(arrow_type, pa.array(values, pa.binary(16)))
            plain = [uuid.UUID(bytes=v) for v in values]
        else:
            array, plain = pa.array(values, arrow_type), values
        serialized = [to_bytes(field_type, v) for v in plain if v is not None]
        expected = sorted({mmh3.hash64(b, 9001, signed=False)[0] >> 1 for b in serialized if b})
        # sliced, so the array's offset is exercised too
        got = np.unique(
            np.concatenate(
                [value_hashes(array.slice(0, 1), KINDS[type(field_type).__name__])]
                + [value_hashes(array.slice(1), KINDS[type(field_type).__name__])]
            )
        )
        assert [int(h) for h in got] == expected, field_type


def test_the_sketch_is_the_datasketches_sketch_after_trim_in_and_beyond_exact_mode():
    for count in (0, 1, 3, 4096, 4097, 30_000):
        values = list(range(-(count // 2), count - count // 2))
        library = datasketches.update_theta_sketch()
        for value in values:
            library.update(value)  # hashes the 8 little-endian bytes, as Iceberg's long
        library.trim()
        expected = library.compact()
        ours = ThetaSketch()
        ours.update(value_hashes(pa.array(values, pa.int64()), "int64"))
        read = datasketches.compact_theta_sketch.deserialize(ours.serialize())
        assert read.theta64 == expected.theta64 and list(read) == list(expected), count
        assert read.get_estimate() == ours.estimate == expected.get_estimate()
        assert (ours.estimate == count) == (count <= 4096)


def test_merging_sketches_gives_the_sketch_of_the_whole():
    values = np.arange(50_000, dtype=np.int64)
    whole = ThetaSketch()
    whole.update(value_hashes(pa.array(values), "int64"))
    parts = [ThetaSketch() for _ in range(3)]
    for index, part in enumerate(parts):
        part.update(value_hashes(pa.array(values[index::3]), "int64"))
    merged = ThetaSketch()
    for part in parts:
        merged.merge(part)
    assert merged.serialize() == whole.serialize()
    assert abs(merged.estimate - 50_000) < 50_000 * 0.05


def test_struct_fields_are_named_by_path_and_lists_are_refused():
    from pyiceberg.schema import Schema
    from pyiceberg.types import ListType, LongType, NestedField, StringType, StructType

    from processes.maintenance.iceberg.statistics.scan import ColumnPlan, _column, plan_columns

    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "address", StructType(NestedField(3, "city", StringType()))),
        NestedField(4, "tags", ListType(5, StringType())),
    )
    assert plan_columns(schema, None) == [ColumnPlan("id", 1, "int64")]
    assert plan_columns(schema, ["address.city"]) == [ColumnPlan("address.city", 3, "string")]
    with pytest.raises(ValueError, match="inside a list or map"):
        plan_columns(schema, ["tags.element"])
    with pytest.raises(ValueError, match="columns is empty"):
        plan_columns(schema, [])
    city = pa.StructArray.from_arrays(
        [pa.array(["a", "b", "c"])], names=["city"], mask=pa.array([False, True, False])
    )
    batch = pa.RecordBatch.from_arrays([city], names=["address"])
    assert _column(batch, ColumnPlan("address.city", 3, "string")).to_pylist() == ["a", None, "c"]
