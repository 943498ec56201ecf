"""The Hudi adapter against hudi-rs's own answers and the Spark SQL that wrote the fixtures.

The tables are the Spark-written ones of ../shared/fixtures/hudi (copy-on-write and
merge-on-read, table versions 6 and 8, hive-style and plain partition folders, the time-based
key generator, parquet and avro log blocks). hudi-rs (the ``hudi`` package) is the reference
for file slices, timeline and rows; each ``NAME.sql`` is the reference for which rows exist
after each statement.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from pathlib import Path

import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.formats.hudi import HudiAdapter, HudiSpecTable
from storage.spec import load_table
from storage.spec.errors import (
    CorruptTable,
    FilterError,
    InstantNotFound,
    InvalidRange,
    NotSupported,
    TableNotFound,
)
from storage.spec.expressions import bind_filter, to_arrow
from storage.spec.models import ChangeKind, FileContent, ReadingMode, Split, SplitPart

FIXTURES = [
    "cow_v6_nonpartitioned",
    "cow_v6_simplekeygen_nonhivestyle",
    "cow_v6_timebasedkeygen_nonhivestyle",
    "cow_v8_nonpartitioned",
    "cow_v8_simplekeygen_nonhivestyle",
    "mor_parquet_v6_simplekeygen_nonhivestyle",
    "mor_avro_v6_trips_8i1u",
]
ID_TABLES = [name for name in FIXTURES if "trips" not in name]
TRIPS = "mor_avro_v6_trips_8i1u"
KEY = "_hoodie_record_key"

ID_FILTERS = [
    "id = 2",
    "id >= 3 and isActive = true",
    "name in ('Alice', 'Diana')",
    "id is null",
    "not (id < 3)",
    "name starts with 'C'",
    "id = 1 or longField > 5000000000",
    "dateField >= date '2023-04-03'",
]
PARTITIONED_FILTERS = ["byteField = 10", "byteField != 20", "byteField in (10, 30) and id > 1"]
TIME_BASED_FILTERS = ["ts_str = '2023-04-04T13:01:00.123Z'", "ts_str >= '2023-04-02'"]
TRIPS_FILTERS = [
    "city = 'chennai'",
    "fare > 40",
    "rider = 'rider-D'",
    "fare = 25.0",  # only the log has it: the base file's bounds say otherwise
    "fare = 33.9",
    "city != 'san_francisco' or fare < 20",
]


def _filters_for(name: str) -> list[str]:
    if name == TRIPS:
        return TRIPS_FILTERS
    if "timebased" in name:
        return ID_FILTERS + TIME_BASED_FILTERS
    if "simplekeygen" in name:
        return ID_FILTERS + PARTITIONED_FILTERS
    return ID_FILTERS


# --- fixtures and references --------------------------------------------------------------------


@pytest.fixture(scope="session")
def hudi_table_path(hudi_fixture):
    """The table folder of ``hudi_fixture(name)``.

    These zips hold a ``__MACOSX`` folder beside the table folder, so the shared fixture returns
    the zip's root for them; the table is the folder holding ``.hoodie``.
    """

    def find(name: str) -> Path:
        root = hudi_fixture(name)
        if (root / ".hoodie").is_dir():
            return root
        tables = [p for p in root.iterdir() if (p / ".hoodie").is_dir()]
        assert len(tables) == 1, f"{name}.zip should hold one table, found {tables}"
        return tables[0]

    return find


@pytest.fixture(scope="session")
def sql_text(external_tables):
    return lambda name: (external_tables / "hudi" / f"{name}.sql").read_text()


@pytest.fixture
def table_copy(hudi_table_path, tmp_path):
    """A private copy of a fixture table, for tests that damage it."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(hudi_table_path(name), target)
        return target

    return copy


def _open(path: Path) -> HudiSpecTable:
    return HudiAdapter.open(str(path))


def _rows_after_each_insert(sql: str) -> list[dict[int, tuple[str, bool]]]:
    """(name, isActive) by primary key ``id`` after each INSERT of the SQL: Hudi upserts on it."""
    states = []
    current: dict[int, tuple[str, bool]] = {}
    for statement in sql.split("INSERT INTO")[1:]:
        for key, name, active in re.findall(r"\(\s*(\d+),\s*'(\w+)',\s*(true|false)", statement):
            current[int(key)] = (name, active == "true")
        states.append(dict(current))
    return states


def _trip_fares(sql: str) -> tuple[dict[str, float], dict[str, float]]:
    """Fare by rider after the INSERT and after the UPDATE of the trips SQL."""
    inserted = {
        rider: float(fare) for rider, fare in re.findall(r"'(rider-\w+)',\s*'driver-\w+',\s*([\d.]+),", sql)
    }
    fare, rider = re.search(r"SET fare = ([\d.]+)\s+WHERE rider = '([\w-]+)'", sql).groups()
    return inserted, {**inserted, rider: float(fare)}


def _table(batches, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches(list(batches), schema=schema)


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by(KEY) if table.num_rows else table


def _reference(path: Path, options: hudi.HudiReadOptions | None = None) -> pa.Table:
    reference = hudi.HudiTable(str(path))
    return pa.Table.from_batches(reference.read(options) if options else reference.read())


def _ids(table: pa.Table) -> dict[int, tuple[str, bool]]:
    return {
        row["id"]: (row["name"], row["isActive"])
        for row in table.select(["id", "name", "isActive"]).to_pylist()
    }


def _slice_files(file_slice) -> set[str]:
    files = {f.path for f in file_slice.delete_files}
    if file_slice.base_file is not None:
        files.add(file_slice.base_file.path)
    return files


# --- opening --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_detect_recognises_a_table_by_its_hoodie_folder(hudi_table_path, tmp_path, name):
    assert HudiAdapter.detect(str(hudi_table_path(name)))
    assert not HudiAdapter.detect(str(tmp_path))
    assert not HudiAdapter.detect(str(tmp_path / "missing"))


def test_load_table_finds_the_hudi_adapter_through_the_entry_point(hudi_table_path):
    table = load_table(str(hudi_table_path(TRIPS)))
    assert isinstance(table, HudiSpecTable)
    assert table.definition.id.format.value == "hudi"


def test_opening_a_missing_location_raises_table_not_found(tmp_path):
    with pytest.raises(TableNotFound, match="does not exist"):
        HudiAdapter.open(str(tmp_path / "nowhere"))


def test_opening_a_folder_without_hoodie_raises_table_not_found(tmp_path):
    with pytest.raises(TableNotFound, match=r"\.hoodie"):
        HudiAdapter.open(str(tmp_path))


def test_a_missing_properties_file_is_a_corrupt_table(table_copy):
    path = table_copy(TRIPS)
    (path / ".hoodie" / "hoodie.properties").unlink()
    with pytest.raises(CorruptTable, match=r"hoodie\.properties is missing"):
        HudiAdapter.open(str(path))


def test_binary_properties_are_a_corrupt_table(table_copy):
    path = table_copy(TRIPS)
    (path / ".hoodie" / "hoodie.properties").write_bytes(b"\x00\x01\x02garbage\xff")
    with pytest.raises(CorruptTable, match=r"hoodie\.properties is binary"):
        HudiAdapter.open(str(path))


def test_properties_without_a_table_type_are_a_corrupt_table_naming_the_key(table_copy):
    path = table_copy(TRIPS)
    properties = path / ".hoodie" / "hoodie.properties"
    kept = [line for line in properties.read_text().splitlines() if not line.startswith("hoodie.table.type=")]
    properties.write_text("\n".join(kept) + "\n")
    with pytest.raises(CorruptTable, match=r"hoodie\.table\.type"):
        HudiAdapter.open(str(path))


def test_a_base_file_that_vanished_after_listing_is_a_corrupt_table_when_read(table_copy):
    table = _open(table_copy("cow_v6_simplekeygen_nonhivestyle"))
    file_slice = next(iter(table.file_index().list_files_at()))
    os.unlink(file_slice.base_file.path)
    with pytest.raises(CorruptTable, match="reading"):
        list(table.read(file_slice))


def test_a_table_pickles_and_reopens_its_hudi_rs_handle(hudi_table_path):
    table = _open(hudi_table_path(TRIPS))
    copy = pickle.loads(pickle.dumps(table))
    assert copy.definition == table.definition
    assert _sorted(_table(copy.read(), copy.read_schema)).equals(
        _sorted(_table(table.read(), table.read_schema))
    )


# --- definition and timeline ----------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_definition_has_hudi_rs_schema_table_type_and_partition_fields(hudi_table_path, name):
    path = hudi_table_path(name)
    reference = hudi.HudiTable(str(path))
    definition = _open(path).definition
    assert definition.schema.equals(reference.get_schema())
    assert definition.table_type == reference.table_type
    declared = reference.hudi_options().get("hoodie.table.partition.fields", "")
    assert definition.partition_spec.names == tuple(f for f in declared.split(",") if f)
    assert definition.properties["hoodie.table.name"] == reference.table_name


def test_time_based_partition_field_keeps_the_folder_text_and_is_not_an_identity(hudi_table_path):
    table = _open(hudi_table_path("cow_v6_timebasedkeygen_nonhivestyle"))
    (field,) = table.definition.partition_spec.fields
    assert field.name == "ts_str" and field.transform.startswith("hudi_timestamp")
    reference = hudi.HudiTable(str(table.location))
    folders = {s.partition_path for s in reference.get_file_slices()}
    listed = {s.partition.path: s.partition.values["ts_str"] for s in table.file_index().list_files_at()}
    assert listed == {folder: folder for folder in folders}


@pytest.mark.parametrize(
    "name", ["cow_v6_simplekeygen_nonhivestyle", "mor_parquet_v6_simplekeygen_nonhivestyle"]
)
def test_plain_partition_folders_give_typed_values(hudi_table_path, name):
    table = _open(hudi_table_path(name))
    for file_slice in table.file_index().list_files_at():
        assert file_slice.partition.values == {"byteField": int(file_slice.partition.path)}


def test_hive_style_partition_folders_give_the_value_after_the_equals_sign(hudi_table_path):
    table = _open(hudi_table_path(TRIPS))
    for file_slice in table.file_index().list_files_at():
        assert file_slice.partition.path == f"city={file_slice.partition.values['city']}"


@pytest.mark.parametrize("name", FIXTURES)
def test_timeline_lists_the_completed_commits_hudi_rs_reports_oldest_first(hudi_table_path, name):
    path = hudi_table_path(name)
    timeline = hudi.HudiTable(str(path)).get_timeline()
    expected = sorted(
        timeline.get_completed_commits()
        + timeline.get_completed_deltacommits()
        + timeline.get_completed_replacecommits(),
        key=lambda i: i.timestamp,
    )
    instants = _open(path).timeline().instants()
    assert [i.id for i in instants] == [e.timestamp for e in expected]
    assert [i.sequence for i in instants] == list(range(len(instants)))
    assert [i.parent_id for i in instants] == [None] + [e.timestamp for e in expected[:-1]]
    for instant, reference in zip(instants, expected, strict=True):
        # hudi-rs reads instant times as UTC too.
        assert instant.timestamp.timestamp() * 1000 == pytest.approx(reference.epoch_mills)
        metadata = json.loads(timeline.get_instant_metadata_in_json(reference))
        stats = [s for group in metadata["partitionToWriteStats"].values() for s in group]
        assert instant.operation == metadata["operationType"].lower()
        assert instant.summary["action"] == reference.action
        assert instant.summary["numWrites"] == sum(s["numWrites"] for s in stats)
        assert instant.summary["numInserts"] == sum(s["numInserts"] for s in stats)
        assert instant.summary["numUpdateWrites"] == sum(s["numUpdateWrites"] for s in stats)
        assert instant.summary["totalBytesWritten"] == sum(s["totalWriteBytes"] for s in stats)


def test_latest_at_a_time_between_commits_is_the_earlier_commit(hudi_table_path):
    timeline = _open(hudi_table_path("cow_v6_nonpartitioned")).timeline()
    first, second = timeline.instants()
    between = first.timestamp + (second.timestamp - first.timestamp) / 2
    assert timeline.latest_at(between) == first
    assert timeline.latest_at(second.timestamp) == second


@pytest.mark.parametrize("name", ["cow_v8_nonpartitioned", "cow_v8_simplekeygen_nonhivestyle"])
def test_version_8_instants_carry_their_completion_time(hudi_table_path, name):
    path = hudi_table_path(name)
    files = {p.name for p in (path / ".hoodie" / "timeline").iterdir()}
    for instant in _open(path).timeline().instants():
        assert f"{instant.id}_{instant.summary['completionTime']}.commit" in files


# --- listing --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_files_at_each_instant_are_hudi_rs_file_slices(hudi_table_path, name):
    path = hudi_table_path(name)
    table = _open(path)
    reference = hudi.HudiTable(str(path))
    for instant in table.timeline().instants():
        options = hudi.HudiReadOptions().with_as_of_timestamp(instant.id)
        expected = {
            (s.file_id, s.partition_path, s.base_file_name, s.base_file_size): dict(
                zip(s.log_files_relative_paths(), s.log_file_sizes, strict=True)
            )
            for s in reference.get_file_slices(options)
        }
        listed = list(table.file_index().list_files_at(instant.id))
        assert {
            (s.file_group_id, s.partition.path, Path(s.base_file.path).name, s.base_file.size_bytes)
            for s in listed
        } == set(expected)
        for file_slice in listed:
            base = file_slice.base_file
            logs = expected[
                (file_slice.file_group_id, file_slice.partition.path, Path(base.path).name, base.size_bytes)
            ]
            # hudi-rs also lists logs written after the instant (named after the base instant).
            for log in file_slice.delete_files:
                assert log.content is FileContent.LOG
                assert logs[os.path.relpath(log.path, path)] == log.size_bytes
            assert base.record_count == pq.read_metadata(base.path).num_rows
            assert file_slice.base_instant == base.path.rsplit("_", 1)[-1].split(".")[0]


def test_listing_at_the_latest_instant_includes_the_log_files(hudi_table_path):
    path = hudi_table_path(TRIPS)
    reference = hudi.HudiTable(str(path))
    expected = {log for s in reference.get_file_slices() for log in s.log_files_relative_paths()}
    listed = {
        os.path.relpath(log.path, path)
        for s in _open(path).file_index().list_files_at()
        for log in s.delete_files
    }
    assert listed == expected and expected


def test_listing_at_an_old_instant_leaves_out_log_files_written_later(hudi_table_path):
    table = _open(hudi_table_path(TRIPS))
    first, second = table.timeline().instants()
    assert all(not s.delete_files for s in table.file_index().list_files_at(first))
    (log_writer,) = [s for s in table.file_index().list_files_between(first, second)]
    assert log_writer.file_slice.delete_files


def test_listing_is_lazy_and_an_unknown_instant_is_refused_at_the_call(hudi_table_path):
    index = _open(hudi_table_path(TRIPS)).file_index()
    with pytest.raises(InstantNotFound):
        index.list_files_at("19990101000000000")
    listing = index.list_files_at()
    assert iter(listing) is listing


def test_a_malformed_filter_is_refused_at_the_call(hudi_table_path):
    index = _open(hudi_table_path(TRIPS)).file_index()
    with pytest.raises(FilterError):
        index.list_files_at(None, "fare >")
    with pytest.raises(FilterError, match="unknown column"):
        index.list_files_at(None, "no_such_column = 1")


def test_a_partition_filter_lists_only_that_partition(hudi_table_path):
    table = _open(hudi_table_path("cow_v6_simplekeygen_nonhivestyle"))
    listed = list(table.file_index().list_files_at(None, "byteField = 10"))
    assert [s.partition.path for s in listed] == ["10"]
    assert listed[0].base_file.lower_bounds is None  # partition columns need no footer


def test_column_statistics_from_the_footer_prune_base_files_that_cannot_match(hudi_table_path):
    table = _open(hudi_table_path("cow_v6_simplekeygen_nonhivestyle"))
    listed = list(table.file_index().list_files_at(None, "id = 4"))
    assert [s.partition.path for s in listed] == ["30"]
    base = listed[0].base_file
    footer = pq.read_metadata(base.path)
    id_column = [footer.row_group(0).column(j) for j in range(footer.num_columns)]
    id_stats = next(c.statistics for c in id_column if c.path_in_schema == "id")
    assert (base.lower_bounds["id"], base.upper_bounds["id"]) == (id_stats.min, id_stats.max)
    assert base.split_offsets is not None and len(base.split_offsets) == footer.num_row_groups


def test_a_slice_with_logs_is_kept_whatever_its_base_file_statistics_say(hudi_table_path):
    table = _open(hudi_table_path(TRIPS))
    listed = list(table.file_index().list_files_at(None, "fare = 25.0"))
    assert any(s.delete_files for s in listed)
    rows = _table(table.read(None, filters="fare = 25.0"), table.read_schema)
    assert rows.column("rider").to_pylist() == ["rider-D"]


@pytest.mark.parametrize("name", FIXTURES)
def test_pruning_never_loses_a_row(hudi_table_path, name):
    table = _open(hudi_table_path(name))
    instants = table.timeline().instants()
    for instant in (instants[0], instants[-1]):
        everything = _table(table.read(instant), table.read_schema)
        all_files = {p for s in table.file_index().list_files_at(instant) for p in _slice_files(s)}
        for text in _filters_for(name):
            expr = bind_filter(text, table.read_schema)
            expected = _sorted(everything.filter(to_arrow(expr, table.read_schema)))
            assert _sorted(_table(table.read(instant, filters=text), table.read_schema)).equals(expected), (
                text
            )
            pruned = list(table.file_index().list_files_at(instant, text))
            assert {p for s in pruned for p in _slice_files(s)} <= all_files
            # _hoodie_file_name is the base file's name, or the file group id for a log record.
            holding = {n.split("_", 1)[0] for n in expected.column("_hoodie_file_name").to_pylist()}
            assert holding <= {s.file_group_id for s in pruned}, text


@pytest.fixture
def many_partitions(hudi_table_path, tmp_path):
    """The simple key generator table with 300 more partition folders (hard links of one)."""
    path = tmp_path / "many"
    shutil.copytree(hudi_table_path("cow_v6_simplekeygen_nonhivestyle"), path)
    for value in range(100, 400):
        shutil.copytree(path / "20", path / str(value), copy_function=os.link)
    return path


def test_listing_many_partitions_matches_hudi_rs_and_a_pruned_listing_asks_hudi_rs_for_few_folders(
    many_partitions, monkeypatch
):
    table = _open(many_partitions)
    calls = []
    listed_by_hudi = table.hudi_slices

    def spy(as_of, partition_filter, base_only):
        slices = listed_by_hudi(as_of, partition_filter, base_only)
        calls.append((partition_filter, len(slices)))
        return slices

    monkeypatch.setattr(table, "hudi_slices", spy)
    reference = hudi.HudiTable(str(many_partitions))
    expected = {(s.partition_path, s.file_id) for s in reference.get_file_slices()}
    listed = [(s.partition.path, s.file_group_id) for s in table.file_index().list_files_at()]
    assert sorted(listed) == sorted(expected) and len(listed) == 303
    calls.clear()
    pruned = {
        (s.partition.path, s.file_group_id)
        for s in table.file_index().list_files_at(None, "byteField >= 390")
    }
    by_hudi = reference.get_file_slices(hudi.HudiReadOptions(filters=[("byteField", ">=", "390")]))
    assert pruned == {(s.partition_path, s.file_id) for s in by_hudi} and len(pruned) == 10
    ((partition_filter, returned),) = calls
    assert partition_filter is not None and returned == 10


# --- changes between instants ---------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_changes_between_consecutive_instants_turn_one_listing_into_the_next(hudi_table_path, name):
    table = _open(hudi_table_path(name))
    index = table.file_index()
    previous: set[str] = set()
    start = None
    for instant in table.timeline().instants():
        changes = list(index.list_files_between(start, instant))
        assert {c.instant_id for c in changes} == {instant.id}
        removed = {p for c in changes if c.kind is ChangeKind.REMOVED for p in _slice_files(c.file_slice)}
        added = {p for c in changes if c.kind is ChangeKind.ADDED for p in _slice_files(c.file_slice)}
        now = {p for s in index.list_files_at(instant) for p in _slice_files(s)}
        assert (previous - removed) | added == now
        previous, start = now, instant


@pytest.mark.parametrize("name", ID_TABLES)
def test_changes_carry_the_commit_record_counts_and_sizes(hudi_table_path, name):
    path = hudi_table_path(name)
    table = _open(path)
    timeline = hudi.HudiTable(str(path)).get_timeline()
    hudi_instants = {
        i.timestamp: i for i in timeline.get_completed_commits() + timeline.get_completed_deltacommits()
    }
    for change in table.file_index().list_files_between(None, None):
        if change.kind is not ChangeKind.ADDED:
            continue
        metadata = json.loads(timeline.get_instant_metadata_in_json(hudi_instants[change.instant_id]))
        stats = {s["path"]: s for group in metadata["partitionToWriteStats"].values() for s in group}
        for data_file in (change.file_slice.base_file, *change.file_slice.delete_files):
            if data_file is None:
                continue
            stat = stats[os.path.relpath(data_file.path, path)]
            assert (data_file.size_bytes, data_file.record_count) == (
                stat["fileSizeInBytes"],
                stat["numWrites"],
            )


def test_changes_with_a_partition_filter_keep_only_that_partition(hudi_table_path):
    table = _open(hudi_table_path("cow_v6_simplekeygen_nonhivestyle"))
    changes = list(table.file_index().list_files_between(None, None, "byteField = 30"))
    assert {c.file_slice.partition.path for c in changes} == {"30"}


def test_a_backwards_range_is_invalid_and_unknown_instants_are_not_found(hudi_table_path):
    table = _open(hudi_table_path("cow_v6_nonpartitioned"))
    first, second = table.timeline().instants()
    with pytest.raises(InvalidRange):
        table.file_index().list_files_between(second, first)
    with pytest.raises(InstantNotFound):
        table.file_index().list_files_between("20000101000000000", second)
    with pytest.raises(InvalidRange):
        table.read(second, mode=ReadingMode.INCREMENTAL, end_instant=first)
    assert list(table.file_index().list_files_between(second, second)) == []


# --- reading --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_snapshot_reads_match_hudi_rs_at_every_instant(hudi_table_path, name):
    path = hudi_table_path(name)
    table = _open(path)
    for instant in table.timeline().instants():
        expected = _reference(path, hudi.HudiReadOptions().with_as_of_timestamp(instant.id))
        assert _sorted(_table(table.read(instant), table.read_schema)).equals(_sorted(expected))


@pytest.mark.parametrize("name", ID_TABLES)
def test_snapshot_rows_are_the_rows_the_sql_wrote(hudi_table_path, sql_text, name):
    table = _open(hudi_table_path(name))
    states = _rows_after_each_insert(sql_text(name))
    instants = table.timeline().instants()
    assert len(instants) == len(states)
    for instant, state in zip(instants, states, strict=True):
        assert _ids(_table(table.read(instant), table.read_schema)) == state


def test_merge_on_read_snapshot_applies_the_avro_log_update(hudi_table_path, sql_text):
    table = _open(hudi_table_path(TRIPS))
    inserted, updated = _trip_fares(sql_text(TRIPS))
    first, second = table.timeline().instants()

    def fares(batches) -> dict[str, float]:
        rows = _table(batches, table.read_schema).select(["rider", "fare"]).to_pylist()
        return {row["rider"]: row["fare"] for row in rows}

    assert fares(table.read(second)) == updated
    assert fares(table.read(first)) == inserted
    assert fares(table.read(second, mode=ReadingMode.READ_OPTIMIZED)) == inserted


def test_read_optimized_reads_base_files_only_like_hudi_rs(hudi_table_path, sql_text):
    name = "mor_parquet_v6_simplekeygen_nonhivestyle"
    path = hudi_table_path(name)
    table = _open(path)
    options = hudi.HudiReadOptions().with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    read_optimized = _table(table.read(None, mode=ReadingMode.READ_OPTIMIZED), table.read_schema)
    assert _sorted(read_optimized).equals(_sorted(_reference(path, options)))
    first_insert, second_insert = _rows_after_each_insert(sql_text(name))
    # id 1's update went to a log file, so base files still hold its first version.
    assert _ids(read_optimized)[1] == first_insert[1]
    assert _ids(_table(table.read(), table.read_schema))[1] == second_insert[1]


def test_read_optimized_on_copy_on_write_equals_the_snapshot(hudi_table_path):
    table = _open(hudi_table_path("cow_v6_simplekeygen_nonhivestyle"))
    snapshot = _table(table.read(), table.read_schema)
    assert _sorted(_table(table.read(None, mode=ReadingMode.READ_OPTIMIZED), table.read_schema)).equals(
        _sorted(snapshot)
    )


@pytest.mark.parametrize("name", FIXTURES)
def test_incremental_read_returns_the_rows_hudi_rs_reads_for_the_range(hudi_table_path, name):
    path = hudi_table_path(name)
    table = _open(path)
    first, second = table.timeline().instants()
    # Version 8 tables bound incremental ranges by completion time in hudi-rs.
    start = first.summary.get("completionTime", first.id)
    end = second.summary.get("completionTime", second.id)
    options = (
        hudi.HudiReadOptions()
        .with_query_type(hudi.HudiQueryType.Incremental)
        .with_start_timestamp(start)
        .with_end_timestamp(end)
    )
    rows = _table(table.read(first, mode=ReadingMode.INCREMENTAL, end_instant=second), table.read_schema)
    assert _sorted(rows).equals(_sorted(_reference(path, options)))
    assert set(rows.column("_hoodie_commit_time").to_pylist()) == {second.id}
    from_creation = _table(
        table.read(None, mode=ReadingMode.INCREMENTAL, end_instant=second), table.read_schema
    )
    assert from_creation.num_rows == _table(table.read(second), table.read_schema).num_rows


@pytest.mark.parametrize("name", ID_TABLES)
def test_incremental_rows_are_the_second_statements_rows(hudi_table_path, sql_text, name):
    table = _open(hudi_table_path(name))
    first, second = table.timeline().instants()
    sql = sql_text(name)
    second_statement = _rows_after_each_insert("INSERT INTO" + sql.split("INSERT INTO")[2])[0]
    rows = _table(table.read(first, mode=ReadingMode.INCREMENTAL, end_instant=second), table.read_schema)
    assert _ids(rows) == second_statement


def test_incremental_read_applies_filters_and_projection(hudi_table_path):
    table = _open(hudi_table_path(TRIPS))
    first, second = table.timeline().instants()
    rows = _table(
        table.read(
            first, ["rider", "fare"], "city = 'san_francisco'", ReadingMode.INCREMENTAL, end_instant=second
        ),
        pa.schema([table.read_schema.field("rider"), table.read_schema.field("fare")]),
    )
    assert rows.to_pylist() == [{"rider": "rider-D", "fare": 25.0}]
    nothing = list(table.read(first, None, "city = 'chennai'", ReadingMode.INCREMENTAL, end_instant=second))
    assert nothing == []


def test_columns_project_away_meta_columns_and_filter_columns(hudi_table_path):
    table = _open(hudi_table_path("cow_v8_simplekeygen_nonhivestyle"))
    batches = list(table.read(None, columns=["name"], filters="id >= 3"))
    assert all(b.schema.names == ["name"] for b in batches)
    assert sorted(v for b in batches for v in b.column("name").to_pylist()) == ["Carol", "Diana"]
    everything = _table(table.read(), table.read_schema)
    assert everything.column_names[:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]


def test_an_unknown_projected_column_is_refused(hudi_table_path):
    table = _open(hudi_table_path(TRIPS))
    with pytest.raises(FilterError, match="unknown column 'nope'"):
        table.read(None, columns=["nope"])


def test_change_data_feed_is_not_supported(hudi_table_path):
    table = _open(hudi_table_path(TRIPS))
    with pytest.raises(NotSupported, match="hudi.*cdc"):
        table.read(None, mode=ReadingMode.CDC)


# --- splits -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_splits_cover_every_slice_once_and_reading_them_gives_the_snapshot(hudi_table_path, name):
    table = _open(hudi_table_path(name))
    splits = list(table.plan_splits(target_size=500_000, open_file_cost=1024))
    slices = list(table.file_index().list_files_at())
    covered: dict[str, int] = {}
    for split in splits:
        assert split.weight <= 500_000 or len(split.parts) == 1
        for part in split.parts:
            covered[part.file_slice.path] = covered.get(part.file_slice.path, 0) + part.length
    assert covered == {s.path: s.base_file.size_bytes for s in slices}
    read = pa.concat_tables(_table(table.read(split), table.read_schema) for split in splits)
    assert _sorted(read).equals(_sorted(_table(table.read(), table.read_schema)))


def test_byte_range_parts_of_a_base_file_read_each_row_group_once(hudi_table_path):
    table = _open(hudi_table_path("cow_v6_nonpartitioned"))
    (file_slice,) = table.file_index().list_files_at()
    size = file_slice.base_file.size_bytes
    offsets = [pq.read_metadata(file_slice.base_file.path).row_group(0).column(0).data_page_offset]
    cut = offsets[0] + 1  # past the only row group's start: the first part owns it
    head = Split(parts=(SplitPart(file_slice, 0, cut, 0),), weight=cut)
    tail = Split(parts=(SplitPart(file_slice, cut, size - cut, 0),), weight=size - cut)
    whole = _table(table.read(file_slice), table.read_schema)
    assert _sorted(_table(table.read(head), table.read_schema)).equals(_sorted(whole))
    assert list(table.read(tail)) == []


def test_a_slice_with_logs_is_merged_whole_by_its_first_part(hudi_table_path):
    table = _open(hudi_table_path(TRIPS))
    (file_slice,) = [s for s in table.file_index().list_files_at() if s.delete_files]
    size = file_slice.base_file.size_bytes
    parts = (SplitPart(file_slice, 0, 1000, 0), SplitPart(file_slice, 1000, size - 1000, 0))
    rows = _table(table.read(Split(parts=parts, weight=size)), table.read_schema)
    assert _sorted(rows).equals(_sorted(_table(table.read(file_slice), table.read_schema)))
    assert rows.num_rows == 4 and "rider-D" in rows.column("rider").to_pylist()


# --- summary ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_summary_counts_the_latest_slices_bytes_and_records(hudi_table_path, name):
    path = hudi_table_path(name)
    table = _open(path)
    reference = hudi.HudiTable(str(path)).get_file_slices()
    summary = table.summary()
    latest = table.timeline().latest()
    assert summary.current_instant_id == latest.id and summary.last_updated == latest.timestamp
    assert summary.instant_count == len(table.timeline().instants())
    assert summary.file_count == len(reference)
    assert summary.total_bytes == sum(s.total_size_bytes() for s in reference)
    assert summary.record_count == sum(
        pq.read_metadata(path / s.base_file_relative_path()).num_rows for s in reference
    )
