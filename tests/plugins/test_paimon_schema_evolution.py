"""Paimon tables whose schema changed after data was written, read as Paimon reads them: the latest
snapshot with the table's current schema (columns added after a file was written are null in it,
renamed columns come under their new name by field id, changed types are cast by Paimon's rules:
strings "Yes"/"nO" to BOOLEAN, "+7"/"12.9" to INT), an older snapshot with its own schema.

Each schema change is a new ``schema/schema-N`` file written as Java Paimon's ``SchemaManager``
commits one (the fields keep their ids, the new schema names the next id); later data is written by
pypaimon, which picks up the newest schema file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import tests.plugins._paimon_tables  # noqa: F401 - skips without pypaimon, puts the plugin on the path

pypaimon = pytest.importorskip("pypaimon")

V0 = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.string()),
        pa.field("flag", pa.string()),
        pa.field("qty", pa.string()),
    ]
)
V1 = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("label", pa.string()),
        pa.field("flag", pa.bool_()),
        pa.field("qty", pa.int32()),
        pa.field("score", pa.int32()),
    ]
)
# schema 1: v renamed to label (field id 1), flag STRING -> BOOLEAN, qty STRING -> INT, score added
SCHEMA_1 = [
    {"id": 0, "name": "id", "type": "BIGINT NOT NULL"},
    {"id": 1, "name": "label", "type": "STRING"},
    {"id": 2, "name": "flag", "type": "BOOLEAN"},
    {"id": 3, "name": "qty", "type": "INT"},
    {"id": 4, "name": "score", "type": "INT"},
]
# schema 2, committed after the last write: label renamed to name, note added
SCHEMA_2 = [{**f, "name": "name"} if f["id"] == 1 else f for f in SCHEMA_1]
SCHEMA_2.append({"id": 5, "name": "note", "type": "STRING"})
FIRST = [
    {"id": 1, "v": "a", "flag": "Yes", "qty": "+7"},
    {"id": 2, "v": "b", "flag": "nO", "qty": "12.9"},
    {"id": 3, "v": "c", "flag": "T", "qty": "-3"},
    {"id": 4, "v": "d", "flag": None, "qty": None},
]


def _write(table, rows: list[dict], schema: pa.Schema) -> None:
    builder = table.new_batch_write_builder()
    writer, commit = builder.new_write(), builder.new_commit()
    writer.write_arrow(pa.Table.from_pylist(rows, schema=schema))
    commit.commit(writer.prepare_commit())
    writer.close()
    commit.close()


def evolve(location: str, fields: list[dict]) -> None:
    """Commit the next schema as Java Paimon's SchemaManager does: ``schema-<latest + 1>``, the
    same keys, the highest field id ever given."""
    folder = Path(location) / "schema"
    latest = max(int(p.name.split("-", 1)[1]) for p in folder.glob("schema-*"))
    schema = json.loads((folder / f"schema-{latest}").read_text())
    schema.update(
        id=latest + 1,
        fields=fields,
        highestFieldId=max(schema["highestFieldId"], *(f["id"] for f in fields)),
        timeMillis=schema["timeMillis"] + 1,
    )
    (folder / f"schema-{latest + 1}").write_text(json.dumps(schema, indent=2))


def write_evolved_table(warehouse: str, *, primary_key: bool, first: list[dict] = FIRST) -> str:
    """Snapshot 1 in schema 0; schema 1; snapshots 2 and 3 in schema 1; schema 2 (no data since).
    The primary-key table updates key 2 in snapshot 2."""
    catalog = pypaimon.CatalogFactory.create({"warehouse": warehouse})
    catalog.create_database("db", True)
    options = {"bucket": "1"} if primary_key else {}
    keys = ["id"] if primary_key else []
    catalog.create_table(
        "db.t", pypaimon.Schema.from_pyarrow_schema(V0, primary_keys=keys, options=options), False
    )
    location = f"{warehouse}/db.db/t"
    _write(catalog.get_table("db.t"), first, V0)
    evolve(location, SCHEMA_1)
    second = {"id": 2 if primary_key else 5, "label": "B", "flag": True, "qty": 5, "score": 50}
    _write(catalog.get_table("db.t"), [second], V1)
    _write(catalog.get_table("db.t"), [{"id": 6, "label": "f", "flag": False, "qty": 6, "score": 60}], V1)
    evolve(location, SCHEMA_2)
    return location


def _rows(batches) -> list[dict]:
    batches = list(batches)
    if not batches:
        return []
    return sorted(pa.Table.from_batches(batches).to_pylist(), key=lambda r: r["id"])


# the rows of snapshot 1's file, cast from schema 0 by Paimon's rules
OLD_IN_NEW = [
    {"id": 1, "name": "a", "flag": True, "qty": 7, "score": None, "note": None},
    {"id": 2, "name": "b", "flag": False, "qty": 12, "score": None, "note": None},
    {"id": 3, "name": "c", "flag": True, "qty": -3, "score": None, "note": None},
    {"id": 4, "name": "d", "flag": None, "qty": None, "score": None, "note": None},
]
LATER = [
    {"id": 5, "name": "B", "flag": True, "qty": 5, "score": 50, "note": None},
    {"id": 6, "name": "f", "flag": False, "qty": 6, "score": 60, "note": None},
]


@pytest.fixture(scope="module")
def append_table(tmp_path_factory):
    from lakewarden_paimon import PaimonAdapter

    return PaimonAdapter.open(write_evolved_table(str(tmp_path_factory.mktemp("paimon")), primary_key=False))


def test_the_latest_snapshot_reads_with_the_tables_current_schema(append_table):
    assert append_table.schema.names == ["id", "name", "flag", "qty", "score", "note"]
    assert append_table.schema_at(3).names == append_table.schema.names
    # the latest snapshot was written in schema 1: it is read in schema 2 all the same
    assert _rows(append_table.read()) == OLD_IN_NEW + LATER
    assert _rows(append_table.read(3)) == OLD_IN_NEW + LATER
    assert _rows(append_table.read(columns=["id", "name", "note"], filters="flag = true")) == [
        {"id": 1, "name": "a", "note": None},
        {"id": 3, "name": "c", "note": None},
        {"id": 5, "name": "B", "note": None},
    ]
    assert append_table.summary().record_count == 6


def test_splits_of_the_latest_snapshot_read_with_the_current_schema(append_table):
    splits = list(append_table.plan_splits())
    assert _rows(b for split in splits for b in append_table.read(split)) == OLD_IN_NEW + LATER
    slices = list(append_table.file_index().list_files_at())
    assert _rows(append_table.read(slices)) == OLD_IN_NEW + LATER


def test_an_older_snapshot_reads_with_its_own_schema_and_casts_older_files(append_table):
    assert append_table.schema_at(1).names == ["id", "v", "flag", "qty"]
    assert _rows(append_table.read(1)) == FIRST
    assert append_table.schema_at(2).names == ["id", "label", "flag", "qty", "score"]
    at_two = [{"id": 1, "label": "a", "flag": True, "qty": 7, "score": None}]
    at_two += [{"id": 2, "label": "b", "flag": False, "qty": 12, "score": None}]
    at_two += [{"id": 3, "label": "c", "flag": True, "qty": -3, "score": None}]
    at_two += [{"id": 4, "label": "d", "flag": None, "qty": None, "score": None}]
    at_two += [{"id": 5, "label": "B", "flag": True, "qty": 5, "score": 50}]
    assert _rows(append_table.read(2)) == at_two
    # splits planned at snapshot 2 read that snapshot's columns (as Spark asks for them)
    splits = list(append_table.plan_splits(2))
    assert _rows(b for split in splits for b in append_table.read(split)) == at_two


def test_incremental_reads_use_the_current_schema(append_table):
    from storage.spec.models import ReadingMode

    added = _rows(append_table.read(1, mode=ReadingMode.INCREMENTAL, end_instant=3))
    assert added == LATER


def test_a_primary_key_table_merges_files_of_several_schemas(tmp_path):
    from lakewarden_paimon import PaimonAdapter

    table = PaimonAdapter.open(write_evolved_table(str(tmp_path), primary_key=True))
    expected = [r for r in OLD_IN_NEW if r["id"] != 2]
    expected.append({"id": 2, "name": "B", "flag": True, "qty": 5, "score": 50, "note": None})
    expected.append(LATER[1])
    assert _rows(table.read()) == sorted(expected, key=lambda r: r["id"])
    assert table.summary().record_count == 5


@pytest.mark.parametrize(
    ("flag", "qty", "refused"),
    [("maybe", "1", "'maybe' as BOOLEAN"), (" yes", "1", "' yes' as BOOLEAN"), ("y", "1 ", "'1 ' as INT")],
)
def test_a_value_paimon_cannot_cast_is_refused_naming_it(tmp_path, flag, qty, refused):
    from lakewarden_paimon import PaimonAdapter

    from storage.spec.errors import CorruptTable

    first = [{"id": 1, "v": "a", "flag": flag, "qty": qty}]
    table = PaimonAdapter.open(write_evolved_table(str(tmp_path), primary_key=False, first=first))
    with pytest.raises(CorruptTable, match=f"cannot cast {refused}"):
        list(table.read())
