"""Iceberg ``rewrite-manifests``: fewer manifests, clustered by partition, the same live data files
with the same sequence numbers, a ``replace`` snapshot, old snapshots still readable."""

from __future__ import annotations

from pathlib import Path

import pytest

from processes.maintenance.iceberg.manifests import (
    IcebergRewriteManifestsFactory,
    commit_rewrite,
    plan_manifests,
)
from processes.maintenance.outputs import local_path
from processes.models import ProcessStatus
from processes.plugin import ProcessContext
from tests.processes.conftest import append_files, iceberg_rows, multiset, rows

pytestmark = pytest.mark.django_db(transaction=True)

REGIONS = ("ap", "eu", "me", "sa", "us", "za")


def live_entries(table, snapshot_id=None) -> dict[str, tuple]:
    """Path -> (record count, size, spec id, partition, adding snapshot, data and file sequence
    numbers) of the live data files of a snapshot, read from its manifests."""
    from pyiceberg.manifest import ManifestContent

    table.refresh()
    snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id else table.current_snapshot()
    found = {}
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            data_file = entry.data_file
            partition = tuple(data_file.partition[i] for i in range(len(data_file.partition)))
            found[data_file.file_path] = (
                data_file.record_count,
                data_file.file_size_in_bytes,
                data_file.spec_id,
                partition,
                entry.snapshot_id,
                entry.sequence_number,
                entry.file_sequence_number,
            )
    return found


def manifests_of(table, content=None):
    from pyiceberg.manifest import ManifestContent

    table.refresh()
    wanted = ManifestContent.DATA if content is None else content
    return [m for m in table.current_snapshot().manifests(table.io) if m.content == wanted]


def spec_rows(table):
    from processes.maintenance.iceberg.rewrite import spec_view

    table.refresh()
    return spec_view(table).read_arrow()


@pytest.fixture
def many_manifests(make_iceberg):
    """(console Table, pyiceberg table): 24 one-file appends over 6 partitions (24 manifests),
    then a copy-on-write delete (a manifest with deleted entries)."""
    console_table, table = make_iceberg(files=0, partitioned=True)
    for i in range(24):
        append_files(table, [rows(i * 5, 5, REGIONS[i % 6])])
    table.delete("id < 3")
    table.refresh()
    return console_table, table


def unreferenced_metadata(table) -> set[str]:
    """Avro files under metadata/ that no snapshot's manifest list names (nor is)."""
    table.refresh()
    referenced = set()
    for snapshot in table.metadata.snapshots:
        referenced.add(local_path(snapshot.manifest_list))
        referenced.update(local_path(m.manifest_path) for m in snapshot.manifests(table.io))
    folder = Path(local_path(table.location())) / "metadata"
    return {str(p) for p in folder.glob("*.avro")} - referenced


def test_manifests_are_rewritten_clustered_by_partition_with_the_same_files(many_manifests, run_now):
    console_table, table = many_manifests
    before_snapshot = table.current_snapshot()
    before_entries, before_rows = live_entries(table), multiset(iceberg_rows(table))
    old = manifests_of(table)
    assert len(old) >= 24
    # about two partitions (four files each) per manifest, at the planner's bytes per entry
    plan = plan_manifests(table.io, before_snapshot, target=8 * 1024 * 1024)
    target = int(plan.entry_bytes * 9)

    process = run_now(console_table, "rewrite-manifests", {"target-manifest-size-bytes": target})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    table.refresh()
    after = table.current_snapshot()
    assert after.parent_snapshot_id == before_snapshot.snapshot_id
    assert after.summary.operation.value == "replace"
    summary = after.summary.additional_properties
    new = manifests_of(table)
    assert int(summary["manifests-created"]) == len(new) == 3
    assert int(summary["manifests-replaced"]) == len(old) and int(summary["manifests-kept"]) == 0
    assert int(summary["entries-processed"]) == len(before_entries)
    for key in ("total-records", "total-data-files", "total-files-size", "total-delete-files"):
        assert summary[key] == before_snapshot.summary.additional_properties[key], key
    assert live_entries(table) == before_entries  # same files, same snapshot ids and sequence numbers
    partitions_by_manifest = [
        sorted({e.data_file.partition[0] for e in m.fetch_manifest_entry(table.io)}) for m in new
    ]
    assert partitions_by_manifest == [["ap", "eu"], ["me", "sa"], ["us", "za"]]
    assert all(m.added_files_count == 0 and m.deleted_files_count == 0 for m in new)
    assert multiset(iceberg_rows(table)) == before_rows == multiset(spec_rows(table))
    assert multiset(iceberg_rows(table, before_snapshot.snapshot_id)) == before_rows  # time travel
    assert process.summary["manifests_created"] == 3 and process.summary["partitions"] == 6


def test_a_concurrent_append_is_rewritten_too_and_the_refused_attempt_leaves_nothing(
    many_manifests, iceberg_catalog, warehouse
):
    console_table, table = many_manifests
    _, catalog = iceberg_catalog
    other = catalog.load_table(table.name())
    before_entries = live_entries(table)

    class Interloper(ProcessContext):
        """Commits an append through another table object right before the rewrite commits."""

        process_id, staging_dir, runtime, spark = 7, warehouse / "staging", None, None

        def check_cancelled(self) -> None:
            pass

        def report_progress(self, done: int, total: int, message: str = "") -> None:
            pass

        def checkpoint(self, name: str) -> None:
            if name == "before-commit":
                append_files(other, [rows(9000, 5, "eu")])

    snapshot = table.current_snapshot()
    plan = plan_manifests(table.io, snapshot, target=8 * 1024 * 1024)
    snapshot_id, producer = commit_rewrite(Interloper(), table, plan, 8 * 1024 * 1024, None)

    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot_id
    appended = other.current_snapshot().snapshot_id
    assert table.snapshot_by_id(snapshot_id).parent_snapshot_id == appended != snapshot.snapshot_id
    entries = live_entries(table)
    assert len(entries) == len(before_entries) + 1 and before_entries.items() <= entries.items()
    assert len(manifests_of(table)) == 1 and producer.plan.snapshot_id == appended  # re-planned
    assert unreferenced_metadata(table) == set()


def test_delete_manifests_are_kept_and_position_deletes_still_apply(external_iceberg, run_now):
    from pyiceberg.manifest import ManifestContent

    console_table, table = external_iceberg("spark_v2_position_deletes")
    deletes = {m.manifest_path for m in manifests_of(table, ManifestContent.DELETES)}
    before_entries, before_rows = live_entries(table), multiset(iceberg_rows(table))
    assert len(manifests_of(table)) == 5 and len({e[5] for e in before_entries.values()}) == 5

    process = run_now(console_table, "rewrite-manifests")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert {m.manifest_path for m in manifests_of(table, ManifestContent.DELETES)} == deletes
    assert len(manifests_of(table)) == 1 and live_entries(table) == before_entries
    rows_after = iceberg_rows(table)
    assert rows_after.num_rows == 6592  # Spark's own count (fixtures README)
    assert multiset(rows_after) == before_rows == multiset(spec_rows(table))
    summary = table.current_snapshot().summary.additional_properties
    assert (summary["manifests-created"], summary["manifests-replaced"], summary["manifests-kept"]) == (
        "1",
        "5",
        "3",
    )


def test_a_single_manifest_is_left_alone(make_iceberg, run_now):
    console_table, table = make_iceberg(files=4)  # one append: one manifest
    head = table.current_snapshot().snapshot_id

    process = run_now(console_table, "rewrite-manifests")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["rewritten"] is False
    table.refresh()
    assert table.current_snapshot().snapshot_id == head


def test_a_spec_id_that_does_not_exist_is_refused_and_changes_nothing(many_manifests):
    from processes import services
    from processes.models import Process
    from storage.errors import InvalidInput

    console_table, table = many_manifests
    before = table.metadata_location

    with pytest.raises(InvalidInput, match="spec-id 42 is not a partition spec"):
        services.process_create(table=console_table, action="rewrite-manifests", params={"spec-id": 42})

    assert not Process.objects.exists()
    table.refresh()
    assert table.metadata_location == before and unreferenced_metadata(table) == set()


def test_the_trigger_wants_many_small_manifests(many_manifests, run_now):
    from processes.runtime import TableRuntime

    console_table, _ = many_manifests
    factory = IcebergRewriteManifestsFactory()
    runtime = TableRuntime(console_table, factory.properties)
    assert factory.trigger(runtime, "rewrite-manifests") is not None
    console_table.properties = {"min-manifests": 100}
    assert factory.trigger(TableRuntime(console_table, factory.properties), "rewrite-manifests") is None
    console_table.properties = {}
    assert run_now(console_table, "rewrite-manifests").status == ProcessStatus.SUCCESS
    assert factory.trigger(TableRuntime(console_table, factory.properties), "rewrite-manifests") is None


def test_the_factory_and_its_defaults_are_listed_by_the_api(api_as, viewer):
    plugins = {p["name"]: p for p in api_as(viewer).get("/api/v1/plugins/").json()}

    listed = plugins["iceberg-rewrite-manifests"]
    assert listed["properties"] == IcebergRewriteManifestsFactory.default_properties
    assert [(s["format"], s["action"], s["on_new_snapshot"]) for s in listed["strategies"]] == [
        ("iceberg", "rewrite-manifests", True)
    ]


def test_bad_parameters_are_refused_by_the_api(api_as, operator, many_manifests):
    console_table, _ = many_manifests
    response = api_as(operator).post(
        "/api/v1/processes/",
        {
            "table": console_table.pk,
            "action": "rewrite-manifests",
            "params": {"target-manifest-size-bytes": 5},
        },
        format="json",
    )

    assert response.status_code == 400 and "target-manifest-size-bytes" in response.json()["error"]
