"""Hudi tables written by 0.5-era writers (issue 29, item 19): their ``hoodie.properties`` names no
table version, no timeline layout version and no partition fields (Hudi 0.6 started recording
them). Hudi reads such a table as version 0; hudi-rs refused to open it ("Config
'hoodie.table.version' not found"), so the table was refused.

The tables here are private copies of the shared Spark-written fixtures with ``hoodie.properties``
cut down to what a 0.5 writer wrote; every read must give the rows the unmodified table gives.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from storage.formats.hudi import HudiAdapter

# What HoodieTableConfig.createHoodieProperties wrote in Hudi 0.5.
LEGACY_KEYS = (
    "hoodie.table.name",
    "hoodie.table.type",
    "hoodie.archivelog.folder",
    "hoodie.compaction.payload.class",
)


@pytest.fixture
def legacy_copy(hudi_fixture, tmp_path):
    """``legacy_copy(name)``: (the fixture table, a copy whose hoodie.properties is 0.5-shaped)."""

    def copy(name: str) -> tuple[Path, Path]:
        root = hudi_fixture(name)
        source = root if (root / ".hoodie").is_dir() else next(p.parent for p in root.glob("*/.hoodie"))
        target = tmp_path / name
        shutil.copytree(source, target)
        properties = target / ".hoodie" / "hoodie.properties"
        lines = properties.read_text(encoding="utf-8").splitlines()
        kept = [line for line in lines if line.split("=", 1)[0] in LEGACY_KEYS]
        properties.write_text("\n".join(kept) + "\n", encoding="utf-8")
        assert "hoodie.table.version" not in properties.read_text()
        return source, target

    return copy


def _rows(table, columns=None, key: str = "id") -> list[dict]:
    rows = [row for batch in table.read(columns=columns) for row in batch.to_pylist()]
    return sorted(rows, key=lambda r: r[key])


def test_a_partitioned_legacy_table_reads_every_partition(legacy_copy):
    source, legacy = legacy_copy("cow_v6_simplekeygen_nonhivestyle")
    table = HudiAdapter.open(str(legacy))
    assert "hoodie.table.version" not in table.definition.properties
    columns = ["id", "name", "isActive", "byteField", "_hoodie_partition_path"]
    assert _rows(table, columns=columns) == [
        {"id": 1, "name": "Alice", "isActive": False, "byteField": 10, "_hoodie_partition_path": "10"},
        {"id": 2, "name": "Bob", "isActive": False, "byteField": 20, "_hoodie_partition_path": "20"},
        {"id": 3, "name": "Carol", "isActive": True, "byteField": 10, "_hoodie_partition_path": "10"},
        {"id": 4, "name": "Diana", "isActive": True, "byteField": 30, "_hoodie_partition_path": "30"},
    ]
    assert _rows(table) == _rows(HudiAdapter.open(str(source)))
    # the partition folders are listed, their columns unnamed (a 0.5 table does not record them)
    slices = list(table.file_index().list_files_at())
    assert sorted(s.partition.path for s in slices) == ["10", "20", "30"]
    assert all(s.partition.values == {} for s in slices)
    assert not table.partition_spec.is_partitioned
    # splits and filters read the same rows
    by_splits = sorted(
        r["id"] for split in table.plan_splits() for b in table.read(split) for r in b.to_pylist()
    )
    assert by_splits == [1, 2, 3, 4]
    assert sorted(
        r["id"] for b in table.read(filters="byteField = 10", columns=["id"]) for r in b.to_pylist()
    ) == [
        1,
        3,
    ]
    assert [i.id for i in table.timeline().instants()] == [
        i.id for i in HudiAdapter.open(str(source)).timeline().instants()
    ]


def test_an_unpartitioned_legacy_table_reads_its_rows(legacy_copy):
    source, legacy = legacy_copy("cow_v6_nonpartitioned")
    table = HudiAdapter.open(str(legacy))
    assert [(r["id"], r["name"]) for r in _rows(table, columns=["id", "name"])] == [
        (1, "Alice"),
        (2, "Bob"),
        (3, "Carol"),
        (4, "Diana"),
    ]
    assert _rows(table) == _rows(HudiAdapter.open(str(source)))


def test_a_merge_on_read_legacy_table_merges_its_logs(legacy_copy):
    source, legacy = legacy_copy("mor_avro_v6_trips_8i1u")
    table = HudiAdapter.open(str(legacy))
    fares = {r["rider"]: r["fare"] for r in _rows(table, columns=["uuid", "rider", "fare"], key="uuid")}
    assert len(fares) == 8
    assert fares["rider-D"] == 25.0  # the UPDATE, from a log file
    assert fares["rider-A"] == 19.1
    assert _rows(table, key="uuid") == _rows(HudiAdapter.open(str(source)), key="uuid")


def test_a_legacy_table_survives_pickling(legacy_copy):
    import pickle

    _, legacy = legacy_copy("cow_v6_simplekeygen_nonhivestyle")
    table = pickle.loads(pickle.dumps(HudiAdapter.open(str(legacy))))
    assert [r["id"] for r in _rows(table, columns=["id"])] == [1, 2, 3, 4]
