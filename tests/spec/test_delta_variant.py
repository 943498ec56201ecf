"""Delta variant columns (``variantType``, ``variantType-preview``): a variant reads as
``struct<value: binary, metadata: binary>`` holding the stored bytes, top level and nested, through
``read``, listings, splits and the Spark data source. A shredded variant (``typed_value`` in the
file) cannot be read that way: the table still opens and is browsed, and reading the column raises
``UnsupportedFeature`` naming it while the other columns read.

Files are written here with pyarrow as Spark lays a variant out in parquet (a group of the two
binaries, ``metadata`` first); the bytes are those Spark 4 wrote for the JSON values below, and
Spark's own ``VariantVal`` decodes what the reader returns.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import VariantVal

from storage.formats.delta import DeltaAdapter
from storage.spec.errors import UnsupportedFeature
from tests.spec import _delta_log_writer as w

EMPTY_METADATA = b"\x01\x00\x00"
# (JSON text, value bytes, metadata bytes) as Spark 4's parse_json encodes them.
VALUES = [
    ("42", b"\x0c*", EMPTY_METADATA),
    ('"hi"', b"\thi", EMPTY_METADATA),
    ('{"a":[1,2]}', b"\x02\x01\x00\x00\t\x03\x02\x00\x02\x04\x0c\x01\x0c\x02", b"\x01\x01\x00\x01a"),
]
SPARK_VARIANT = pa.struct([pa.field("metadata", pa.binary(), False), pa.field("value", pa.binary(), False)])
SHREDDED = pa.struct(
    [pa.field("metadata", pa.binary(), False), pa.field("value", pa.binary()), ("typed_value", pa.int64())]
)
FIELDS = [
    w.field("id", "long"),
    w.field("v", "variant"),
    w.field("w", {"type": "struct", "fields": [w.field("tag", "string"), w.field("payload", "variant")]}),
]


def _variant(index: int | None) -> dict | None:
    if index is None:
        return None
    _, value, metadata = VALUES[index]
    return {"metadata": metadata, "value": value}


def _data(ids: list[int], picks: list[int | None]) -> pa.Table:
    nested = pa.struct([("tag", pa.string()), pa.field("payload", SPARK_VARIANT)])
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array([_variant(p) for p in picks], SPARK_VARIANT),
            "w": pa.array(
                [None if p is None else {"tag": f"t{p}", "payload": _variant(p)} for p in picks], nested
            ),
        }
    )


@pytest.fixture
def variant_table(tmp_path) -> Path:
    path = tmp_path / "variant"
    w.commit(
        path,
        0,
        w.protocol("variantType"),
        w.metadata(FIELDS),
        w.data_file(
            path, _data([1, 2], [0, 1]), stats='{"numRecords":2,"minValues":{"id":1},"maxValues":{"id":2}}'
        ),
    )
    w.commit(path, 1, w.data_file(path, _data([3, 4], [2, None]), stats='{"numRecords":2}'))
    return path


@pytest.fixture
def shredded_table(tmp_path) -> Path:
    path = tmp_path / "shredded"
    shredded = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "v": pa.array(
                [
                    {"metadata": EMPTY_METADATA, "value": None, "typed_value": 42},
                    {"metadata": EMPTY_METADATA, "value": b"\thi", "typed_value": None},
                ],
                SHREDDED,
            ),
        }
    )
    w.commit(
        path,
        0,
        w.protocol("variantType-preview", "variantShredding-preview"),
        w.metadata(FIELDS[:2]),
        w.data_file(path, shredded, stats='{"numRecords":2,"minValues":{"id":1},"maxValues":{"id":2}}'),
    )
    return path


def _json(variant: dict | None) -> str | None:
    return None if variant is None else VariantVal(variant["value"], variant["metadata"]).toJson()


EXPECTED = [
    (1, "42", "t0", "42"),
    (2, '"hi"', "t1", '"hi"'),
    (3, '{"a":[1,2]}', "t2", '{"a":[1,2]}'),
    (4, None, None, None),
]


def _decoded(rows: list[dict]) -> list[tuple]:
    found = []
    for row in sorted(rows, key=lambda r: r["id"]):
        nested = row["w"]
        found.append(
            (row["id"], _json(row["v"]), nested and nested["tag"], nested and _json(nested["payload"]))
        )
    return found


def _rows(batches) -> list[dict]:
    return [row for batch in batches for row in batch.to_pylist()]


def test_a_variant_reads_as_the_struct_of_its_value_and_metadata_bytes(variant_table):
    table = DeltaAdapter.open(str(variant_table))
    variant = pa.struct([pa.field("value", pa.binary(), False), pa.field("metadata", pa.binary(), False)])
    assert table.schema.field("v").type == variant
    assert table.schema.field("w").type.field("payload").type == variant
    rows = sorted(_rows(table.read()), key=lambda r: r["id"])
    assert rows[0]["v"] == {"value": b"\x0c*", "metadata": EMPTY_METADATA}
    assert rows[2]["w"] == {"tag": "t2", "payload": {"value": VALUES[2][1], "metadata": VALUES[2][2]}}
    assert rows[3]["v"] is None and rows[3]["w"] is None
    assert _decoded(rows) == EXPECTED


def test_variant_tables_list_plan_and_read_by_split(variant_table):
    table = DeltaAdapter.open(str(variant_table))
    slices = list(table.file_index().list_files_at(filters="id > 2"))
    assert len(slices) == 1  # the first file holds ids 1..2; the second has no bounds: kept
    assert _decoded(_rows(table.read(slices, filters="id > 2"))) == EXPECTED[2:]
    splits = list(table.plan_splits(target_size=1, open_file_cost=0))
    assert len(splits) == 2
    assert _decoded([r for s in splits for r in _rows(table.read(s))]) == EXPECTED
    assert _decoded(_rows(table.read(0))) == EXPECTED[:2]
    assert table.plain_parquet_layout() is False


@pytest.mark.spark
def test_spark_reads_variants_as_the_struct_of_their_bytes(spark, variant_table):
    from storage.spec.spark_source import read_table

    frame = read_table(spark, str(variant_table))
    assert frame.schema["v"].dataType.simpleString() == "struct<value:binary,metadata:binary>"
    rows = [r.asDict(recursive=True) for r in frame.collect()]
    for row in rows:
        for name in ("v",):
            if row[name] is not None:
                row[name] = {k: bytes(v) for k, v in row[name].items()}
        if row["w"] is not None:
            row["w"]["payload"] = {k: bytes(v) for k, v in row["w"]["payload"].items()}
    assert _decoded(rows) == EXPECTED


def test_a_shredded_variant_table_opens_and_is_browsed(shredded_table):
    table = DeltaAdapter.open(str(shredded_table))
    assert [i.id for i in table.timeline().instants()] == [0]
    assert table.summary().record_count == 2
    assert [s.record_count for s in table.file_index().list_files_at()] == [2]
    assert [p.record_count for p in table.file_index().partitions_at()] == [2]
    assert len(list(table.plan_splits())) == 1


def test_reading_a_shredded_variant_is_refused_naming_the_column_and_other_columns_read(shredded_table):
    table = DeltaAdapter.open(str(shredded_table))
    batches = table.read()  # refused when read, not when asked
    with pytest.raises(UnsupportedFeature, match="column 'v'.*shredded variant"):
        list(batches)
    split = next(iter(table.plan_splits()))
    with pytest.raises(UnsupportedFeature, match="'v'"):
        list(table.read(split))
    assert sorted(r["id"] for r in _rows(table.read(columns=["id"]))) == [1, 2]
    assert [r["id"] for r in _rows(table.read(split, columns=["id"], filters="id = 2"))] == [2]


@pytest.mark.spark
def test_spark_refuses_a_shredded_variant_naming_it_and_reads_the_other_columns(spark, shredded_table):
    from storage.spec.spark_source import read_table

    assert sorted(r["id"] for r in read_table(spark, str(shredded_table), columns=["id"]).collect()) == [1, 2]
    with pytest.raises(Exception, match="column 'v'"):
        read_table(spark, str(shredded_table)).collect()
