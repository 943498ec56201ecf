"""Delta maintenance on the object store: tables written by deltalake on SeaweedFS's S3.

Rewrite (compaction) writes its files in place under unique names and commits through Lakewarden's
commit writer, whose commit is a conditional put (``If-None-Match: *``, as deltalake's) that the
store refuses for a version that exists: a concurrent writer's commit is never overwritten. Vacuum
deletes exactly the removed files (the prefix is listed before and after).
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pyarrow.fs as pafs
import pytest

from processes.maintenance.delta.rewrite import DeltaRewriteProcess
from processes.maintenance.group_writer import S3A_FALLBACK
from processes.models import ProcessStatus
from storage.formats.delta import commit as delta_commit
from storage.io import StoreError, put_if_absent
from tests.processes.conftest import REGIONS, delta_rows, multiset, run_now  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def s3_root(seaweedfs, transactional_db):
    """A path-root catalog holding ``s3://lake/`` with the store's credentials (where a table
    registered by location gets its credentials from)."""
    from storage.models import Catalog, CatalogKind

    return Catalog.objects.create(
        name=f"lake-{uuid.uuid4().hex[:8]}",
        kind=CatalogKind.PATH_ROOT,
        properties={"root": "s3://lake/", **seaweedfs.s3_properties()},
    )


@pytest.fixture
def storage_options(s3_options):
    return s3_options.delta_options()


@pytest.fixture
def make_s3_delta(s3_root, s3_prefix, storage_options):
    """``make(files=, rows_per_file=, partitioned=, configuration=)`` -> (console Table, location):
    a Delta table on S3 written by deltalake, one commit of one file per ``files``."""
    from deltalake import write_deltalake

    from storage.models import Table

    def make(*, files: int = 30, rows_per_file: int = 5, partitioned: bool = False, configuration=None):
        location = f"{s3_prefix}/delta-{uuid.uuid4().hex[:6]}"
        for i in range(files):
            write_deltalake(
                location,
                delta_rows(i * rows_per_file, rows_per_file, REGIONS[i % 2] if partitioned else None),
                mode="append",
                partition_by=["region"] if partitioned else None,
                configuration=configuration if i == 0 else None,
                storage_options=storage_options,
            )
        console = Table.objects.create(location=location, format="delta", name=location.rsplit("/", 1)[1])
        return console, location

    return make


def objects(seaweedfs, location: str) -> dict[str, int]:
    fs = seaweedfs.filesystem()
    infos = fs.get_file_info(
        pafs.FileSelector(location.removeprefix("s3://"), recursive=True, allow_not_found=True)
    )
    return {f"s3://{i.path}": i.size for i in infos if i.type == pafs.FileType.File}


def data_objects(listing: dict[str, int]) -> set[str]:
    return {p for p in listing if "/_delta_log/" not in p}


def delta(location, storage_options):
    from deltalake import DeltaTable

    return DeltaTable(location, storage_options=storage_options)


def delta_rows_of(location, storage_options):
    return multiset(delta(location, storage_options).to_pyarrow_table())


def live(location, storage_options) -> set[str]:
    return set(delta(location, storage_options).file_uris())


# --- rewrite -------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["arrow", "spark-sql"])
def test_a_delta_table_on_s3_is_compacted_in_place(
    make_s3_delta, run_now, seaweedfs, storage_options, engine
):
    console, location = make_s3_delta(files=30, partitioned=True)
    before_rows, before_files = delta_rows_of(location, storage_options), live(location, storage_options)
    version = delta(location, storage_options).version()
    before_objects = objects(seaweedfs, location)

    process = run_now(console, "rewrite", {"engine": engine})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 30 and process.summary["files_out"] == 2
    assert process.summary["engines"] == {"arrow": 2}
    assert (process.summary.get("engine_note") == S3A_FALLBACK) == (engine == "spark-sql")
    table = delta(location, storage_options)
    assert table.version() == version + 1 == process.summary["version"]
    assert delta_rows_of(location, storage_options) == before_rows
    after_files = live(location, storage_options)
    assert len(after_files) == 2 and not after_files & before_files
    for uri in after_files:
        folder, name = uri.rsplit("/", 1)
        assert name.startswith(f"lakewarden-p{process.pk}-")
        assert folder in {f"{location}/region=eu", f"{location}/region=us"}
    commit = table.history(1)[0]
    assert commit["lakewarden.process-id"] == str(process.pk)
    after_objects = objects(seaweedfs, location)
    assert data_objects(after_objects) - data_objects(before_objects) == after_files
    assert set(before_objects) <= set(after_objects)  # removed files stay until vacuum


def test_a_corrupt_input_fails_the_rewrite_and_leaves_no_object(
    make_s3_delta, run_now, seaweedfs, storage_options
):
    console, location = make_s3_delta(files=20, partitioned=True)
    victim = sorted(p for p in live(location, storage_options) if "region=us" in p)[0]
    with seaweedfs.filesystem().open_output_stream(victim.removeprefix("s3://")) as out:
        out.write(b"PAR1 not parquet at all PAR1")
    version = delta(location, storage_options).version()
    before_objects = objects(seaweedfs, location)

    process = run_now(console, "rewrite")

    assert process.status == ProcessStatus.FAILED
    assert delta(location, storage_options).version() == version
    assert objects(seaweedfs, location) == before_objects  # the healthy group's files are gone


def test_a_cancel_before_the_commit_deletes_the_written_objects(
    make_s3_delta, run_now, seaweedfs, storage_options, monkeypatch
):
    from processes import services
    from processes.models import Process

    console, location = make_s3_delta(files=12)
    version, before_objects = delta(location, storage_options).version(), objects(seaweedfs, location)
    seen = {}

    def cancel(self, context, plan):
        seen["written"] = data_objects(objects(seaweedfs, location)) - data_objects(before_objects)
        services.process_cancel(process=Process.objects.get(pk=context.process_id))
        context.cancelled.set()

    monkeypatch.setattr(DeltaRewriteProcess, "before_commit", cancel)
    process = run_now(console, "rewrite")

    assert process.status == ProcessStatus.CANCELED
    assert seen["written"]
    assert delta(location, storage_options).version() == version
    assert objects(seaweedfs, location) == before_objects


def test_an_append_committed_during_the_rewrite_is_kept_exactly_once(
    make_s3_delta, run_now, storage_options, monkeypatch
):
    from deltalake import write_deltalake

    console, location = make_s3_delta(files=20)
    appended = delta_rows(70_000, 13)
    expected = delta_rows_of(location, storage_options) + multiset(appended)

    def external_append(self, context, plan):
        write_deltalake(location, appended, mode="append", storage_options=storage_options)

    monkeypatch.setattr(DeltaRewriteProcess, "before_commit", external_append)
    process = run_now(console, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert delta_rows_of(location, storage_options) == expected


def test_a_commit_racing_another_writer_for_the_same_version_loses_nothing(
    make_s3_delta, run_now, storage_options, monkeypatch
):
    """The other writer takes the very version the rewrite is about to write (between its
    validation and its commit): the store refuses the rewrite's put of that version (412), and
    the commit writer commits it at the next one after checking the winner for conflicts."""
    from deltalake import write_deltalake

    console, location = make_s3_delta(files=20)
    appended = delta_rows(80_000, 11)
    expected = delta_rows_of(location, storage_options) + multiset(appended)
    version = delta(location, storage_options).version()
    real_check = delta_commit._checked_actions
    raced = []

    def check_then_race(latest, request):
        actions = real_check(latest, request)
        if not raced:
            write_deltalake(location, appended, mode="append", storage_options=storage_options)
            raced.append(True)
        return actions

    monkeypatch.setattr(delta_commit, "_checked_actions", check_then_race)
    process = run_now(console, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    table = delta(location, storage_options)
    assert table.version() == version + 2 == process.summary["version"]
    history = {h["version"]: h for h in table.history(2)}
    assert history[version + 1]["operation"] == "WRITE"  # the other writer's commit survived
    assert history[version + 2]["lakewarden.process-id"] == str(process.pk)
    assert delta_rows_of(location, storage_options) == expected


def test_the_store_creates_a_commit_once_through_a_conditional_put(seaweedfs, s3_prefix, s3_options):
    """What the commit writers rely on: a put-if-absent (``PUT`` with ``If-None-Match: *``)
    creates a key once; a second one is refused and leaves the first content."""
    key = f"{s3_prefix.removeprefix('s3://lake/')}/_delta_log/00000000000000000000.json"
    assert put_if_absent(f"s3://lake/{key}", b"first", s3_options) is True
    assert put_if_absent(f"s3://lake/{key}", b"second", s3_options) is False
    with seaweedfs.filesystem().open_input_file(f"lake/{key}") as handle:
        assert handle.read() == b"first"


def test_racing_conditional_puts_of_one_key_leave_exactly_one_winner(seaweedfs, s3_prefix, s3_options):
    key = f"{s3_prefix}/_delta_log/00000000000000000001.json"
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda n: put_if_absent(key, f"writer {n}".encode(), s3_options), range(8)))
    assert won.count(True) == 1
    with seaweedfs.filesystem().open_input_file(key.removeprefix("s3://")) as handle:
        assert handle.read() == f"writer {won.index(True)}".encode()


def test_a_conditional_put_with_wrong_credentials_is_a_store_error_and_writes_nothing(
    seaweedfs, s3_prefix, s3_options
):
    key = f"{s3_prefix}/_delta_log/00000000000000000002.json"
    with pytest.raises(StoreError, match="refused a conditional put"):
        put_if_absent(key, b"x", replace(s3_options, secret_key="not-the-secret"))
    info = seaweedfs.filesystem().get_file_info(key.removeprefix("s3://"))
    assert info.type == pafs.FileType.NotFound


def test_deltalake_commits_with_a_conditional_put(s3_options):
    assert s3_options.delta_options()["conditional_put"] == "etag"


# --- vacuum --------------------------------------------------------------------------------------


def test_vacuum_on_s3_deletes_exactly_the_removed_files(make_s3_delta, run_now, seaweedfs, storage_options):
    console, location = make_s3_delta(
        files=12, configuration={"delta.deletedFileRetentionDuration": "interval 0 hours"}
    )
    compacted = run_now(console, "rewrite")
    assert compacted.status == ProcessStatus.SUCCESS, compacted.failure
    removed = data_objects(objects(seaweedfs, location)) - live(location, storage_options)
    assert len(removed) == 12
    expected_rows = delta_rows_of(location, storage_options)
    before = objects(seaweedfs, location)

    process = run_now(console, "vacuum", {"retention-hours": 0})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["vacuumed_files"] == 12
    after = objects(seaweedfs, location)
    assert data_objects(before) - data_objects(after) == removed
    assert data_objects(after) == live(location, storage_options)
    assert any(p.endswith(".checkpoint.parquet") for p in after)
    assert delta_rows_of(location, storage_options) == expected_rows


@pytest.mark.parametrize("full", [True, False])
def test_vacuum_on_s3_takes_back_what_a_killed_rewrite_left_unless_told_not_to(
    make_s3_delta, run_now, seaweedfs, storage_options, full
):
    """A worker killed between writing and committing leaves objects the log never names; the
    vacuum (Delta's full semantics, the default) is the safety net that deletes them once older
    than the retention, here the table's 0 hours."""
    console, location = make_s3_delta(
        files=3, configuration={"delta.deletedFileRetentionDuration": "interval 0 hours"}
    )
    rows = delta_rows_of(location, storage_options)
    leftover = f"{location}/lakewarden-p999999-{uuid.uuid4().hex}-g00000-part-0.parquet"
    with seaweedfs.filesystem().open_output_stream(leftover.removeprefix("s3://")) as out:
        out.write(b"PAR1 never committed PAR1")
    live_before = live(location, storage_options)

    process = run_now(console, "vacuum", {"retention-hours": 0, "full": full})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["full"] is full
    after = data_objects(objects(seaweedfs, location))
    assert (leftover in after) is not full
    assert after - {leftover} == live_before  # the live files are untouched either way
    assert delta_rows_of(location, storage_options) == rows
