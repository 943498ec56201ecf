"""The Iceberg rewrite (compaction) process on real tables in a SQL catalog."""

from __future__ import annotations

import pytest

from processes.maintenance.iceberg.rewrite import IcebergRewriteFactory, IcebergRewriteProcess, spec_view
from processes.maintenance.planning import CompactionSettings, plan_compaction
from processes.models import ProcessStatus
from tests.processes.conftest import append_files, iceberg_files, iceberg_rows, multiset, rows, staging_root

pytestmark = pytest.mark.django_db(transaction=True)


def planned(table, **config):
    table.refresh()
    settings = CompactionSettings.from_config(config)
    spec = spec_view(table)
    return plan_compaction(
        spec.file_index().list_files_at(), settings, instant=table.current_snapshot().snapshot_id
    )


@pytest.mark.parametrize("engine", ["arrow", "spark-sql"])
def test_two_hundred_small_files_are_compacted_with_the_same_rows(make_iceberg, run_now, engine):
    console_table, table = make_iceberg(files=200, rows_per_file=5, partitioned=True)
    before = multiset(iceberg_rows(table))
    plan = planned(table)

    process = run_now(console_table, "rewrite", {"engine": engine})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 200
    assert process.summary["partitions"] == 2
    assert process.summary["files_out"] == len(plan.groups) == 2
    assert process.summary["engines"] == {engine: 2}
    assert len(iceberg_files(table)) == 200 - plan.files_in + process.summary["files_out"]
    assert multiset(iceberg_rows(table)) == before
    assert table.current_snapshot().snapshot_id == process.summary["snapshot_id"]
    assert not staging_root(console_table.location).exists()


def test_a_smaller_target_makes_groups_of_at_most_the_target(make_iceberg, run_now):
    console_table, table = make_iceberg(files=200, rows_per_file=40)
    before = multiset(iceberg_rows(table))
    target = 65536
    plan = planned(table, **{"target-file-size": target})
    assert len(plan.groups) > 2 and all(g.size_bytes <= target for g in plan.groups)

    process = run_now(console_table, "rewrite", {"target-file-size": target})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["groups"] == len(plan.groups)
    assert len(iceberg_files(table)) == 200 - plan.files_in + process.summary["files_out"]
    assert multiset(iceberg_rows(table)) == before


def test_a_cancel_just_before_the_commit_leaves_the_table_as_it_was(make_iceberg, run_now, monkeypatch):
    from processes import services

    console_table, table = make_iceberg(files=30)
    snapshot, files, before = (
        table.current_snapshot().snapshot_id,
        iceberg_files(table),
        multiset(iceberg_rows(table)),
    )

    def cancel(self, context, plan):
        assert any(context.staging_dir.rglob("*.parquet"))  # the rewritten groups are staged
        services.process_cancel(
            process=__import__("processes.models").models.Process.objects.get(pk=context.process_id)
        )
        context.cancelled.set()  # what the heartbeat does when it sees the request

    monkeypatch.setattr(IcebergRewriteProcess, "before_commit", cancel)
    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.CANCELED
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot
    assert iceberg_files(table) == files
    assert multiset(iceberg_rows(table)) == before
    assert not staging_root(console_table.location).exists()


def test_an_append_committed_during_the_rewrite_is_kept_exactly_once(make_iceberg, run_now, monkeypatch):
    console_table, table = make_iceberg(files=40)
    before = iceberg_rows(table)
    appended = rows(10_000, 25)

    def external_append(self, context, plan):
        append_files(table, [appended])

    monkeypatch.setattr(IcebergRewriteProcess, "before_commit", external_append)
    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["attempts"] == 1  # an append does not invalidate the plan
    expected = multiset(before) + multiset(appended)
    assert multiset(iceberg_rows(table)) == expected


def test_a_planned_file_removed_meanwhile_makes_the_rewrite_plan_again(make_iceberg, run_now, monkeypatch):
    console_table, table = make_iceberg(files=40)
    calls = []

    def external_delete(self, context, plan):
        if not calls:
            table.delete("id = 3")  # copy-on-write: the file holding id 3 is replaced
        calls.append(plan)

    monkeypatch.setattr(IcebergRewriteProcess, "before_commit", external_delete)
    expected = multiset(iceberg_rows(table).filter(__import__("pyarrow.compute").compute.field("id") != 3))
    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["attempts"] == 2
    assert multiset(iceberg_rows(table)) == expected


def test_a_rewrite_that_conflicts_twice_fails_and_references_no_new_file(make_iceberg, run_now, monkeypatch):
    import pyarrow.compute as pc

    console_table, table = make_iceberg(files=40)
    deleted = iter(range(0, 200, 5))

    def external_delete(self, context, plan):
        table.delete(f"id = {next(deleted)}")

    monkeypatch.setattr(IcebergRewriteProcess, "before_commit", external_delete)
    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.FAILED
    assert "changed during the rewrite" in process.failure
    rows_after = iceberg_rows(table)
    assert rows_after.num_rows == 200 - 2
    assert pc.sum(pc.is_in(rows_after["id"], __import__("pyarrow").array([0, 5]))).as_py() == 0
    data_dir = __import__("pathlib").Path(console_table.location) / "data"
    assert not list(data_dir.rglob("*-compacted.parquet"))
    assert not staging_root(console_table.location).exists()


def test_the_trigger_only_offers_work_when_a_partition_has_enough_small_files(make_iceberg):
    from processes.runtime import TableRuntime

    factory = IcebergRewriteFactory()
    few_table, _ = make_iceberg(files=4)
    many_table, _ = make_iceberg(files=12)

    assert factory.trigger(TableRuntime(few_table, factory.properties), "rewrite") is None
    assert factory.trigger(TableRuntime(many_table, factory.properties), "rewrite") is not None


def test_a_table_property_overrides_the_factory_minimum_of_input_files(make_iceberg):
    from processes.runtime import TableRuntime

    factory = IcebergRewriteFactory()
    console_table, _ = make_iceberg(files=4)
    console_table.properties = {"min-input-files": 3}

    assert factory.trigger(TableRuntime(console_table, factory.properties), "rewrite") is not None


def test_files_with_position_deletes_are_rewritten_with_the_deletes_applied(external_iceberg, run_now):
    import pyarrow as pa

    from storage.spec import load_table

    console_table, table = external_iceberg("spark_v2_position_deletes")
    spec = spec_view(table)
    before = pa.Table.from_batches(list(spec.read()))
    assert any(s.delete_files for s in spec.file_index().list_files_at())

    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] >= 2
    table.refresh()
    after = pa.Table.from_batches(list(spec_view(table).read()))
    assert after.num_rows == before.num_rows == 6592
    assert multiset(after) == multiset(before)
    assert load_table(console_table.location, format="iceberg").summary().record_count >= 6592


def test_a_sorted_table_is_rewritten_in_its_sort_order(make_iceberg, run_now):
    console_table, table = make_iceberg(files=0)
    with table.update_sort_order() as update:
        update.asc("id", __import__("pyiceberg.transforms").transforms.IdentityTransform())
    append_files(table, [rows(start, 10) for start in range(1000, 0, -10)])

    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_out"] == 1
    ids = iceberg_rows(table)["id"]
    assert ids.to_pylist() == sorted(ids.to_pylist())


def test_columns_renamed_after_the_files_were_written_keep_their_values(make_iceberg, run_now):
    console_table, table = make_iceberg(files=20)
    before = iceberg_rows(table)
    with table.update_schema() as update:
        update.rename_column("name", "label")

    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    after = iceberg_rows(table)
    assert after["label"].to_pylist() != [None] * after.num_rows
    assert multiset(after.rename_columns(before.column_names)) == multiset(before)


def test_nested_columns_round_trip(iceberg_catalog, run_now):
    import pyarrow as pa

    from storage import services

    row, catalog = iceberg_catalog
    catalog.create_namespace("nested")
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("point", pa.struct([("x", pa.float64()), ("y", pa.float64())])),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("attrs", pa.map_(pa.string(), pa.int32())),
        ]
    )
    table = catalog.create_table("nested.things", schema=schema)
    for i in range(8):
        ids = range(i * 3, i * 3 + 3)
        table.append(
            pa.table(
                {
                    "id": list(ids),
                    "point": [{"x": float(j), "y": -float(j)} for j in ids],
                    "tags": [[f"t{j}", "common"] for j in ids],
                    "attrs": [[("k", j), ("n", 1)] for j in ids],
                },
                schema=schema,
            )
        )
    console_table = services.table_register(catalog=row, identifier="nested.things")
    before = table.scan().to_arrow().sort_by("id").to_pylist()

    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 8 and process.summary["files_out"] == 1
    table.refresh()
    assert table.scan().to_arrow().sort_by("id").to_pylist() == before


def test_a_table_without_a_catalog_is_not_offered_and_fails_clearly(make_iceberg, run_now):
    from processes.runtime import TableRuntime
    from storage import services

    _, table = make_iceberg(files=10, register=False)
    # registered by location: opened from its metadata file, with no catalog to commit through
    console_table = services.table_register(
        location=table.location().removeprefix("file://"), format="iceberg"
    )
    factory = IcebergRewriteFactory()
    assert factory.trigger(TableRuntime(console_table, factory.properties), "rewrite") is None

    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.FAILED
    assert "rewrites need a catalog" in process.failure
