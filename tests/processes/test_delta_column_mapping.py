"""Column-mapped Delta tables (``delta.columnMapping.mode`` name or id) compacted by ``rewrite``:
the new files use the physical column names (nested ones too) and carry the column ids as parquet
field ids; statistics and partition values are keyed by physical names; deltalake's reader (which
resolves physical names and ids) reads the same rows after."""

from __future__ import annotations

import json
import shutil
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from processes.models import ProcessStatus
from storage.formats.delta.commit import live_files, open_version, put_commit
from tests.processes.test_delta_deletion_vectors import delete_rows, last_commit

pytestmark = pytest.mark.django_db(transaction=True)


def rows_of(table: pa.Table) -> Counter:
    """A multiset of rows that holds nested values (structs become sorted JSON)."""
    table = table.select(sorted(table.column_names))
    return Counter(json.dumps(row, sort_keys=True, default=str) for row in table.to_pylist())


def scan(path, version: int | None = None) -> Counter:
    table = DeltaTable(str(path)) if version is None else DeltaTable(str(path), version=version)
    return rows_of(pa.RecordBatchReader.from_stream(table.scan()).read_all())


def spec_rows(path) -> Counter:
    spec = open_version(str(path))
    return rows_of(pa.Table.from_batches(list(spec.read())))


def batch(i: int) -> pa.Table:
    ids = list(range(i * 5, i * 5 + 5))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": ["eu" if i % 2 == 0 else "us"] * 5,
            "point": pa.array([{"x": n, "label": f"p{n}"} for n in ids]),
            "name": [f"name-{n}" for n in ids],
        }
    )


@pytest.fixture
def mapped_table(warehouse, db):
    """``make(mode)`` -> (console table, path): 8 commits of 5 rows by deltalake, partitioned,
    with column mapping ``mode``, then upgraded to support deletion vectors too."""
    from storage import services

    def make(mode: str):
        path = warehouse / f"mapped_{mode}_{uuid.uuid4().hex[:6]}"
        for i in range(8):
            write_deltalake(
                str(path),
                batch(i),
                mode="append",
                partition_by=["region"],
                configuration={"delta.columnMapping.mode": mode} if i == 0 else None,
            )
        support_vectors(path)
        return services.table_register(location=str(path)), path

    return make


def support_vectors(path) -> None:
    """Upgrade a column-mapped table (reader 2, writer 5) to reader 3 / writer 7 with the
    ``columnMapping`` and ``deletionVectors`` features, as Delta Spark's ALTER TABLE does
    (deltalake cannot write this combination consistently: see the refusal test below)."""
    spec = open_version(str(path))
    implied = ["appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"]
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["columnMapping", "deletionVectors"],
        "writerFeatures": [*implied, "columnMapping", "deletionVectors"],
    }
    metadata = dict(spec.state(spec.version).snapshot.metadata)
    metadata["configuration"] = {**metadata["configuration"], "delta.enableDeletionVectors": "true"}
    content = "\n".join(json.dumps(a) for a in ({"protocol": protocol}, {"metaData": metadata}))
    assert put_commit(spec.store, spec.version + 1, content.encode())


def physical_names(path) -> dict[str, dict]:
    """Logical top-level name -> its Delta field (metadata holds the physical name and id)."""
    spec = open_version(str(path))
    return {f["name"]: f for f in spec.state(spec.version).schema.fields}


@pytest.mark.parametrize("mode", ["name", "id"])
def test_a_column_mapped_table_is_compacted_with_physical_names_and_field_ids(mapped_table, run_now, mode):
    from processes.maintenance.delta.rewrite import DeltaRewriteFactory
    from processes.runtime import TableRuntime

    console_table, path = mapped_table(mode)
    factory = DeltaRewriteFactory()
    factory.configure({"min-input-files": 2})
    assert factory.trigger(TableRuntime(console_table, factory.properties), "rewrite") is not None
    delete_rows(path, {0, 7, 21})  # vectors on a column-mapped table: found by the physical id column
    before, version = scan(path), DeltaTable(str(path)).version()
    assert sum(before.values()) == 37 and spec_rows(path) == before

    process = run_now(console_table, "rewrite", {"min-input-files": 2, "engine": "spark-sql"})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert (summary["files_in"], summary["files_out"], summary["deletion_vectors_applied"]) == (8, 2, 3)
    assert summary["engine_note"] == "column-mapped tables are rewritten with the arrow engine"
    assert scan(path) == before == spec_rows(path)
    assert scan(path, version) == before
    fields = physical_names(path)
    meta = {name: field["metadata"] for name, field in fields.items()}
    physical = {name: m["delta.columnMapping.physicalName"] for name, m in meta.items()}
    adds = [a["add"] for a in last_commit(path) if "add" in a]
    assert {a["partitionValues"][physical["region"]] for a in adds} == {"eu", "us"}
    for add in adds:
        schema = pq.read_schema(Path(path) / add["path"])
        assert schema.names == [physical["id"], physical["point"], physical["name"]]
        assert [int(f.metadata[b"PARQUET:field_id"]) for f in schema] == [
            meta[n]["delta.columnMapping.id"] for n in ("id", "point", "name")
        ]
        nested = {f["name"]: f["metadata"] for f in fields["point"]["type"]["fields"]}
        point = schema.field(physical["point"]).type
        assert [point.field(i).name for i in range(2)] == [
            nested[n]["delta.columnMapping.physicalName"] for n in ("x", "label")
        ]
        assert int(point.field(0).metadata[b"PARQUET:field_id"]) == nested["x"]["delta.columnMapping.id"]
        stats = json.loads(add["stats"])
        assert set(stats["minValues"]) == {physical["id"], physical["point"], physical["name"]}
        assert set(stats["minValues"][physical["point"]]) == {
            nested[n]["delta.columnMapping.physicalName"] for n in ("x", "label")
        }
    assert sum(json.loads(a["stats"])["numRecords"] for a in adds) == 37


def test_the_databricks_column_mapped_fixture_is_compacted(external_tables, warehouse, run_now):
    """Partition column with spaces, random-prefix folders: two appends to its ``BMS`` partition
    (by deltalake) give that partition three files to compact."""
    from storage import services

    path = warehouse / "mapped"
    shutil.copytree(external_tables / "delta" / "table_with_column_mapping", path)
    for names in (["Ada", "Bo"], ["Cy"]):
        extra = pa.table({"Company Very Short": ["BMS"] * len(names), "Super Name": names})
        write_deltalake(str(path), extra, mode="append", partition_by=["Company Very Short"])
    console_table = services.table_register(location=str(path))
    before = scan(path)
    assert sum(before.values()) == 8 and spec_rows(path) == before
    live_before = set(live_files(open_version(str(path))))

    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert (process.summary["files_in"], process.summary["files_out"]) == (3, 1)
    assert scan(path) == before == spec_rows(path)
    after = live_files(open_version(str(path)))
    assert len(after) == 2 and len(set(after) & live_before) == 1  # the BME file stays
    (add,) = [a["add"] for a in last_commit(path) if "add" in a]
    assert add["partitionValues"] == {"col-173b4db9-b5ad-427f-9e75-516aae37fbbb": "BMS"}
    assert json.loads(add["stats"])["numRecords"] == 7


def test_a_table_whose_protocol_lacks_the_column_mapping_feature_reads_and_compacts_by_logical_names(
    warehouse, run_now
):
    """deltalake 1.6 writes ``delta.columnMapping.mode=name`` with deletion vectors enabled into a
    protocol without the ``columnMapping`` feature, and files with logical names: the mode is not
    active there (deltalake reads the logical names). Our reader honoured it once and read nulls in
    every column; now it reads the values, and the rewrite writes logical names as the files do."""
    from storage import services

    path = warehouse / "half_mapped"
    configuration = {"delta.columnMapping.mode": "name", "delta.enableDeletionVectors": "true"}
    for i in range(3):
        write_deltalake(str(path), batch(i), mode="append", configuration=configuration if i == 0 else None)
    console_table = services.table_register(location=str(path))
    before, version = scan(path), DeltaTable(str(path)).version()
    assert sum(before.values()) == 15
    assert spec_rows(path) == before  # values, not nulls
    assert open_version(str(path)).state(version).schema.mapped is False

    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert DeltaTable(str(path)).version() == version + 1
    assert scan(path) == before and spec_rows(path) == before
    assert scan(path, version) == before  # time travel to the version before the compaction
