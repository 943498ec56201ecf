"""The Iceberg rewrite commits like Iceberg's RewriteFiles: a ``replace`` snapshot, and data files
with v3 deletion vectors are compacted with exactly their own vectors removed.

The v3 tables are written by ``tests.spec.iceberg_v3_tables`` (ids numbered across the files,
names ``n<id>``; the vectors of every data file share one Puffin file) and registered in the SQL
catalog on the test database, so the rewrite commits through the catalog like any other table.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from processes.maintenance.iceberg.rewrite import IcebergRewriteProcess, spec_view
from processes.models import ProcessStatus
from storage.formats.iceberg.commit import (
    CONTENT_OFFSET,
    CONTENT_SIZE,
    FIRST_ROW_ID,
    REFERENCED_DATA_FILE,
    RewriteFiles,
    read_entries,
    read_manifest_list,
)
from tests.processes.conftest import iceberg_rows, multiset
from tests.spec.iceberg_v3_tables import Blob, write_puffin, write_v3_table

pytestmark = pytest.mark.django_db(transaction=True)

# Four data files: 10, 10, 4000 and 5 rows (ids 0..4024). The third is too big to be a candidate
# (target 64 KiB: small is below 8 KiB), so its vector must survive the rewrite of the others.
SIZES = (10, 10, 4000, 5)
DELETED = {0: [1, 3, 4], 1: [0, 9], 2: [5, 7, 3999]}
SETTINGS = {"target-file-size": 65536, "min-input-files": 2}


def streamed_rows(table, after_snapshot_id: int) -> Counter:
    """What an incremental reader that skips ``replace`` snapshots (Spark structured streaming's
    Iceberg source) adds after ``after_snapshot_id``: the rows of the files each later
    non-replace snapshot added."""
    from pyiceberg.manifest import ManifestContent, ManifestEntryStatus

    table.refresh()
    later, current = [], table.current_snapshot()
    while current is not None and current.snapshot_id != after_snapshot_id:
        later.append(current)
        current = table.metadata.snapshot_by_id(current.parent_snapshot_id)
    rows: Counter = Counter()
    for snapshot in reversed(later):
        if snapshot.summary.operation.value == "replace":
            continue
        for manifest in snapshot.manifests(table.io):
            if manifest.content != ManifestContent.DATA or manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                if entry.status == ManifestEntryStatus.ADDED:
                    path = entry.data_file.file_path.removeprefix("file://")
                    rows += multiset(pq.read_table(path))
    return rows


def test_the_rewrite_commits_a_replace_that_streaming_readers_skip(make_iceberg, run_now):
    console_table, table = make_iceberg(files=30, rows_per_file=5, partitioned=True)
    before_id, before_rows = table.current_snapshot().snapshot_id, multiset(iceberg_rows(table))
    before_summary = table.current_snapshot().summary

    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    table.refresh()
    summary = table.current_snapshot().summary
    assert summary.operation.value == "replace"
    assert summary["added-records"] == summary["deleted-records"] == "150"
    assert summary["deleted-data-files"] == "30" and summary["added-data-files"] == "2"
    assert summary["total-records"] == before_summary["total-records"] == "150"
    assert summary["total-data-files"] == "2"
    assert summary["lakewarden.process-id"] == str(process.pk)
    assert streamed_rows(table, before_id) == Counter()  # nothing new for a streaming reader
    assert multiset(iceberg_rows(table)) == before_rows  # pyiceberg's scan
    assert multiset(spec_view(table).read_arrow()) == before_rows  # the spec reader
    assert multiset(iceberg_rows(table, before_id)) == before_rows  # time travel


def test_an_append_after_the_rewrite_is_streamed_and_the_rewrite_is_not(make_iceberg, run_now):
    from tests.processes.conftest import append_files, rows

    console_table, table = make_iceberg(files=12, rows_per_file=5)
    before_id = table.current_snapshot().snapshot_id
    assert run_now(console_table, "rewrite").status == ProcessStatus.SUCCESS
    appended = rows(5000, 7)
    append_files(table, [appended])

    assert streamed_rows(table, before_id) == multiset(appended)


# --- v3 deletion vectors ---------------------------------------------------------------------------


@pytest.fixture
def v3_table(iceberg_catalog, warehouse):
    """(console table, pyiceberg table, V3Table) of a v3 table with deletion vectors in the SQL
    catalog."""
    from storage import services

    row, catalog = iceberg_catalog
    written = write_v3_table(warehouse / f"v3_{uuid.uuid4().hex[:6]}", sizes=SIZES, deleted=DELETED)
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    table = catalog.register_table(f"{namespace}.dv", str(written.location / "metadata" / "v1.metadata.json"))
    return services.table_register(catalog=row, identifier=f"{namespace}.dv"), table, written


def expected_rows(written, skip: dict[int, list[int]] | None = None) -> Counter:
    deleted = DELETED if skip is None else skip
    return Counter(
        (row[0], row[1])
        for index, file_rows in enumerate(written.rows)
        for position, row in enumerate(file_rows)
        if position not in deleted.get(index, [])
    )


def as_counter(table: pa.Table) -> Counter:
    return Counter(zip(table["id"].to_pylist(), table["name"].to_pylist(), strict=True))


def live_entries(table, content):
    table.refresh()
    return [
        entry
        for manifest in read_manifest_list(table.io, table.current_snapshot())
        if manifest.content == content
        for entry in read_entries(table.io, manifest)
        if entry.status != 2
    ]


def test_the_plan_takes_files_with_vectors_and_the_vectors_to_remove(tmp_path):
    from processes.maintenance.iceberg.rewrite import plan_rewrite, planned_vectors
    from processes.maintenance.planning import CompactionSettings
    from storage.spec import load_table

    written = write_v3_table(tmp_path / "t", sizes=(10, 10, 5, 3))
    plan = plan_rewrite(
        load_table(str(written.location)), CompactionSettings.from_config({"min-input-files": 2})
    )

    assert [sorted(s.base_file.path for s in g.slices) for g in plan.groups] == [sorted(written.data_paths)]
    assert planned_vectors(plan) == {
        (written.puffin_path, b.referenced_data_file, b.offset) for b in written.blobs
    }
    assert len(planned_vectors(plan)) == 2


def test_files_with_deletion_vectors_are_compacted_and_only_their_vectors_removed(v3_table, run_now):
    from pyiceberg.manifest import ManifestContent

    console_table, table, written = v3_table
    expected = expected_rows(written)
    old_id = table.current_snapshot().snapshot_id
    assert as_counter(spec_view(table).read_arrow()) == expected
    big = written.data_paths[2]
    vector = next(b for b in written.blobs if b.referenced_data_file == big)

    process = run_now(console_table, "rewrite", SETTINGS)

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 3 and process.summary["files_out"] == 1
    assert "skipped_deletion_vector_files" not in process.summary
    # the rows: the same values, the deleted ones still deleted, by both readers and at both snapshots
    table.refresh()
    after = spec_view(table).read_arrow()
    assert as_counter(after) == expected
    assert as_counter(table.scan().to_arrow()) == expected
    assert as_counter(spec_view(table).read_arrow(old_id)) == expected
    assert as_counter(table.scan(snapshot_id=old_id).to_arrow()) == expected
    assert not {1, 3, 4, 10, 19, 20 + 5, 20 + 7, 20 + 3999} & set(after["id"].to_pylist())
    assert after.num_rows == 4025 - 8
    # the data files: the big one kept (its row ids too), the others replaced by one new file
    data = {e.data_file.file_path: e for e in live_entries(table, ManifestContent.DATA)}
    assert big in data and not set(written.data_paths) - {big} & data.keys()
    assert len(data) == 2
    assert data[big].data_file[FIRST_ROW_ID] == written.first_row_ids[2] == 20
    # the vectors: only the big file's is live, still in the shared Puffin file, where it was
    vectors = live_entries(table, ManifestContent.DELETES)
    assert [(v.data_file.file_path, v.data_file[REFERENCED_DATA_FILE]) for v in vectors] == [
        (written.puffin_path, big)
    ]
    assert (vectors[0].data_file[CONTENT_OFFSET], vectors[0].data_file[CONTENT_SIZE]) == (
        vector.offset,
        vector.length,
    )
    assert vectors[0].data_file.record_count == 3


def test_the_vector_commit_is_a_replace_with_the_right_summary_and_row_ids(v3_table, run_now):
    console_table, table, written = v3_table
    before = table.current_snapshot()
    next_row_id = table.metadata.next_row_id

    process = run_now(console_table, "rewrite", SETTINGS)

    assert process.status == ProcessStatus.SUCCESS, process.failure
    table.refresh()
    snapshot = table.current_snapshot()
    summary = snapshot.summary
    assert snapshot.parent_snapshot_id == before.snapshot_id
    assert summary.operation.value == "replace"
    assert summary["deleted-data-files"] == "3" and summary["added-data-files"] == "1"
    assert summary["deleted-records"] == "25" and summary["added-records"] == str(25 - 5)
    assert summary["removed-dvs"] == "2" and summary["removed-position-deletes"] == "5"
    assert summary["total-records"] == str(4025 - 5)
    assert summary["total-position-deletes"] == "3"
    # v3 row lineage: the snapshot starts at the table's next row id and reserves the ids of the
    # data manifests it wrote (the new file's 20 rows, the rewritten manifest's kept 4000)
    assert snapshot.first_row_id == next_row_id == 4025
    assert snapshot.added_rows == 20 + 4000
    assert table.metadata.next_row_id == 4025 + 20 + 4000
    assert table.metadata.format_version == 3


def test_a_vector_committed_during_the_rewrite_makes_it_plan_again(v3_table, run_now, monkeypatch):
    """A vector for a planned file that had none, committed between the write and the commit:
    the first attempt must not commit (its new file holds that file's rows), the second plans
    with the vector, and its rows are gone."""
    console_table, table, written = v3_table
    calls = []

    def concurrent_vector(self, context, plan):
        if not calls:
            add_vector(table, written.data_paths[3], [0, 2], written.location)
        calls.append(plan)

    monkeypatch.setattr(IcebergRewriteProcess, "before_commit", concurrent_vector)
    process = run_now(console_table, "rewrite", SETTINGS)

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["attempts"] == 2
    expected = expected_rows(written, {**DELETED, 3: [0, 2]})
    table.refresh()
    assert as_counter(spec_view(table).read_arrow()) == expected
    assert as_counter(table.scan().to_arrow()) == expected


def add_vector(table, data_path: str, positions: list[int], location) -> None:
    """Commit a deletion vector for ``data_path`` (another writer's commit, through the catalog)."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent, ManifestEntry
    from pyiceberg.typedef import Record

    from storage.formats.iceberg.commit import v3_metadata_writes

    table.refresh()
    puffin = location / "data" / f"{uuid.uuid4().hex}.puffin"
    blob = Blob(data_path, positions)
    size = write_puffin(puffin, [blob], table.current_snapshot().snapshot_id, 99)
    vector = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=f"file://{puffin}",
        file_format=FileFormat.PUFFIN,
        partition=Record(),
        record_count=len(positions),
        file_size_in_bytes=size,
        referenced_data_file=data_path,
        content_offset=blob.offset,
        content_size_in_bytes=blob.length,
    )

    class AddVector(RewriteFiles):
        def _manifests(self):
            with self._writer(0, ManifestContent.DELETES) as writer:
                writer.add(ManifestEntry.from_args(status=1, snapshot_id=self._snapshot_id, data_file=vector))
            return [writer.to_manifest_file(), *super()._manifests()]

    transaction = table.transaction()
    AddVector(transaction, removed=[], removed_dvs=set(), added=[], spec_id=0).commit()
    with v3_metadata_writes(table):
        transaction.commit_transaction()
    table.refresh()


def test_rows_keep_their_row_lineage_through_the_rewrite(v3_table, run_now):
    """Iceberg spec, "Row Lineage": a writer that moves rows writes the ``_row_id`` and
    ``_last_updated_sequence_number`` it read, so a compacted row is not a new row to a
    change-tracking reader. The ids are ``first_row_id`` + position (inherited, before deletes)."""
    console_table, table, written = v3_table
    lineage = ["id", "_row_id", "_last_updated_sequence_number"]

    def by_id() -> dict[int, tuple[int, int]]:
        read = spec_view(table).read_arrow(columns=lineage).to_pylist()
        return {r["id"]: (r["_row_id"], r["_last_updated_sequence_number"]) for r in read}

    before = by_id()
    # the inherited values before: file i's rows start at its first_row_id, position before deletes
    id_to_row_id = {
        row[0]: written.first_row_ids[index] + position
        for index, file_rows in enumerate(written.rows)
        for position, row in enumerate(file_rows)
    }
    assert {i: row_id for i, (row_id, _) in before.items()} == {i: id_to_row_id[i] for i in before}
    assert len(before) == 4025 - 8 and None not in {s for _, s in before.values()}

    process = run_now(console_table, "rewrite", SETTINGS)

    assert process.status == ProcessStatus.SUCCESS, process.failure
    table.refresh()
    assert process.summary["files_out"] == 1
    assert by_id() == before  # every row keeps its id and its last-updated sequence number
    new_file = next(
        e.data_file.file_path
        for e in live_entries(table, 0)
        if e.data_file.file_path not in written.data_paths
    )
    stored = pq.read_table(new_file.removeprefix("file://"))
    assert {"_row_id", "_last_updated_sequence_number"} <= set(stored.column_names)
    field_ids = {f.name: (f.metadata or {}).get(b"PARQUET:field_id") for f in stored.schema}
    assert (
        field_ids["_row_id"] == b"2147483540" and field_ids["_last_updated_sequence_number"] == b"2147483539"
    )
