"""Delta vacuum: retention respected (never below the table's own), dry-run, log cleanup."""

from __future__ import annotations

import json
import time

import pytest
from deltalake import DeltaTable, write_deltalake

from processes.maintenance.delta.vacuum import table_retention_hours
from processes.models import ProcessStatus
from tests.processes.conftest import delta_read, delta_rows, multiset

pytestmark = pytest.mark.django_db(transaction=True)
HOUR_MS = 3600 * 1000


def backdate_removes(path, version: int, hours: float) -> list[str]:
    """Make the tombstones of commit ``version`` ``hours`` old (as if the commit were that old);
    returns the paths they removed."""
    log = path / "_delta_log" / f"{version:020d}.json"
    lines, removed = [], []
    for line in log.read_text().splitlines():
        action = json.loads(line)
        if "remove" in action:
            action["remove"]["deletionTimestamp"] = int(time.time() * 1000 - hours * HOUR_MS)
            removed.append(action["remove"]["path"])
        lines.append(json.dumps(action))
    log.write_text("\n".join(lines) + "\n")
    return removed


@pytest.fixture
def overwritten(make_delta):
    """Files removed 10 days ago (commit 2) and 1 day ago (commit 3)."""

    def make(configuration=None):
        console_table, path = make_delta(files=2, configuration=configuration)
        write_deltalake(str(path), delta_rows(100, 5), mode="overwrite")  # v2 removes v0, v1 files
        old = backdate_removes(path, 2, 240)
        write_deltalake(str(path), delta_rows(200, 5), mode="overwrite")  # v3 removes the v2 file
        young = backdate_removes(path, 3, 24)
        return console_table, path, old, young

    return make


def test_vacuum_deletes_only_files_removed_longer_ago_than_the_retention(overwritten, run_now):
    console_table, path, old, young = overwritten()
    rows = multiset(delta_read(path))

    process = run_now(console_table, "vacuum")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["retention_hours"] == 168
    assert not any((path / p).exists() for p in old)
    assert all((path / p).exists() for p in young)
    assert process.summary["vacuumed_files"] == len(old) == 2
    assert multiset(delta_read(path)) == rows
    assert list((path / "_delta_log").glob("*.checkpoint.parquet"))


def test_the_tables_own_longer_retention_wins_over_the_default(overwritten, run_now):
    console_table, path, old, young = overwritten({"delta.deletedFileRetentionDuration": "interval 15 days"})

    process = run_now(console_table, "vacuum")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["retention_hours"] == 360
    assert all((path / p).exists() for p in old + young)


def test_a_retention_below_the_tables_own_is_refused_and_nothing_is_deleted(overwritten, run_now):
    console_table, path, old, young = overwritten()
    version = DeltaTable(str(path)).version()

    process = run_now(console_table, "vacuum", {"retention-hours": 12})

    assert process.status == ProcessStatus.FAILED
    assert "shorter than the table's own retention of 168 hours" in process.failure
    assert all((path / p).exists() for p in old + young)
    assert DeltaTable(str(path)).version() == version


def test_a_dry_run_lists_the_files_and_deletes_nothing(overwritten, run_now):
    console_table, path, old, young = overwritten()
    version = DeltaTable(str(path)).version()

    process = run_now(console_table, "vacuum", {"dry-run": True})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["vacuumed_files"] == 2
    assert all((path / p).exists() for p in old + young)
    assert DeltaTable(str(path)).version() == version
    assert not list((path / "_delta_log").glob("*.checkpoint.parquet"))


@pytest.mark.parametrize(
    ("setting", "hours"),
    [("interval 7 days", 168), ("interval 36 hours", 36), ("interval 2 weeks", 336), ("1 day", 24)],
)
def test_the_tables_retention_setting_is_read_in_hours(setting, hours):
    assert table_retention_hours({"delta.deletedFileRetentionDuration": setting}) == hours
