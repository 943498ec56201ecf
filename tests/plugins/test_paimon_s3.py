"""Paimon tables on an object store (SeaweedFS): a table written by pypaimon, copied under an
``s3://`` prefix, opens by detection, lists and reads what pypaimon lists and reads there, and is
expired and orphan-cleaned through the store with the table's credentials."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from tests.conftest import upload_folder
from tests.plugins._paimon_tables import sorted_rows, write_primary_key_table


@pytest.fixture
def s3_table(seaweedfs, s3_prefix, s3_options, tmp_path):
    local = write_primary_key_table(str(tmp_path))
    return local, upload_folder(seaweedfs, Path(local), s3_prefix), s3_options


def _pypaimon(location: str, storage, **scan):
    from lakewarden_paimon._files import pypaimon_options
    from pypaimon.table.file_store_table import FileStoreTable

    table = FileStoreTable.from_path(location, pypaimon_options(storage))
    builder = (table.copy({k: str(v) for k, v in scan.items()}) if scan else table).new_read_builder()
    splits = builder.new_scan().plan().splits()
    return builder.new_read().to_arrow(splits), {p for s in splits for p in s.file_paths}


def test_a_paimon_table_on_s3_lists_and_reads_what_pypaimon_does(s3_table):
    from lakewarden_paimon import PaimonAdapter

    local, prefix, storage = s3_table
    table = PaimonAdapter.open(prefix, storage=storage)
    assert PaimonAdapter.detect(prefix, storage) and not PaimonAdapter.detect(prefix + "-missing", storage)
    on_disk = PaimonAdapter.open(local)
    assert [i.id for i in table.timeline().instants()] == [i.id for i in on_disk.timeline().instants()]
    for snapshot_id in range(1, 7):
        rows, files = _pypaimon(prefix, storage, **{"scan.snapshot-id": snapshot_id})
        listed = {s.base_file.path for s in table.file_index().list_files_at(snapshot_id)}
        assert {table.files.path(p) for p in listed} == {table.files.path(p) for p in files}
        assert all(p.startswith(prefix) for p in listed)
        assert sorted_rows(_table(table.read(snapshot_id))) == sorted_rows(rows)
    assert table.summary().record_count == 36


def _table(batches):
    import pyarrow as pa

    batches = list(batches)
    return pa.Table.from_batches(batches) if batches else None


def test_expiry_and_orphan_cleanup_on_s3_keep_every_row(s3_table, seaweedfs):
    from lakewarden_paimon import PaimonAdapter, _cleanup
    from lakewarden_paimon.maintenance import PaimonExpireSnapshots

    from tests.plugins.test_paimon_maintenance import _Context

    _local, prefix, storage = s3_table
    before, _ = _pypaimon(prefix, storage)
    kept_before, needed = _pypaimon(prefix, storage, **{"scan.snapshot-id": 5})

    class Runtime:
        location, config = prefix, {}

        def load(self):
            return PaimonAdapter.open(prefix, storage=storage)

        def guard(self):
            from storage.io.guard import PathGuard

            return PathGuard.build(prefix, roots=[prefix])

    summary = PaimonExpireSnapshots({"retain-min": 2, "time-retained-seconds": 0}, {}).run(
        _Context(Runtime())
    )
    assert summary["expired_snapshots"] == [1, 2, 3, 4] and summary["deleted_files"] > 0

    fs = seaweedfs.filesystem()
    key = prefix.removeprefix("s3://")
    snapshots = fs.get_file_info(pafs.FileSelector(f"{key}/snapshot"))
    assert sorted(i.base_name for i in snapshots) == ["EARLIEST", "LATEST", "snapshot-5", "snapshot-6"]
    assert sorted_rows(_pypaimon(prefix, storage)[0]) == sorted_rows(before)
    assert sorted_rows(_pypaimon(prefix, storage, **{"scan.snapshot-id": 5})[0]) == sorted_rows(kept_before)

    orphan = f"{key}/region=eu/bucket-0/data-orphan-0.parquet"
    with fs.open_output_stream(orphan) as out:
        out.write(b"nobody names me")
    table = PaimonAdapter.open(prefix, storage=storage)
    # the store sets last-modified times itself: an age limit in the future makes everything old
    found = _cleanup.plan_orphans(table.store, table.files, int(time.time() * 1000) + 3_600_000)
    assert list(found) == [f"s3://{orphan}"]
    assert sum(table.files.remove(location) for location in found) == 1
    assert sorted_rows(_pypaimon(prefix, storage)[0]) == sorted_rows(before)
    assert all(fs.get_file_info(table.files.path(p)).type == pafs.FileType.File for p in needed)
