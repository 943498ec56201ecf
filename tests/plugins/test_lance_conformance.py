"""The format conformance suite (tests/spec/test_conformance.py) over Lance datasets written here
by pylance: the suite's own test functions, run with a ``conformance_table`` fixture of Lance
cases. Lance's answers (versions, each version's fragments, rows) come from pylance itself.

A plugin author adding a format copies this file: a builder writing a table with the format's own
library, its reference answers, and the import of the suite's tests."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from storage.spec import load_table
from storage.spec.models import ReadingMode
from tests.plugins.lance_tables import lance, lance_rows, reference_files, write_history
from tests.spec import test_conformance as suite
from tests.spec.test_conformance import (  # noqa: F401 - the suite's tests, collected here
    test_a_filtered_listing_keeps_every_file_holding_a_matching_row,
    test_a_filtered_split_plan_reads_the_filtered_rows,
    test_a_malformed_filter_is_a_filter_error_pointing_at_the_token,
    test_a_range_from_after_to_is_invalid,
    test_an_empty_range_has_no_changes,
    test_an_unknown_column_in_a_filter_is_a_filter_error_naming_it,
    test_an_unknown_instant_is_instant_not_found_everywhere,
    test_an_unsupported_reading_mode_is_not_supported_naming_format_and_mode,
    test_changes_over_the_whole_history_add_up_to_the_latest_files,
    test_changes_turn_each_instants_files_into_the_next_ones,
    test_every_split_respects_the_target_size_unless_it_is_a_single_part,
    test_files_at_each_instant_are_the_librarys_live_files,
    test_filtered_reads_at_the_first_instant_equal_filtering_in_pyarrow,
    test_filtered_reads_equal_reading_everything_and_filtering_in_pyarrow,
    test_get_round_trips_every_instant_by_object_id_and_text,
    test_latest_at_an_instants_timestamp_is_the_last_instant_committed_by_then,
    test_reading_every_split_gives_the_rows_of_the_instant,
    test_row_counts_at_each_instant_are_the_librarys,
    test_splits_cover_every_byte_of_every_base_file_exactly_once,
    test_the_latest_instant_is_the_librarys_current_one,
    test_the_summary_bytes_are_the_bytes_of_the_listed_files,
    test_the_summary_counts_the_files_listed_at_the_latest_instant,
    test_the_summary_record_count_is_the_row_count,
    test_the_timeline_lists_the_librarys_instants_oldest_first,
)


def _lance_reference(path: Path) -> suite.Reference:
    versions = sorted(lance.dataset(str(path)).versions(), key=lambda v: v["version"])
    ids = [int(v["version"]) for v in versions]
    return suite.Reference(
        instant_ids=ids,
        # pylance's naive local times, read as local times
        timestamps_ms=[round(v["timestamp"].timestamp() * 1000) for v in versions],
        current_id=lance.dataset(str(path)).version,
        files=[reference_files(path, version) for version in ids],
        rows=[lance.dataset(str(path), version=version).count_rows() for version in ids],
    )


@pytest.fixture(scope="module")
def lance_history(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("conformance-lance") / "events.lance"
    write_history(path, suite._events)
    return path


@pytest.fixture(scope="module", params=["lance-written"])
def conformance_table(lance_history) -> suite.ConformanceCase:
    return suite.ConformanceCase(
        name="lance-written",
        table=load_table(str(lance_history)),
        root=str(lance_history),
        reference=_lance_reference(lance_history),
        filters=suite.WRITTEN_FILTERS,
        key_column="id",
        unsupported_mode=ReadingMode.CDC,
        cuts_files=False,  # .lance files have no parquet row groups to cut at
    )


# -- what the suite cannot know about Lance -------------------------------------------------------


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by("id")


def test_every_version_reads_the_rows_lance_reads(conformance_table, lance_history):
    for version in conformance_table.reference.instant_ids:
        ours = pa.Table.from_batches(list(conformance_table.table.read(version)))
        theirs = lance_rows(lance_history, version)
        assert _sorted(ours).equals(_sorted(theirs.select(ours.column_names))), version
        assert ours.column_names == theirs.column_names, version


def test_the_timeline_names_operations_and_tags(conformance_table):
    instants = conformance_table.table.timeline().instants()
    assert [i.operation for i in instants] == [
        "overwrite",
        "overwrite",
        "append",
        "merge",  # add_columns commits a Merge of the new column files
        "append",
        "delete",
        "update",
    ]
    assert instants[2].summary["tags"] == ["after-append"]
    assert conformance_table.table.timeline().get("after-append") == instants[2]
    assert [i.parent_id for i in instants[1:]] == [i.id for i in instants[:-1]]


def test_deleted_rows_are_deletion_files_of_their_fragment(conformance_table, lance_history):
    slices = conformance_table.files_at(None)
    dataset = lance.dataset(str(lance_history))
    deleted = {
        f.fragment_id: f.metadata.deletion_file.num_deleted_rows
        for f in dataset.get_fragments()
        if f.metadata.deletion_file
    }
    listed = {
        s.base_file.extra["fragment_id"]: sum(d.record_count for d in s.delete_files)
        for s in slices
        if s.delete_files
    }
    assert listed == deleted and sum(deleted.values()) >= 500
    assert all(
        d.content == "deletion_vector" and Path(d.path).is_file() for s in slices for d in s.delete_files
    )


def test_a_fragment_with_an_added_column_lists_all_its_data_files(conformance_table):
    first = conformance_table.files_at(conformance_table.reference.instant_ids[3])
    assert all(len(s.base_file.extra["data_files"]) == 2 for s in first)
    for file_slice in first:
        sizes = sum(Path(p).stat().st_size for p in file_slice.base_file.extra["data_files"])
        assert file_slice.base_file.size_bytes == sizes


def test_lance_has_no_partitions(conformance_table):
    assert not conformance_table.table.partition_spec.is_partitioned
    partitions = conformance_table.table.file_index().partitions_at()
    assert [p.partition.path for p in partitions] == [""]
    assert partitions[0].file_count == len(conformance_table.reference.files[-1])


def test_incremental_reads_the_rows_of_fragments_added_in_the_range(conformance_table, lance_history):
    ids = conformance_table.reference.instant_ids
    # between the column added (v4) and the next append (v5): exactly the appended rows
    rows = pa.Table.from_batches(
        list(conformance_table.table.read(ids[3], mode=ReadingMode.INCREMENTAL, end_instant=ids[4]))
    )
    assert sorted(rows.column("id").to_pylist()) == list(range(18000, 27000))
