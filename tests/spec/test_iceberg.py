"""The Iceberg adapter against pyiceberg's own answers, on tables written here and by Spark/Trino."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from storage.formats.iceberg import IcebergAdapter, IcebergSpecTable
from storage.formats.iceberg._avro import iter_records
from storage.spec.errors import CorruptTable, InstantNotFound, InvalidRange, NotSupported, TableNotFound
from storage.spec.models import ChangeKind, FileContent, FileSlice, ReadingMode, SplitPart

UTC = dt.UTC


# -- a Postgres-backed pyiceberg SQL catalog for the session --------------------------------


@pytest.fixture(scope="session")
def catalog(tmp_path_factory, throwaway_database):
    from pyiceberg.catalog.sql import SqlCatalog

    database_url = throwaway_database("iceberg")
    sql_catalog = SqlCatalog(
        "lakewarden_test",
        uri=database_url.replace("postgresql://", "postgresql+psycopg2://", 1),
        warehouse=f"file://{tmp_path_factory.mktemp('warehouse')}",
    )
    sql_catalog.create_namespace("spec")
    yield sql_catalog
    sql_catalog.engine.dispose()


def _events(ids: range, days: list[int], note: bool = False) -> pa.Table:
    regions = ["eu", "us", "ap"]
    columns = {
        "id": pa.array(list(ids), pa.int64()),
        "region": pa.array([regions[i % 3] for i in ids], pa.string()),
        "ts": pa.array(
            [dt.datetime(2024, 1, 1 + days[i % len(days)], i % 24, tzinfo=UTC) for i in ids],
            pa.timestamp("us", "UTC"),
        ),
        "amount": pa.array([float(i) * 1.5 for i in ids], pa.float64()),
    }
    if note:
        columns["note"] = pa.array([f"note {i}" if i % 2 else None for i in ids], pa.string())
    return pa.table(columns)


@pytest.fixture(scope="module")
def events(catalog):
    """A partitioned (region identity + day(ts)) v2 table with appends, a schema change, a
    copy-on-write delete and an overwrite; returns (pyiceberg table, snapshot ids oldest first)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform, IdentityTransform
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "region", StringType(), required=False),
        NestedField(3, "ts", TimestamptzType(), required=False),
        NestedField(4, "amount", DoubleType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(2, 1000, IdentityTransform(), "region"),
        PartitionField(3, 1001, DayTransform(), "ts_day"),
    )
    table = catalog.create_table(
        "spec.events",
        schema,
        partition_spec=spec,
        properties={"write.target-file-size-bytes": str(64 * 1024 * 1024)},
    )
    table.append(_events(range(0, 60), [0, 1]))
    table.append(_events(range(60, 120), [1, 2]))
    with table.update_schema() as update:
        update.add_column("note", StringType())
    table.append(_events(range(120, 180), [2, 3], note=True))
    table.delete("id >= 30 and id < 45")
    table.overwrite(_events(range(200, 220), [3], note=True), overwrite_filter="region == 'ap'")
    table = catalog.load_table("spec.events")
    return table, [s.snapshot_id for s in table.metadata.snapshots]


@pytest.fixture(scope="module")
def spec_table(events) -> IcebergSpecTable:
    return IcebergAdapter.open(events[0].metadata_location)


def _paths(slices) -> set[str]:
    return {s.base_file.path for s in slices}


def _pyiceberg_tasks(table, snapshot_id, row_filter=None):
    from pyiceberg.expressions import AlwaysTrue

    return list(table.scan(row_filter=row_filter or AlwaysTrue(), snapshot_id=snapshot_id).plan_files())


def _sorted_rows(table: pa.Table, key: str = "id") -> list[dict]:
    return table.sort_by(key).to_pylist()


# -- opening and describing ------------------------------------------------------------------


def test_detect_recognises_a_table_folder_as_a_path_and_as_a_file_uri(spec_table, tmp_path):
    location = spec_table.location.removeprefix("file://")
    assert IcebergAdapter.detect(location)
    assert IcebergAdapter.detect(f"file://{location}")
    assert not IcebergAdapter.detect(str(tmp_path))
    assert not IcebergAdapter.detect(str(tmp_path / "absent"))


def test_opening_by_catalog_identifier_and_by_metadata_path_gives_the_same_history(
    catalog, events, spec_table
):
    by_catalog = IcebergAdapter.open("spec.events", catalog=catalog)
    by_properties = IcebergAdapter.open(
        "spec.events",
        catalog={
            "name": catalog.name,
            "type": "sql",
            "uri": catalog.engine.url.render_as_string(hide_password=False),
        },
    )
    by_folder = IcebergAdapter.open(spec_table.location)
    expected = [s.snapshot_id for s in events[0].metadata.snapshots]
    for table in (by_catalog, by_properties, by_folder):
        assert [i.id for i in table.timeline().instants()] == expected
    assert by_catalog.definition.id.identifier == "spec.events"


def test_a_missing_table_is_table_not_found(catalog, tmp_path):
    with pytest.raises(TableNotFound):
        IcebergAdapter.open(str(tmp_path / "nowhere"))
    with pytest.raises(TableNotFound, match="spec.absent"):
        IcebergAdapter.open("spec.absent", catalog=catalog)


def test_truncated_metadata_json_is_corrupt_table_naming_the_file(spec_table, tmp_path):
    source = Path(spec_table.location.removeprefix("file://"))
    copy = tmp_path / "copy"
    shutil.copytree(source / "metadata", copy / "metadata")
    for metadata_file in (copy / "metadata").glob("*.metadata.json"):
        metadata_file.write_text(metadata_file.read_text()[:100])
    with pytest.raises(CorruptTable, match=r"\.metadata\.json"):
        IcebergAdapter.open(str(copy))


def test_definition_carries_field_ids_partition_transforms_and_properties(events, spec_table):
    table = events[0]
    definition = spec_table.definition
    schema = table.schema()
    assert definition.schema.names == [f.name for f in schema.fields]
    for field in definition.schema:
        assert int(field.metadata[b"PARQUET:field_id"]) == schema.find_field(field.name).field_id
    assert [(f.name, f.source_column, f.transform) for f in definition.partition_spec.fields] == [
        ("region", "region", "identity"),
        ("ts_day", "ts", "day"),
    ]
    assert definition.properties["write.target-file-size-bytes"] == str(64 * 1024 * 1024)


def test_timeline_lists_snapshots_oldest_first_with_operations_and_parents(events, spec_table):
    table, _ = events
    instants = spec_table.timeline().instants()
    assert [i.id for i in instants] == [s.snapshot_id for s in table.metadata.snapshots]
    for instant, snapshot in zip(instants, table.metadata.snapshots, strict=True):
        assert instant.operation == snapshot.summary.operation.value
        assert instant.parent_id == snapshot.parent_snapshot_id
        assert instant.summary["total-records"] == snapshot.summary["total-records"]
    assert spec_table.timeline().latest_at(instants[1].timestamp).id == instants[1].id
    with pytest.raises(InstantNotFound):
        spec_table.timeline().get(12345)


def test_summary_answers_from_the_current_snapshot_totals(events, spec_table):
    table, _ = events
    summary = spec_table.summary()
    totals = table.current_snapshot().summary
    assert summary.current_instant_id == table.current_snapshot().snapshot_id
    assert summary.file_count == int(totals["total-data-files"])
    assert summary.record_count == int(totals["total-records"]) == len(table.scan().to_arrow())
    assert summary.instant_count == len(table.metadata.snapshots)


# -- listing ---------------------------------------------------------------------------------


def test_listing_at_every_snapshot_matches_pyiceberg_plan_files(events, spec_table):
    table, snapshot_ids = events
    for snapshot_id in snapshot_ids:
        ours = list(spec_table.file_index().list_files_at(snapshot_id))
        theirs = _pyiceberg_tasks(table, snapshot_id)
        assert _paths(ours) == {t.file.file_path for t in theirs}
        by_path = {t.file.file_path: t.file for t in theirs}
        for file_slice in ours:
            expected = by_path[file_slice.base_file.path]
            assert file_slice.base_file.record_count == expected.record_count
            assert file_slice.base_file.size_bytes == expected.file_size_in_bytes


def test_listing_is_a_lazy_iterator_of_file_slices(spec_table):
    listing = spec_table.file_index().list_files_at()
    assert isinstance(listing, Iterator)
    first = next(listing)
    assert isinstance(first, FileSlice)
    assert first.base_file.content is FileContent.DATA


def test_listed_files_carry_typed_partition_values_and_decoded_stats(events, spec_table):
    table, _ = events
    theirs = {t.file.file_path: t.file for t in _pyiceberg_tasks(table, None)}
    for file_slice in spec_table.file_index().list_files_at():
        data_file = file_slice.base_file
        expected = theirs[data_file.path]
        region, day = expected.partition[0], expected.partition[1]
        assert data_file.partition == {
            "region": region,
            "ts_day": dt.date(1970, 1, 1) + dt.timedelta(days=day),
        }
        assert (
            file_slice.partition.path == f"region={region}/ts_day={data_file.partition['ts_day'].isoformat()}"
        )
        rows = pq.read_table(data_file.path.removeprefix("file://"))
        assert data_file.lower_bounds["id"] == pc.min(rows["id"]).as_py()
        assert data_file.upper_bounds["ts"] == pc.max(rows["ts"]).as_py()
        assert data_file.null_counts["id"] == 0
        assert data_file.split_offsets == tuple(expected.split_offsets)


@pytest.mark.parametrize(
    "filter_text",
    [
        "region = 'eu'",
        "ts >= timestamp '2024-01-03 00:00:00'",
        "id < 20 or id > 170",
        "region in ('us', 'ap') and amount > 100",
        "note is null",
        "note is not null and id > 150",
        "not (region = 'eu')",
    ],
)
def test_filtered_reads_equal_reading_everything_and_filtering_in_pyarrow(spec_table, filter_text):
    from storage.spec.expressions import bind_filter, to_arrow

    everything = spec_table.read_arrow()
    expected = everything.filter(to_arrow(bind_filter(filter_text, spec_table.schema)))
    filtered = spec_table.read_arrow(filters=filter_text)
    assert _sorted_rows(filtered) == _sorted_rows(expected)
    listed = _paths(spec_table.file_index().list_files_at(filters=filter_text))
    assert listed <= _paths(spec_table.file_index().list_files_at())


def test_partition_and_stats_filters_prune_files(spec_table):
    index = spec_table.file_index()
    everything = _paths(index.list_files_at())
    eu = list(index.list_files_at(filters="region = 'eu'"))
    assert eu and all(s.partition.values["region"] == "eu" for s in eu)
    assert len(eu) < len(everything)
    assert len(_paths(index.list_files_at(filters="id = 5"))) < len(everything)


def test_listing_with_filter_agrees_with_pyiceberg_on_partition_pruning(events, spec_table):
    from pyiceberg.expressions import EqualTo

    table, _ = events
    ours = _paths(spec_table.file_index().list_files_at(filters="region = 'us'"))
    assert ours == {t.file.file_path for t in _pyiceberg_tasks(table, None, EqualTo("region", "us"))}


PROVED_BY_PARTITIONS = [
    "ts >= timestamp '2024-01-02 00:00:00+00:00' and ts < timestamp '2024-01-03 00:00:00+00:00'",
    "region = 'us' and ts >= timestamp '2024-01-03 00:00:00+00:00'",
    "ts < timestamp '2024-01-03 00:00:00+00:00' or region = 'ap'",
    # partly proved: a day cut at noon leaves those files to their statistics
    "ts >= timestamp '2024-01-02 12:00:00+00:00' and ts < timestamp '2024-01-04 00:00:00+00:00'",
]


@pytest.mark.parametrize("text", PROVED_BY_PARTITIONS)
def test_files_of_partitions_that_prove_the_filter_are_kept_without_their_statistics(
    events, spec_table, monkeypatch, text
):
    """Where a partition's values prove every row matches (always_matches_partition), its files
    are kept without a statistics check, and the listing is the same as with every file checked
    and as pyiceberg's plan; the other partitions' files are still checked."""
    from storage.spec import expressions
    from storage.spec.expressions import to_pyiceberg

    table, _ = events
    checked: list[str] = []
    real_check = expressions.might_match_file_stats

    def counted(expr, data_file):
        checked.append(data_file.path)
        return real_check(expr, data_file)

    monkeypatch.setattr(expressions, "might_match_file_stats", counted)
    proved = list(spec_table.file_index().list_files_at(filters=text))
    checked_with_proofs = set(checked)
    monkeypatch.setattr(expressions, "always_matches_partition", lambda expr, spec, values: False)
    checked.clear()
    unproved = list(spec_table.file_index().list_files_at(filters=text))
    assert proved == unproved and proved
    assert _paths(proved) == {
        t.file.file_path for t in _pyiceberg_tasks(table, None, to_pyiceberg(spec_table.bind(text)))
    }
    assert checked_with_proofs < set(checked)  # fewer files checked, none kept otherwise
    if "12:00" in text:  # the cut day's files are checked, the whole day's are not
        assert checked_with_proofs and all("ts_day=2024-01-02" in path for path in checked_with_proofs)
    else:
        assert not checked_with_proofs


def test_partitions_at_aggregates_the_listing(spec_table):
    partitions = spec_table.file_index().partitions_at()
    slices = list(spec_table.file_index().list_files_at())
    assert sum(p.file_count for p in partitions) == len(slices)
    assert sum(p.record_count for p in partitions) == sum(s.record_count for s in slices)
    assert {p.partition.path for p in partitions} == {s.partition.path for s in slices}
    # every test file is far below 64 MiB / 8
    assert all(p.small_file_count == p.file_count for p in partitions)


# -- changes between snapshots ----------------------------------------------------------------


def test_changes_between_consecutive_snapshots_explain_the_listings(events, spec_table):
    table, snapshot_ids = events
    index = spec_table.file_index()
    for before, after in zip(snapshot_ids, snapshot_ids[1:], strict=False):
        changes = list(index.list_files_between(before, after))
        added = {c.file_slice.path for c in changes if c.kind is ChangeKind.ADDED}
        removed = {c.file_slice.path for c in changes if c.kind is ChangeKind.REMOVED}
        old = {t.file.file_path for t in _pyiceberg_tasks(table, before)}
        new = {t.file.file_path for t in _pyiceberg_tasks(table, after)}
        assert (old - removed) | added == new
        assert all(c.instant_id == after for c in changes)


def test_changes_over_the_whole_history_add_every_live_file(events, spec_table):
    table, snapshot_ids = events
    changes = list(spec_table.file_index().list_files_between(None, snapshot_ids[-1]))
    added = {c.file_slice.path for c in changes if c.kind is ChangeKind.ADDED}
    assert {t.file.file_path for t in _pyiceberg_tasks(table, None)} <= added


def test_changes_refuse_a_backwards_range_and_unknown_snapshots(events, spec_table):
    _, snapshot_ids = events
    index = spec_table.file_index()
    with pytest.raises(InvalidRange):
        index.list_files_between(snapshot_ids[-1], snapshot_ids[0])
    with pytest.raises(InstantNotFound):
        index.list_files_between(1, snapshot_ids[-1])
    assert list(index.list_files_between(snapshot_ids[2], snapshot_ids[2])) == []


# -- reading ------------------------------------------------------------------------------------


def test_reads_at_every_snapshot_equal_pyiceberg_to_arrow(events, spec_table):
    table, snapshot_ids = events
    for snapshot_id in snapshot_ids:
        theirs = table.scan(snapshot_id=snapshot_id).to_arrow()
        ours = spec_table.read_arrow(snapshot_id, columns=["id", "region", "ts", "amount"])
        assert ours.num_rows == theirs.num_rows
        assert _sorted_rows(ours) == _sorted_rows(theirs.select(["id", "region", "ts", "amount"]))


def test_files_written_before_a_column_was_added_read_it_as_null(spec_table):
    rows = {r["id"]: r["note"] for r in spec_table.read_arrow(columns=["id", "note"]).to_pylist()}
    assert rows[0] is None and rows[61] is None
    assert rows[121] == "note 121" and rows[120] is None


def test_renamed_columns_keep_their_data_by_field_id(catalog):
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    table = catalog.create_table(
        "spec.renamed",
        Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "name", StringType(), required=False),
        ),
    )
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}))
    with table.update_schema() as update:
        update.rename_column("name", "label")
    table = catalog.load_table("spec.renamed")
    spec = IcebergAdapter.open(table.metadata_location)
    assert _sorted_rows(spec.read_arrow()) == [{"id": 1, "label": "a"}, {"id": 2, "label": "b"}]
    assert spec.read_arrow(filters="label = 'b'").to_pylist() == [{"id": 2, "label": "b"}]


def test_column_projection_returns_only_the_asked_columns_in_order(spec_table):
    result = spec_table.read_arrow(columns=["amount", "id"], filters="region = 'eu'")
    assert result.column_names == ["amount", "id"]
    assert result.num_rows > 0


@pytest.fixture(scope="module")
def row_groups(catalog) -> str:
    """The metadata location of a one-file table of 10,000 ids in row groups of 1,000 rows, made
    here for whichever test of this module asks first (tests of a module may run on different
    xdist workers, each with its own catalog: none may rely on another having made it)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    table = catalog.create_table(
        "spec.row_groups",
        Schema(NestedField(1, "id", LongType(), required=False)),
        properties={"write.parquet.row-group-limit": "1000"},
    )
    table.append(pa.table({"id": pa.array(range(10_000), pa.int64())}))
    return catalog.load_table("spec.row_groups").metadata_location


def test_split_parts_of_one_file_read_every_row_exactly_once(row_groups):
    spec = IcebergAdapter.open(row_groups)
    (file_slice,) = spec.file_index().list_files_at()
    metadata = pq.ParquetFile(file_slice.path.removeprefix("file://")).metadata
    assert metadata.num_row_groups > 3
    # cut the file into byte ranges at arbitrary points between row-group offsets
    offsets = sorted(file_slice.base_file.split_offsets)
    cuts = [0, offsets[1] + 1, offsets[3] - 1, file_slice.size_bytes]
    parts = [SplitPart(file_slice, start, end - start, 0) for start, end in zip(cuts, cuts[1:], strict=False)]
    ids = [v for part in parts for batch in spec.read(part) for v in batch.column("id").to_pylist()]
    assert sorted(ids) == list(range(10_000))


def test_planned_splits_read_the_same_rows_as_the_whole_table(row_groups, spec_table):
    for table in (spec_table, IcebergAdapter.open(row_groups)):
        splits = list(table.plan_splits(target_size=4096, open_file_cost=512))
        assert len(splits) > 1
        from_splits = pa.Table.from_batches(
            [b for split in splits for b in table.read(split)], schema=table.schema
        )
        assert _sorted_rows(from_splits) == _sorted_rows(table.read_arrow())


def test_incremental_read_returns_the_rows_of_files_added_in_the_range(events, spec_table):
    table, snapshot_ids = events
    # a plain append: exactly the appended rows
    appended = spec_table.read_arrow(
        snapshot_ids[0], columns=["id"], mode=ReadingMode.INCREMENTAL, end_instant=snapshot_ids[1]
    )
    assert sorted(appended.column("id").to_pylist()) == list(range(60, 120))
    # across the delete and the overwrite: rows of files live at the end that were not live at the start
    start, end = snapshot_ids[2], snapshot_ids[-1]
    old = {t.file.file_path for t in _pyiceberg_tasks(table, start)}
    new_files = [t.file.file_path for t in _pyiceberg_tasks(table, end) if t.file.file_path not in old]
    expected = sorted(
        v
        for p in new_files
        for v in pq.read_table(p.removeprefix("file://"), columns=["id"])["id"].to_pylist()
    )
    got = spec_table.read_arrow(start, columns=["id"], mode=ReadingMode.INCREMENTAL, end_instant=end)
    assert sorted(got.column("id").to_pylist()) == expected


def test_unsupported_reading_modes_raise_not_supported(spec_table):
    with pytest.raises(NotSupported, match="iceberg"):
        list(spec_table.read(mode=ReadingMode.CDC))


def test_file_slices_pickle_with_plain_stats(spec_table):
    file_slice = next(spec_table.file_index().list_files_at())
    copy = pickle.loads(pickle.dumps(file_slice))
    assert copy == file_slice
    assert type(copy.base_file.lower_bounds) is dict


# -- tables written by Spark and Trino (../shared/fixtures) --------------------------------------


def test_spark_position_deletes_rows_per_snapshot(iceberg_fixture):
    table = IcebergAdapter.open(str(iceberg_fixture("spark_v2_position_deletes")))
    counts = [sum(b.num_rows for b in table.read(i)) for i in table.timeline().instants()]
    assert counts == [6005, 6005, 7690, 7690, 6592, 6592, 6592]


def test_spark_position_deletes_listing_matches_pyiceberg_with_delete_files(iceberg_fixture):
    table = IcebergAdapter.open(str(iceberg_fixture("spark_v2_position_deletes")))
    for instant in table.timeline().instants():
        ours = {
            s.base_file.path: {d.path for d in s.delete_files}
            for s in table.file_index().list_files_at(instant)
        }
        theirs = {
            t.file.file_path: {d.file_path for d in t.delete_files}
            for t in _pyiceberg_tasks(table.pyiceberg_table, instant.id)
        }
        assert ours == theirs


def test_spark_position_deletes_rows_equal_pyiceberg(iceberg_fixture):
    table = IcebergAdapter.open(str(iceberg_fixture("spark_v2_position_deletes")))
    theirs = table.pyiceberg_table.scan().to_arrow()
    ours = table.read_arrow()
    key = theirs.column_names[0]
    assert ours.num_rows == theirs.num_rows == 6592
    assert sorted(ours.column(key).to_pylist(), key=repr) == sorted(theirs.column(key).to_pylist(), key=repr)


def test_spark_equality_deletes_are_applied(iceberg_fixture):
    table = IcebergAdapter.open(str(iceberg_fixture("spark_v2_equality_deletes")))
    slices = list(table.file_index().list_files_at())
    assert any(d.content is FileContent.EQUALITY_DELETES for s in slices for d in s.delete_files)
    rows = sorted((r["id"], r["name"]) for r in table.read_arrow(columns=["id", "name"]).to_pylist())
    assert rows == [(4, "d"), (5, "e")]


def test_time_travel_to_a_snapshot_whose_manifest_list_is_missing_is_corrupt_table(iceberg_fixture):
    table = IcebergAdapter.open(str(iceberg_fixture("spark_v2_equality_deletes")))
    broken = [i for i in table.timeline().instants() if not os.path.exists(_manifest_list(table, i.id))]
    assert broken, "the fixture lost one manifest list"
    with pytest.raises(CorruptTable, match=r"snap-.*\.avro is missing"):
        list(table.file_index().list_files_at(broken[0]))
    with pytest.raises(CorruptTable):
        list(table.read(broken[0]))


def _manifest_list(table: IcebergSpecTable, snapshot_id: int) -> str:
    return table.pyiceberg_table.metadata.snapshot_by_id(snapshot_id).manifest_list.removeprefix("file://")


def test_spark_v1_day_partitioned_lists_date_partitions_and_prunes_by_day(iceberg_fixture):
    table = IcebergAdapter.open(str(iceberg_fixture("spark_v1_day_partitioned")))
    slices = list(table.file_index().list_files_at())
    assert len(slices) == 2 and sum(s.record_count for s in slices) == 3
    assert all(isinstance(s.partition.values["ts_day"], dt.date) for s in slices)
    assert table.read_arrow().num_rows == 3
    day_filter = "ts >= timestamp '2023-03-02 00:00:00'"
    assert len(list(table.file_index().list_files_at(filters=day_filter))) == 1
    assert table.read_arrow(filters=day_filter).column("id").to_pylist() == [3]


def test_spark_lineitem_partition_value_with_a_space(iceberg_fixture):
    table = IcebergAdapter.open(str(iceberg_fixture("spark_v2_lineitem_partitioned")))
    slices = list(table.file_index().list_files_at())
    assert len(slices) == 7 and table.read_arrow().num_rows == 1000
    reg_air = [s for s in slices if s.partition.values["l_shipmode"] == "REG AIR"]
    assert [s.partition.path for s in reg_air] == ["l_shipmode=REG+AIR"]
    everything = table.read_arrow()
    expected = everything.filter(pc.field("l_shipmode") == "REG AIR")
    assert table.read_arrow(filters="l_shipmode = 'REG AIR'").num_rows == expected.num_rows > 0


def test_trino_time_travel_by_timestamp(iceberg_fixture):
    table = IcebergAdapter.open(str(iceberg_fixture("trino_timetravel")))
    instants = table.timeline().instants()
    assert [table.read_arrow(i).num_rows for i in instants] == [0, 1, 2, 3]
    for instant in instants:
        found = table.timeline().latest_at(instant.timestamp + dt.timedelta(seconds=1))
        assert found.id == instant.id


def test_manifest_decoder_agrees_with_fastavro_on_every_fixture_manifest(iceberg_fixture):
    checked = 0
    for name in ("spark_v2_position_deletes", "spark_v2_equality_deletes", "spark_v1_day_partitioned"):
        for manifest in (iceberg_fixture(name) / "metadata").glob("*-m*.avro"):
            data = manifest.read_bytes()
            theirs = list(fastavro.reader(io.BytesIO(data)))
            ours = [record for record, _ in iter_records(data, _everything(data))]
            assert [_normalise(r) for r in ours] == [_normalise(r) for r in theirs]
            checked += 1
    assert checked > 5


def _everything(data: bytes) -> dict:
    schema = json.loads(fastavro.reader(io.BytesIO(data)).metadata["avro.schema"])
    return {f["name"]: True for f in schema["fields"]}


def _normalise(value):
    """fastavro's shape (maps as key/value record lists, logical types applied) vs raw values."""
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()} if value else []
    if isinstance(value, list) and value and isinstance(value[0], dict) and set(value[0]) == {"key", "value"}:
        return {item["key"]: _normalise(item["value"]) for item in value}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, dt.datetime):
        return int((value - dt.datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1_000_000)
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days
    return value
