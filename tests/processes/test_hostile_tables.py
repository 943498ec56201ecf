"""Hostile tables: every deleting, moving or writing action leaves alone what is not its table's
(another registered table's files, files outside the allowed roots, a table nested in this one,
what a symlink in the table folder leads to, ``../`` paths in a log), reports what it kept, and
still does its own work."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from processes.models import ProcessStatus
from storage.errors import Conflict, InvalidInput
from storage.io import local_path
from storage.trash import MANIFEST_NAME
from tests.processes.conftest import (
    append_files,
    delta_files,
    delta_read,
    delta_rows,
    iceberg_files,
    iceberg_rows,
    multiset,
    rows,
)

pytestmark = pytest.mark.django_db(transaction=True)
TRASH = {"trash-retention": "PT48H"}
OUTSIDE_TABLE = "outside the table's location"


def with_trash(console_table):
    console_table.properties = {**(console_table.properties or {}), **TRASH}
    console_table.save(update_fields=["properties"])


def snapshot_of(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (symlinks not followed) with its bytes."""
    found = {}
    for directory, _, names in os.walk(folder):
        for name in names:
            path = Path(directory, name)
            if not path.is_symlink():
                found[str(path.relative_to(folder))] = path.read_bytes()
    return found


def age_everything(folder: Path, days: float = 10) -> None:
    when = time.time() - days * 86400
    for directory, _, names in os.walk(folder, followlinks=True):
        for name in names:
            os.utime(Path(directory, name), (when, when))


def plain_path(location: str) -> Path:
    return Path(local_path(location, percent_decoded=False))


def write_parquet_like(table, path: Path, start: int) -> None:
    """A parquet file of ``table``'s schema (with field ids), as an engine adding files writes it."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows(start, 5).cast(schema_to_pyarrow(table.schema(), include_field_ids=True)), path)


def add_files(table, locations: list[str]) -> None:
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            for location in locations:
                append.append_data_file(parquet_file_to_data_file(table.io, table.metadata, location))
    table.refresh()


def move_location(table, location: str) -> None:
    """Change the location the current metadata file names (as a hand edit or another tool
    would: pyiceberg cannot update a location)."""
    metadata = plain_path(table.metadata_location)
    body = json.loads(metadata.read_text())
    body["location"] = location
    metadata.write_text(json.dumps(body))
    table.refresh()
    assert table.location() == location


def register_nested_delta(folder: Path):
    from storage import services

    write_deltalake(str(folder), delta_rows(7000, 5))
    return services.table_register(location=str(folder), allow_nested=True)


# --- Iceberg expire-snapshots --------------------------------------------------------------------


@pytest.mark.parametrize("trash", [False, True], ids=["delete", "trash"])
def test_expiry_keeps_another_tables_file_and_one_outside_the_roots(make_iceberg, run_now, tmp_path, trash):
    console_a, a = make_iceberg(files=2)
    _, b = make_iceberg(files=2)
    own_files = {plain_path(p) for p in iceberg_files(a)}
    b_rows = multiset(iceberg_rows(b))
    stolen = sorted(iceberg_files(b))[0]
    outside = tmp_path / "outside" / "x.parquet"
    write_parquet_like(a, outside, 500)
    add_files(a, [stolen, f"file://{outside}"])
    a.overwrite(rows(9000, 4))
    if trash:
        with_trash(console_a)

    process = run_now(console_a, "expire-snapshots", {"max-age": 0})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert plain_path(stolen).exists() and outside.exists()
    assert multiset(iceberg_rows(b)) == b_rows
    kept = process.summary["kept"][OUTSIDE_TABLE]
    assert kept["count"] == 2
    assert {plain_path(p) for p in kept["files"]} == {plain_path(stolen), outside}
    assert not any(path.exists() for path in own_files)  # the table's own expired files went
    assert multiset(iceberg_rows(a)) == multiset(rows(9000, 4))


def test_expiry_preview_counts_only_the_tables_own_files(make_iceberg, tmp_path):
    from processes.maintenance.iceberg.expire import IcebergExpireSnapshotsFactory
    from processes.runtime import TableRuntime

    console_a, a = make_iceberg(files=2)
    _, b = make_iceberg(files=1)
    stolen = sorted(iceberg_files(b))[0]
    add_files(a, [stolen])
    a.overwrite(rows(9000, 4))
    factory = IcebergExpireSnapshotsFactory()

    preview = factory.preview(TableRuntime(console_a), "expire-snapshots", {"max-age": 0})

    assert preview.details["kept"][OUTSIDE_TABLE]["count"] == 1
    assert preview.objects_to_delete == preview.details["deleted_data_files"] + sum(
        preview.details[f"deleted_{kind}"] for kind in ("delete_files", "manifests", "manifest_lists")
    )
    assert preview.details["deleted_data_files"] == 2  # its own two files, not the stolen one


# --- Iceberg clean-orphan-files ------------------------------------------------------------------


@pytest.mark.parametrize("trash", [False, True], ids=["delete", "trash"])
def test_orphan_cleanup_keeps_a_nested_table_and_what_links_lead_to(make_iceberg, run_now, tmp_path, trash):
    console_a, a = make_iceberg(files=2)
    root = plain_path(a.location())
    nested = root / "sub"
    register_nested_delta(nested)
    nested_rows, nested_files = multiset(delta_read(nested)), snapshot_of(nested)
    outside = tmp_path / "outside"
    write_parquet_like(a, outside / "secret.parquet", 100)
    os.symlink(outside, root / "data" / "linked")
    os.symlink(outside / "secret.parquet", root / "data" / "link.parquet")
    orphan = root / "data" / "orphan.parquet"
    write_parquet_like(a, orphan, 200)
    age_everything(root)
    age_everything(outside)
    a_rows = multiset(iceberg_rows(a))
    if trash:
        with_trash(console_a)

    process = run_now(console_a, "clean-orphan-files", {"min-age": 3600})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert not orphan.exists()
    assert process.summary["orphan_files"] == 1
    assert snapshot_of(nested) == nested_files and multiset(delta_read(nested)) == nested_rows
    assert snapshot_of(outside) == {"secret.parquet": (outside / "secret.parquet").read_bytes()}
    assert (root / "data" / "linked").is_symlink() and (root / "data" / "link.parquet").is_symlink()
    assert multiset(iceberg_rows(a)) == a_rows


def test_orphan_cleanup_refuses_a_metadata_location_outside_the_table(make_iceberg, run_now, tmp_path):
    """A catalog table whose metadata now says it lives elsewhere (moved after registration):
    orphan cleanup under that location would delete files no registered table's folder holds."""
    console_a, a = make_iceberg(files=1)
    elsewhere = tmp_path / "warehouse" / "elsewhere"
    victim = elsewhere / "data" / "victim.parquet"
    write_parquet_like(a, victim, 300)
    age_everything(elsewhere)
    move_location(a, f"file://{elsewhere}")

    process = run_now(console_a, "clean-orphan-files", {"min-age": 3600})

    assert process.status == ProcessStatus.FAILED
    assert "nothing was deleted" in process.failure and OUTSIDE_TABLE in process.failure
    assert victim.exists()


# --- Delta vacuum --------------------------------------------------------------------------------


@pytest.mark.parametrize("trash", [False, True], ids=["delete", "trash"])
def test_full_vacuum_keeps_a_nested_table_and_files_behind_a_link(make_delta, run_now, tmp_path, trash):
    console_t, path = make_delta(files=2)
    nested = path / "sub"
    register_nested_delta(nested)
    nested_rows, nested_files = multiset(delta_read(nested)), snapshot_of(nested)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.parquet").write_bytes(b"not the table's")
    os.symlink(outside, path / "linked")
    orphan = path / "never-committed.parquet"
    pq.write_table(delta_rows(0, 3), orphan)
    age_everything(path)
    age_everything(outside)
    rows_before = multiset(delta_read(path))
    if trash:
        with_trash(console_t)

    process = run_now(console_t, "vacuum")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert not orphan.exists()
    assert snapshot_of(nested) == nested_files and multiset(delta_read(nested)) == nested_rows
    assert (outside / "secret.parquet").read_bytes() == b"not the table's"
    kept = process.summary["kept"]
    assert any(reason.startswith("inside another registered table") for reason in kept)
    assert kept["through a symlink"]["files"] == [f"{path}/linked/secret.parquet"]
    assert multiset(delta_read(path)) == rows_before


# --- rewrites ------------------------------------------------------------------------------------


def commit_actions(path: Path, actions: list[dict]) -> None:
    """A hand-written Delta commit (as a hostile or careless writer would write it)."""
    log = path / "_delta_log"
    version = max(int(p.name.split(".")[0]) for p in log.glob("*.json")) + 1
    (log / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def commit_add(path: Path, relative: str, size: int) -> None:
    add = {
        "path": relative,
        "partitionValues": {},
        "size": size,
        "modificationTime": int(time.time() * 1000),
        "dataChange": True,
    }
    commit_actions(path, [{"add": add}])


def test_a_delta_rewrite_never_writes_where_a_dotdot_path_leads(make_delta, run_now, warehouse):
    console_t, path = make_delta(files=1)
    own = sorted(delta_files(path))
    commit_actions(path, [{"remove": {"path": plain_path(own[0]).name, "dataChange": True}}])
    other = warehouse / "other"
    other.mkdir()
    for i in range(3):
        pq.write_table(delta_rows(900 + i * 5, 5), other / f"x{i}.parquet")
        commit_add(path, f"../other/x{i}.parquet", (other / f"x{i}.parquet").stat().st_size)
    other_before = snapshot_of(other)
    rows_before = multiset(delta_read(path))
    assert len(rows_before) == 15  # the outside files are read as part of the table

    process = run_now(console_t, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert snapshot_of(other) == other_before
    assert multiset(delta_read(path)) == rows_before
    live = [plain_path(uri) for uri in delta_files(path)]
    assert live and all(p.resolve().is_relative_to(path / "data") for p in live)


@pytest.mark.parametrize(
    ("action", "params", "refused"),
    [
        ("rewrite", {"min-input-files": 2}, "will not write the commit"),
        ("checkpoint", {}, "will not write"),
    ],
)
def test_a_delta_process_never_writes_through_a_log_folder_linked_out_of_the_table(
    make_delta, run_now, tmp_path, action, params, refused
):
    import shutil

    console_t, path = make_delta(files=6)
    rows_before = multiset(delta_read(path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(str(path / "_delta_log"), str(elsewhere / "_delta_log"))
    os.symlink(elsewhere / "_delta_log", path / "_delta_log")  # the table reads the same log
    log_before = snapshot_of(elsewhere)
    data_before = snapshot_of(path / "data") if (path / "data").exists() else None
    top_before = sorted(p.name for p in path.iterdir())

    process = run_now(console_t, action, params)

    assert process.status == ProcessStatus.FAILED
    assert refused in process.failure and "symlink" in process.failure
    assert snapshot_of(elsewhere) == log_before  # no commit landed where the link leads
    assert sorted(p.name for p in path.iterdir()) == top_before
    if data_before is not None:
        assert snapshot_of(path / "data") == data_before  # the published files were taken back
    assert multiset(delta_read(path)) == rows_before


def test_an_iceberg_rewrite_of_files_outside_the_roots_writes_inside_the_table(
    make_iceberg, run_now, tmp_path
):
    console_a, a = make_iceberg(files=0)
    outside = tmp_path / "outside"
    for i in range(3):
        write_parquet_like(a, outside / f"x{i}.parquet", i * 5)
    add_files(a, [f"file://{outside}/x{i}.parquet" for i in range(3)])
    before_rows, before_outside = multiset(iceberg_rows(a)), snapshot_of(outside)

    process = run_now(console_a, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert snapshot_of(outside) == before_outside
    assert multiset(iceberg_rows(a)) == before_rows
    root = plain_path(a.location())
    assert all(plain_path(p).is_relative_to(root) for p in iceberg_files(a))


def test_an_iceberg_rewrite_refuses_a_metadata_path_outside_the_table(make_iceberg, run_now, tmp_path):
    """``write.metadata.path`` names where new manifests go: a rewrite would write them there."""
    console_a, a = make_iceberg(files=3)
    with a.transaction() as tx:
        tx.set_properties(**{"write.metadata.path": f"file://{tmp_path}/outside/metadata"})
    before = multiset(iceberg_rows(a))
    snapshot = a.current_snapshot().snapshot_id
    outside = snapshot_of(tmp_path / "outside")  # pyiceberg wrote the property's metadata file there

    process = run_now(console_a, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.FAILED
    assert "will not write new metadata files at" in process.failure and OUTSIDE_TABLE in process.failure
    assert snapshot_of(tmp_path / "outside") == outside
    a.refresh()
    assert a.current_snapshot().snapshot_id == snapshot and multiset(iceberg_rows(a)) == before


# --- trash restore -------------------------------------------------------------------------------


def trashed_orphan(make_iceberg, run_now):
    console_a, a = make_iceberg(files=1)
    root = plain_path(a.location())
    orphan = root / "data" / "orphan.parquet"
    write_parquet_like(a, orphan, 200)
    age_everything(root)
    with_trash(console_a)
    process = run_now(console_a, "clean-orphan-files", {"min-age": 3600})
    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert not orphan.exists()
    return process, orphan


def test_restore_refuses_a_manifest_changed_after_it_was_written(make_iceberg, run_now):
    from storage.trash.models import TrashBatch
    from storage.trash.services import trash_batch_restore

    process, orphan = trashed_orphan(make_iceberg, run_now)
    _, b = make_iceberg(files=1)
    victim = plain_path(sorted(iceberg_files(b))[0])
    b_rows = multiset(iceberg_rows(b))
    batch = TrashBatch.objects.get(process_id=process.pk)
    manifest_path = Path(batch.location) / MANIFEST_NAME
    body = json.loads(manifest_path.read_text())
    victim_entry = {
        "original": str(orphan.parent / "stolen.parquet"),
        "trashed": f"../../../../{victim.name}",
    }
    body["entries"].append({**victim_entry, "size": victim.stat().st_size, "kind": "orphan"})
    manifest_path.write_text(json.dumps(body))

    with pytest.raises(Conflict, match="changed after Lakewarden wrote it"):
        trash_batch_restore(process_id=process.pk)

    assert victim.exists() and multiset(iceberg_rows(b)) == b_rows
    assert not orphan.exists()  # nothing was moved


def test_restore_refuses_entries_outside_the_table_even_with_a_matching_digest(make_iceberg, run_now):
    """A batch recorded before digests (or a digest forged with the manifest): the guard still
    refuses every entry that would put a file outside the table."""
    from storage.trash.models import TrashBatch
    from storage.trash.services import trash_batch_restore

    process, orphan = trashed_orphan(make_iceberg, run_now)
    _, b = make_iceberg(files=1)
    victim = plain_path(sorted(iceberg_files(b))[0])
    batch = TrashBatch.objects.get(process_id=process.pk)
    manifest_path = Path(batch.location) / MANIFEST_NAME
    body = json.loads(manifest_path.read_text())
    body["entries"][0]["original"] = str(victim.parent / "moved-in.parquet")
    manifest_path.write_text(json.dumps(body))
    TrashBatch.objects.filter(pk=batch.pk).update(manifest_sha256="")

    with pytest.raises(Conflict, match="where this table may not write"):
        trash_batch_restore(process_id=process.pk)

    assert not (victim.parent / "moved-in.parquet").exists()


# --- registration --------------------------------------------------------------------------------


def test_registration_refuses_an_iceberg_table_whose_metadata_says_it_lives_outside_the_roots(
    make_iceberg, tmp_path
):
    from storage import services

    _, a = make_iceberg(files=1, register=False)
    move_location(a, f"file://{tmp_path}/outside/t")
    metadata_folder = plain_path(a.metadata_location).parent

    with pytest.raises(InvalidInput, match="outside the allowed roots"):
        services.table_register(location=str(metadata_folder.parent))


def test_registration_refuses_nested_tables_unless_allowed(make_delta, warehouse):
    from storage import services
    from storage.models import Table

    _, path = make_delta(files=1)
    write_deltalake(str(path / "sub"), delta_rows(0, 2))
    outer = warehouse / "outer"
    write_deltalake(str(outer), delta_rows(0, 2))
    write_deltalake(str(outer / "inner"), delta_rows(0, 2))
    services.table_register(location=str(outer / "inner"))

    with pytest.raises(InvalidInput, match="nests with registered table"):
        services.table_register(location=str(path / "sub"))  # inside a registered table
    with pytest.raises(InvalidInput, match="nests with registered table"):
        services.table_register(location=str(outer))  # holding a registered table
    assert not Table.objects.filter(location__in=[str(path / "sub"), str(outer)]).exists()

    nested = services.table_register(location=str(path / "sub"), allow_nested=True)
    assert nested.location == str(path / "sub")
    prefix_sibling = warehouse / f"{path.name}2"
    write_deltalake(str(prefix_sibling), delta_rows(0, 2))
    assert services.table_register(location=str(prefix_sibling)).location == str(prefix_sibling)


def test_appending_keeps_working_after_the_guard(make_iceberg, run_now):
    """The guard does not get in the way of an ordinary table: expiry of a plain history deletes
    exactly the files only the expired snapshots reached and keeps nothing."""
    console_a, a = make_iceberg(files=2)
    append_files(a, [rows(1000, 5)])
    a.overwrite(rows(3000, 5))

    process = run_now(console_a, "expire-snapshots", {"max-age": 0})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert "kept" not in process.summary
    assert process.summary["deleted_data_files"] == 3
