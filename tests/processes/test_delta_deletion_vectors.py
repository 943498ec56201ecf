"""Delta files with deletion vectors: compacted by ``rewrite`` and ``purge-deletion-vectors``
through our own commit writer (removes carrying their vectors, ``OPTIMIZE``/``REORG`` commits).

deltalake writes no deletion vectors (its deletes rewrite files), so the tables here are written
by deltalake and then given vectors by ``delete_rows`` below, which writes vector files in Delta's
format and a ``DELETE`` commit; deltalake's own reader (``DeltaTable.scan``, the path that applies
deletion vectors) confirms the rows each vector deletes before any test relies on them. The
Databricks-written fixture ``table-with-dv-small`` is compacted too.
"""

from __future__ import annotations

import json
import shutil
import struct
import time
import uuid
import zlib
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyroaring import BitMap64

from processes.maintenance.delta.rewrite import DeltaRewriteProcess
from processes.models import ProcessStatus
from storage.formats.delta import commit as delta_commit
from storage.formats.delta.commit import live_files, open_version, put_commit
from storage.io import objects
from tests.processes.conftest import delta_read, delta_rows, multiset, staging_root

pytestmark = pytest.mark.django_db(transaction=True)

DV_ON = {"delta.enableDeletionVectors": "true"}
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_MAGIC = 1681511377


# --- helpers: deletion vectors as Delta writers make them ------------------------------------------


def z85_encode(data: bytes) -> str:
    out = []
    for start in range(0, len(data), 4):
        number = int.from_bytes(data[start : start + 4], "big")
        chunk = []
        for _ in range(5):
            number, digit = divmod(number, 85)
            chunk.append(_Z85[digit])
        out.append("".join(reversed(chunk)))
    return "".join(out)


def write_vector(table_path, rows: BitMap64) -> dict:
    """A deletion vector file (format version 1, one vector at offset 1) and its descriptor."""
    blob = struct.pack("<i", _MAGIC) + rows.serialize()
    name = uuid.uuid4()
    framed = b"\x01" + struct.pack(">i", len(blob)) + blob + struct.pack(">I", zlib.crc32(blob))
    (table_path / f"deletion_vector_{name}.bin").write_bytes(framed)
    return {
        "storageType": "u",
        "pathOrInlineDv": z85_encode(name.bytes),
        "offset": 1,
        "sizeInBytes": len(blob),
        "cardinality": len(rows),
    }


def delete_rows(path, ids: set[int]) -> int:
    """Delete the rows whose ``id`` is in ``ids`` with deletion vectors (one ``DELETE`` commit,
    vectors merged with those the files had); returns the new version."""
    from storage.formats.delta.read import load_deletion_vector

    spec = open_version(str(path))
    column = spec.state(spec.version).schema.physical_name("id")
    now = int(time.time() * 1000)
    actions: list[dict] = [
        {"commitInfo": {"timestamp": now, "operation": "DELETE", "operationParameters": {}}}
    ]
    for (location, _), add in live_files(spec).items():
        values = pq.read_table(location, columns=[column]).column(0).to_pylist()
        hit = BitMap64(i for i, value in enumerate(values) if value in ids)
        old = add.get("deletionVector")
        deleted = load_deletion_vector(spec.store, old) if old else BitMap64()
        if not hit - deleted:
            continue
        removal = delta_commit.remove_action(add, now)
        removal["remove"]["dataChange"] = True
        kept = {k: v for k, v in add.items() if v is not None}
        actions += [
            removal,
            {"add": {**kept, "dataChange": True, "deletionVector": write_vector(path, deleted | hit)}},
        ]
    content = "\n".join(json.dumps(a) for a in actions).encode()
    assert put_commit(spec.store, spec.version + 1, content)
    return spec.version + 1


def scan(path, version: int | None = None) -> Counter:
    """The rows deltalake's deletion-vector-aware reader returns, as a multiset."""
    table = DeltaTable(str(path)) if version is None else DeltaTable(str(path), version=version)
    return multiset(pa.RecordBatchReader.from_stream(table.scan()).read_all())


def all_rows(files: int, rows_per_file: int, partitioned: bool) -> pa.Table:
    from tests.processes.conftest import REGIONS

    return pa.concat_tables(
        delta_rows(i * rows_per_file, rows_per_file, REGIONS[i % 2] if partitioned else None)
        for i in range(files)
    )


def last_commit(path) -> list[dict]:
    log = sorted((path / "_delta_log").glob("*.json"))[-1]
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def data_files_on_disk(path) -> set[str]:
    return {str(p) for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}


@pytest.fixture
def dv_table(make_delta):
    """``dv_table(files, rows_per_file, deleted)`` -> (console table, path, expected rows): a
    deltalake table with deletion vectors deleting the ``deleted`` ids, checked with deltalake."""

    def make(*, files: int = 12, rows_per_file: int = 10, deleted: set[int], partitioned: bool = True):
        console_table, path = make_delta(
            files=files, rows_per_file=rows_per_file, partitioned=partitioned, configuration=DV_ON
        )
        delete_rows(path, deleted)
        rows = all_rows(files, rows_per_file, partitioned)
        expected = multiset(rows.filter(pa.array([i not in deleted for i in rows["id"].to_pylist()])))
        assert scan(path) == expected == multiset(delta_read(path))
        return console_table, path, expected

    return make


# --- compaction ------------------------------------------------------------------------------------


def test_compaction_applies_the_vectors_and_removes_each_file_with_its_vector(dv_table, run_now):
    deleted = {i for i in range(60) if i % 3 == 0}  # the first 6 of 12 files get vectors
    console_table, path, expected = dv_table(files=12, deleted=deleted)
    version = DeltaTable(str(path)).version()
    vectors = {
        a["path"]: a["deletionVector"]
        for a in live_files(open_version(str(path))).values()
        if a.get("deletionVector")
    }
    assert len(vectors) == 6

    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert (summary["files_in"], summary["files_out"], summary["deletion_vectors_applied"]) == (12, 2, 6)
    assert summary["operation"] == "OPTIMIZE" and summary["version"] == version + 1
    assert scan(path) == expected == multiset(delta_read(path))
    assert scan(path, version) == expected  # time travel to before the compaction
    actions = last_commit(path)
    info = actions[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE" and info["readVersion"] == version
    assert info["lakewarden.process-id"] == str(process.pk) and info["engineInfo"].startswith("Lakewarden/")
    assert info["operationMetrics"]["numDeletionVectorsRemoved"] == "6"
    removes = [a["remove"] for a in actions if "remove" in a]
    adds = [a["add"] for a in actions if "add" in a]
    assert {r["path"]: r.get("deletionVector") for r in removes if r.get("deletionVector")} == vectors
    assert not any(a["dataChange"] for a in adds + removes) and len(removes) == 12
    assert sorted(json.loads(a["stats"])["numRecords"] for a in adds) == sorted(
        Counter(row[3] for row in expected.elements()).values()
    )  # rows per region (column 3 of the sorted columns is the region)
    assert {a["partitionValues"]["region"] for a in adds} == {"eu", "us"}
    history = DeltaTable(str(path)).history(1)[0]
    assert history["operation"] == "OPTIMIZE" and history["lakewarden.operation"] == "rewrite"
    assert not staging_root(console_table.location).exists()


def test_the_databricks_fixture_file_with_a_deletion_vector_is_compacted(external_tables, warehouse, run_now):
    from storage import services

    path = warehouse / "dv"
    shutil.copytree(external_tables / "delta" / "table-with-dv-small", path)
    console_table = services.table_register(location=str(path))
    vector = next(iter(live_files(open_version(str(path))).values()))["deletionVector"]
    assert scan(path) == multiset(pa.table({"value": pa.array(range(1, 9), pa.int32())}))

    process = run_now(console_table, "rewrite", {"delete-file-threshold": 1, "min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 1 and process.summary["deletion_vectors_applied"] == 1
    after = pa.RecordBatchReader.from_stream(DeltaTable(str(path)).scan()).read_all()
    assert sorted(after["value"].to_pylist()) == list(range(1, 9))
    assert sorted(delta_read(path)["value"].to_pylist()) == list(range(1, 9))
    (remove,) = [a["remove"] for a in last_commit(path) if "remove" in a]
    assert remove["deletionVector"] == vector and remove["tags"]["INSERTION_TIME"] == "1677811178336000"
    (add,) = [a["add"] for a in last_commit(path) if "add" in a]
    assert json.loads(add["stats"]) == {
        "numRecords": 8,
        "minValues": {"value": 1},
        "maxValues": {"value": 8},
        "nullCount": {"value": 0},
    }
    before = pa.RecordBatchReader.from_stream(DeltaTable(str(path), version=0).scan()).read_all()
    assert sorted(before["value"].to_pylist()) == list(range(10))  # time travel still reads v0


# --- purge -----------------------------------------------------------------------------------------


def test_purge_rewrites_only_the_files_whose_deleted_ratio_passes_the_threshold(dv_table, run_now):
    # file 0: 5 of 10 rows deleted (0.5), file 1: 1 of 10 (0.1), file 3: every row; others none
    deleted = {0, 2, 4, 6, 8, 15, *range(30, 40)}
    console_table, path, expected = dv_table(files=6, deleted=deleted)
    version = DeltaTable(str(path)).version()

    process = run_now(console_table, "purge-deletion-vectors", {"deleted-ratio-threshold": 0.3})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert (summary["files_in"], summary["files_out"], summary["deleted_rows_purged"]) == (2, 1, 15)
    assert summary["operation"] == "REORG" and summary["deleted_ratio_threshold"] == 0.3
    assert scan(path) == expected == multiset(delta_read(path))
    assert scan(path, version) == expected
    actions = last_commit(path)
    assert actions[0]["commitInfo"]["operation"] == "REORG"
    assert actions[0]["commitInfo"]["lakewarden.operation"] == "purge-deletion-vectors"
    removes = [a["remove"] for a in actions if "remove" in a]
    assert len(removes) == 2 and all(r["deletionVector"]["cardinality"] in (5, 10) for r in removes)
    (add,) = [a["add"] for a in actions if "add" in a]  # the fully deleted file leaves no file
    assert json.loads(add["stats"])["numRecords"] == 5
    remaining = [a for a in live_files(open_version(str(path))).values() if a.get("deletionVector")]
    assert [a["deletionVector"]["cardinality"] for a in remaining] == [1]


def test_purge_leaves_files_below_the_threshold_and_takes_them_at_the_default(dv_table, run_now):
    console_table, path, expected = dv_table(files=4, deleted={1, 12})  # 0.1 of two files
    version = DeltaTable(str(path)).version()

    above = run_now(console_table, "purge-deletion-vectors", {"deleted-ratio-threshold": 0.11})

    assert above.status == ProcessStatus.SUCCESS, above.failure
    assert above.summary["files_in"] == 0 and DeltaTable(str(path)).version() == version

    default = run_now(console_table, "purge-deletion-vectors")

    assert default.status == ProcessStatus.SUCCESS, default.failure
    assert default.summary["deleted_ratio_threshold"] == 0.1 and default.summary["files_in"] == 2
    assert scan(path) == expected == multiset(delta_read(path))
    assert not [a for a in live_files(open_version(str(path))).values() if a.get("deletionVector")]


@pytest.mark.parametrize(
    "params", [{"deleted-ratio-threshold": 2}, {"deleted-ratio-threshold": "x"}, {"bogus": 1}]
)
def test_bad_purge_parameters_are_refused_naming_them(make_delta, params):
    from processes import services
    from storage.errors import InvalidInput

    console_table, _ = make_delta(files=1)
    with pytest.raises(InvalidInput) as refused:
        services.process_create(table=console_table, action="purge-deletion-vectors", params=params)
    assert refused.value.field == "params"


# --- conflicts and failures ------------------------------------------------------------------------


def test_rows_deleted_between_plan_and_commit_make_the_rewrite_plan_again(dv_table, run_now, monkeypatch):
    console_table, path, expected = dv_table(files=8, deleted={0, 1})
    more = {11, 22, 33}
    calls = []

    def delete_more(self, context, plan):
        if not calls:
            delete_rows(path, more)  # new vectors on files the plan rewrites
        calls.append(plan)

    monkeypatch.setattr(DeltaRewriteProcess, "before_commit", delete_more)
    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["attempts"] == 2
    gone = {row for row in expected if row[1] in more}  # column 1 of the sorted columns is the id
    assert len(gone) == 3
    assert scan(path) == expected - Counter(gone) == multiset(delta_read(path))


def test_a_table_changing_under_both_attempts_fails_the_rewrite_and_takes_its_files_back(
    dv_table, run_now, monkeypatch
):
    console_table, path, _ = dv_table(files=6, deleted={0})
    files = data_files_on_disk(path)
    victims = iter([{11}, {22}])

    def delete_more(self, context, plan):
        delete_rows(path, next(victims))  # a new vector on a planned file before each commit

    monkeypatch.setattr(DeltaRewriteProcess, "before_commit", delete_more)
    version = DeltaTable(str(path)).version()
    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.FAILED
    assert "changed during the rewrite twice" in process.failure and "new deletion vector" in process.failure
    assert DeltaTable(str(path)).version() == version + 2  # the two deletes, no compaction
    assert data_files_on_disk(path) == files  # the published files of both attempts are gone
    assert 11 not in delta_read(path)["id"].to_pylist() and 22 not in scan_ids(path)


def test_an_error_after_the_commit_landed_keeps_the_files_it_committed(dv_table, run_now, monkeypatch):
    console_table, path, expected = dv_table(files=6, deleted={4})
    version = DeltaTable(str(path)).version()

    def fail(directory):
        raise OSError("fsync of the log folder failed")

    monkeypatch.setattr(objects, "_sync_directory", fail)  # after the link: the commit landed
    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["version"] == version + 1
    assert scan(path) == expected == multiset(delta_read(path))  # every committed file is there


def scan_ids(path) -> list[int]:
    return pa.RecordBatchReader.from_stream(DeltaTable(str(path)).scan()).read_all()["id"].to_pylist()


def test_a_commit_taking_the_next_version_first_is_checked_again_and_kept(dv_table, run_now, monkeypatch):
    console_table, path, expected = dv_table(files=8, deleted={5})
    appended = delta_rows(90_000, 7, "eu")
    real = delta_commit._checked_actions
    raced = []

    def check_then_race(latest, request):
        actions = real(latest, request)
        if not raced:  # another writer takes the version this commit is about to create
            write_deltalake(str(path), appended, mode="append", partition_by=["region"])
            raced.append(True)
        return actions

    monkeypatch.setattr(delta_commit, "_checked_actions", check_then_race)
    version = DeltaTable(str(path)).version()
    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["version"] == version + 2 and process.summary["attempts"] == 1
    history = {h["version"]: h["operation"] for h in DeltaTable(str(path)).history(2)}
    assert history == {version + 1: "WRITE", version + 2: "OPTIMIZE"}
    assert scan(path) == expected + multiset(appended) == multiset(delta_read(path))


def test_a_failure_injected_before_the_commit_leaves_the_table_and_no_new_files(
    dv_table, run_now, monkeypatch
):
    console_table, path, expected = dv_table(files=8, deleted={3, 14})
    version, files = DeltaTable(str(path)).version(), data_files_on_disk(path)
    log = sorted(p.name for p in (path / "_delta_log").iterdir())
    monkeypatch.setenv("LAKEWARDEN_FAILPOINTS", "before-commit=raise")

    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.FAILED and "failpoint before-commit" in process.failure
    assert DeltaTable(str(path)).version() == version
    assert data_files_on_disk(path) == files
    assert sorted(p.name for p in (path / "_delta_log").iterdir()) == log
    assert scan(path) == expected
    assert not staging_root(console_table.location).exists()


def test_a_table_needing_a_writer_feature_lakewarden_lacks_is_refused_unchanged(make_delta, run_now):
    console_table, path = make_delta(files=6, configuration=DV_ON)
    spec = open_version(str(path))
    protocol = dict(spec.state(spec.version).snapshot.protocol)
    protocol["writerFeatures"] = [*protocol["writerFeatures"], "domainMetadata", "rowTracking"]
    put_commit(spec.store, spec.version + 1, json.dumps({"protocol": protocol}).encode())
    version, files = DeltaTable(str(path)).version(), data_files_on_disk(path)

    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.FAILED
    assert "rowTracking" in process.failure and "left as it is" in process.failure
    assert DeltaTable(str(path)).version() == version and data_files_on_disk(path) == files


def test_with_in_commit_timestamps_the_compaction_commits_after_the_previous_timestamp(make_delta, run_now):
    """``inCommitTimestamp`` (writer feature): commitInfo first, its timestamp after the previous
    commit's even when that one is ahead of this clock (here by an hour)."""
    console_table, path = make_delta(files=6)
    rows = multiset(delta_read(path))
    spec = open_version(str(path))
    ahead = int(time.time() * 1000) + 3600 * 1000
    metadata = dict(spec.state(spec.version).snapshot.metadata)
    metadata["configuration"] = {**metadata["configuration"], "delta.enableInCommitTimestamps": "true"}
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": [],
        "writerFeatures": ["appendOnly", "invariants", "inCommitTimestamp"],
    }
    upgrade = [
        {"commitInfo": {"timestamp": ahead, "inCommitTimestamp": ahead, "operation": "SET TBLPROPERTIES"}},
        {"protocol": protocol},
        {"metaData": metadata},
    ]
    assert put_commit(spec.store, spec.version + 1, "\n".join(json.dumps(a) for a in upgrade).encode())

    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    info = last_commit(path)[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE" and info["inCommitTimestamp"] == ahead + 1
    assert multiset(delta_read(path)) == rows == scan(path)


def test_put_if_absent_creates_a_version_once_and_never_overwrites_it(tmp_path):
    from storage.formats.delta._log import Store

    (tmp_path / "_delta_log").mkdir()
    store = Store(str(tmp_path))

    assert put_commit(store, 0, b'{"commitInfo":{"first":true}}') is True
    assert put_commit(store, 0, b'{"commitInfo":{"second":true}}') is False
    assert (tmp_path / "_delta_log" / f"{0:020d}.json").read_bytes() == b'{"commitInfo":{"first":true}}'
    assert [p.name for p in (tmp_path / "_delta_log").iterdir()] == [f"{0:020d}.json"]
