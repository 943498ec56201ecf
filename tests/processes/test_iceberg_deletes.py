"""Iceberg delete-file maintenance (``iceberg-deletes``): dangling deletes removed, position deletes
compacted per partition, equality deletes converted into position deletes; every row read the same
before and after (pyiceberg's scan where it can read the table, and our reader), time travel to
the old snapshot unchanged, concurrent commits detected.

pyiceberg 0.12 writes no delete files (``write.delete.mode=merge-on-read`` falls back to
copy-on-write), so the delete files here are written as a merge-on-read writer does: parquet
position delete files (``file_path``, ``pos``) and equality delete files (the equality columns, by
field id), committed through the catalog by another producer (``RowDelta``, an ``overwrite``
snapshot as Spark's merge-on-read DELETE commits). The tables are the processes' usual ones
(``make_iceberg``: v2, identity-partitioned by ``region`` over an unpartitioned spec 0, ids
numbered across the files, five rows a file, files alternating eu/us); one runs on S3 in the
SeaweedFS REST catalog (``make_rest_iceberg``), a v3 one is written by ``tests.spec``.
"""

from __future__ import annotations

import io
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
)
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.typedef import EMPTY_DICT, Record

from processes.maintenance.iceberg.deletes import (
    ConvertEqualityDeletes,
    IcebergDeletesFactory,
    RemoveDanglingDeletes,
)
from processes.maintenance.iceberg.deletes.writing import (
    POSITION_SCHEMA,
    position_delete_file,
    position_metrics,
)
from processes.maintenance.iceberg.rewrite import spec_view
from processes.models import Process, ProcessStatus
from storage.formats.iceberg.commit import NewDeleteFile, RewriteFiles, read_entries, read_manifest_list
from tests.objectstore.test_iceberg_maintenance_s3 import make_rest_iceberg, rest_catalog  # noqa: F401
from tests.processes.conftest import ICEBERG_SCHEMA, REGIONS, append_files, multiset, rows

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(transactional_db, monkeypatch):
    """``run(table, action, params)`` -> the Process row after the executor ran it (no Spark: the
    actions never ask for it)."""
    from processes import executor, services

    monkeypatch.setattr(services, "process_enqueue", lambda process: None)

    def run_now(table, action: str, params: dict | None = None) -> Process:
        process = services.process_create(table=table, action=action, params=params or {})
        executor.run_process(process.pk)
        process.refresh_from_db()
        return process

    return run_now


# --- writing delete files as a merge-on-read writer does ----------------------------------------------


class RowDelta(RewriteFiles):
    """Another writer's row-level delete: delete files added in an ``overwrite`` snapshot."""

    def _summary(self, snapshot_properties=EMPTY_DICT) -> Summary:
        summary = super()._summary(snapshot_properties)
        return Summary(Operation.OVERWRITE, **summary.additional_properties)


def commit_row_delta(table, deletes: list[DataFile], removed_deletes=()) -> None:
    table.refresh()
    transaction = table.transaction()
    RowDelta(
        transaction,
        removed=[],
        removed_dvs=set(),
        added=[],
        spec_id=table.metadata.default_spec_id,
        removed_deletes=list(removed_deletes),
        added_deletes=[NewDeleteFile(d) for d in deletes],
    ).commit()
    transaction.commit_transaction()
    table.refresh()


def data_files(table) -> dict[str, DataFile]:
    """The live data files of the current snapshot, in order of their first row id."""
    table.refresh()
    found = {}
    for manifest in read_manifest_list(table.io, table.current_snapshot()):
        if manifest.content == ManifestContent.DATA:
            for entry in read_entries(table.io, manifest):
                if entry.status != ManifestEntryStatus.DELETED:
                    found[entry.data_file.file_path] = entry.data_file
    return dict(sorted(found.items(), key=lambda item: first_id(table, item[1])))


def first_id(table, data_file: DataFile) -> int:
    with table.io.new_input(data_file.file_path).open() as stream:
        return pq.read_table(stream, columns=["id"])["id"][0].as_py()


def position_deletes(table, named: dict[str, list[int]], *, bounds: bool = True) -> DataFile:
    """A position delete file of ``named`` (data file -> positions) beside the first one, in its
    partition; without ``bounds`` its metrics hold no ``file_path`` bounds (a reader then cannot
    tell which files it names)."""
    home = data_files(table)[next(iter(named))]
    pairs = sorted((path, pos) for path, positions in named.items() for pos in positions)
    table_rows = pa.Table.from_arrays(
        [pa.array([p for p, _ in pairs], pa.string()), pa.array([q for _, q in pairs], pa.int64())],
        schema=POSITION_SCHEMA,
    )
    path = f"{home.file_path.rsplit('/', 1)[0]}/{uuid.uuid4()}-position.parquet"
    size = write_parquet(table, path, table_rows)
    if bounds:
        return position_delete_file(path, size, position_metrics(table_rows), home.partition, home.spec_id)
    data_file = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=home.partition,
        record_count=len(pairs),
        file_size_in_bytes=size,
    )
    data_file.spec_id = home.spec_id
    return data_file


def write_parquet(table, path: str, content: pa.Table) -> int:
    """Write ``content`` at ``path`` through the table's file IO (local or S3); its size."""
    buffer = io.BytesIO()
    pq.write_table(content, buffer)
    with table.io.new_output(path).create(overwrite=True) as out:
        out.write(buffer.getvalue())
    return len(buffer.getvalue())


def equality_deletes(table, column: str, values: list, *, partition: Record, spec_id: int) -> DataFile:
    """An equality delete file on ``column`` deleting ``values`` (a None deletes the nulls)."""
    field_id = table.schema().find_field(column).field_id
    arrow = ICEBERG_SCHEMA.field(column).with_metadata({b"PARQUET:field_id": str(field_id).encode()})
    table_rows = pa.Table.from_arrays([pa.array(values, arrow.type)], schema=pa.schema([arrow]))
    path = f"{table.location()}/data/deletes/{uuid.uuid4()}-equality.parquet"
    size = write_parquet(table, path, table_rows)
    data_file = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.EQUALITY_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=len(values),
        file_size_in_bytes=size,
        equality_ids=[field_id],
    )
    data_file.spec_id = spec_id
    return data_file


# --- reading ------------------------------------------------------------------------------------------


def ours(table, snapshot_id=None) -> Counter:
    table.refresh()
    return multiset(spec_view(table).read_arrow(snapshot_id))


def theirs(table, snapshot_id=None) -> Counter:
    table.refresh()
    return multiset(table.scan(snapshot_id=snapshot_id).to_arrow())


def table_rows(files: int) -> pa.Table:
    """The rows ``make_iceberg(files=files, rows_per_file=5, partitioned=True)`` writes."""
    return pa.concat_tables([rows(i * 5, 5, REGIONS[i % 2]) for i in range(files)])


def expected(deleted_ids: set[int], files: int) -> Counter:
    """The rows of ``table_rows(files)`` but those with the given ids."""
    everything = table_rows(files)
    return multiset(everything.filter(pc.invert(pc.is_in(everything["id"], pa.array(sorted(deleted_ids))))))


def live_deletes(table) -> list[tuple[DataFile, int]]:
    """(delete file, data sequence number) of the current snapshot."""
    table.refresh()
    return [
        (entry.data_file, entry.sequence_number)
        for manifest in read_manifest_list(table.io, table.current_snapshot())
        if manifest.content == ManifestContent.DELETES
        for entry in read_entries(table.io, manifest)
        if entry.status != ManifestEntryStatus.DELETED
    ]


def kinds(table) -> Counter:
    return Counter(
        "equality" if f.content == DataFileContent.EQUALITY_DELETES else "position"
        for f, _ in live_deletes(table)
    )


def files_under(table) -> set[str]:
    """The files of the table's folder (the process's staging folder apart)."""
    root = Path(table.location().removeprefix("file://"))
    return {str(p) for p in root.rglob("*") if p.is_file() and ".lakewarden-staging" not in p.parts}


def staged_files(table) -> list[Path]:
    return [
        p
        for p in Path(table.location().removeprefix("file://")).rglob("*.parquet")
        if ".lakewarden-staging" in p.parts
    ]


# --- position deletes ---------------------------------------------------------------------------------


@pytest.fixture
def position_table(make_iceberg):
    """Six files of five rows (ids 0..29; files 0, 2, 4 in eu, 1, 3, 5 in us), four delete commits,
    then file 4 (ids 20..24) dropped whole by pyiceberg's delete. Position delete files:

    * eu: [f0: 0, 2], [f0: 1; f2: 3] (range bounds), [f4: 1; f0: 4] (half dangling), [f4: 0]
      (dangling: its file is gone), and a file without bounds naming f4 only (dangling, as only
      reading it shows);
    * us: [f1: 4], [f1: 0; f3: 2].

    Returns (console table, pyiceberg table, data file paths, the dangling delete files' paths)."""
    console_table, table = make_iceberg(files=6, rows_per_file=5, partitioned=True)
    f = list(data_files(table))
    commit_row_delta(table, [position_deletes(table, {f[0]: [0, 2]})])
    commit_row_delta(table, [position_deletes(table, {f[0]: [1], f[2]: [3]})])
    gone, unbounded = position_deletes(table, {f[4]: [0]}), position_deletes(table, {f[4]: [3]}, bounds=False)
    commit_row_delta(
        table,
        [position_deletes(table, {f[4]: [1], f[0]: [4]}), gone, position_deletes(table, {f[1]: [4]})],
    )
    commit_row_delta(table, [unbounded, position_deletes(table, {f[1]: [0], f[3]: [2]})])
    table.delete("id >= 20 and id < 25")  # drops file 4 whole
    table.refresh()
    assert f[4] not in data_files(table)
    return console_table, table, f, sorted([gone.file_path, unbounded.file_path])


POSITION_DELETED = {0, 1, 2, 4, 13, 9, 5, 17} | set(range(20, 25))


def test_dangling_deletes_are_removed_and_nothing_else_changes(position_table, run):
    console_table, table, _, dangling = position_table
    before_id, before = table.current_snapshot().snapshot_id, ours(table)
    assert before == theirs(table) == expected(POSITION_DELETED, 6)
    assert kinds(table) == Counter(position=7)

    process = run(console_table, "remove-dangling-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert summary["removed_delete_files"] == 2 and summary["removed_position_delete_files"] == 2
    # read: the files whose bounds span several data files, and the one without bounds
    assert summary["delete_files_read"] == 4
    assert summary["removed_files"] == dangling
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot.summary.operation == Operation.REPLACE
    assert snapshot.summary["removed-position-delete-files"] == "2"
    assert snapshot.summary["lakewarden.process-id"] == str(process.pk)
    assert kinds(table) == Counter(position=5)
    left = {f.file_path for f, _ in live_deletes(table)}
    assert not left & set(summary["removed_files"])
    assert ours(table) == theirs(table) == before == expected(POSITION_DELETED, 6)
    assert ours(table, before_id) == theirs(table, before_id) == before  # time travel

    again = run(console_table, "remove-dangling-deletes")
    assert again.status == ProcessStatus.SUCCESS and again.summary["removed_delete_files"] == 0


def test_position_deletes_are_compacted_to_one_file_per_partition(position_table, run):
    console_table, table, paths, _ = position_table
    before_id, before = table.current_snapshot().snapshot_id, ours(table)
    old = {f.file_path: (f, sequence) for f, sequence in live_deletes(table)}

    process = run(console_table, "rewrite-position-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert summary["partitions"] == 2 and summary["removed_delete_files"] == 7
    assert summary["added_delete_files"] == 2
    # eu: f0 0,2 | f0 1, f2 3 | f4 1, f0 4 | f4 0 | f4 3 -> 5 kept; us: f1 4 | f1 0, f3 2 -> 3 kept
    assert summary["entries_in"] == 8 + 3 and summary["entries_out"] == 5 + 3
    assert summary["dropped_entries"] == 3
    new = live_deletes(table)
    assert len(new) == 2 and not {f.file_path for f, _ in new} & old.keys()
    by_region = {f.partition[0]: (f, sequence) for f, sequence in new}
    eu_file, eu_sequence = by_region["eu"]
    named = pq.read_table(eu_file.file_path.removeprefix("file://"))
    assert list(zip(named["file_path"].to_pylist(), named["pos"].to_pylist(), strict=True)) == sorted(
        [(paths[0], 0), (paths[0], 1), (paths[0], 2), (paths[0], 4), (paths[2], 3)]
    )
    # the new files keep the greatest data sequence number of the files they replace
    assert eu_sequence == max(s for f, s in old.values() if f.partition[0] == "eu")
    us_file, us_sequence = by_region["us"]
    assert us_file.record_count == 3 and us_sequence == max(
        s for f, s in old.values() if f.partition[0] == "us"
    )
    assert table.current_snapshot().summary.operation == Operation.REPLACE
    assert ours(table) == theirs(table) == before
    assert ours(table, before_id) == theirs(table, before_id) == before


def test_a_partition_with_fewer_delete_files_than_asked_is_left_alone(position_table, run):
    console_table, table, _, _ = position_table
    process = run(console_table, "rewrite-position-deletes", {"min-delete-files": 3})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["partitions"] == 1 and process.summary["removed_delete_files"] == 5
    assert kinds(table) == Counter(position=3)  # eu's five became one; us's two are kept


def test_a_dry_run_reports_and_changes_nothing(position_table, run):
    console_table, table, _, dangling = position_table
    head, files = table.current_snapshot().snapshot_id, files_under(table)

    process = run(console_table, "remove-dangling-deletes", {"dry-run": True})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["dry_run"] is True and process.summary["removed_files"] == dangling
    table.refresh()
    assert table.current_snapshot().snapshot_id == head and files_under(table) == files


def test_appends_and_deletes_committed_during_the_rewrite_are_kept(position_table, run, monkeypatch):
    """An append and a new delete file land between the write and the commit: neither conflicts
    (the new delete stays live beside the new file), the commit goes on top of them."""
    from processes.maintenance.iceberg.deletes import RewritePositionDeletes

    console_table, table, paths, _ = position_table

    def concurrent(self, context, plan):
        append_files(table, [rows(100, 5, "eu")])
        commit_row_delta(table, [position_deletes(table, {paths[2]: [0]})])

    monkeypatch.setattr(RewritePositionDeletes, "before_commit", concurrent)
    process = run(console_table, "rewrite-position-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["attempts"] == 1 and process.summary["removed_delete_files"] == 7
    want = expected(POSITION_DELETED | {10}, 6) + multiset(rows(100, 5, "eu"))
    assert ours(table) == theirs(table) == want
    assert kinds(table) == Counter(position=3)  # two new files and the concurrent one


def test_a_commit_the_catalog_refuses_is_validated_and_committed_again(position_table, run, monkeypatch):
    """Another writer commits between the validation and the catalog commit: the catalog refuses
    the commit (its head moved), the run validates at the new head and commits on top of it, and
    the manifests of the refused attempt are deleted."""
    from processes.maintenance.iceberg.deletes import commit as commit_module

    console_table, table, _, _ = position_table
    validations = []
    real = commit_module.validate_at_head

    def validate_then_race(*args):
        real(*args)
        validations.append(table.metadata.current_snapshot().snapshot_id)
        if len(validations) == 1:
            append_files(table, [rows(300, 2, "us")])

    monkeypatch.setattr(commit_module, "validate_at_head", validate_then_race)
    metadata_before = set(Path(table.location().removeprefix("file://"), "metadata").iterdir())
    process = run(console_table, "remove-dangling-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["commit_attempts"] == 2 and process.summary["attempts"] == 1
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot.parent_snapshot_id == validations[1] != validations[0]
    assert ours(table) == theirs(table) == expected(POSITION_DELETED, 6) + multiset(rows(300, 2, "us"))
    # what is left in the metadata folder is referenced: the append's and the commit's files only
    added = set(Path(table.location().removeprefix("file://"), "metadata").iterdir()) - metadata_before
    referenced = {Path(m.manifest_path.removeprefix("file://")) for m in snapshot.manifests(table.io)}
    referenced |= {Path(s.manifest_list.removeprefix("file://")) for s in table.metadata.snapshots}
    assert {p for p in added if not p.name.endswith(".metadata.json")} <= referenced


# --- equality deletes ---------------------------------------------------------------------------------


@pytest.fixture
def equality_table(make_iceberg):
    """Four files (ids 0..19; 0-4 and 10-14 in eu, 5-9 and 15-19 in us), then
    E1 (eu, spec 1): ids 1, 12, 7 (7 lives in us: not deleted) and 99 (no row);
    E2 (spec 0, unpartitioned: applies everywhere): names None (the null names: ids 0, 7, 14) and
    "name-16"; E3 (asia, where no data file lives yet): id 2; then an append of ids 1 and 7 again
    and of id 2 in asia: new rows, the equality deletes are older and do not apply to them (E3
    applies to no data file: it is dangling by its sequence number)."""
    console_table, table = make_iceberg(files=4, rows_per_file=5, partitioned=True)
    commit_row_delta(
        table, [equality_deletes(table, "id", [1, 12, 7, 99], partition=Record("eu"), spec_id=1)]
    )
    commit_row_delta(
        table,
        [
            equality_deletes(table, "name", [None, "name-16"], partition=Record(), spec_id=0),
            equality_deletes(table, "id", [2], partition=Record("asia"), spec_id=1),
        ],
    )
    append_files(table, [rows(1, 1, "eu"), rows(7, 1, "us"), rows(2, 1, "asia")])
    return console_table, table


APPENDED = multiset(rows(1, 1, "eu")) + multiset(rows(7, 1, "us")) + multiset(rows(2, 1, "asia"))
EQUALITY_ROWS = expected({1, 12, 0, 7, 14, 16}, 4) + APPENDED


def test_equality_deletes_become_position_deletes_deleting_the_same_rows(equality_table, run):
    console_table, table = equality_table
    before_id = table.current_snapshot().snapshot_id
    assert ours(table) == EQUALITY_ROWS
    with pytest.raises(ValueError, match="equality deletes"):
        theirs(table)  # pyiceberg cannot read it yet

    process = run(console_table, "convert-equality-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert summary["removed_equality_delete_files"] == 3 and summary["data_files_read"] == 4
    assert summary["positions_written"] == 6 and summary["added_delete_files"] == 2
    assert kinds(table) == Counter(position=2)  # one per partition, no equality deletes left
    assert ours(table) == theirs(table) == EQUALITY_ROWS
    assert ours(table, before_id) == EQUALITY_ROWS  # time travel (our reader: it has equality deletes)
    snapshot = table.current_snapshot()
    assert snapshot.summary.operation == Operation.REPLACE
    assert snapshot.summary["removed-equality-delete-files"] == "3"
    assert snapshot.summary["added-position-delete-files"] == "2"
    # the position deletes carry the data sequence number of the equality deletes behind them,
    # below the appended files' own: those stay untouched
    sequences = {f.partition[0]: s for f, s in live_deletes(table)}
    assert sequences == {"eu": 3, "us": 3}
    assert snapshot.sequence_number > 4


def test_dangling_equality_deletes_are_found_by_sequence_number(equality_table, run):
    console_table, table = equality_table

    process = run(console_table, "remove-dangling-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["removed_equality_delete_files"] == 1
    assert process.summary["removed_files"][0].endswith("-equality.parquet")
    assert {f.partition[0] if len(f.partition) else None for f, _ in live_deletes(table)} == {"eu", None}
    assert ours(table) == EQUALITY_ROWS


def test_a_data_file_committed_with_an_old_sequence_number_makes_the_conversion_plan_again(
    equality_table, run, monkeypatch
):
    """A compaction that keeps old data sequence numbers commits, during the conversion, a file the
    equality deletes apply to: the first plan must not commit (its positions miss that file's
    rows), the second converts them too."""
    console_table, table = equality_table
    calls = []

    def concurrent(self, context, plan):
        if not calls:
            append_with_sequence(table, rows(10, 3, "eu"), sequence=1)  # ids 10, 11, 12: 12 is deleted
        calls.append(plan)

    monkeypatch.setattr(ConvertEqualityDeletes, "before_commit", concurrent)
    process = run(console_table, "convert-equality-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["attempts"] == 2 and process.summary["data_files_read"] == 5
    want = EQUALITY_ROWS + multiset(rows(10, 2, "eu"))
    assert ours(table) == theirs(table) == want
    assert kinds(table) == Counter(position=2)


def test_a_plan_that_conflicts_twice_fails_and_leaves_the_table_as_it_was(equality_table, run, monkeypatch):
    console_table, table = equality_table
    files = files_under(table)
    written: list[str] = []

    staged: list[int] = []

    def concurrent(self, context, plan):
        staged.append(len(staged_files(table)))  # this attempt's position delete files
        append_with_sequence(table, rows(200, 1, "eu"), sequence=1)
        written.extend(files_under(table) - files)

    monkeypatch.setattr(ConvertEqualityDeletes, "before_commit", concurrent)
    process = run(console_table, "convert-equality-deletes")

    assert process.status == ProcessStatus.FAILED
    assert "changed during convert-equality-deletes twice" in process.failure
    table.refresh()
    assert table.current_snapshot().summary.get("lakewarden.process-id") is None
    assert kinds(table) == Counter(equality=3)
    assert staged == [2, 2]  # written by both attempts (eu and us) ...
    assert files_under(table) == files | set(written)  # ... and none left behind
    assert not staged_files(table)


def test_a_planned_delete_file_removed_meanwhile_makes_the_removal_plan_again(
    equality_table, run, monkeypatch
):
    console_table, table = equality_table
    calls = []

    def concurrent(self, context, plan):
        if not calls:  # another writer removes the dangling file itself
            commit_row_delta(table, [], removed_deletes=[plan.removed[0].data_file])
        calls.append(plan)

    monkeypatch.setattr(RemoveDanglingDeletes, "before_commit", concurrent)
    process = run(console_table, "remove-dangling-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["attempts"] == 2 and process.summary["removed_delete_files"] == 0
    assert kinds(table) == Counter(equality=2)


def append_with_sequence(table, data: pa.Table, *, sequence: int) -> None:
    """Commit ``data`` as one data file whose entry carries the data sequence number ``sequence``
    (as a compaction keeping its input's sequence numbers commits its output)."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow

    path = f"{table.location()}/data/region={data['region'][0].as_py()}/{uuid.uuid4()}-old-sequence.parquet"
    write_parquet(table, path, data.cast(schema_to_pyarrow(table.schema(), include_field_ids=True)))
    data_file = parquet_file_to_data_file(table.io, table.metadata, path)

    class OldSequenceAppend(RowDelta):
        def _write_added(self):
            with self._writer(self._output_spec_id, ManifestContent.DATA) as writer:
                writer.add(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=self._snapshot_id,
                        sequence_number=sequence,
                        data_file=self._added_data_files[0],
                    )
                )
            return [writer.to_manifest_file()]

    table.refresh()
    transaction = table.transaction()
    OldSequenceAppend(
        transaction, removed=[], removed_dvs=set(), added=[data_file], spec_id=table.metadata.default_spec_id
    ).commit()
    transaction.commit_transaction()
    table.refresh()


# --- bad input, refusals, scheduling ------------------------------------------------------------------


BAD_PARAMS = [
    ({"min-files": 2}, "min-files"),  # unknown
    ({"min-delete-files": 0}, "min-delete-files"),  # below the minimum
    ({"dry-run": "yes"}, "dry-run"),  # wrong type
]


@pytest.mark.django_db  # no process runs: no transaction needed
def test_bad_parameters_are_a_400_and_create_nothing(make_iceberg, api_as, operator):
    console_table, _ = make_iceberg(files=1)
    for params, message in BAD_PARAMS:
        body = {"table": console_table.pk, "action": "rewrite-position-deletes", "params": params}

        response = api_as(operator).post("/api/v1/processes/", body, format="json")

        assert response.status_code == 400, params
        assert message in response.json()["error"]
    assert Process.objects.count() == 0


def test_a_parameter_of_another_action_is_refused_at_submission(position_table, run):
    from storage.errors import InvalidInput

    console_table, table, _, _ = position_table
    head = table.current_snapshot().snapshot_id

    with pytest.raises(
        InvalidInput, match="min-delete-files is a parameter of rewrite-position-deletes only"
    ):
        run(console_table, "remove-dangling-deletes", {"min-delete-files": 3})

    assert Process.objects.count() == 0
    table.refresh()
    assert table.current_snapshot().snapshot_id == head


@pytest.mark.django_db  # no process runs: no transaction needed
def test_the_scheduler_triggers_only_actions_with_work(position_table, equality_table):
    from processes.runtime import TableRuntime

    factory = IcebergDeletesFactory()
    position_console, _, _, _ = position_table
    equality_console, _ = equality_table

    def due(table, action):
        return factory.trigger(TableRuntime(table, factory.properties), action) is not None

    assert due(position_console, "remove-dangling-deletes")
    assert due(position_console, "rewrite-position-deletes")
    assert not due(position_console, "convert-equality-deletes")
    assert due(equality_console, "convert-equality-deletes")
    assert due(equality_console, "remove-dangling-deletes")
    assert not due(equality_console, "rewrite-position-deletes")


# --- v3 -----------------------------------------------------------------------------------------------


@pytest.fixture
def v3_table(iceberg_catalog, warehouse):
    from storage import services
    from tests.spec.iceberg_v3_tables import write_v3_table

    row, catalog = iceberg_catalog
    written = write_v3_table(
        warehouse / f"v3_{uuid.uuid4().hex[:6]}", sizes=(10, 10, 5), deleted={0: [1], 2: [0, 3]}
    )
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    table = catalog.register_table(f"{namespace}.dv", str(written.location / "metadata" / "v1.metadata.json"))
    return services.table_register(catalog=row, identifier=f"{namespace}.dv"), table, written


def test_a_deletion_vector_of_a_dropped_data_file_is_removed_and_the_shared_puffin_kept(v3_table, run):
    from storage.formats.iceberg.commit import REFERENCED_DATA_FILE, v3_metadata_writes

    console_table, table, written = v3_table
    dropped = written.data_paths[2]
    transaction = table.transaction()
    RowDelta(
        transaction, removed=[data_files(table)[dropped]], removed_dvs=set(), added=[], spec_id=0
    ).commit()  # its vector dangles
    with v3_metadata_writes(table):
        transaction.commit_transaction()
    before = ours(table)

    process = run(console_table, "remove-dangling-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["removed_deletion_vectors"] == 1
    vectors = [f for f, _ in live_deletes(table)]
    assert [(v.file_path, v[REFERENCED_DATA_FILE]) for v in vectors] == [
        (written.puffin_path, written.data_paths[0])
    ]
    assert table.current_snapshot().summary["removed-dvs"] == "1"
    assert ours(table) == before


def test_a_v3_table_takes_no_new_position_delete_file(v3_table, run):
    console_table, table, _ = v3_table
    head = table.current_snapshot().snapshot_id

    process = run(console_table, "rewrite-position-deletes")  # nothing to do: no position deletes

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["removed_delete_files"] == 0
    table.refresh()
    assert table.current_snapshot().snapshot_id == head
    # the producer itself refuses to add one, whoever asks
    path = next(iter(data_files(table)))
    rows_ = pa.table({"file_path": [path], "pos": [0]}).cast(POSITION_SCHEMA)
    new = position_delete_file(f"{path}.deletes.parquet", 1, position_metrics(rows_), Record(), 0)
    with pytest.raises(ValueError, match="must not be added to a v3 table"):
        RewriteFiles(
            table.transaction(),
            removed=[],
            removed_dvs=set(),
            added=[],
            spec_id=0,
            added_deletes=[NewDeleteFile(new)],
        )


# --- object store -------------------------------------------------------------------------------------


def test_on_an_object_store_the_new_file_is_deleted_on_cancel_and_committed_otherwise(
    make_rest_iceberg, seaweedfs, run, monkeypatch
):
    """A REST-catalog table on S3: the compacted position delete file is written in place under a
    unique name; a cancel before the commit deletes it again; a run to the end commits it."""
    from processes import services
    from processes.maintenance.iceberg.deletes import RewritePositionDeletes

    console_table, table = make_rest_iceberg(files=4, partitioned=True)
    f = list(data_files(table))
    commit_row_delta(table, [position_deletes(table, {f[0]: [0, 1]})])
    commit_row_delta(table, [position_deletes(table, {f[0]: [3], f[2]: [4]})])
    before, head = theirs(table), table.current_snapshot().snapshot_id
    before_objects = s3_objects(seaweedfs, table.location())
    seen = {}

    def cancel(self, context, plan):
        seen["written"] = set(s3_objects(seaweedfs, table.location())) - set(before_objects)
        services.process_cancel(process=Process.objects.get(pk=context.process_id))
        context.cancelled.set()  # what the heartbeat does when it sees the request

    with monkeypatch.context() as patch:
        patch.setattr(RewritePositionDeletes, "before_commit", cancel)
        cancelled = run(console_table, "rewrite-position-deletes")

    assert cancelled.status == ProcessStatus.CANCELED
    assert [p.rsplit("/", 1)[1].startswith("lakewarden-p") for p in seen["written"]] == [True]
    table.refresh()
    assert table.current_snapshot().snapshot_id == head
    assert s3_objects(seaweedfs, table.location()) == before_objects

    process = run(console_table, "rewrite-position-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert theirs(table) == ours(table) == before == expected({0, 1, 3, 14}, 4)
    ((new, _),) = live_deletes(table)
    assert new.file_path.startswith("s3://") and new.file_path in s3_objects(seaweedfs, table.location())


def s3_objects(seaweedfs, location: str) -> dict[str, int]:
    from tests.objectstore.test_iceberg_maintenance_s3 import objects

    return objects(seaweedfs, location)
