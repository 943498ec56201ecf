"""The Lance plugin's maintenance processes, run through Lakewarden's executor on datasets written
by pylance: every row kept exactly once, pylance still reads the dataset, expiry keeps every file a
kept version needs, a failed run leaves the dataset as it was."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from storage.spec import load_table
from tests.plugins.lance_tables import build_demo_dataset, lance, lance_rows

pytestmark = pytest.mark.django_db(transaction=True)


def _rows(table: pa.Table) -> Counter:
    return Counter(tuple(sorted(row.items())) for row in table.to_pylist())


def _versions(path: Path) -> list[int]:
    return sorted(int(v["version"]) for v in lance.dataset(str(path)).versions())


def _files_of(path: Path, version: int) -> list[Path]:
    """Every file the manifest of ``version`` names: data files and deletion files."""
    dataset = lance.dataset(str(path), version=version)
    files = []
    for fragment in dataset.get_fragments():
        files += [path / "data" / f.path for f in fragment.metadata.files]
        if fragment.metadata.deletion_file is not None:
            files.append(path / fragment.metadata.deletion_file.path(fragment.fragment_id))
    return files


@pytest.fixture
def run_now(transactional_db, monkeypatch):
    """``run_now(table, action, params)`` -> the Process row, run through the executor (no Spark:
    Lance's maintenance runs in the worker process)."""
    from processes import executor, services

    monkeypatch.setattr(services, "process_enqueue", lambda process: None)

    def run(table, action: str, params: dict | None = None):
        process = services.process_create(table=table, action=action, params=params or {})
        executor.run_process(process.pk)
        process.refresh_from_db()
        return process

    return run


@pytest.fixture
def small_lance(warehouse, db):
    """(console Table, path): the plugin's demo dataset, small: 12 one-fragment appends, a tag,
    a delete, no index."""
    from storage import services

    path = warehouse / "clicks.lance"
    assert build_demo_dataset(str(path), appends=12, rows=50, index=False)
    return services.table_register(location=str(path)), path


def _runtime(table):
    from processes.registry import factory_classes
    from processes.runtime import TableRuntime

    def of(name: str):
        factory = factory_classes()[name]()
        return factory, TableRuntime(table, factory.properties)

    return of


def test_the_plugin_registers_the_format_and_its_factories(small_lance):
    from processes.registry import factory_classes
    from storage.spec import format_adapters

    table, _ = small_lance
    assert table.format == "lance" and table.file_count == 12
    assert "lance" in format_adapters()
    pairs = {pair for cls in factory_classes().values() for pair in cls().pairs() if pair[0] == "lance"}
    assert pairs == {("lance", "rewrite"), ("lance", "expire-snapshots"), ("lance", "optimize-indices")}


def test_rewrite_merges_small_fragments_and_keeps_every_row_once(small_lance, run_now):
    table, path = small_lance
    before = _rows(lance_rows(path))
    factory, runtime = _runtime(table)("lance-rewrite")
    preview = factory.preview(runtime, "rewrite", {})
    assert (preview.groups, preview.files_in, preview.files_out) == (1, 12, 1)
    assert preview.details["rows"] == sum(before.values()) == lance.dataset(str(path)).count_rows()

    process = run_now(table, "rewrite")

    assert process.status == "SUCCESS", process.failure
    dataset = lance.dataset(str(path))
    assert len(dataset.get_fragments()) == 1
    assert dataset.get_fragments()[0].metadata.deletion_file is None  # deletions materialised
    assert _rows(lance_rows(path)) == before
    assert process.summary["fragments_removed"] == 12
    assert process.summary["rows"] == sum(before.values())
    assert dataset.read_transaction(dataset.version).operation.__class__.__name__ == "Rewrite"
    assert factory.trigger(runtime, "rewrite") is None  # nothing left to compact
    assert runtime.reason == "nothing to do: no fragments are small or carry enough deletions"  # the decision


def test_rewrite_honours_the_target_rows_per_fragment(small_lance, run_now):
    table, path = small_lance
    before = _rows(lance_rows(path))

    process = run_now(table, "rewrite", {"target-rows-per-fragment": 200})

    assert process.status == "SUCCESS", process.failure
    counts = [f.count_rows() for f in lance.dataset(str(path)).get_fragments()]
    # Lance bins neighbouring small fragments until a bin holds the target: two fragments here
    assert len(counts) == 2 and min(counts) >= 200 and sum(counts) == sum(before.values())
    assert _rows(lance_rows(path)) == before


def test_a_failed_rewrite_leaves_the_dataset_and_its_folder_as_they_were(small_lance, run_now, monkeypatch):
    table, path = small_lance
    files_before = sorted(p.relative_to(path) for p in path.rglob("*") if p.is_file())
    version = lance.dataset(str(path)).version
    monkeypatch.setenv("LAKEWARDEN_FAILPOINTS", "before-commit=raise")

    process = run_now(table, "rewrite")

    assert process.status == "FAILED"
    assert "failpoint before-commit" in process.failure
    assert lance.dataset(str(path)).version == version
    assert sorted(p.relative_to(path) for p in path.rglob("*") if p.is_file()) == files_before


def test_expire_keeps_tagged_and_newest_versions_and_every_file_they_need(small_lance, run_now):
    table, path = small_lance
    versions = _versions(path)
    tagged = int(lance.dataset(str(path)).tags.list()["before-cleanup"]["version"])
    rows_of = {v: _rows(lance_rows(path, v)) for v in versions}
    run_now(table, "rewrite")  # one new fragment, needed by the rewrite's version only ...
    compacted_file = _files_of(path, _versions(path)[-1])
    fresh = pa.table({"id": pa.array([7, 8], pa.int64()), "user": ["a", "b"]})
    lance.write_dataset(fresh, str(path), mode="overwrite")  # ... once this overwrite lands
    history = _versions(path)
    params = {"older-than-hours": 0, "retain-versions": 1}

    dry = run_now(table, "expire-snapshots", {**params, "dry-run": True})
    assert dry.status == "SUCCESS", dry.failure
    assert _versions(path) == history and all(f.is_file() for f in compacted_file)
    process = run_now(table, "expire-snapshots", params)

    assert process.status == "SUCCESS", process.failure
    kept = _versions(path)
    assert kept == [tagged, history[-1]]
    assert process.summary["old_versions"] == dry.summary["old_versions"] == len(history) - 2
    assert process.summary["expired"] == sorted(set(history) - set(kept))
    # the compacted fragment's file goes; the tagged version's fragments all stay
    assert process.summary["data_files_removed"] == len(compacted_file) == 1
    assert not compacted_file[0].exists()
    for version in kept:
        assert all(f.is_file() for f in _files_of(path, version)), version
    assert _rows(lance_rows(path, tagged)) == rows_of[tagged]
    assert _rows(lance_rows(path)) == _rows(fresh)
    timeline = [i.id for i in load_table(str(path)).timeline().instants()]
    assert timeline == kept


def test_expire_preview_counts_what_cleanup_removes(small_lance, run_now):
    table, path = small_lance
    factory, runtime = _runtime(table)("lance-expire-snapshots")
    params = {"older-than-hours": 0, "retain-versions": 3}
    preview = factory.preview(runtime, "expire-snapshots", params)

    process = run_now(table, "expire-snapshots", params)

    assert process.status == "SUCCESS", process.failure
    assert preview.details["old_versions"] == process.summary["old_versions"] > 0
    assert preview.bytes_to_delete == process.summary["bytes_removed"]


def test_versions_younger_than_the_age_limit_are_kept(small_lance, run_now):
    table, path = small_lance
    versions = _versions(path)

    process = run_now(table, "expire-snapshots", {"older-than-hours": 1, "retain-versions": 1})

    assert process.status == "SUCCESS", process.failure
    assert process.summary["old_versions"] == 0 and _versions(path) == versions


def test_index_optimisation_is_not_offered_without_an_index(small_lance):
    table, _ = small_lance
    factory, runtime = _runtime(table)("lance-optimize-indices")
    assert factory.trigger(runtime, "optimize-indices") is None
    assert runtime.reason == "nothing to do: every index covers every fragment"


def test_index_optimisation_indexes_the_fragments_written_after_the_index(warehouse, run_now):
    from storage import services

    path = warehouse / "indexed.lance"
    build_demo_dataset(str(path), appends=6, rows=20)  # index built after the 4th append
    table = services.table_register(location=str(path))
    factory, runtime = _runtime(table)("lance-optimize-indices")
    assert lance.dataset(str(path)).stats.index_stats("id_idx")["num_unindexed_fragments"] == 2
    assert factory.trigger(runtime, "optimize-indices") is not None

    process = run_now(table, "optimize-indices")

    assert process.status == "SUCCESS", process.failure
    assert process.summary["unindexed_fragments_before"] == {"id_idx": 2}
    assert process.summary["unindexed_fragments_after"] == {"id_idx": 0}
    dataset = lance.dataset(str(path))
    assert dataset.stats.index_stats("id_idx")["num_unindexed_fragments"] == 0
    expected = lance_rows(path).filter(pa.compute.field("id") == 115)
    assert dataset.to_table(filter="id = 115").equals(expected) and expected.num_rows == 1
    assert factory.trigger(runtime, "optimize-indices") is None


def test_rewrite_of_an_indexed_dataset_keeps_every_row_and_the_index_answers(warehouse, run_now):
    from storage import services

    path = warehouse / "indexed.lance"
    build_demo_dataset(str(path), appends=8, rows=20)
    table = services.table_register(location=str(path))
    before = _rows(lance_rows(path))

    process = run_now(table, "rewrite")

    assert process.status == "SUCCESS", process.failure
    assert _rows(lance_rows(path)) == before
    dataset = lance.dataset(str(path))
    assert len(dataset.get_fragments()) < 8
    kept = {dict(row)["id"] for row in before}
    deleted = min(set(range(8 * 20)) - kept)
    for key in (min(kept), max(kept), deleted):  # looked up through the remapped index
        found = dataset.to_table(filter=f"id = {key}").column("id").to_pylist()
        assert found == ([key] if key in kept else []), key

    # The compaction's commit remapped the index: pylance cannot read that transaction back as an
    # object, and the timeline (so every page of the table and its refresh) must not fail on it.
    table = services.table_refresh(table=table)
    assert table.refresh_error == "" and table.current_instant == str(dataset.version)
    opened = services.table_open(table)
    instants = opened.timeline().instants()
    assert instants[-1].id == dataset.version and instants[-1].operation == "rewrite"
    assert [i.operation for i in instants].count("createindex") == 1
    assert sum(s.base_file.record_count for s in opened.file_index().list_files_at()) == len(before)
