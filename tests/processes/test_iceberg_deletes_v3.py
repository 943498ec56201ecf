"""``convert-equality-deletes`` on an Iceberg v3 table writes deletion vectors (Puffin), not
position delete files: one vector per data file, merged with the vector the file had.

The v3 table is written by ``tests.spec.iceberg_v3_tables`` (ids 0..24 over three files of 10, 10
and 5 rows, names ``n<id>``; vectors delete position 1 of file 0 and positions 0 and 3 of file 2),
then an equality delete on ``id`` is committed as a merge-on-read writer does."""

from __future__ import annotations

from collections import Counter

import pytest
from pyiceberg.manifest import FileFormat
from pyiceberg.table.snapshots import Operation
from pyiceberg.typedef import Record

from processes.maintenance.iceberg.deletes import IcebergDeletesFactory
from processes.models import ProcessStatus
from processes.runtime import TableRuntime
from storage.formats.iceberg._puffin import decode_blob
from storage.formats.iceberg.commit import (
    CONTENT_OFFSET,
    CONTENT_SIZE,
    REFERENCED_DATA_FILE,
    v3_metadata_writes,
)
from tests.processes.test_iceberg_deletes import (  # noqa: F401  (fixtures)
    RowDelta,
    equality_deletes,
    live_deletes,
    ours,
    position_deletes,
    run,
    v3_table,
)

pytestmark = pytest.mark.django_db(transaction=True)

EQUALITY_IDS = [2, 5, 12, 20]  # 20 is position 0 of file 2: its vector deletes it already
VECTOR_IDS = {1, 20, 23}


def expected_rows() -> Counter:
    gone = VECTOR_IDS | set(EQUALITY_IDS)
    return Counter((i, f"n{i}") for i in range(25) if i not in gone)


@pytest.fixture
def v3_equality(v3_table):
    console_table, table, written = v3_table
    delete = equality_deletes(table, "id", EQUALITY_IDS, partition=Record(), spec_id=0)
    transaction = table.transaction()
    RowDelta(
        transaction, removed=[], removed_dvs=set(), added=[], spec_id=0, added_deletes=[_new(delete)]
    ).commit()
    with v3_metadata_writes(table):
        transaction.commit_transaction()
    table.refresh()
    return console_table, table, written


def _new(delete):
    from storage.formats.iceberg.commit import NewDeleteFile

    return NewDeleteFile(delete)


def as_pairs(counter: Counter) -> Counter:
    return Counter({(row[0], row[1]): n for row, n in counter.items()})


def positions_of(table, vector) -> list[int]:
    with table.io.new_input(vector.file_path).open(seekable=True) as handle:
        handle.seek(vector[CONTENT_OFFSET])
        return sorted(decode_blob(bytes(handle.read(vector[CONTENT_SIZE])), vector.file_path))


def test_equality_deletes_of_a_v3_table_become_merged_deletion_vectors(v3_equality, run):
    console_table, table, written = v3_equality
    before_id = table.current_snapshot().snapshot_id
    assert as_pairs(ours(table)) == expected_rows()
    factory = IcebergDeletesFactory()
    seen = factory.preview(TableRuntime(console_table, factory.properties), "convert-equality-deletes", {})
    assert (seen.files_in, seen.files_out) == (3, 3)  # the equality file and two vectors; three vectors

    process = run(console_table, "convert-equality-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert summary["removed_equality_delete_files"] == 1 and summary["removed_deletion_vectors"] == 2
    assert summary["added_delete_files"] == 3
    vectors = [f for f, _ in live_deletes(table)]
    assert all(v.file_format == FileFormat.PUFFIN for v in vectors)
    assert len({v.file_path for v in vectors}) == 1 and vectors[0].file_path != written.puffin_path
    by_file = {v[REFERENCED_DATA_FILE]: positions_of(table, v) for v in vectors}
    paths = written.data_paths
    assert by_file == {paths[0]: [1, 2, 5], paths[1]: [2], paths[2]: [0, 3]}
    assert {v[REFERENCED_DATA_FILE]: v.record_count for v in vectors} == {
        paths[0]: 3,
        paths[1]: 1,
        paths[2]: 2,
    }
    snapshot = table.current_snapshot()
    assert snapshot.summary.operation == Operation.REPLACE
    assert snapshot.summary["added-dvs"] == "3" and snapshot.summary["removed-dvs"] == "2"
    assert snapshot.summary["removed-equality-delete-files"] == "1"
    assert as_pairs(ours(table)) == expected_rows()
    assert as_pairs(ours(table, before_id)) == expected_rows()  # time travel

    again = run(console_table, "convert-equality-deletes")
    assert again.status == ProcessStatus.SUCCESS and again.summary["removed_delete_files"] == 0


@pytest.fixture
def v3_legacy_positions(v3_table, monkeypatch):
    """The v3 table with two position delete files a v2 past left (committed past the producer's
    v3 check, as an upgraded table holds them): P1 names file 1 positions 3 and 4 and file 0
    position 7 (file 0 has a vector: v3 readers ignore that entry), P2 file 1 position 8."""
    from storage.formats.iceberg.commit import NewDeleteFile, producer

    console_table, table, written = v3_table
    paths = written.data_paths
    first = position_deletes(table, {paths[1]: [3, 4], paths[0]: [7]})
    second = position_deletes(table, {paths[1]: [8]})
    with monkeypatch.context() as patch:
        patch.setattr(producer, "_check_delete_files", lambda *args: None)
        transaction = table.transaction()
        RowDelta(
            transaction,
            removed=[],
            removed_dvs=set(),
            added=[],
            spec_id=0,
            added_deletes=[NewDeleteFile(first), NewDeleteFile(second)],
        ).commit()
        with v3_metadata_writes(table):
            transaction.commit_transaction()
    table.refresh()
    return console_table, table, written


def test_position_deletes_of_a_v3_table_become_deletion_vectors(v3_legacy_positions, run):
    console_table, table, written = v3_legacy_positions
    paths = written.data_paths
    expected = Counter((i, f"n{i}") for i in range(25) if i not in VECTOR_IDS | {13, 14, 18})
    assert as_pairs(ours(table)) == expected  # id 7: its entry is shadowed by file 0's vector
    factory = IcebergDeletesFactory()
    seen = factory.preview(TableRuntime(console_table, factory.properties), "rewrite-position-deletes", {})
    assert (seen.groups, seen.files_in, seen.files_out) == (1, 2, 1)

    process = run(console_table, "rewrite-position-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert (summary["removed_position_delete_files"], summary["added_delete_files"]) == (2, 1)
    assert (summary["entries_in"], summary["entries_out"]) == (4, 3)
    vectors = [f for f, _ in live_deletes(table)]
    assert all(v.file_format == FileFormat.PUFFIN for v in vectors) and len(vectors) == 3
    by_file = {v[REFERENCED_DATA_FILE]: positions_of(table, v) for v in vectors}
    assert by_file == {paths[0]: [1], paths[1]: [3, 4, 8], paths[2]: [0, 3]}
    assert table.current_snapshot().summary["added-dvs"] == "1"
    assert table.current_snapshot().summary["removed-position-delete-files"] == "2"
    assert as_pairs(ours(table)) == expected
