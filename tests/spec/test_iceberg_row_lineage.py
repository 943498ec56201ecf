"""Iceberg v3 row lineage (spec "Row Lineage"): ``_row_id`` and ``_last_updated_sequence_number``
read as metadata columns, by name only.

The table is hand-written from the spec (pyiceberg 0.12 cannot write row lineage): schema
``id long, name string``, unpartitioned, three snapshots.

* S1 (sequence 1), written before the table tracked lineage: manifest M1 without ``first_row_id``
  holds A (ids 0..3) and B (ids 10..12); at S1 every ``_row_id`` is null.
* S2 (sequence 2, ``first-row-id`` 0): M1 again, now with ``first_row_id`` 0 (A inherits 0, B 4),
  and M2 (``first_row_id`` 7, entries with null sequence numbers, inherited: 2) holding D (ids
  30..32, its own ``first_row_id`` 1000, a stored ``_row_id`` column of nulls, one row per row
  group) then C (ids 20..24, inherits 7: D's own id does not move the counter), whose file stores
  ``_row_id`` [100, null, 102, null, 104] and ``_last_updated_sequence_number`` [1, null, 1, null,
  null] (rows moved from elsewhere keep their lineage), two rows per row group.
* S3 (sequence 3): deletion vectors drop positions 1 and 2 of A and position 0 of C; a row keeps
  the id of its physical position.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.spec import load_table
from storage.spec.errors import FilterError
from storage.spec.models import ReadingMode
from storage.spec.splits import row_group_start
from tests.spec.iceberg_v3_tables import ARROW_SCHEMA, ICEBERG_SCHEMA, v3_avro_metadata
from tests.spec.iceberg_writer import Blob, SpecWriter, entry, vector_entries, write_puffin

ROW_ID = pa.field("_row_id", pa.int64(), True, {b"PARQUET:field_id": b"2147483540"})
LAST_UPDATED = pa.field(
    "_last_updated_sequence_number", pa.int64(), True, {b"PARQUET:field_id": b"2147483539"}
)
LINEAGE = ["id", "_row_id", "_last_updated_sequence_number"]
S1, S2, S3 = 101, 202, 303

# id -> (_row_id, _last_updated_sequence_number) at S2; S3 drops ids 1, 2 (A) and 20 (C)
AT_S2 = {
    **{i: (i, 1) for i in range(4)},  # A: inherits first_row_id 0, position i
    10: (4, 1), 11: (5, 1), 12: (6, 1),  # B: 0 + A's 4 rows
    30: (1000, 2), 31: (1001, 2), 32: (1002, 2),  # D: its own first_row_id, sequence inherited
    20: (100, 1), 21: (8, 2), 22: (102, 1), 23: (10, 2), 24: (104, 2),  # C: stored values win
}  # fmt: skip
AT_S1 = {i: (None, 1) for i in (0, 1, 2, 3, 10, 11, 12)}
AT_S3 = {i: v for i, v in AT_S2.items() if i not in (1, 2, 20)}


@dataclass
class LineageTable:
    location: Path
    paths: dict[str, str]  # file letter -> path


def _data_file(writer: SpecWriter, name: str, ids: list[int], lineage: dict[str, list[Any]], group: int):
    """A data file of ``ids`` (names ``n<id>``) storing the ``lineage`` columns given, written in
    row groups of ``group`` rows; its data_file record (no first_row_id of its own)."""
    fields = [*ARROW_SCHEMA, *(f for f in (ROW_ID, LAST_UPDATED) if f.name in lineage)]
    columns = {"id": ids, "name": [f"n{i}" for i in ids], **lineage}
    rows = pa.table(columns, schema=pa.schema(fields))
    data_file = writer.parquet(rows, f"{name}.parquet", row_group_size=group)
    data_file["first_row_id"] = None
    return data_file


def _manifest(writer: SpecWriter, name: str, entries: list[dict], content: str = "data") -> str:
    return writer.manifest(
        [], 0, entries=entries, version=3, content=content, name=name, avro_metadata=v3_avro_metadata()
    )


def _manifest_list(writer: SpecWriter, snapshot: int, sequence: int, rows: list[dict]) -> str:
    metadata = {"snapshot-id": str(snapshot), "sequence-number": str(sequence), "format-version": "3"}
    return writer.write_manifest_list(rows, version=3, metadata=metadata, name=f"snap-{snapshot}.avro")


def write_lineage_table(location: Path) -> LineageTable:
    writer = SpecWriter(location)
    a = _data_file(writer, "a", [0, 1, 2, 3], {}, 4)
    b = _data_file(writer, "b", [10, 11, 12], {}, 4)
    d = _data_file(writer, "d", [30, 31, 32], {"_row_id": [None] * 3}, 1)
    stored = {
        "_row_id": [100, None, 102, None, 104],
        "_last_updated_sequence_number": [1, None, 1, None, None],
    }
    c = _data_file(writer, "c", [20, 21, 22, 23, 24], stored, 2)
    metadata = pq.ParquetFile(d["file_path"]).metadata
    d.update(
        first_row_id=1000,
        split_offsets=[row_group_start(metadata.row_group(i)) for i in range(metadata.num_row_groups)],
    )
    # snapshot ids inherited from the manifest list; M2's sequence numbers too
    m1 = _manifest(writer, "m1.avro", [entry(a, None, 1), entry(b, None, 1)])
    m2 = _manifest(writer, "m2.avro", [entry(d, None, None), entry(c, None, None)])
    blobs = [Blob(a["file_path"], [1, 2]), Blob(c["file_path"], [0])]
    puffin = location / "data" / "dv.puffin"
    size = write_puffin(puffin, blobs, S3, 3)
    vectors = [entry(v, None, 3) for v in vector_entries(writer.named(puffin), size, blobs)]
    md = _manifest(writer, "md.avro", vectors, "deletes")
    data_1 = writer.listed(m1, S1, 1, files=2, rows=7, first_row_id=0)
    data_2 = writer.listed(m2, S2, 2, files=2, rows=8, first_row_id=7)
    lists = {
        S1: _manifest_list(writer, S1, 1, [{**data_1, "first_row_id": None}]),  # before lineage
        S2: _manifest_list(writer, S2, 2, [data_1, data_2]),
        S3: _manifest_list(writer, S3, 3, [data_1, data_2, writer.listed(md, S3, 3, content=1, files=2)]),
    }
    writer.metadata(_metadata(lists))
    paths = {"A": a["file_path"], "B": b["file_path"], "C": c["file_path"], "D": d["file_path"]}
    return LineageTable(location, paths)


def _metadata(lists: dict[int, str]) -> dict[str, Any]:
    snapshots = []
    for position, (snapshot, manifest_list) in enumerate(lists.items()):
        snap: dict[str, Any] = {
            "snapshot-id": snapshot,
            "sequence-number": position + 1,
            "timestamp-ms": 1_700_000_000_000 + position,
            "manifest-list": manifest_list,
            "summary": {"operation": ("append", "append", "delete")[position]},
            "schema-id": 0,
        }
        if position:
            snap.update(
                {"parent-snapshot-id": snapshots[-1]["snapshot-id"], "first-row-id": (0, 15)[position - 1]}
            )
            snap["added-rows"] = (15, 0)[position - 1]
        snapshots.append(snap)
    return {
        "format-version": 3,
        "table-uuid": str(uuid.uuid4()),
        "last-sequence-number": 3,
        "last-updated-ms": 1_700_000_000_002,
        "last-column-id": 2,
        "current-schema-id": 0,
        "schemas": [ICEBERG_SCHEMA],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {},
        "current-snapshot-id": S3,
        "next-row-id": 15,
        "snapshots": snapshots,
        "snapshot-log": [
            {"snapshot-id": s["snapshot-id"], "timestamp-ms": s["timestamp-ms"]} for s in snapshots
        ],
        "metadata-log": [],
        "refs": {"main": {"snapshot-id": S3, "type": "branch"}},
    }


@pytest.fixture(scope="module")
def lineage(tmp_path_factory) -> LineageTable:
    return write_lineage_table(tmp_path_factory.mktemp("lineage") / "t")


def _lineage_of(rows: pa.Table | list[dict]) -> dict[int, tuple[Any, Any]]:
    listed = rows.to_pylist() if isinstance(rows, pa.Table) else rows
    found = {r["id"]: (r["_row_id"], r["_last_updated_sequence_number"]) for r in listed}
    assert len(found) == len(listed), "an id was read twice"
    return found


def test_select_star_has_no_lineage_columns_and_naming_them_reads_them(lineage):
    table = load_table(str(lineage.location))
    everything = table.read_arrow()
    assert everything.schema.names == ["id", "name"]
    assert sorted(everything.column("id").to_pylist()) == sorted(AT_S3)
    assert table.metadata_columns().names == ["_row_id", "_last_updated_sequence_number"]
    read = table.read_arrow(columns=["name", *LINEAGE])
    assert read.schema.names == ["name", *LINEAGE]
    assert read.schema.field("_row_id").type == pa.int64()
    assert _lineage_of(read) == AT_S3
    assert {r["id"]: r["name"] for r in read.to_pylist()} == {i: f"n{i}" for i in AT_S3}
    only = table.read_arrow(columns=["_row_id"])  # no data column read at all
    assert sorted(only.column("_row_id").to_pylist()) == sorted(v[0] for v in AT_S3.values())


def test_time_travel_gives_each_snapshots_lineage(lineage):
    table = load_table(str(lineage.location))
    assert _lineage_of(table.read_arrow(S2, columns=LINEAGE)) == AT_S2
    # before the table tracked lineage its manifests had no first_row_id: ids are null
    assert _lineage_of(table.read_arrow(S1, columns=LINEAGE)) == AT_S1


def test_lineage_in_filters_splits_and_incremental_reads(lineage):
    table = load_table(str(lineage.location))
    high = table.read_arrow(columns=LINEAGE, filters="_row_id >= 100")
    assert _lineage_of(high) == {i: v for i, v in AT_S3.items() if v[0] >= 100}
    mixed = table.read_arrow(S2, columns=LINEAGE, filters="id > 20 and _last_updated_sequence_number = 2")
    assert _lineage_of(mixed) == {
        21: (8, 2),
        23: (10, 2),
        24: (104, 2),
        30: (1000, 2),
        31: (1001, 2),
        32: (1002, 2),
    }
    # tiny splits cut D at its row groups: each part still counts positions from the file start
    splits = list(table.plan_splits(S2, target_size=1, open_file_cost=0))
    d_parts = [p for s in splits for p in s.parts if p.file_slice.path == lineage.paths["D"]]
    assert len(d_parts) == 3
    rows = [r for split in splits for r in table.read_arrow(split, columns=LINEAGE).to_pylist()]
    assert _lineage_of(rows) == AT_S2
    assert list(table.plan_splits(filters="_row_id = 8"))  # planning accepts the column, prunes nothing
    added = table.read_arrow(S1, columns=LINEAGE, mode=ReadingMode.INCREMENTAL, end_instant=S2)
    assert _lineage_of(added) == {i: v for i, v in AT_S2.items() if i >= 20}


def test_file_slices_read_with_the_lineage_of_their_listing(lineage):
    table = load_table(str(lineage.location))
    slices = {s.base_file.path: s for s in table.file_index().list_files_at()}
    assert {p: slices[p].base_file.extra["first_row_id"] for p in slices} == {
        lineage.paths["A"]: 0,
        lineage.paths["B"]: 4,
        lineage.paths["D"]: 1000,
        lineage.paths["C"]: 7,
    }
    c = table.read_arrow(slices[lineage.paths["C"]], columns=LINEAGE)
    assert _lineage_of(c) == {i: AT_S3[i] for i in (21, 22, 23, 24)}


def test_a_table_without_lineage_refuses_the_columns_by_name(tmp_path):
    from tests.spec.test_iceberg_legacy import _legacy_table

    location, ids = _legacy_table(tmp_path, inline=False)
    table = load_table(location)
    assert len(table.metadata_columns()) == 0
    with pytest.raises(FilterError, match="_row_id.*does not track row lineage.*v1"):
        table.read_arrow(ids[1], columns=["id", "_row_id"])
    with pytest.raises(FilterError, match="_last_updated_sequence_number"):
        table.read_arrow(ids[1], filters="_last_updated_sequence_number = 1")


@pytest.mark.spark
def test_the_spark_reader_reads_lineage_only_when_asked(lineage, spark):
    from storage.spec.spark_source import read_table

    location = str(lineage.location)
    assert read_table(spark, location).columns == ["id", "name"]
    frame = read_table(spark, location, columns=LINEAGE)
    assert frame.columns == LINEAGE
    assert _lineage_of([r.asDict() for r in frame.collect()]) == AT_S3
    old = read_table(spark, location, instant=S2, columns=LINEAGE)
    assert _lineage_of([r.asDict() for r in old.collect()]) == AT_S2
    where = frame.where("_row_id >= 100")  # Spark evaluates it: the source takes no lineage filter
    assert sorted(r["_row_id"] for r in where.collect()) == [102, 104, 1000, 1001, 1002]
