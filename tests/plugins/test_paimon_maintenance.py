"""Paimon expire-snapshots and clean-orphan-files on tables written by pypaimon: every row kept
exactly once, pypaimon still reads every kept snapshot and tag, no file they need is deleted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from processes.plugin import Preview, ProcessContext, ProcessInputError, ProcessRecord
from tests.plugins._paimon_tables import (
    pypaimon_files,
    pypaimon_read,
    pypaimon_table,
    sorted_rows,
    write_primary_key_table,
)

OLD = 1_000_000_000  # an mtime in 2001: older than any minimum age


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> str:
    return write_primary_key_table(str(tmp_path_factory.mktemp("paimon-maintenance")))


@pytest.fixture
def table_copy(written, tmp_path) -> str:
    location = str(tmp_path / "pk")
    shutil.copytree(written, location)
    return location


class _Runtime:
    """What a factory sees of a table (the executor's TableRuntime, without the database)."""

    def __init__(self, location: str, config: dict | None = None) -> None:
        from lakewarden_paimon import PaimonAdapter

        self.location, self.config = location, dict(config or {})
        self._table = PaimonAdapter.open(location)

    def load(self):
        return self._table

    def guard(self):
        from storage.io.guard import PathGuard

        return PathGuard.build(self.location, roots=[self.location])


class _Context(ProcessContext):
    def __init__(self, runtime: _Runtime) -> None:
        self.runtime, self.process_id, self.staging_dir = runtime, 1, Path(runtime.location) / ".staging"
        self.progress: list[tuple[int, int, str]] = []

    @property
    def spark(self):  # pragma: no cover - these processes never use Spark
        raise AssertionError("no Spark")

    def check_cancelled(self) -> None:
        return None

    def report_progress(self, done: int, total: int, message: str = "") -> None:
        self.progress.append((done, total, message))


def _run(factory_cls, location: str, params: dict, config: dict | None = None) -> dict:
    factory = factory_cls()
    runtime = _Runtime(location, {**factory_cls.default_properties, **(config or {})})
    factory.validate(runtime, factory.action, params)
    process = factory.recover(runtime, ProcessRecord(id=1, action=factory.action, params=params))
    return process.run(_Context(runtime))


def _tag(location: str, snapshot_id: int, name: str) -> None:
    table = pypaimon_table(location)
    table.tag_manager().create_tag(table.snapshot_manager().get_snapshot_by_id(snapshot_id), name)


def _needed(location: str, snapshot_ids, tags) -> set[str]:
    files = set()
    for snapshot_id in snapshot_ids:
        files |= pypaimon_files(location, **{"scan.snapshot-id": snapshot_id})
    for tag in tags:
        files |= pypaimon_files(location, **{"scan.tag-name": tag})
    return files


def test_paimon_rules_expire_beyond_retain_max_and_old_snapshots_down_to_retain_min():
    from lakewarden_paimon._cleanup import expire_range

    ids = list(range(3, 13))  # 3..12, snapshot n committed at n * 1000 ms

    def rule(**kw):
        return expire_range(ids, lambda i: i * 1000, **{"expire_limit": 100, **kw})

    # all old: everything but the newest retain-min goes
    assert rule(retain_min=3, retain_max=100, older_than_ms=10**9) == [3, 4, 5, 6, 7, 8, 9]
    # the first snapshot younger than the time retained stops expiry (7 is committed at 7000)
    assert rule(retain_min=3, retain_max=100, older_than_ms=7000) == [3, 4, 5, 6]
    # beyond retain-max snapshots go however young they are
    assert rule(retain_min=2, retain_max=4, older_than_ms=0) == [3, 4, 5, 6, 7, 8]
    # at most expire-limit per run, counted from the earliest
    assert rule(retain_min=1, retain_max=100, older_than_ms=10**9, expire_limit=2) == [3, 4]
    with pytest.raises(ValueError):
        rule(retain_min=0, retain_max=4, older_than_ms=0)


def test_expiry_keeps_every_row_and_every_file_kept_snapshots_and_tags_need(table_copy):
    from lakewarden_paimon.maintenance import PaimonExpireSnapshotsFactory

    _tag(table_copy, 2, "audit")
    kept_ids = [5, 6]
    before_latest = sorted_rows(pypaimon_read(table_copy))
    before_kept = {i: sorted_rows(pypaimon_read(table_copy, **{"scan.snapshot-id": i})) for i in kept_ids}
    before_tag = sorted_rows(pypaimon_read(table_copy, **{"scan.tag-name": "audit"}))
    needed = _needed(table_copy, kept_ids, ["audit"])
    all_files = {str(p) for p in Path(table_copy).rglob("*.parquet")}

    summary = _run(PaimonExpireSnapshotsFactory, table_copy, {"retain-min": 2, "time-retained-seconds": 0})

    assert summary["expired_snapshots"] == [1, 2, 3, 4]
    assert sorted(os.listdir(Path(table_copy) / "snapshot")) == [
        "EARLIEST",
        "LATEST",
        "snapshot-5",
        "snapshot-6",
    ]
    assert (Path(table_copy) / "snapshot" / "EARLIEST").read_text() == "5"
    remaining = {str(p) for p in Path(table_copy).rglob("*.parquet")}
    assert needed <= remaining  # nothing a kept snapshot or the tag reads was deleted
    assert remaining < all_files and summary["data_files"] == len(all_files - remaining) > 0
    assert not (all_files - remaining) & needed
    # pypaimon reads the same rows, each key once, at the latest, the kept snapshots and the tag
    after = sorted_rows(pypaimon_read(table_copy))
    assert after == before_latest
    assert len({(r["id"], r["region"]) for r in after}) == len(after) == 36
    assert {
        i: sorted_rows(pypaimon_read(table_copy, **{"scan.snapshot-id": i})) for i in kept_ids
    } == before_kept
    assert sorted_rows(pypaimon_read(table_copy, **{"scan.tag-name": "audit"})) == before_tag
    # the adapter agrees: the timeline starts at 5 and lists what pypaimon lists
    from lakewarden_paimon import PaimonAdapter

    table = PaimonAdapter.open(table_copy)
    assert [i.id for i in table.timeline().instants()] == kept_ids
    listed = {s.base_file.path for s in table.file_index().list_files_at(5)}
    assert listed == pypaimon_files(table_copy, **{"scan.snapshot-id": 5})


def test_expiry_removes_manifests_only_expired_snapshots_named(table_copy):
    from lakewarden_paimon import _cleanup, _meta
    from lakewarden_paimon.maintenance import PaimonExpireSnapshotsFactory

    _run(PaimonExpireSnapshotsFactory, table_copy, {"retain-min": 3, "time-retained-seconds": 0})
    store = pypaimon_table(table_copy)
    named = set()
    for snapshot_id in _meta.snapshot_ids(store):
        named |= _cleanup._names(store, _meta.load_snapshot(store, snapshot_id))
    assert set(os.listdir(Path(table_copy) / "manifest")) == named


def test_a_young_table_or_a_dry_run_expires_nothing(table_copy):
    from lakewarden_paimon.maintenance import PaimonExpireSnapshotsFactory

    files = sorted(str(p) for p in Path(table_copy).rglob("*") if p.is_file())
    # default time retained (1 h): every snapshot was written seconds ago
    assert _run(PaimonExpireSnapshotsFactory, table_copy, {"retain-min": 1})["expired_snapshots"] == []
    dry = _run(
        PaimonExpireSnapshotsFactory,
        table_copy,
        {"retain-min": 1, "time-retained-seconds": 0, "dry-run": True},
    )
    assert dry["expired_snapshots"] == [1, 2, 3, 4, 5] and dry["data_files"] > 0
    assert sorted(str(p) for p in Path(table_copy).rglob("*") if p.is_file()) == files


def test_expiry_preview_says_what_a_run_deletes_and_bad_rules_are_refused(table_copy):
    from lakewarden_paimon.maintenance import PaimonExpireSnapshotsFactory

    factory = PaimonExpireSnapshotsFactory()
    runtime = _Runtime(table_copy, dict(PaimonExpireSnapshotsFactory.default_properties))
    preview = factory.preview(runtime, "expire-snapshots", {"retain-min": 4, "time-retained-seconds": 0})
    assert isinstance(preview, Preview)
    assert preview.details["snapshots_to_expire"] == [1, 2]
    summary = _run(PaimonExpireSnapshotsFactory, table_copy, {"retain-min": 4, "time-retained-seconds": 0})
    assert preview.objects_to_delete == 2 + summary["data_files"] + summary["metadata_files"]
    assert preview.bytes_to_delete == summary["bytes"]
    with pytest.raises(ProcessInputError, match="retain-max"):
        factory.validate(runtime, "expire-snapshots", {"retain-min": 5, "retain-max": 2})


def test_the_tables_own_paimon_options_set_the_rules(tmp_path):
    from lakewarden_paimon.maintenance import PaimonExpireSnapshots, paimon_duration_ms

    assert paimon_duration_ms("30 min") == 1_800_000 and paimon_duration_ms("2 h") == 7_200_000

    class _Schema:
        options = {"snapshot.num-retained.min": "4", "snapshot.time-retained": "2 h"}

    class _Store:
        table_schema = _Schema()

    rules = PaimonExpireSnapshots({}, {"retain-min": 10}).rules(_Store())
    assert rules["retain_min"] == 4 and rules["time_retained_ms"] == 7_200_000
    assert PaimonExpireSnapshots({"retain-min": 2}, {}).rules(_Store())["retain_min"] == 2


def test_orphan_cleanup_deletes_only_old_unreferenced_files(table_copy):
    from lakewarden_paimon.maintenance import PaimonCleanOrphanFilesFactory

    bucket = next(Path(table_copy).glob("region=eu/bucket-0"))
    orphan_data = bucket / "data-00000000-orphan-0.parquet"
    orphan_manifest = Path(table_copy) / "manifest" / "manifest-orphan-0"
    young = bucket / "data-11111111-young-0.parquet"
    for path in (orphan_data, orphan_manifest, young):
        path.write_bytes(b"not referenced")
    for path in (orphan_data, orphan_manifest):
        os.utime(path, (OLD, OLD))
    for path in Path(table_copy).rglob("*"):  # referenced files old too: age alone must not matter
        if path.is_file() and path not in (young,):
            os.utime(path, (OLD, OLD))
    before = sorted_rows(pypaimon_read(table_copy))
    every_snapshot = _needed(table_copy, range(1, 7), [])

    preview = PaimonCleanOrphanFilesFactory().preview(
        _Runtime(table_copy, dict(PaimonCleanOrphanFilesFactory.default_properties)), "clean-orphan-files", {}
    )
    assert sorted(preview.details["files"]) == sorted([str(orphan_data), str(orphan_manifest)])
    summary = _run(PaimonCleanOrphanFilesFactory, table_copy, {})

    assert summary["deleted_files"] == 2
    assert not orphan_data.exists() and not orphan_manifest.exists() and young.exists()
    assert all(os.path.exists(p) for p in every_snapshot)
    assert sorted_rows(pypaimon_read(table_copy)) == before
    for snapshot_id in range(1, 7):
        assert pypaimon_read(table_copy, **{"scan.snapshot-id": snapshot_id}).num_rows > 0


def test_orphan_cleanup_refuses_a_minimum_age_under_an_hour(table_copy):
    from lakewarden_paimon.maintenance import PaimonCleanOrphanFilesFactory

    with pytest.raises(ProcessInputError, match="at least 3600"):
        _run(PaimonCleanOrphanFilesFactory, table_copy, {"older-than-seconds": 60})


def test_compaction_is_declined_with_the_reason():
    from lakewarden_paimon.maintenance import PaimonCleanOrphanFilesFactory, PaimonExpireSnapshotsFactory

    for factory_cls in (PaimonExpireSnapshotsFactory, PaimonCleanOrphanFilesFactory):
        factory = factory_cls()
        assert "rewrite" not in factory.supported_actions()["paimon"]
        assert "Paimon writer" in factory.declined_actions()["paimon"]["rewrite"]


def test_orphan_cleanup_keeps_a_nested_table_and_what_a_link_leads_to(table_copy, tmp_path):
    """The path guard (``context.guard``) keeps a registered table nested in the Paimon folder and
    a folder outside reached through a symlink; the table's own orphan still goes."""
    from deltalake import write_deltalake
    from lakewarden_paimon.maintenance import PaimonCleanOrphanFilesFactory

    from storage.io.guard import PathGuard
    from tests.processes.conftest import delta_rows

    bucket = next(Path(table_copy).glob("region=eu/bucket-0"))
    nested = bucket / "nested"
    write_deltalake(str(nested), delta_rows(0, 3))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.parquet").write_bytes(b"not the table's")
    os.symlink(outside, bucket / "linked")
    orphan = bucket / "data-00000000-orphan-0.parquet"
    orphan.write_bytes(b"not referenced")
    for path in [*Path(table_copy).rglob("*"), outside / "secret.parquet"]:
        if path.is_file():
            os.utime(path, (OLD, OLD))
    nested_files = {p: p.read_bytes() for p in nested.rglob("*") if p.is_file()}

    class Guarded(_Runtime):
        def guard(self):
            return PathGuard.build(self.location, roots=[self.location], others=[str(nested)])

    factory = PaimonCleanOrphanFilesFactory()
    runtime = Guarded(table_copy, dict(PaimonCleanOrphanFilesFactory.default_properties))
    process = factory.recover(runtime, ProcessRecord(id=1, action=factory.action, params={}))
    summary = process.run(_Context(runtime))

    assert not orphan.exists()
    assert {p: p.read_bytes() for p in nested.rglob("*") if p.is_file()} == nested_files
    assert (outside / "secret.parquet").read_bytes() == b"not the table's"
    assert summary["deleted_files"] == 1
    assert any(reason.startswith("inside another registered table") for reason in summary["kept"])
