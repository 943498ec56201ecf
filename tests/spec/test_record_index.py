"""RecordIndex (Hudi RFC-64): record keys tagged with the file holding them, on Iceberg (pyiceberg),
Delta (deltalake) and Hudi (../shared/fixtures/hudi) tables; only candidate files are read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from storage.formats.delta.adapter import DeltaAdapter
from storage.formats.hudi.record_index import HudiRecordIndex
from storage.formats.iceberg import IcebergAdapter
from storage.spec import load_table
from storage.spec.record_index import MAX_KEYS, RecordIndex, RecordIndexError, RecordLocation

BATCHES = (range(1, 11), range(11, 21), range(21, 31))  # one data file each, disjoint id ranges


def _rows(ids: range, nullable: bool = True) -> pa.Table:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=nullable), pa.field("name", pa.string())])
    return pa.table({"id": list(ids), "name": [f"n{i}" for i in ids]}, schema=schema)


def _count_reads(spec_table) -> list:
    """Wraps ``spec_table.read``; the returned list gets the slice of each read."""
    reads: list = []
    original = spec_table.read

    def read(source=None, *args, **kwargs):
        reads.append(source)
        return original(source, *args, **kwargs)

    spec_table.read = read
    return reads


def _by_key(locations: list[RecordLocation]) -> dict:
    return {location.key: location for location in locations}


# --- Iceberg -----------------------------------------------------------------------------------


@pytest.fixture
def iceberg_table(tmp_path, sql_catalog):
    """Three appends (ids 1-10, 11-20, 21-30) then a delete of id 15; ``id`` is the identifier field."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    catalog = sql_catalog("rix", f"file://{tmp_path}")
    catalog.create_namespace("rix")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType(), required=False),
        identifier_field_ids=[1],
    )
    table = catalog.create_table("rix.events", schema=schema)
    for ids in BATCHES:
        table.append(_rows(ids, nullable=False))
    table.delete("id = 15")
    return IcebergAdapter.open(catalog.load_table("rix.events").metadata_location)


def test_iceberg_keys_are_tagged_with_their_data_file(iceberg_table):
    instants = iceberg_table.timeline().instants()
    latest = instants[-1]
    files = {s.base_file.path for s in iceberg_table.file_index().list_files_at(latest)}
    index = iceberg_table.record_index()
    assert index.key_columns == ("id",)  # the schema's identifier field
    reads = _count_reads(iceberg_table)
    found = _by_key(index.tag([5, "25", 99, 15, 16]))
    assert found[5].found and found[5].file_path in files and found[5].instant_id == latest.id
    assert found[25].found and found[25].file_path != found[5].file_path
    assert not found[99].found and found[99].file_path is None
    assert not found[15].found  # deleted
    assert found[16].found
    # 99 is beyond every file's bounds: three files (one per range holding a key) are read.
    assert len(reads) == index.files_read == 3


def test_iceberg_keys_at_an_older_snapshot(iceberg_table):
    instants = iceberg_table.timeline().instants()
    index = iceberg_table.record_index()
    first = _by_key(index.tag([5, 15, 25], instant=instants[0].id))
    assert first[5].found and not first[25].found and first[15].found is False
    before_delete = _by_key(index.tag([15], instant=instants[2].id))
    assert before_delete[15].found and before_delete[15].instant_id == instants[2].id


def test_iceberg_reads_only_the_file_whose_range_holds_the_key(iceberg_table):
    reads = _count_reads(iceberg_table)
    located = iceberg_table.record_index().tag([27])
    assert located[0].found
    assert [s.path for s in reads] == [located[0].file_path]


def test_iceberg_keys_outside_every_range_read_nothing(iceberg_table):
    reads = _count_reads(iceberg_table)
    assert [loc.found for loc in iceberg_table.record_index().tag([0, 1000])] == [False, False]
    assert reads == []


def test_iceberg_bad_input_is_refused_with_a_clear_error(iceberg_table):
    index = iceberg_table.record_index()
    with pytest.raises(RecordIndexError, match=f"at most {MAX_KEYS} keys"):
        index.tag(range(MAX_KEYS + 1))
    with pytest.raises(RecordIndexError, match="column id is long"):
        index.tag(["not a number"])
    with pytest.raises(RecordIndexError, match="unknown column 'nope'"):
        iceberg_table.record_index("nope")
    assert index.tag([]) == []


# --- Delta -------------------------------------------------------------------------------------


@pytest.fixture
def delta_table(tmp_path):
    path = tmp_path / "delta"
    for ids in BATCHES:
        write_deltalake(str(path), _rows(ids), mode="append")
    DeltaTable(str(path)).delete("id = 15")
    return DeltaAdapter.open(str(path))


def test_delta_needs_a_key_column(delta_table):
    with pytest.raises(RecordIndexError, match="declares no record key"):
        delta_table.record_index()


def test_delta_keys_latest_older_and_deleted(delta_table):
    index = delta_table.record_index("id")
    reads = _count_reads(delta_table)
    latest = _by_key(index.tag([3, 15, 22, 31]))
    assert latest[3].found and latest[22].found and latest[3].file_path != latest[22].file_path
    assert latest[3].file_path.endswith(".parquet") and latest[3].instant_id == 3
    assert not latest[15].found and not latest[31].found
    assert len(reads) == 3  # the files holding 1-10, 11-20 (rewritten by the delete) and 21-30
    reads.clear()
    older = _by_key(index.tag([15, 22], instant=0))
    assert older[15].found is False and older[22].found is False and reads == []
    at_two = _by_key(index.tag([15], instant=2))
    assert at_two[15].found and at_two[15].file_path != latest[3].file_path
    assert len(reads) == 1


def test_a_composite_key_matches_every_column(delta_table):
    index = delta_table.record_index(["id", "name"])
    found = _by_key(index.tag([(4, "n4"), "5,n5", (6, "other")]))
    assert found[(4, "n4")].found and found[(5, "n5")].found and not found[(6, "other")].found


# --- Hudi --------------------------------------------------------------------------------------


def test_hudi_keys_by_record_key_field(hudi_fixture):
    table = load_table(str(hudi_fixture("cow_v8_simplekeygen_nonhivestyle")))
    index = table.record_index()
    assert isinstance(index, HudiRecordIndex) and index.key_columns == ("id",)
    assert not index.has_metadata_record_index and "footers" in index.method
    first, second = table.timeline().instants()
    latest = _by_key(index.tag([1, 2, 3, 4, 99]))
    assert latest[1].partition == "10" and latest[1].file_path == latest[3].file_path
    assert latest[1].file_path.endswith(f"_{second.id}.parquet")  # rewritten by the upsert of id 1
    assert latest[2].partition == "20" and latest[2].file_path.endswith(f"_{first.id}.parquet")
    assert latest[4].partition == "30" and latest[4].file_group_id in latest[4].file_path
    assert not latest[99].found
    older = _by_key(index.tag([1, 4], instant=first.id))
    assert older[1].found and older[1].file_path.endswith(f"_{first.id}.parquet")
    assert older[1].file_group_id == latest[1].file_group_id
    assert not older[4].found  # inserted by the second commit


def test_hudi_reads_only_candidate_base_files(hudi_fixture):
    table = load_table(str(hudi_fixture("cow_v8_simplekeygen_nonhivestyle")))
    reads = _count_reads(table)
    located = table.record_index().tag([4])  # files hold ids 1..3 (partition 10), 2..2 and 4..4
    assert located[0].found and [s.path for s in reads] == [located[0].file_path]


def test_hudi_merge_on_read_slices_with_logs(hudi_fixture):
    table = load_table(str(hudi_fixture("mor_avro_v6_trips_8i1u")))
    index = table.record_index()
    assert index.key_columns == ("uuid",)
    found = _by_key(index.tag(["e96c4396-3fad-413a-a942-4cb36106d721", "no-such-trip"]))
    assert found["e96c4396-3fad-413a-a942-4cb36106d721"].found
    assert "san_francisco" in found["e96c4396-3fad-413a-a942-4cb36106d721"].partition
    assert not found["no-such-trip"].found


def test_the_generic_index_works_for_any_spec_table(delta_table):
    assert type(delta_table.record_index("id")) is RecordIndex
    assert Path(delta_table.location).exists()


def test_hudi_with_a_metadata_record_index_says_it_is_not_read(hudi_fixture, tmp_path):
    source = hudi_fixture("cow_v8_simplekeygen_nonhivestyle")
    copy = tmp_path / source.name
    shutil.copytree(source, copy)
    (copy / ".hoodie" / "metadata" / "record_index").mkdir(parents=True)
    properties = copy / ".hoodie" / "hoodie.properties"
    properties.write_text(properties.read_text() + "hoodie.table.metadata.partitions=files,record_index\n")
    index = load_table(str(copy)).record_index()
    assert isinstance(index, HudiRecordIndex) and index.has_metadata_record_index
    assert "record index is not read" in index.method
    assert [loc.partition for loc in index.tag([2, 4])] == ["20", "30"]
