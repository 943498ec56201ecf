"""The Delta adapter against deltalake's own answers.

Tables come from two sources: written here by ``deltalake.write_deltalake`` (partitioned, schema
evolution, deletes, overwrites, checkpoints) and the Spark/Databricks-written fixtures of
../shared/fixtures/delta (deletion vectors, column mapping, every partition value type). The
reference is deltalake 1.6: ``file_uris``/``get_add_actions`` for listings, ``scan()`` for rows
(``to_pyarrow_table`` refuses deletion vectors and column mapping, and may abort the process at
exit), ``history()`` for the timeline, ``load_cdf`` for the change data feed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, WriterProperties, write_deltalake

from storage.formats.delta import DeltaAdapter, DeltaSpecTable
from storage.formats.delta._dv import z85_decode
from storage.formats.delta.read import CDF_COLUMNS, CDF_FIELDS, load_deletion_vector
from storage.spec import load_table
from storage.spec.errors import (
    CorruptTable,
    FilterError,
    InstantNotFound,
    InvalidRange,
    NotSupported,
    TableNotFound,
)
from storage.spec.models import ChangeKind, FileContent, ReadingMode
from storage.spec.splits import row_group_offsets, row_groups_in_range

FIXTURES = [
    "simple_table",
    "simple_table_with_checkpoint",
    "cdf-table",
    "table-with-dv-small",
    "table_with_column_mapping",
    "data-reader-partition-values",
    "partition-type-primitives",
]


# --- helpers ------------------------------------------------------------------------------------


def _row_key(row: dict) -> str:
    return json.dumps(row, default=str, sort_keys=True)


def _rows(batches) -> list[dict]:
    rows = []
    for batch in batches:
        rows.extend(batch.to_pylist())
    return sorted(rows, key=_row_key)


def _scan(path: Path, version: int | None = None, columns: list[str] | None = None) -> list[dict]:
    table = DeltaTable(str(path), version=version)
    return _rows(pa.RecordBatchReader.from_stream(table.scan(columns=columns)))


def _paths(slices) -> set[str]:
    return {s.base_file.path for s in slices}


def _deltalake_files(path: Path, version: int | None = None) -> set[str]:
    return set(DeltaTable(str(path), version=version).file_uris())


def _write(path: Path, data: dict, **kwargs) -> None:
    write_deltalake(str(path), pa.table(data), **kwargs)


@pytest.fixture
def history_table(tmp_path) -> Path:
    """Partitioned; appends, a schema-evolving append, a delete, an overwrite of one partition
    and a plain append: versions 0..5."""
    path = tmp_path / "orders"
    ts = pa.array(
        [dt.datetime(2024, 1, d, 10, 0, 0, 123, tzinfo=dt.UTC) for d in range(1, 6)],
        pa.timestamp("us", "UTC"),
    )
    _write(
        path,
        {"id": pa.array([1, 2, 3, 4, 5], pa.int64()), "region": ["eu", "us", "eu", "ap", "us"], "ts": ts},
        partition_by=["region"],
    )
    _write(
        path,
        {"id": pa.array([6, 7, 8], pa.int64()), "region": ["eu", "eu", "us"], "ts": ts[:3]},
        partition_by=["region"],
        mode="append",
    )
    _write(
        path,
        {
            "id": pa.array([9, 10], pa.int64()),
            "region": ["ap", "eu"],
            "ts": ts[:2],
            "amount": pa.array([1.5, None], pa.float64()),
        },
        partition_by=["region"],
        mode="append",
        schema_mode="merge",
    )
    DeltaTable(str(path)).delete("id = 3 or id = 8")
    _write(
        path,
        {"id": pa.array([11, 12], pa.int64()), "region": ["us", "us"], "ts": ts[:2], "amount": [2.0, 3.0]},
        partition_by=["region"],
        mode="overwrite",
        predicate="region = 'us'",
    )
    _write(
        path,
        {"id": pa.array([13], pa.int64()), "region": [None], "ts": ts[:1], "amount": [4.0]},
        partition_by=["region"],
        mode="append",
    )
    return path


# --- opening and detection ----------------------------------------------------------------------


def test_the_adapter_detects_a_delta_folder_and_nothing_else(history_table, tmp_path):
    assert DeltaAdapter.detect(str(history_table))
    assert not DeltaAdapter.detect(str(tmp_path / "missing"))
    (tmp_path / "plain").mkdir()
    assert not DeltaAdapter.detect(str(tmp_path / "plain"))


def test_load_table_finds_the_delta_adapter_through_entry_points(history_table):
    table = load_table(str(history_table))
    assert isinstance(table, DeltaSpecTable)
    assert table.definition.id.format.value == "delta"


def test_opening_a_missing_path_or_a_folder_without_a_log_raises_table_not_found(tmp_path):
    with pytest.raises(TableNotFound, match="does not exist"):
        DeltaAdapter.open(str(tmp_path / "nowhere"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(TableNotFound, match="_delta_log"):
        DeltaAdapter.open(str(tmp_path / "plain"))


def test_a_truncated_commit_raises_corrupt_table_naming_the_file(history_table):
    commit = history_table / "_delta_log" / f"{5:020d}.json"
    commit.write_text(commit.read_text()[:-40])
    with pytest.raises(CorruptTable, match=commit.name):
        list(DeltaAdapter.open(str(history_table)).file_index().list_files_at())


def test_a_missing_data_file_raises_corrupt_table_when_read(history_table):
    table = DeltaAdapter.open(str(history_table))
    victim = next(iter(table.file_index().list_files_at()))
    os.remove(victim.base_file.path)
    with pytest.raises(CorruptTable, match=Path(victim.base_file.path).name):
        list(table.read(victim))


def test_the_type_widening_table_the_reference_refuses_is_read_since_type_widening_is_supported(
    delta_fixture,
):
    """The fixture README's answer predates type-widening support (issue 13): deltalake, the
    reference, still refuses the table; our reasoned answer reads it in its current types
    (tests/spec/test_delta_widening.py checks the values). Unknown reader features stay refused
    (test_a_table_with_an_unknown_reader_feature_is_still_refused_at_open)."""
    path = delta_fixture("type-widening")
    table = DeltaAdapter.open(str(path))
    assert sum(batch.num_rows for batch in table.read()) == 2  # both versions' rows, widened
    with pytest.raises(Exception, match="(?i)typewidening"):
        list(pa.RecordBatchReader.from_stream(DeltaTable(str(path)).scan()))


def test_a_version_before_the_unsupported_protocol_upgrade_stays_readable(delta_fixture):
    path = delta_fixture("type-widening")
    table = DeltaAdapter.open(str(path), version=0)
    assert _rows(table.read()) == _scan(path, version=0)
    assert len(_rows(table.read())) == 1
    assert [i.id for i in table.timeline().instants()] == [0]


# --- definition and timeline --------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_the_schema_is_deltalakes_arrow_schema(delta_fixture, name):
    path = delta_fixture(name)
    table = DeltaAdapter.open(str(path))
    reference = pa.schema(DeltaTable(str(path)).schema().to_arrow())
    assert table.schema.remove_metadata().equals(reference.remove_metadata())
    assert table.definition.partition_spec.names == tuple(DeltaTable(str(path)).metadata().partition_columns)


def test_the_definition_carries_partitioning_and_table_properties(delta_fixture):
    table = DeltaAdapter.open(str(delta_fixture("table_with_column_mapping")))
    assert table.schema.names == ["Company Very Short", "Super Name"]
    assert [(f.name, f.source_column, f.transform) for f in table.partition_spec.fields] == [
        ("Company Very Short", "Company Very Short", "identity")
    ]
    assert table.definition.properties["delta.columnMapping.mode"] == "name"


def test_the_timeline_lists_every_commit_oldest_first_as_history_records_it(history_table):
    table = DeltaAdapter.open(str(history_table))
    instants = table.timeline().instants()
    history = sorted(DeltaTable(str(history_table)).history(), key=lambda c: c["version"])
    assert [i.id for i in instants] == [c["version"] for c in history] == list(range(6))
    assert [int(i.timestamp.timestamp() * 1000) for i in instants] == [c["timestamp"] for c in history]
    assert [i.parent_id for i in instants] == [None, 0, 1, 2, 3, 4]
    assert [i.sequence for i in instants] == list(range(6))
    assert [i.operation for i in instants] == ["append", "append", "append", "delete", "overwrite", "append"]
    assert instants[3].summary["predicate"] == history[3]["operationParameters"]["predicate"]
    assert table.timeline().get("3") == instants[3]
    assert table.timeline().latest_at(instants[2].timestamp) == instants[2]


def test_an_unknown_version_raises_instant_not_found(history_table):
    table = DeltaAdapter.open(str(history_table))
    with pytest.raises(InstantNotFound):
        table.timeline().get(42)
    with pytest.raises(InstantNotFound):
        table.file_index().list_files_at(42)
    with pytest.raises(InstantNotFound):
        table.file_index().list_files_at("yesterday")


def test_the_summary_agrees_with_deltalakes_file_list_and_row_count(history_table):
    table = DeltaAdapter.open(str(history_table))
    summary = table.summary()
    actions = pa.table(DeltaTable(str(history_table)).get_add_actions(flatten=True))
    assert summary.current_instant_id == 5
    assert summary.file_count == actions.num_rows
    assert summary.total_bytes == sum(actions.column("size_bytes").to_pylist())
    assert summary.record_count == len(_scan(history_table))
    assert summary.instant_count == 6
    assert summary.last_updated == table.timeline().latest().timestamp


# --- listing ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_listing_the_latest_version_returns_deltalakes_files(delta_fixture, name):
    path = delta_fixture(name)
    slices = list(DeltaAdapter.open(str(path)).file_index().list_files_at())
    assert _paths(slices) == _deltalake_files(path)
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).to_pylist()
    assert sorted(s.base_file.size_bytes for s in slices) == sorted(a["size_bytes"] for a in actions)
    assert sorted(
        s.base_file.record_count for s in slices if s.base_file.extra["record_count_known"]
    ) == sorted(a["num_records"] for a in actions if a["num_records"] is not None)


def test_listing_an_old_version_returns_the_files_it_had(history_table):
    index = DeltaAdapter.open(str(history_table)).file_index()
    for version in range(6):
        assert _paths(index.list_files_at(version)) == _deltalake_files(history_table, version)


def test_listing_is_a_lazy_iterator(history_table):
    listing = DeltaAdapter.open(str(history_table)).file_index().list_files_at()
    assert iter(listing) is listing
    assert next(listing).base_file is not None


def test_record_counts_and_statistics_come_from_the_add_actions(history_table):
    slices = list(DeltaAdapter.open(str(history_table)).file_index().list_files_at())
    actions = {
        str(history_table / a["path"]): a
        for a in pa.table(DeltaTable(str(history_table)).get_add_actions(flatten=True)).to_pylist()
    }
    for file_slice in slices:
        action = actions[file_slice.base_file.path]
        data_file = file_slice.base_file
        assert data_file.record_count == action["num_records"]
        assert data_file.lower_bounds["id"] == action["min.id"]
        assert data_file.upper_bounds["id"] == action["max.id"]
        assert data_file.null_counts["id"] == action["null_count.id"]
        # Timestamp statistics are truncated to milliseconds; the upper bound is widened so it
        # still bounds the microseconds actually stored.
        rows = _rows(DeltaAdapter.open(str(history_table)).read(file_slice, columns=["ts"]))
        assert data_file.lower_bounds["ts"] <= min(r["ts"] for r in rows)
        assert data_file.upper_bounds["ts"] >= max(r["ts"] for r in rows)


def test_partition_values_of_every_primitive_type_parse_to_the_values_read(delta_fixture):
    path = delta_fixture("data-reader-partition-values")
    table = DeltaAdapter.open(str(path))
    partition_columns = list(table.partition_spec.names)
    seen_null_partition = False
    for file_slice in table.file_index().list_files_at():
        rows = _rows(table.read(file_slice, columns=partition_columns))
        assert rows, file_slice.path
        for row in rows:
            assert row == dict(file_slice.partition.values)
        assert dict(file_slice.base_file.partition) == dict(file_slice.partition.values)
        seen_null_partition |= all(v is None for v in file_slice.partition.values.values())
    assert seen_null_partition
    # And the rows as a whole are deltalake's.
    assert _rows(table.read()) == _scan(path)


def test_column_mapping_lists_and_reads_with_logical_names(delta_fixture):
    path = delta_fixture("table_with_column_mapping")
    table = DeltaAdapter.open(str(path))
    slices = list(table.file_index().list_files_at())
    assert _paths(slices) == _deltalake_files(path)
    for file_slice in slices:
        assert set(file_slice.partition.values) == {"Company Very Short"}
        assert set(file_slice.base_file.lower_bounds) == {"Super Name"}
        names = [r["Super Name"] for r in _rows(table.read(file_slice))]
        assert file_slice.base_file.lower_bounds["Super Name"] == min(names)
        assert file_slice.base_file.upper_bounds["Super Name"] == max(names)
    assert _rows(table.read()) == _scan(path)
    assert len(_rows(table.read())) == 5


def test_a_checkpoint_and_the_commits_after_it_give_the_live_files(tmp_path):
    path = tmp_path / "checkpointed"
    for i in range(4):
        _write(path, {"id": pa.array([i * 10 + j for j in range(5)], pa.int64())}, mode="append")
    DeltaTable(str(path)).create_checkpoint()
    DeltaTable(str(path)).delete("id < 12")
    _write(path, {"id": pa.array([100], pa.int64())}, mode="append")
    table = DeltaAdapter.open(str(path))
    for version in range(6):
        assert _paths(table.file_index().list_files_at(version)) == _deltalake_files(path, version)
        assert _rows(table.read(version)) == _scan(path, version)


def test_a_log_cleaned_up_below_a_checkpoint_starts_the_timeline_at_the_checkpoint(tmp_path):
    path = tmp_path / "cleaned"
    for i in range(5):
        _write(path, {"id": pa.array([i], pa.int64())}, mode="append")
    DeltaTable(str(path)).create_checkpoint()  # at version 4
    _write(path, {"id": pa.array([5], pa.int64())}, mode="append")
    for version in range(4):
        (path / "_delta_log" / f"{version:020d}.json").unlink()
    table = DeltaAdapter.open(str(path))
    assert [i.id for i in table.timeline().instants()] == [4, 5]
    assert table.timeline().instants()[0].parent_id is None
    assert _paths(table.file_index().list_files_at(4)) == _deltalake_files(path, 4)
    assert _rows(table.read()) == _scan(path)
    with pytest.raises(InstantNotFound):
        table.file_index().list_files_at(2)
    # "From the creation" on a cleaned log: the checkpoint's files, then the later commits.
    changes = list(table.file_index().list_files_between(None, 5))
    assert {c.file_slice.path for c in changes if c.kind is ChangeKind.ADDED} == _deltalake_files(path)


def test_a_v2_checkpoint_with_a_sidecar_gives_the_live_files(tmp_path):
    path = tmp_path / "v2"
    for i in range(3):
        _write(path, {"id": pa.array([i, i + 10], pa.int64())}, mode="append", partition_by=None)
    expected_files = _deltalake_files(path)
    expected_rows = _scan(path)
    DeltaTable(str(path)).create_checkpoint()
    log = path / "_delta_log"
    classic = log / f"{2:020d}.checkpoint.parquet"
    state = pq.read_table(classic)
    # Rewrite the classic checkpoint as a v2 one: the adds in a sidecar, the rest in a JSON
    # top-level file, the protocol upgraded to the v2Checkpoint reader feature.
    (log / "_sidecars").mkdir()
    sidecar = log / "_sidecars" / "00000000000000000002.checkpoint.0000000001.0000000001.a1.parquet"
    adds = state.filter(pc.is_valid(state.column("add"))).select(["add"])
    pq.write_table(adds, sidecar)
    metadata = (
        state.filter(pc.is_valid(state.column("metaData"))).select(["metaData"]).to_pylist()[0]["metaData"]
    )
    metadata["configuration"] = dict(metadata["configuration"])
    metadata["format"]["options"] = dict(metadata["format"]["options"])
    top = log / f"{2:020d}.checkpoint.3a0d65cd-4056-49b8-937b-95f9e3ee90e5.json"
    lines = [
        {"checkpointMetadata": {"version": 2}},
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["v2Checkpoint"],
                "writerFeatures": ["v2Checkpoint"],
            }
        },
        {"metaData": metadata},
        {"sidecar": {"path": sidecar.name, "sizeInBytes": sidecar.stat().st_size, "modificationTime": 0}},
    ]
    top.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    classic.unlink()
    (log / "_last_checkpoint").unlink()
    for version in range(3):
        (log / f"{version:020d}.json").unlink()
    table = DeltaAdapter.open(str(path))
    assert _paths(table.file_index().list_files_at()) == expected_files
    assert _rows(table.read()) == expected_rows


# --- changes between versions -------------------------------------------------------------------


def test_changes_between_two_versions_turn_the_older_file_list_into_the_newer(history_table):
    index = DeltaAdapter.open(str(history_table)).file_index()
    for start, end in [(0, 2), (1, 4), (2, 5), (0, 5), (3, 3)]:
        live = _deltalake_files(history_table, start)
        for change in index.list_files_between(start, end):
            assert start < change.instant_id <= end
            if change.kind is ChangeKind.ADDED:
                live.add(change.file_slice.path)
            else:
                live.discard(change.file_slice.path)
        assert live == _deltalake_files(history_table, end)


def test_changes_from_the_creation_add_up_to_the_latest_files(history_table):
    live: set[str] = set()
    for change in DeltaAdapter.open(str(history_table)).file_index().list_files_between(None, None):
        (live.add if change.kind is ChangeKind.ADDED else live.discard)(change.file_slice.path)
    assert live == _deltalake_files(history_table)


def test_a_backwards_range_raises_invalid_range(history_table):
    index = DeltaAdapter.open(str(history_table)).file_index()
    with pytest.raises(InvalidRange):
        index.list_files_between(4, 2)
    with pytest.raises(InstantNotFound):
        index.list_files_between(1, 9)


# --- reading ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_reading_the_latest_version_returns_deltalakes_rows(delta_fixture, name):
    path = delta_fixture(name)
    assert _rows(DeltaAdapter.open(str(path)).read()) == _scan(path)


@pytest.mark.parametrize(("name", "versions"), [("simple_table", range(5)), ("cdf-table", range(4))])
def test_reading_every_version_of_a_fixture_returns_deltalakes_rows(delta_fixture, name, versions):
    path = delta_fixture(name)
    table = DeltaAdapter.open(str(path))
    for version in versions:
        assert _rows(table.read(version)) == _scan(path, version), version


def test_reading_every_version_returns_deltalakes_rows_with_the_schema_of_that_version(history_table):
    table = DeltaAdapter.open(str(history_table))
    for version in range(6):
        rows = _rows(table.read(version))
        assert rows == _scan(history_table, version), version
    assert "amount" not in _rows(table.read(1))[0]
    assert {r["amount"] for r in _rows(table.read()) if r["id"] in (1, 2)} == {None}


def test_reading_projected_columns_returns_only_those(history_table):
    table = DeltaAdapter.open(str(history_table))
    assert _rows(table.read(columns=["region", "id"])) == _scan(history_table, columns=["region", "id"])
    batch = next(table.read(columns=["region", "id"]))
    assert batch.schema.names == ["region", "id"]
    # A filter on a column left out of the projection still filters.
    filtered = _rows(table.read(columns=["id"], filters="region = 'eu'"))
    assert filtered == _rows(
        [pa.Table.from_batches(list(table.read())).filter(pc.field("region") == "eu").select(["id"])]
    )


def test_deletion_vectors_are_applied_when_reading(delta_fixture):
    path = delta_fixture("table-with-dv-small")
    table = DeltaAdapter.open(str(path))
    assert _rows(table.read(0)) == _scan(path, 0)
    assert _rows(table.read()) == _scan(path)
    assert (len(_rows(table.read(0))), len(_rows(table.read()))) == (10, 8)


def test_a_deletion_vector_decodes_to_the_rows_deltalake_drops(delta_fixture):
    path = delta_fixture("table-with-dv-small")
    (file_slice,) = DeltaAdapter.open(str(path)).file_index().list_files_at()
    (vector,) = file_slice.delete_files
    descriptor = file_slice.base_file.extra["deletion_vector"]
    assert vector.content is FileContent.DELETION_VECTOR
    assert vector.size_bytes == descriptor["sizeInBytes"]
    assert vector.record_count == descriptor["cardinality"]
    assert Path(vector.path).is_file()
    assert file_slice.size_bytes == file_slice.base_file.size_bytes + vector.size_bytes
    reference = pa.table(
        pa.RecordBatchReader.from_stream(DeltaTable(str(path)).deletion_vectors())
    ).to_pylist()
    (selection,) = [r["selection_vector"] for r in reference]
    deleted = [i for i, keep in enumerate(selection) if not keep]
    assert list(load_deletion_vector(DeltaAdapter.open(str(path))._store, descriptor)) == deleted


def test_z85_decodes_the_reference_example():
    # The example of the ZeroMQ Z85 specification (rfc.zeromq.org/spec/32).
    assert z85_decode("HelloWorld") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])


def test_reading_a_split_part_reads_only_its_row_groups_and_parts_cover_the_file(tmp_path):
    path = tmp_path / "row_groups"
    _write(
        path,
        {"id": pa.array(range(5000), pa.int64()), "payload": [f"value-{i:06d}" * 4 for i in range(5000)]},
        writer_properties=WriterProperties(max_row_group_size=700),
    )
    table = DeltaAdapter.open(str(path))
    (file_slice,) = table.file_index().list_files_at()
    metadata = pq.ParquetFile(file_slice.base_file.path).metadata
    assert metadata.num_row_groups > 3
    # The planner gets the footer's row-group offsets: the Delta log does not record them.
    splits = list(table.plan_splits(target_size=file_slice.size_bytes // 3, open_file_cost=1))
    assert len(splits) > 1
    assert all(
        p.file_slice.base_file.split_offsets == row_group_offsets(metadata) for s in splits for p in s.parts
    )
    ids: list[int] = []
    for split in splits:
        rows = _rows(table.read(split, columns=["id"]))
        groups = [g for part in split.parts for g in row_groups_in_range(metadata, part.start, part.length)]
        assert len(rows) == sum(metadata.row_group(g).num_rows for g in groups)
        ids.extend(r["id"] for r in rows)
    assert sorted(ids) == list(range(5000))


def test_a_table_survives_pickling_at_its_version(history_table):
    import pickle

    table = DeltaAdapter.open(str(history_table), version=3)
    copy = pickle.loads(pickle.dumps(table))
    assert copy.version == 3
    assert _rows(copy.read()) == _rows(table.read()) == _scan(history_table, 3)


def test_an_unsupported_reading_mode_raises_not_supported(history_table):
    table = DeltaAdapter.open(str(history_table))
    with pytest.raises(NotSupported, match="delta.*read_optimized"):
        table.read(mode=ReadingMode.READ_OPTIMIZED)


def test_incremental_reads_return_the_rows_appended_in_the_range(tmp_path):
    path = tmp_path / "appends"
    for i in range(4):
        _write(path, {"id": pa.array([i * 10 + j for j in range(3)], pa.int64())}, mode="append")
    table = DeltaAdapter.open(str(path))
    for start, end in [(0, 2), (1, 3), (None, 1), (2, 2)]:
        before = Counter(_row_key(r) for r in (_scan(path, start) if start is not None else []))
        after = Counter(_row_key(r) for r in _scan(path, end))
        added = sorted((after - before).elements())
        got = [_row_key(r) for r in _rows(table.read(start, mode=ReadingMode.INCREMENTAL, end_instant=end))]
        assert got == added, (start, end)


def test_incremental_reads_return_rows_of_files_added_in_the_range_and_still_live(history_table):
    table = DeltaAdapter.open(str(history_table))
    for start, end in [(2, 5), (0, 3), (3, 4), (None, 5)]:
        # Reference: deltalake's file lists at both ends, the new files read by pyarrow.
        new_files = _deltalake_files(history_table, end) - (
            _deltalake_files(history_table, start) if start is not None else set()
        )
        expected = sorted(
            i for f in new_files for i in pq.read_table(f, columns=["id"]).column("id").to_pylist()
        )
        got = sorted(
            r["id"]
            for r in _rows(table.read(start, columns=["id"], mode=ReadingMode.INCREMENTAL, end_instant=end))
        )
        assert got == expected, (start, end)


def _cdf_reference(path: Path, schema: pa.Schema) -> pa.Table:
    """deltalake's change data feed from version 0, cast to the adapter's types (string views
    and a naive millisecond commit time become strings and aware UTC microseconds)."""
    reference = pa.table(pa.RecordBatchReader.from_stream(DeltaTable(str(path)).load_cdf(starting_version=0)))
    return reference.cast(pa.schema([*schema, *CDF_FIELDS]))


def test_the_change_data_feed_is_deltalakes(delta_fixture):
    path = delta_fixture("cdf-table")
    table = DeltaAdapter.open(str(path))
    reference = _rows([_cdf_reference(path, table.schema)])
    rows = _rows(table.read(None, mode=ReadingMode.CDC))
    assert rows == reference
    assert len(rows) == 23
    ranged = _rows(table.read(1, mode=ReadingMode.CDC, end_instant=3))
    assert ranged == [r for r in reference if 1 < r["_commit_version"] <= 3]
    assert {r["_change_type"] for r in rows} >= {"insert", "delete"}


def test_the_change_data_feed_of_a_table_without_it_is_not_supported(history_table):
    with pytest.raises(NotSupported, match="change data feed"):
        DeltaAdapter.open(str(history_table)).read(None, mode=ReadingMode.CDC)


# --- filters ------------------------------------------------------------------------------------

FILTERS = [
    ("region = 'eu'", pc.field("region") == "eu"),
    ("region is null", pc.field("region").is_null()),
    ("id >= 6 and id < 11", (pc.field("id") >= 6) & (pc.field("id") < 11)),
    ("id in (1, 7, 13)", pc.field("id").isin([1, 7, 13])),
    ("region != 'us' or id = 12", (pc.field("region") != "us") | (pc.field("id") == 12)),
    ("amount > 2.5", pc.field("amount") > 2.5),
    (
        "ts > timestamp '2024-01-02 10:00:00.000100'",
        pc.field("ts")
        > pa.scalar(dt.datetime(2024, 1, 2, 10, 0, 0, 100, tzinfo=dt.UTC), pa.timestamp("us", "UTC")),
    ),
    ("not (region = 'eu')", ~(pc.field("region") == "eu")),
]


@pytest.mark.parametrize(("text", "reference"), FILTERS, ids=[f[0] for f in FILTERS])
def test_a_filtered_read_equals_reading_everything_and_filtering_in_pyarrow(history_table, text, reference):
    table = DeltaAdapter.open(str(history_table))
    everything = pa.Table.from_batches(list(table.read()))
    expected = _rows([everything.filter(reference)])
    assert _rows(table.read(filters=text)) == expected


@pytest.mark.parametrize(("text", "reference"), FILTERS, ids=[f[0] for f in FILTERS])
def test_pruning_never_drops_a_file_holding_a_matching_row(history_table, text, reference):
    table = DeltaAdapter.open(str(history_table))
    index = table.file_index()
    kept = _paths(index.list_files_at(filters=text))
    for file_slice in index.list_files_at():
        if file_slice.path not in kept:
            rows = pa.Table.from_batches(list(table.read(file_slice)), schema=table.schema)
            assert rows.filter(reference).num_rows == 0, file_slice.path


def test_partition_and_statistics_pruning_skip_files(history_table):
    index = DeltaAdapter.open(str(history_table)).file_index()
    everything = list(index.list_files_at())
    by_partition = list(index.list_files_at(filters="region = 'eu'"))
    by_stats = list(index.list_files_at(filters="id = 13"))
    assert 0 < len(by_partition) < len(everything)
    assert {s.partition.values["region"] for s in by_partition} == {"eu"}
    assert len(by_stats) == 1


def test_pruning_works_on_column_mapped_physical_statistics_and_partitions(delta_fixture):
    path = delta_fixture("table_with_column_mapping")
    table = DeltaAdapter.open(str(path))
    index = table.file_index()
    assert len(list(index.list_files_at(filters="\"Company Very Short\" = 'BME'"))) == 1
    assert len(list(index.list_files_at(filters="\"Super Name\" = 'Timothy Lamb'"))) == 1
    assert [r["Super Name"] for r in _rows(table.read(filters="\"Super Name\" = 'Timothy Lamb'"))] == [
        "Timothy Lamb"
    ]


def test_pruning_on_every_partition_value_type_keeps_the_matching_file(delta_fixture):
    path = delta_fixture("data-reader-partition-values")
    table = DeltaAdapter.open(str(path))
    index = table.file_index()
    cases = {
        "as_int = 1": 1,
        "as_boolean = true": 1,
        "as_date = date '2021-09-08'": 2,
        "as_timestamp = timestamp '2021-09-08 11:11:11'": 2,
        "as_big_decimal = 1": 1,
        "as_float is null": 1,
        "as_string_lit_null = 'null'": 2,
    }
    for text, files in cases.items():
        assert len(list(index.list_files_at(filters=text))) == files, text
        assert len(_rows(table.read(filters=text))) == files, text


# --- streaming ----------------------------------------------------------------------------------


def _synthetic_checkpointed_table(path: Path, files: int) -> None:
    """A table whose state is one checkpoint of ``files`` add actions (the data files need not
    exist for listing): version 0 creates it, version 1 is checkpointed."""
    log = path / "_delta_log"
    log.mkdir(parents=True)
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "day", "type": "date", "nullable": True, "metadata": {}},
        ],
    }
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    metadata = {
        "id": "synthetic",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema),
        "partitionColumns": ["day"],
        "configuration": {},
        "createdTime": 0,
    }
    commits = [
        [
            {"commitInfo": {"timestamp": 0, "operation": "CREATE TABLE"}},
            {"protocol": protocol},
            {"metaData": metadata},
        ],
        [
            {
                "commitInfo": {
                    "timestamp": 1000,
                    "operation": "WRITE",
                    "operationParameters": {"mode": "Append"},
                }
            }
        ],
    ]
    for version, actions in enumerate(commits):
        (log / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    string_map = pa.map_(pa.string(), pa.string())
    add_type = pa.struct(
        [
            ("path", pa.string()),
            ("partitionValues", string_map),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            ("stats", pa.string()),
        ]
    )
    adds = []
    for i in range(files):
        day = f"2024-{1 + (i // 28) % 12:02d}-{1 + i % 28:02d}"
        stats = {
            "numRecords": 1000,
            "minValues": {"id": i * 1000},
            "maxValues": {"id": i * 1000 + 999},
            "nullCount": {"id": 0},
        }
        adds.append(
            {
                "path": f"day={day}/part-{i:08d}.parquet",
                "partitionValues": [("day", day)],
                "size": 1_000_000 + i,
                "modificationTime": 0,
                "dataChange": False,
                "stats": json.dumps(stats),
            }
        )
    protocol_type = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
    metadata_type = pa.struct(
        [
            ("id", pa.string()),
            ("format", pa.struct([("provider", pa.string()), ("options", string_map)])),
            ("schemaString", pa.string()),
            ("partitionColumns", pa.list_(pa.string())),
            ("configuration", string_map),
            ("createdTime", pa.int64()),
        ]
    )
    metadata_row = {**metadata, "format": {"provider": "parquet", "options": []}, "configuration": []}
    checkpoint = pa.table(
        {
            "add": pa.concat_arrays([pa.nulls(2, add_type), pa.array(adds, add_type)]),
            "protocol": pa.concat_arrays(
                [pa.array([protocol], protocol_type), pa.nulls(files + 1, protocol_type)]
            ),
            "metaData": pa.concat_arrays(
                [
                    pa.nulls(1, metadata_type),
                    pa.array([metadata_row], metadata_type),
                    pa.nulls(files, metadata_type),
                ]
            ),
        }
    )
    pq.write_table(checkpoint, log / f"{1:020d}.checkpoint.parquet", row_group_size=8192)


def _peak_python_memory_while_listing(path: Path) -> tuple[int, int]:
    import gc
    import tracemalloc

    listing = DeltaAdapter.open(str(path)).file_index().list_files_at()
    gc.collect()
    tracemalloc.start()
    try:
        count = sum(1 for _ in listing)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return count, peak


def test_listing_a_large_checkpoint_streams_with_flat_memory(tmp_path):
    small, large = tmp_path / "small", tmp_path / "large"
    _synthetic_checkpointed_table(small, 5_000)
    _synthetic_checkpointed_table(large, 15_000)
    assert len(DeltaTable(str(large)).file_uris()) == 15_000  # deltalake reads the same state
    small_count, small_peak = _peak_python_memory_while_listing(small)
    large_count, large_peak = _peak_python_memory_while_listing(large)
    assert (small_count, large_count) == (5_000, 15_000)
    # Three times the files, about the same peak: one checkpoint batch at a time, never the list.
    assert large_peak < small_peak * 1.5, (small_peak, large_peak)


def test_pruning_a_large_checkpoint_by_partition_and_statistics(tmp_path):
    path = tmp_path / "large"
    _synthetic_checkpointed_table(path, 5_000)
    index = DeltaAdapter.open(str(path)).file_index()
    by_day = list(index.list_files_at(filters="day = date '2024-03-05'"))
    assert by_day and {s.partition.values["day"] for s in by_day} == {dt.date(2024, 3, 5)}
    reference = DeltaTable(str(path)).file_uris(file_pruning_predicate="day = '2024-03-05'")
    assert _paths(by_day) == set(reference)
    (by_id,) = index.list_files_at(filters="id = 1234567")
    assert by_id.base_file.lower_bounds["id"] <= 1234567 <= by_id.base_file.upper_bounds["id"]


# --- more reading paths -------------------------------------------------------------------------


def test_reading_several_slices_returns_their_rows(history_table):
    table = DeltaAdapter.open(str(history_table))
    slices = list(table.file_index().list_files_at())
    assert _rows(table.read(slices)) == _rows(table.read())
    assert _rows(table.read(iter(slices[:1]))) == _rows(table.read(slices[0]))


def test_a_commit_that_only_attaches_a_deletion_vector_adds_no_rows(delta_fixture):
    table = DeltaAdapter.open(str(delta_fixture("table-with-dv-small")))
    assert _rows(table.read(0, mode=ReadingMode.INCREMENTAL, end_instant=1)) == []
    assert len(_rows(table.read(None, mode=ReadingMode.INCREMENTAL, end_instant=0))) == 10
    # The file added at version 0 is read as it is at the end of the range: its deleted rows go.
    assert _rows(table.read(None, mode=ReadingMode.INCREMENTAL, end_instant=1)) == _scan(table.location, 1)


def test_the_change_data_feed_projects_columns_and_filters_rows(delta_fixture):
    path = delta_fixture("cdf-table")
    table = DeltaAdapter.open(str(path))
    reference = _cdf_reference(path, table.schema)
    expected = _rows([reference.filter(pc.field("id") <= 3).select(["id", *CDF_COLUMNS])])
    batches = list(table.read(None, columns=["id"], filters="id <= 3", mode=ReadingMode.CDC))
    assert batches[0].schema.names == ["id", *CDF_COLUMNS]
    assert _rows(batches) == expected


def test_changes_between_versions_are_pruned_by_partition(history_table):
    index = DeltaAdapter.open(str(history_table)).file_index()
    everything = list(index.list_files_between(0, 5))
    eu = list(index.list_files_between(0, 5, filters="region = 'eu'"))
    assert {(c.kind, c.file_slice.path) for c in eu} == {
        (c.kind, c.file_slice.path) for c in everything if c.file_slice.partition.values["region"] == "eu"
    }
    assert any(c.kind is ChangeKind.REMOVED for c in eu)


def test_an_unreadable_checkpoint_raises_corrupt_table_naming_it(tmp_path):
    path = tmp_path / "broken_checkpoint"
    for i in range(3):
        _write(path, {"id": pa.array([i], pa.int64())}, mode="append")
    DeltaTable(str(path)).create_checkpoint()
    checkpoint = path / "_delta_log" / f"{2:020d}.checkpoint.parquet"
    checkpoint.write_bytes(b"not parquet at all")
    with pytest.raises(CorruptTable, match=checkpoint.name):
        list(DeltaAdapter.open(str(path)).file_index().list_files_at())


def test_removes_without_partition_values_are_never_pruned(history_table):
    # Old writers leave partitionValues out of remove actions: their partition is unknown.
    commit = history_table / "_delta_log" / f"{3:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
    for action in actions:
        if "remove" in action:
            action["remove"].pop("partitionValues", None)
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    index = DeltaAdapter.open(str(history_table)).file_index()
    removed = {c.file_slice.path for c in index.list_files_between(2, 3) if c.kind is ChangeKind.REMOVED}
    assert removed
    filtered = {
        c.file_slice.path
        for c in index.list_files_between(2, 3, filters="region = 'ap'")
        if c.kind is ChangeKind.REMOVED
    }
    assert filtered == removed


def test_bad_columns_and_filters_are_refused_when_called(history_table):
    table = DeltaAdapter.open(str(history_table))
    with pytest.raises(FilterError, match="nope"):
        table.read(columns=["id", "nope"])
    with pytest.raises(FilterError, match="nope"):
        table.file_index().list_files_at(filters="nope = 1")
    with pytest.raises(FilterError):
        table.file_index().list_files_between(0, 2, filters="id = 'x'")


def test_absolute_file_uris_in_the_log_are_followed(history_table):
    # Writers may log absolute URIs (Spark writes file:/...) instead of paths relative to the table.
    expected = _scan(history_table)
    commit = history_table / "_delta_log" / f"{5:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
    for action in actions:
        if "add" in action:
            action["add"]["path"] = f"file:{history_table}/{action['add']['path']}"
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    table = DeltaAdapter.open(str(history_table))
    assert _rows(table.read()) == expected
    assert all(Path(s.base_file.path).is_file() for s in table.file_index().list_files_at())


def test_timestamp_without_time_zone_columns_read_and_prune(tmp_path):
    path = tmp_path / "ntz"
    moments = [dt.datetime(2024, 5, d, 8, 30, 0, 250) for d in range(1, 4)]
    for moment in moments:
        _write(
            path,
            {"at": pa.array([moment], pa.timestamp("us")), "n": pa.array([moment.day], pa.int32())},
            mode="append",
        )
    protocol = DeltaTable(str(path)).protocol()
    assert "timestampNtz" in (protocol.reader_features or [])
    table = DeltaAdapter.open(str(path))
    assert table.schema.field("at").type == pa.timestamp("us")
    assert _rows(table.read()) == _scan(path)
    kept = list(table.file_index().list_files_at(filters="at >= timestamp '2024-05-03 08:30:00.000200'"))
    assert len(kept) == 1
    assert [r["n"] for r in _rows(table.read(kept))] == [3]
