"""Column defaults (Iceberg spec v3 "Default values"): rows of files written before a column
existed read its ``initial-default``, for every primitive type and for struct children; null only
when there is no default; an identity partition value comes first.

The table is hand-written (``SpecWriter``): pyiceberg 0.12 cannot parse every type's default
(``timestamp_ns``), which is why the adapter reads defaults from the JSON itself.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage.spec import load_table
from storage.spec.errors import CorruptTable
from tests.spec.iceberg_writer import SpecWriter, fid, optional

UTC = dt.UTC
UUID = "f79c3e09-677c-4bbd-a479-3f349cb785e7"

# (name, id, Iceberg type, JSON default, value the default reads as, Arrow type, a file's own value)
COLUMNS: list[tuple[str, int, str, Any, Any, pa.DataType, Any]] = [
    ("b", 10, "boolean", True, True, pa.bool_(), False),
    ("i", 11, "int", 42, 42, pa.int32(), -1),
    ("l", 12, "long", 9007199254740993, 9007199254740993, pa.int64(), 5),
    ("f", 13, "float", 1.5, 1.5, pa.float32(), 2.5),
    ("d", 14, "double", 0.1, 0.1, pa.float64(), 0.2),
    ("dec", 15, "decimal(9,2)", "123.45", Decimal("123.45"), pa.decimal128(9, 2), Decimal("-0.01")),
    ("day", 16, "date", "2024-02-29", dt.date(2024, 2, 29), pa.date32(), dt.date(1970, 1, 1)),
    ("t", 17, "time", "10:11:12.123456", dt.time(10, 11, 12, 123456), pa.time64("us"), dt.time(0)),
    (
        "ts",
        18,
        "timestamp",
        "2024-02-29T10:11:12.123456",
        dt.datetime(2024, 2, 29, 10, 11, 12, 123456),
        pa.timestamp("us"),
        dt.datetime(2000, 1, 1),
    ),
    (
        "tstz",
        19,
        "timestamptz",
        "2024-02-29T10:11:12.123456+02:00",
        dt.datetime(2024, 2, 29, 8, 11, 12, 123456, tzinfo=UTC),
        pa.timestamp("us", "UTC"),
        dt.datetime(2000, 1, 1, tzinfo=UTC),
    ),
    ("str", 20, "string", "héllo", "héllo", pa.large_string(), "own"),
    ("u", 21, "uuid", UUID, uuid.UUID(UUID), pa.uuid(), uuid.UUID(int=1)),
    ("fx", 22, "fixed[3]", "0a0b0c", b"\x0a\x0b\x0c", pa.binary(3), b"abc"),
    ("bin", 23, "binary", "00ff", b"\x00\xff", pa.large_binary(), b""),
    (
        "tsn",
        26,
        "timestamp_ns",
        "2024-02-29T10:11:12.123456789",
        pa.scalar(1709201472123456789, pa.timestamp("ns")).as_py(),
        pa.timestamp("ns"),
        pa.scalar(1, pa.timestamp("ns")).as_py(),
    ),
]


def _field(name: str, field_id: int, type_: Any, default: Any = None, **extra: Any) -> dict[str, Any]:
    field = {"id": field_id, "name": name, "required": False, "type": type_, **extra}
    if default is not None:
        field["initial-default"] = default
        field["write-default"] = default
    return field


SCHEMA_0 = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        _field("id", 1, "long"),
        _field("s", 2, {"type": "struct", "fields": [_field("a", 3, "int")]}),
    ],
}
SCHEMA_1 = {
    "type": "struct",
    "schema-id": 1,
    "fields": [
        _field("id", 1, "long"),
        _field(
            "s",
            2,
            {"type": "struct", "fields": [_field("a", 3, "int"), _field("child", 25, "string", "kid")]},
        ),
        *(_field(name, field_id, type_, default) for name, field_id, type_, default, *_ in COLUMNS),
        _field("nodefault", 24, "string"),
        _field("s2", 27, {"type": "struct", "fields": [_field("x", 28, "int", 7)]}, {}),
    ],
}

OLD_ARROW = pa.schema([fid("id", pa.int64(), 1), fid("s", pa.struct([fid("a", pa.int32(), 3)]), 2)])


def _new_arrow() -> pa.Schema:
    return pa.schema(
        [
            fid("id", pa.int64(), 1),
            fid("s", pa.struct([fid("a", pa.int32(), 3), fid("child", pa.string(), 25)]), 2),
            *(
                fid(name, arrow if name != "u" else pa.binary(16), field_id)
                for name, field_id, _, _, _, arrow, _ in COLUMNS
            ),
            fid("nodefault", pa.string(), 24),
            fid("s2", pa.struct([fid("x", pa.int32(), 28)]), 27),
        ]
    )


def _metadata(writer: SpecWriter, snapshots: list[dict[str, Any]], partitioned: bool = False) -> str:
    spec_fields = (
        [{"name": "i", "transform": "identity", "source-id": 11, "field-id": 1000}] if partitioned else []
    )
    return writer.metadata(
        {
            "format-version": 3,
            "table-uuid": "4b1bd1c5-64b5-4b34-bbcd-5cdd3f7e4e0f",
            "last-sequence-number": len(snapshots),
            "last-column-id": 28,
            "current-schema-id": 1,
            "schemas": [SCHEMA_0, SCHEMA_1],
            "default-spec-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": spec_fields}],
            "last-partition-id": 1000 if partitioned else 999,
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": {},
            "current-snapshot-id": snapshots[-1]["snapshot-id"],
            "snapshots": snapshots,
            "next-row-id": 0,
        }
    )


def defaults_table(root: Path) -> tuple[str, int, int]:
    """Snapshot 1 (schema 0): ids 1, 2 (s null in row 2). Snapshot 2 (schema 1): id 3 with its
    own value in every column (s2 null)."""
    writer = SpecWriter(root)
    old = writer.parquet(pa.table({"id": [1, 2], "s": [{"a": 10}, None]}, schema=OLD_ARROW))
    own = {name: [value] for name, _, _, _, _, _, value in COLUMNS}
    own["u"] = [uuid.UUID(int=1).bytes]
    new = writer.parquet(
        pa.table(
            {"id": [3], "s": [{"a": 30, "child": "mine"}], **own, "nodefault": ["set"], "s2": [None]},
            schema=_new_arrow(),
        )
    )
    first = writer.manifest([old], 1)
    second = writer.manifest([new], 2)
    snapshots = [
        {
            "snapshot-id": 1,
            "sequence-number": 1,
            "timestamp-ms": 1_700_000_000_000,
            "schema-id": 0,
            "summary": {"operation": "append"},
            "manifest-list": writer.manifest_list([(first, 0, 1)], 1),
        },
        {
            "snapshot-id": 2,
            "parent-snapshot-id": 1,
            "sequence-number": 2,
            "timestamp-ms": 1_700_000_000_001,
            "schema-id": 1,
            "summary": {"operation": "append"},
            "manifest-list": writer.manifest_list([(first, 0, 1), (second, 0, 2)], 2),
        },
    ]
    return _metadata(writer, snapshots), 1, 2


def _expected_old_row(row_id: int, s: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"id": row_id, "s": s}
    for name, _, _, _, value, _, _ in COLUMNS:
        row[name] = value
    row["nodefault"] = None
    row["s2"] = {"x": 7}
    return row


def test_older_files_read_the_initial_default_of_every_primitive_type(tmp_path):
    location, _, _ = defaults_table(tmp_path / "defaults")
    table = load_table(location)
    rows = sorted(table.read_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows[0] == _expected_old_row(1, {"a": 10, "child": "kid"})
    # a null struct stays null: its children's defaults do not resurrect it
    assert rows[1] == _expected_old_row(2, None)
    own = {name: value for name, _, _, _, _, _, value in COLUMNS}
    assert rows[2] == {"id": 3, "s": {"a": 30, "child": "mine"}, **own, "nodefault": "set", "s2": None}
    # the timestamp_ns default keeps its nanoseconds
    column = table.read_arrow(columns=["id", "tsn"]).sort_by("id").column("tsn")
    assert column.type == pa.timestamp("ns") and column.cast(pa.int64()).to_pylist()[0] == 1709201472123456789
    assert table.schema.field("i").metadata[b"iceberg.initial-default"] == b"42"
    assert table.schema.field("i").metadata[b"iceberg.write-default"] == b"42"


def test_filters_splits_and_projections_see_the_defaults(tmp_path):
    location, _, _ = defaults_table(tmp_path / "defaults")
    table = load_table(location)
    assert sorted(r["id"] for r in table.read_arrow(filters="i = 42").to_pylist()) == [1, 2]
    assert table.read_arrow(filters="str = 'own'", columns=["id"]).to_pylist() == [{"id": 3}]
    assert sorted(r["id"] for r in table.read_arrow(filters="nodefault is null").to_pylist()) == [1, 2]
    splits = list(table.plan_splits())
    rows = sorted(
        (r for s in splits for r in table.read_arrow(s, columns=["id", "dec"]).to_pylist()),
        key=lambda r: r["id"],
    )
    assert rows == [
        {"id": 1, "dec": Decimal("123.45")},
        {"id": 2, "dec": Decimal("123.45")},
        {"id": 3, "dec": Decimal("-0.01")},
    ]
    assert not table.plain_parquet_layout()  # Spark's parquet reader would read nulls
    assert sum(1 for _ in table.file_index().list_files_at()) == 2


def test_an_identity_partition_value_comes_before_the_default(tmp_path):
    writer = SpecWriter(tmp_path / "partitioned")
    old = writer.parquet(pa.table({"id": [1], "s": [{"a": 1}]}, schema=OLD_ARROW))
    old["partition"] = {"i": 5}
    other = writer.parquet(pa.table({"id": [2], "s": [{"a": 2}]}, schema=OLD_ARROW))
    other["partition"] = {"i": None}
    manifest = writer.manifest([old, other], 1, [{"name": "i", "type": optional("int"), "field-id": 1000}])
    snapshots = [
        {
            "snapshot-id": 1,
            "sequence-number": 1,
            "timestamp-ms": 1,
            "schema-id": 1,
            "summary": {"operation": "append"},
            "manifest-list": writer.manifest_list([(manifest, 0, 1)], 1),
        }
    ]
    table = load_table(_metadata(writer, snapshots, partitioned=True))
    assert sorted(table.read_arrow(columns=["id", "i", "l"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "i": 5, "l": 9007199254740993},  # the partition value
        {"id": 2, "i": None, "l": 9007199254740993},  # a null partition value is the value
    ]


def test_a_default_the_type_cannot_hold_is_corrupt(tmp_path):
    import json

    location, _, _ = defaults_table(tmp_path / "defaults")
    document = json.loads(Path(location).read_text())
    for field in document["schemas"][1]["fields"]:
        if field["name"] == "dec":
            field["initial-default"] = "1.234"  # scale 3 in a decimal(9, 2)
    Path(location).write_text(json.dumps(document))
    table = load_table(location)  # opening and listing do not need the default
    assert sum(1 for _ in table.file_index().list_files_at()) == 2
    with pytest.raises(CorruptTable, match="dec"):
        table.read_arrow()


@pytest.mark.spark
def test_the_spark_reader_reads_initial_defaults(tmp_path, spark):
    from storage.spec.spark_source import read_table

    location, _, _ = defaults_table(tmp_path / "defaults")
    columns = ["id", "i", "l", "dec", "day", "ts", "tstz", "str", "bin", "nodefault"]
    frame = read_table(spark, location, format="iceberg", columns=columns)
    rows = sorted((tuple(r) for r in frame.collect()), key=lambda r: r[0])
    default = (
        42,
        9007199254740993,
        Decimal("123.45"),
        dt.date(2024, 2, 29),
        dt.datetime(2024, 2, 29, 10, 11, 12, 123456),
    )
    assert [r[:6] for r in rows[:2]] == [(1, *default), (2, *default)]
    assert [(r[7], bytes(r[8]), r[9]) for r in rows] == [
        ("héllo", b"\x00\xff", None),
        ("héllo", b"\x00\xff", None),
        ("own", b"", "set"),
    ]
    assert rows[0][6].astimezone(UTC) == dt.datetime(2024, 2, 29, 8, 11, 12, 123456, tzinfo=UTC)
    filtered = read_table(spark, location, format="iceberg", filters="i = 42", columns=["id"])
    assert sorted(r[0] for r in filtered.collect()) == [1, 2]


# -- v3 types a reader may meet: timestamp_ns (above and here), unknown, variant ----------------------

V3_SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        _field("id", 1, "long"),
        _field("tsn", 2, "timestamp_ns"),
        _field("tstzn", 3, "timestamptz_ns"),
        _field("nothing", 4, "unknown"),
        _field("v", 5, "variant"),
    ],
}
VARIANT_METADATA = b"\x01\x00\x00"  # version 1, empty dictionary
VARIANT_FIVE = b"\x0c\x05"  # int8 5


def v3_types_table(root: Path, shredded: bool = False) -> str:
    writer = SpecWriter(root)
    variant = [pa.field("metadata", pa.binary(), False), pa.field("value", pa.binary())]
    if shredded:
        variant.append(pa.field("typed_value", pa.int8()))
    values: dict[str, Any] = {"metadata": VARIANT_METADATA, "value": VARIANT_FIVE}
    if shredded:
        values["typed_value"] = None
    rows = pa.table(
        {
            "id": [1, 2],
            "tsn": pa.array([1709201472123456789, None], pa.timestamp("ns")),
            "tstzn": pa.array([-1, 1], pa.timestamp("ns", "UTC")),
            "v": [values, None],
        },
        schema=pa.schema(
            [
                fid("id", pa.int64(), 1),
                fid("tsn", pa.timestamp("ns"), 2),
                fid("tstzn", pa.timestamp("ns", "UTC"), 3),
                fid("v", pa.struct(variant), 5),
            ]
        ),
    )
    manifest = writer.manifest([writer.parquet(rows)], 1)
    snapshots = [
        {
            "snapshot-id": 1,
            "sequence-number": 1,
            "timestamp-ms": 1,
            "schema-id": 0,
            "summary": {"operation": "append"},
            "manifest-list": writer.manifest_list([(manifest, 0, 1)], 1),
        }
    ]
    return writer.metadata(
        {
            "format-version": 3,
            "table-uuid": "1c5bd1c5-64b5-4b34-bbcd-5cdd3f7e4e0f",
            "last-sequence-number": 1,
            "last-column-id": 5,
            "current-schema-id": 0,
            "schemas": [V3_SCHEMA],
            "default-spec-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": []}],
            "last-partition-id": 999,
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": {},
            "current-snapshot-id": 1,
            "snapshots": snapshots,
            "next-row-id": 2,
        }
    )


def test_v3_types_read_exactly(tmp_path):
    table = load_table(v3_types_table(tmp_path / "v3"))
    schema = table.schema
    assert schema.field("tsn").type == pa.timestamp("ns")
    assert schema.field("tstzn").type == pa.timestamp("ns", "UTC")
    assert schema.field("nothing").type == pa.null()
    assert schema.field("v").type == pa.struct(
        [pa.field("metadata", pa.binary()), pa.field("value", pa.binary())]
    )
    result = table.read_arrow().sort_by("id")
    assert result.column("tsn").cast(pa.int64()).to_pylist() == [1709201472123456789, None]
    assert result.column("tstzn").cast(pa.int64()).to_pylist() == [-1, 1]
    assert result.column("nothing").to_pylist() == [None, None]
    assert result.column("v").to_pylist() == [{"metadata": VARIANT_METADATA, "value": VARIANT_FIVE}, None]
    splits = list(table.plan_splits())
    assert sum(table.read_arrow(s).num_rows for s in splits) == 2
    assert table.read_arrow(filters="tsn is null", columns=["id"]).to_pylist() == [{"id": 2}]
    assert not table.plain_parquet_layout()


def test_a_shredded_variant_is_refused_at_read_time_not_at_open(tmp_path):
    from storage.spec.errors import UnsupportedFeature

    table = load_table(v3_types_table(tmp_path / "v3", shredded=True))
    assert table.schema.names == ["id", "tsn", "tstzn", "nothing", "v"]
    assert sum(1 for _ in table.file_index().list_files_at()) == 1
    assert table.summary().file_count == 1
    with pytest.raises(UnsupportedFeature, match="shredded variant"):
        table.read_arrow()
    assert table.read_arrow(columns=["id"]).num_rows == 2  # other columns still read


@pytest.mark.spark
def test_the_spark_reader_reads_v3_types(tmp_path, spark):
    from storage.spec.spark_source import read_table

    location = v3_types_table(tmp_path / "v3")
    frame = read_table(spark, location, format="iceberg", columns=["id", "tsn", "nothing", "v"])
    rows = sorted((tuple(r) for r in frame.collect()), key=lambda r: r[0])
    # Spark timestamps hold microseconds: the nanoseconds are truncated by Spark, not by the reader
    assert rows[0][1] == dt.datetime(2024, 2, 29, 10, 11, 12, 123456)
    assert rows[1][1] is None
    assert [r[2] for r in rows] == [None, None]
    assert bytes(rows[0][3]["metadata"]) == VARIANT_METADATA and bytes(rows[0][3]["value"]) == VARIANT_FIVE
